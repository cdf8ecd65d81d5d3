"""The device side of a run: the torch device, the training step, and the device micro-benchmarks (L2).

`Trainer` is one model and optimizer whose `step` is a full
forward/backward/update; the micro-benchmarks time a square matmul and
host<->device copies (`nvidia-smi` has no equivalent; nccl-tests and
`bandwidthTest` are the closest).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict, Optional, Tuple

from bootstrap.bench.results import LoaderConfig
from bootstrap.fsutil import MIB


def pick_device(requested: str, cuda_available: bool, mps_available: bool) -> Tuple[str, str]:
    """(torch device name, why): `auto` is the first of cuda, mps (Apple silicon), cpu this torch can
    use; any other name is kept as asked (`_check_device` in startup refuses one that is absent)."""
    if requested != "auto":
        return requested, "asked for"
    if cuda_available:
        return "cuda", "auto: CUDA is available"
    if mps_available:
        return "mps", "auto: no CUDA; Apple MPS is available"
    return "cpu", "auto: neither CUDA nor Apple MPS is available"


def mps_available(torch: Any) -> bool:
    """`torch.backends.mps.is_available()`, False on a torch built without the MPS backend."""
    backend = getattr(getattr(torch, "backends", None), "mps", None)
    return bool(backend is not None and backend.is_available())


class Device:
    """The torch device a run uses, with its synchronisation."""

    def __init__(self, name: str) -> None:
        import torch

        name, self.reason = pick_device(name, torch.cuda.is_available(), mps_available(torch))
        self.torch_device = torch.device(name)
        if self.torch_device.type == "cuda" and self.torch_device.index is None:
            self.torch_device = torch.device("cuda", torch.cuda.current_device())
        self.is_cuda = self.torch_device.type == "cuda"
        self.is_mps = self.torch_device.type == "mps"

    @property
    def type(self) -> str:
        return self.torch_device.type

    @property
    def is_accelerator(self) -> bool:
        """A device other than the host's CPU: the step does not compete with the loader for cores."""
        return self.is_cuda or self.is_mps

    def sync(self) -> None:
        """Wait for the device's queued work, so that a timer read after it counts that work."""
        import torch

        if self.is_cuda:
            torch.cuda.synchronize(self.torch_device)
        elif self.is_mps:
            torch.mps.synchronize()


class StepFailed(Exception):
    """The training step raised `error`: the user's step or model, or the built-in step on the user's
    batch. Raised in place of it, so a phase never takes it for the loader's (a worker that died)."""

    def __init__(self, error: Exception, batch: Any = None) -> None:
        super().__init__()
        self.error = error
        self.batch = batch  # what the step was given: its fix may depend on what the batch holds

    def __str__(self) -> str:
        return f"the training step raised {type(self.error).__name__}"


class NotALoss(TypeError):
    """The user's step returned what is no loss tensor: bench calls `backward()` on what it returns."""


class NoParameters(ValueError):
    """The model has no parameters, so nothing for the step's backward pass and update to train."""


class Trainer:
    """One model + SGD optimizer; `step` is a full forward/backward/update on one batch.

    Images arrive as uint8 and are scaled on the device (4x less to copy);
    `step_s` adds a known sleep per step (a stand-in for a slower device,
    used by tests and the loader figures). With `user_code` (the step,
    model or batches are the user's) what the step raises comes as
    `StepFailed`.
    """

    def __init__(
        self,
        model_name: str,
        num_classes: int,
        device: Device,
        config: LoaderConfig,
        step_s: float = 0.0,
        model_factory: Optional[Callable[[], Any]] = None,
        step_fn: Optional[Callable[..., Any]] = None,
        user_code: bool = False,
    ) -> None:
        import torch

        from bootstrap.bench.workloads import build_model

        self.device = device
        self.user_code = user_code
        self.config = config
        self.step_s = step_s
        self.step_fn = step_fn
        model = model_factory() if model_factory is not None else build_model(model_name, num_classes)
        model = model.to(device.torch_device)
        if config.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model.train()
        parameters = list(self.model.parameters())
        # A step that returns None updates the model itself: it may train one without parameters.
        self.optimizer = torch.optim.SGD(parameters, lr=0.01, momentum=0.9) if parameters else None
        self.amp_dtype = getattr(torch, config.amp_dtype) if config.amp_dtype else None

    def to_device(self, images: Any, labels: Any, non_blocking: bool) -> Tuple[Any, Any]:
        import torch

        images = images.to(self.device.torch_device, non_blocking=non_blocking)
        labels = labels.to(self.device.torch_device, non_blocking=non_blocking)
        if self.config.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return (images.float().div_(255) if images.dtype == torch.uint8 else images.float()), labels

    def prepare(self, batch: Any, non_blocking: bool) -> Any:
        """`batch` on the device as the step takes it: (scaled images, labels) for the built-in step;
        for a user's step, every tensor in it moved (`batch.map_tensors`)."""
        if self.step_fn is None:
            return self.to_device(batch[0], batch[1], non_blocking)
        from bootstrap.bench.batch import map_tensors

        return map_tensors(lambda t: t.to(self.device.torch_device, non_blocking=non_blocking), batch)

    def run(self, prepared: Any) -> None:
        """One step on a batch `prepare` returned: the built-in one, or the user's (whose loss, when it
        returns one, gets the backward pass and the update)."""
        self._guarded(self._run, prepared)

    def _guarded(self, call: Callable[[Any], None], batch: Any) -> None:
        # The step runs in this process, between two `next(loader)` calls: its error must stay apart
        # from the loader's, whose RuntimeErrors mean workers that died.
        if not self.user_code:
            call(batch)
            return
        try:
            call(batch)
        except StepFailed:
            raise
        except Exception as exc:  # noqa: BLE001 (the user's step or model may raise anything)
            if raised_by_worker_watch(exc):
                raise
            raise StepFailed(exc, batch) from exc

    def _run(self, prepared: Any) -> None:
        if self.step_fn is None:
            self.step_on_device(*prepared)
            return
        import torch

        loss = self.step_fn(self.model, prepared, self.device.torch_device)
        if loss is not None:
            if not isinstance(loss, torch.Tensor):
                raise NotALoss(f"returned a {type(loss).__name__}, not a loss tensor")
            self._update(loss)
        if self.step_s:
            time.sleep(self.step_s)

    def step_on_device(self, images: Any, labels: Any) -> None:
        import torch
        import torch.nn.functional as F  # noqa: N812 (PyTorch's own spelling)

        with torch.autocast(device_type=self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            loss = F.cross_entropy(self.model(images), labels)
        self._update(loss)
        if self.step_s:
            time.sleep(self.step_s)

    def _update(self, loss: Any) -> None:
        if self.optimizer is None:
            raise NoParameters("the model has no parameters to train")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def step(self, batch: Any) -> None:
        self._guarded(lambda b: self.run(self.prepare(b, self.config.non_blocking)), batch)


def raised_by_worker_watch(exc: BaseException) -> bool:
    """Whether `exc` is torch's news of a DataLoader worker that died, raised by its SIGCHLD handler in
    whatever this process was running when the signal came: a step in the middle of the run, often."""
    from torch.utils.data._utils import signal_handling

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    return os.path.normcase(tb.tb_frame.f_code.co_filename) == os.path.normcase(signal_handling.__file__)


def matmul_tflops(device: Device, deadline: float) -> Tuple[Optional[float], str]:
    """Square-matmul TFLOP/s: bf16 8192^3 on CUDA (MAMF-style warm-up then timed loop), fp32 1024^3 on CPU."""
    import torch

    if device.is_cuda:
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        n, warm, timed = 8192, 50, 100
    else:
        dtype, n, warm, timed = torch.float32, 1024, 2, 10
    a = torch.randn(n, n, device=device.torch_device, dtype=dtype)
    b = torch.randn(n, n, device=device.torch_device, dtype=dtype)
    for _ in range(warm):
        torch.mm(a, b)
    device.sync()
    started = time.perf_counter()
    done = 0
    while done < timed and time.perf_counter() < deadline:
        torch.mm(a, b)
        done += 1
    device.sync()
    seconds = time.perf_counter() - started
    dtype_name = str(dtype).replace("torch.", "")
    return (2.0 * n**3 * done / seconds / 1e12 if done else None), f"{dtype_name} {n}^3 x {done}"


def h2d_bandwidth(
    device: Device, nbytes: int = 256 * MIB, repeats: int = 10, during: Optional[Callable[[], Any]] = None
) -> Tuple[Dict[str, Optional[float]], Any]:
    """Host<->device GB/s (1e9 B/s), pinned and pageable (CUDA only), and what `during()` returned.

    `during` runs while the pinned host-to-device copies are in flight: read
    the PCIe link there, because idle links train down.
    """
    import torch

    out: Dict[str, Optional[float]] = {}
    seen: Any = None
    if not device.is_cuda:
        return out, seen
    target = torch.empty(nbytes, dtype=torch.uint8, device=device.torch_device)
    for pinned in (True, False):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
        name = "pinned" if pinned else "pageable"
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
            out[f"{direction}_{name}_gb_per_s"] = nbytes * repeats / (start.elapsed_time(end) / 1000.0) / 1e9
    return out, seen


def peak_memory_mib(device: Device) -> Optional[float]:
    """CUDA: torch's peak allocated bytes on the device; CPU, and MPS (memory the host shares): this
    process's peak RSS."""
    if device.is_cuda:
        import torch

        return torch.cuda.max_memory_allocated(device.torch_device) / MIB
    try:
        import resource  # not on Windows
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024.0  # macOS: bytes; Linux: KiB
