"""The bench's CUDA paths, run against a stand-in for `torch.cuda` (no GPU here): the answers are what
torch gives on the GPUs named, the calls are recorded. Each test fails without the fix it names.

* bf16 is asked of the hardware, not of torch's emulation: a T4 or V100 (CC 7.x) answers
  `is_bf16_supported()` True, and cuDNN has no bf16 convolutions there.
* `--device cuda:N` makes device N current for the run (CUDA events record on the current stream)
  and gives the previous one back after it.
* The matmul sees its deadline: launches queue up asynchronously, so it synchronises every few.
* A MIG instance's UUID is spelt as NVML knows it, 'MIG-...': with 'GPU-' NVML finds no such GPU.
"""

from __future__ import annotations

import time

import pytest

from bootstrap.bench.config import BenchOptions, WorkloadSpec
from bootstrap.bench.device import Device, matmul_tflops


class FakeCuda:
    """What torch.cuda answers on a host with `count` GPUs of compute capability `capability`: kernels
    queue without running until a synchronize, which then takes `launch_s` for each one queued."""

    def __init__(self, monkeypatch, capability=(7, 0), count=2, launch_s=0.0):
        import torch

        self.capability, self.launch_s, self.queued = capability, launch_s, 0
        self.current, self.set_devices, self.syncs = 0, [], 0
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda, "device_count", lambda: count)
        monkeypatch.setattr(cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(cuda, "set_device", self.set_device)
        monkeypatch.setattr(cuda, "get_device_capability", lambda device=None: self.capability)
        monkeypatch.setattr(cuda, "is_bf16_supported", lambda including_emulation=True: True)
        monkeypatch.setattr(cuda, "synchronize", self.synchronize)
        monkeypatch.setattr(cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-16GB")
        monkeypatch.setattr(cuda, "get_device_properties", lambda index: type("P", (), {"uuid": "1234"})())
        real_randn = torch.randn
        monkeypatch.setattr(torch, "randn", lambda *size, device=None, dtype=None: real_randn(*size[:1], 1))
        monkeypatch.setattr(torch, "mm", self.mm)

    def set_device(self, device):
        index = device if isinstance(device, int) else device.index
        self.set_devices.append(index)
        self.current = index

    def mm(self, a, b):
        self.queued += 1

    def synchronize(self, device=None):
        time.sleep(self.queued * self.launch_s)
        self.queued, self.syncs = 0, self.syncs + 1


@pytest.mark.parametrize(("capability", "bf16"), [((7, 0), False), ((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_bf16_is_the_hardware_s_not_torch_s_emulation(monkeypatch, capability, bf16):
    FakeCuda(monkeypatch, capability=capability)
    assert Device("cuda").bf16_supported() is bf16


def test_a_gpu_without_bf16_times_its_matmul_in_fp16(monkeypatch):
    FakeCuda(monkeypatch, capability=(7, 0))
    _, how = matmul_tflops(Device("cuda"), time.perf_counter() + 5)
    assert how.startswith("float16 8192^3")


def test_the_matmul_synchronises_often_enough_to_see_its_deadline(monkeypatch):
    """A slow GPU (0.05 s a launch): 150 launches queued at once would take 7.5 s past a 0.3 s deadline."""
    fake = FakeCuda(monkeypatch, capability=(7, 0), launch_s=0.05)
    began = time.perf_counter()
    tflops, how = matmul_tflops(Device("cuda"), began + 0.3)
    assert time.perf_counter() - began < 1.5 and fake.syncs >= 2
    assert tflops is not None and " x 5" in how  # one group of launches timed: at least that, whatever the deadline


def test_cuda_n_is_the_current_device_for_the_run_and_the_previous_one_after(monkeypatch):
    from bootstrap.bench.run import clean_up, set_up
    from bootstrap.bench.state import new_state

    fake = FakeCuda(monkeypatch, count=2)
    spec = WorkloadSpec(samples=4, image_size=32, crop_size=24, batch_size=2, model="tiny")
    state = new_state(BenchOptions(workload=spec, budget_s=30, device="cuda:1", nvml_module=object()))
    try:
        set_up(state)
        assert fake.current == 1 and state.device_info["index"] == 1
    finally:
        clean_up(state)
    assert fake.set_devices == [1, 0] and fake.current == 0


UUID = "8f0a6e5c-2b1d-5a3e-9c4f-0d1e2f3a4b5c"  # str() of torch's _CUuuid: no prefix


def properties_torch(name):
    from types import SimpleNamespace

    properties = SimpleNamespace(name=name, uuid=UUID)
    return SimpleNamespace(cuda=SimpleNamespace(get_device_properties=lambda index: properties))


@pytest.mark.parametrize(
    ("name", "visible", "uuid"),
    [
        ("NVIDIA H100 80GB HBM3", None, f"GPU-{UUID}"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", None, f"MIG-{UUID}"),
        ("NVIDIA A100-SXM4-40GB", f"MIG-{UUID}", f"MIG-{UUID}"),
        ("NVIDIA A100-SXM4-40GB", "GPU-1234,GPU-5678", f"GPU-{UUID}"),
    ],
)
def test_a_mig_instance_keeps_nvml_s_mig_spelling(monkeypatch, name, visible, uuid):
    from bootstrap.bench.device import cuda_uuid

    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert cuda_uuid(properties_torch(name), 0) == uuid
