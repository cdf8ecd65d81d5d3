"""The torch device a run measures, and its micro-benchmarks: matmul TFLOP/s and host<->device copies.

Closest shell equivalents: CUDA's `bandwidthTest` and the MAMF matmul benchmark (docs/benchmark.md, "Micro-benchmarks").
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import Any, Callable, Mapping, Optional, TypeVar

from bootstrap.fsutil import MIB

T = TypeVar("T")


def pick_device(requested: str, cuda_available: bool, mps_available: bool) -> tuple[str, str]:
    """(torch device name, why): `auto` is the first of cuda, mps, cpu this torch can use; else as asked."""
    if requested != "auto":
        return requested, "asked for"
    if cuda_available:
        return "cuda", "auto: CUDA is available"
    if mps_available:
        return "mps", "auto: no CUDA; Apple MPS is available"
    return "cpu", "auto: neither CUDA nor Apple MPS is available"


def mps_available(torch: Any) -> bool:
    """Whether Apple MPS is there; False on a torch built without the MPS backend."""
    backend = getattr(getattr(torch, "backends", None), "mps", None)
    return bool(backend is not None and backend.is_available())


def cuda_uuid(torch: Any, index: Optional[int]) -> Optional[str]:
    """NVML's spelling of the device's UUID, from torch's device properties where it has them: 'MIG-...'
    for a MIG instance (CUDA names one 'NVIDIA A100-SXM4-40GB MIG 1g.5gb'; CUDA_VISIBLE_DEVICES=MIG-...
    shows one), else 'GPU-...'."""
    try:
        properties = torch.cuda.get_device_properties(index)
        uuid = str(properties.uuid)
    except (AttributeError, RuntimeError, AssertionError):
        return None
    if uuid.startswith(("GPU-", "MIG-")):
        return uuid
    named_mig = re.search(r"\bMIG\b", str(getattr(properties, "name", "")))
    return f"MIG-{uuid}" if named_mig or _visible_mig(os.environ) else f"GPU-{uuid}"


def _visible_mig(environ: Mapping[str, str]) -> bool:
    """Whether CUDA_VISIBLE_DEVICES names a MIG instance: the first entry decides what the list holds."""
    return environ.get("CUDA_VISIBLE_DEVICES", "").strip().startswith("MIG-")


class Device:
    """The torch device a run uses, with its synchronisation."""

    def __init__(self, name: str) -> None:
        import torch

        name, self.reason = pick_device(name, torch.cuda.is_available(), mps_available(torch))
        self.torch_device = torch.device(name)
        if self.torch_device.type == "cuda" and self.torch_device.index is None:
            self.torch_device = torch.device("cuda", torch.cuda.current_device())
        self.type = str(self.torch_device.type)
        self.is_cuda = self.type == "cuda"
        self.is_mps = self.type == "mps"
        self.index: Optional[int] = self.torch_device.index if self.is_cuda else None
        # A device other than the host's CPU: the step does not compete with the loader for cores.
        self.is_accelerator = self.is_cuda or self.is_mps

    def sync(self) -> None:
        """Wait for the device's queued work, so that a timer read after it counts that work."""
        import torch

        if self.is_cuda:
            torch.cuda.synchronize(self.torch_device)
        elif self.is_mps:
            torch.mps.synchronize()

    def bf16_supported(self) -> bool:
        """Whether this GPU computes bf16 in hardware (compute capability 8.0 and newer): torch's own
        `is_bf16_supported()` also says yes to the slow emulated bf16 (T4, V100)."""
        import torch

        return self.is_cuda and tuple(torch.cuda.get_device_capability(self.torch_device)) >= (8, 0)


MATMUL_SYNC_EVERY = 5  # launches queue up asynchronously: a deadline is only seen after a sync


def matmul_tflops(device: Device, deadline: float) -> tuple[Optional[float], str]:
    """Square-matmul TFLOP/s, and what was multiplied; warm-up and timed launches stop at `deadline`."""
    import torch

    if device.is_cuda:
        dtype = torch.bfloat16 if device.bf16_supported() else torch.float16
        n, warm, timed = 8192, 50, 100
    else:
        dtype, n, warm, timed = torch.float32, 1024, 2, 10
    a = torch.randn(n, n, device=device.torch_device, dtype=dtype)
    b = torch.randn(n, n, device=device.torch_device, dtype=dtype)

    def launch(count: int) -> int:  # at least one group of launches, whatever the deadline
        done = 0
        while done < count and (done == 0 or time.perf_counter() < deadline):
            for _ in range(min(MATMUL_SYNC_EVERY, count - done)):
                torch.mm(a, b)
                done += 1
            device.sync()
        return done

    launch(warm)
    started = time.perf_counter()
    done = launch(timed)
    seconds = time.perf_counter() - started
    name = str(dtype).replace("torch.", "")
    return (2.0 * n**3 * done / seconds / 1e12 if done else None), f"{name} {n}^3 x {done}"


def h2d_bandwidth(
    device: Device, nbytes: int = 256 * MIB, repeats: int = 10, during: Optional[Callable[[], T]] = None
) -> tuple[dict[str, float], Optional[T]]:
    """Host<->device GB/s, pinned and pageable (CUDA only), and what `during()` returned: it runs while
    the pinned host-to-device copies are in flight (idle PCIe links train down)."""
    import torch

    out: dict[str, float] = {}
    seen: Optional[T] = None
    if not device.is_cuda:
        return out, seen
    target = torch.empty(nbytes, dtype=torch.uint8, device=device.torch_device)
    for pinned in (True, False):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        for direction in ("h2d", "d2h"):
            source, sink = (host, target) if direction == "h2d" else (target, host)
            sink.copy_(source, non_blocking=pinned)
            device.sync()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeats):
                sink.copy_(source, non_blocking=pinned)
            end.record()
            if pinned and direction == "h2d" and during is not None:
                seen = during()
            device.sync()
            seconds = start.elapsed_time(end) / 1000.0
            out[f"{direction}_{'pinned' if pinned else 'pageable'}_gb_per_s"] = nbytes * repeats / seconds / 1e9
    return out, seen


def peak_memory_mib(device: Device) -> Optional[float]:
    """Torch's peak allocation on a CUDA device; elsewhere (memory the host shares) this process's peak RSS."""
    if device.is_cuda:
        import torch

        return float(torch.cuda.max_memory_allocated(device.torch_device)) / MIB
    try:
        import resource  # not on Windows
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024.0  # macOS: bytes; Linux: KiB
