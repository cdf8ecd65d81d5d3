"""Where `bench` runs: `--device auto` picks cuda, then mps, then cpu; `--device mps` is checked and
synchronised like CUDA, without NVML or pinned memory.

The choice is tested with fakes (torch.cuda / torch.backends.mps answering as asked); the CPU path
runs for real. No test here runs on an MPS or CUDA device.
"""

from __future__ import annotations

import pytest

from bootstrap.bench.config import BenchOptions
from bootstrap.bench.device import Device, pick_device
from bootstrap.errors import InputError


@pytest.mark.parametrize(
    ("cuda", "mps", "picked"),
    [
        (True, True, "cuda"),
        (True, False, "cuda"),
        (False, True, "mps"),
        (False, False, "cpu"),
    ],
)
def test_auto_picks_cuda_then_mps_then_cpu(cuda, mps, picked):
    name, reason = pick_device("auto", cuda, mps)
    assert name == picked and reason.startswith("auto: ")


@pytest.mark.parametrize("asked", ["cpu", "cuda", "cuda:1", "mps"])
def test_a_named_device_is_kept_as_asked(asked):
    assert pick_device(asked, cuda_available=False, mps_available=True) == (asked, "asked for")


@pytest.fixture
def fake_accelerators(monkeypatch):
    """torch answering that CUDA and MPS are (or are not) there, as each test sets them."""
    import torch

    present = {"cuda": False, "mps": False}
    synced = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: present["cuda"])
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: present["mps"])
    monkeypatch.setattr(torch.mps, "synchronize", lambda: synced.append("mps"))
    return present, synced


def test_auto_on_a_mac_is_mps_and_syncs_through_torch_mps(fake_accelerators):
    present, synced = fake_accelerators
    present["mps"] = True
    device = Device("auto")
    assert (device.type, device.is_mps, device.is_cuda, device.is_accelerator) == ("mps", True, False, True)
    assert "MPS" in device.reason
    device.sync()
    assert synced == ["mps"]


def test_auto_without_accelerators_is_the_cpu_and_syncs_nothing(fake_accelerators):
    _, synced = fake_accelerators
    device = Device("auto")
    assert (device.type, device.is_accelerator) == ("cpu", False)
    device.sync()
    assert synced == []


def test_mps_asked_where_torch_has_none_is_one_line(fake_accelerators):
    import torch

    from bootstrap.bench.run import _check_device

    with pytest.raises(InputError, match="mps: Apple MPS is not available") as caught:
        _check_device(torch, "mps")
    assert "--device cpu" in str(caught.value.fix)
    fake_accelerators[0]["mps"] = True
    _check_device(torch, "mps")  # there: no complaint


def test_mps_is_a_device_name_the_options_accept():
    assert BenchOptions(device="mps").validate().device == "mps"
    with pytest.raises(InputError, match="not auto, cpu, cuda, cuda:N or mps"):
        BenchOptions(device="metal").validate()


def test_mps_is_not_cuda_so_nothing_pinned_is_tried(fake_accelerators):
    # The tuner and its baselines offer pin_memory (CUDA-only in torch) where the run's device is CUDA.
    from bootstrap.bench.state import new_state

    fake_accelerators[0]["mps"] = True
    state = new_state(BenchOptions(device="auto"))
    state.device = Device("auto")
    assert state.device.type == "mps" and not state.is_cuda


def test_auto_runs_on_this_hosts_cpu_for_real():
    """No fakes: this torch's own answers (the test torch is a CPU build)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: auto picks it")
    device = Device("auto")
    assert device.type == "cpu" and device.reason.startswith("auto: ")
    device.sync()
