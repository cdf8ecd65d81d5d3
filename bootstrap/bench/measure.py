"""Timing: the training step, endless batch streams, and synchronised windows.

A window discards a warm-up (the first batch timed separately), then runs
steps until its planned length, synchronising the device at both ends
(`torch.cuda.synchronize`), and records the host's wait in `next()`, the
process CPU time and, on CUDA, the device-idle gaps between consecutive
steps' GPU work (CUDA events). Noise comes from the window itself: the rate
over each third of its steps gives a coefficient of variation.

Shell equivalents: none; this is what `benchy` / DS-Analyzer time by hand.
"""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from bootstrap.bench.results import LoaderConfig, Measurement
from bootstrap.fsutil import MIB



@dataclass(frozen=True)
class WindowPlan:
    """How long to warm up and measure; a window also ends at the phase deadline."""

    warmup_steps: int = 20
    warmup_s: float = 5.0
    window_s: float = 15.0
    min_steps: int = 100
    max_factor: float = 2.0  # warm-up / window never run past this x their planned seconds ...
    floor_steps: int = 3     # ... unless fewer steps than this ran (a rate needs a few steps; CV needs thirds)
    drain_steps: int = 1     # warm-up steps that must run whatever the time (workers' start-up queue)

    def scaled(self, seconds: float) -> "WindowPlan":
        """A plan whose window lasts `seconds`, warm-up and step minimums shrunk in proportion."""
        ratio = max(0.0, min(1.0, seconds / self.window_s))
        return WindowPlan(
            warmup_steps=max(2, int(self.warmup_steps * ratio)),
            warmup_s=self.warmup_s * ratio,
            window_s=seconds,
            min_steps=max(self.floor_steps, int(self.min_steps * ratio)),
            max_factor=self.max_factor,
            floor_steps=self.floor_steps,
            drain_steps=self.drain_steps,
        )


class Device:
    """The torch device a run uses, with its synchronisation."""

    def __init__(self, name: str) -> None:
        import torch

        if name == "auto":
            name = "cuda" if torch.cuda.is_available() else "cpu"
        self.torch_device = torch.device(name)
        if self.torch_device.type == "cuda" and self.torch_device.index is None:
            self.torch_device = torch.device("cuda", torch.cuda.current_device())
        self.is_cuda = self.torch_device.type == "cuda"

    @property
    def type(self) -> str:
        return self.torch_device.type

    def sync(self) -> None:
        if self.is_cuda:
            import torch

            torch.cuda.synchronize(self.torch_device)


class Trainer:
    """One model + SGD optimizer; `step` is a full forward/backward/update on one batch.

    Images arrive as uint8 and are scaled on the device (4x less to copy);
    `step_s` adds a known sleep per step (a stand-in for a slower device,
    used by tests and the loader figures).
    """

    def __init__(self, model_name: str, num_classes: int, device: Device, config: LoaderConfig,
                 step_s: float = 0.0) -> None:
        import torch

        from bootstrap.bench.workloads import build_model

        self.device = device
        self.config = config
        self.step_s = step_s
        model = build_model(model_name, num_classes).to(device.torch_device)
        if config.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model.train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.amp_dtype = getattr(torch, config.amp_dtype) if config.amp_dtype else None

    def to_device(self, images: Any, labels: Any, non_blocking: bool) -> Tuple[Any, Any]:
        import torch

        images = images.to(self.device.torch_device, non_blocking=non_blocking)
        labels = labels.to(self.device.torch_device, non_blocking=non_blocking)
        if self.config.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images.float().div_(255), labels

    def step_on_device(self, images: Any, labels: Any) -> None:
        import torch
        import torch.nn.functional as F

        with torch.autocast(device_type=self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            loss = F.cross_entropy(self.model(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.step_s:
            time.sleep(self.step_s)

    def step(self, batch: Tuple[Any, Any]) -> None:
        images, labels = self.to_device(batch[0], batch[1], self.config.non_blocking)
        self.step_on_device(images, labels)


class BatchStream:
    """Batches from a DataLoader forever (epoch after epoch); the first batch's latency is kept."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        started = time.perf_counter()
        with _quiet_worker_count():
            self._iterator: Any = iter(loader)
        try:
            self._first: Any = next(self._iterator)
        except BaseException:
            self.close(kill=True)
            raise
        self.first_batch_s = time.perf_counter() - started

    def __next__(self) -> Any:
        if self._first is not None:
            batch, self._first = self._first, None
            return batch
        try:
            return next(self._iterator)
        except StopIteration:
            with _quiet_worker_count():
                self._iterator = iter(self.loader)
            return next(self._iterator)

    def close(self, kill: bool = False) -> None:
        """Drop the iterator (and, with persistent workers, the loader holding it): that shuts the workers
        down. `kill` (after a failure) terminates them first: a worker whose batch could not be sent stays
        stuck, and torch's shutdown then waits 5 s for each at garbage collection, inside whatever is being
        timed by then."""
        iterator, self._iterator, self.loader = self._iterator, None, None
        if kill:
            for worker in getattr(iterator, "_workers", None) or ():  # torch's own list of processes
                if worker.is_alive():
                    worker.terminate()
        # Shut the workers down now, not when the iterator is collected: an interrupted or failed iterator
        # sits in a reference cycle with its traceback, and a worker that a signal killed (Slurm signals
        # every process of the job) makes torch's SIGCHLD handler raise inside that later shutdown, a
        # traceback after the report. Here it is expected: the workers are gone either way.
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            with contextlib.suppress(RuntimeError):
                shutdown()
        if kill:
            gc.collect()  # the failed iterator sits in a reference cycle with its traceback: collect it now


def make_loader(dataset: Any, batch_size: int, config: LoaderConfig, *, seed: int = 0) -> Any:
    import torch
    from torch.utils.data import DataLoader

    generator = torch.Generator()
    generator.manual_seed(seed)
    with _quiet_worker_count():
        return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True, generator=generator,
                          **config.dataloader_kwargs())


@contextlib.contextmanager
def _quiet_worker_count() -> Iterator[None]:
    """Silence DataLoader's 'will create N worker processes' warning: the tuner tries more workers than
    CPUs on purpose for I/O-latency work (sleeping workers do not compete for cores), and reports why."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        yield


class _CudaGaps:
    """Device-idle time: sum of gaps between one step's last GPU work and the next step's first."""

    def __init__(self, device: Device) -> None:
        self.enabled = device.is_cuda
        self.pairs: List[Tuple[Any, Any]] = []

    def begin(self) -> Any:
        if not self.enabled:
            return None
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def end(self, start: Any) -> None:
        if self.enabled:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.pairs.append((start, event))

    def idle_s(self) -> Optional[float]:
        """Call after a synchronize: milliseconds between step i's end and step i+1's start, summed."""
        if not self.enabled:
            return None
        gaps = [max(0.0, self.pairs[i][1].elapsed_time(self.pairs[i + 1][0])) for i in range(len(self.pairs) - 1)]
        return sum(gaps) / 1000.0


def run_window(next_batch: Callable[[], Any], step: Callable[[Any], None], device: Device, plan: WindowPlan,
               deadline: float, *, phase: str, label: str, config: Optional[LoaderConfig], batch_size: int,
               clock_zero: float, first_batch_s: Optional[float] = None, warmup: bool = True) -> Measurement:
    """Warm up, then time steps of `step(next_batch())` until the plan or `deadline` (perf_counter) ends it."""
    if warmup:
        warm_up(next_batch, step, device, plan, deadline)
    gaps = _CudaGaps(device)
    device.sync()
    started = time.perf_counter()
    cpu_started = time.process_time()
    planned_end = started + plan.window_s
    soft_end = min(deadline, started + plan.window_s * plan.max_factor)
    hard_end = max(deadline, planned_end) + max(1.0, plan.window_s)  # runaway guard: a step that never ends
    stamps: List[float] = []
    waited = 0.0
    while True:
        before = time.perf_counter()
        batch = next_batch()
        waited += time.perf_counter() - before
        mark = gaps.begin()
        step(batch)
        gaps.end(mark)
        now = time.perf_counter()
        stamps.append(now)
        count = len(stamps)
        if (now >= planned_end and count >= plan.min_steps) or (now >= soft_end and count >= plan.floor_steps) \
                or now >= hard_end:
            break
    device.sync()
    ended = time.perf_counter()
    seconds = ended - started
    steps = len(stamps)
    truncated = steps < plan.min_steps or ended - started < plan.window_s
    return Measurement(
        phase=phase, label=label, config=config, steps=steps, samples=steps * batch_size, seconds=seconds,
        samples_per_s=steps * batch_size / seconds if seconds > 0 else 0.0, host_wait_s=waited,
        cv=_thirds_cv(started, stamps), first_batch_s=first_batch_s,
        cpu_s=time.process_time() - cpu_started, device_idle_s=gaps.idle_s(), truncated=truncated,
        started_s=started - clock_zero,
    )


def warm_up(next_batch: Callable[[], Any], step: Callable[[Any], None], device: Device, plan: WindowPlan,
             deadline: float) -> None:
    started = time.perf_counter()
    soft_end = min(deadline, started + max(plan.warmup_s, 0.05) * plan.max_factor)
    hard_end = max(deadline, soft_end) + max(1.0, plan.warmup_s)
    steps = 0
    while True:
        step(next_batch())
        steps += 1
        now = time.perf_counter()
        if (steps >= plan.warmup_steps and now - started >= plan.warmup_s) \
                or (now >= soft_end and steps >= plan.drain_steps) or now >= hard_end:
            break
    device.sync()


def _thirds_cv(started: float, stamps: List[float]) -> float:
    """Coefficient of variation of the step rate over the window's three thirds (0 with < 3 steps)."""
    if len(stamps) < 3:
        return 0.0
    bounds = [0, len(stamps) // 3, 2 * len(stamps) // 3, len(stamps)]
    times = [started] + stamps
    rates = []
    for lo, hi in zip(bounds, bounds[1:]):
        span = times[hi] - times[lo]
        if span > 0 and hi > lo:
            rates.append((hi - lo) / span)
    if len(rates) < 2 or statistics.mean(rates) == 0:
        return 0.0
    return statistics.pstdev(rates) / statistics.mean(rates)


def measure_loader_only(next_batch: Callable[[], Any], plan: WindowPlan, deadline: float, *, phase: str,
                        label: str, config: LoaderConfig, batch_size: int, clock_zero: float,
                        first_batch_s: Optional[float]) -> Measurement:
    """Iterate the loader with no training step: its own samples/s and (with 0 workers) CPU-s per sample."""
    cpu = _NullDevice()
    return run_window(next_batch, lambda batch: None, cpu, plan, deadline, phase=phase, label=label,
                      config=config, batch_size=batch_size, clock_zero=clock_zero, first_batch_s=first_batch_s)


class _NullDevice:
    is_cuda = False
    type = "cpu"

    def sync(self) -> None:
        return None


# --------------------------------------------------------------------------- loaders that die

SHM_FAILURE = "out of /dev/shm"
# How a worker that ran out of /dev/shm surfaces: torch's allocation error re-raised in the main process,
# or the SIGBUS a write past a full tmpfs gets ("killed by signal: Bus error", PyTorch #5040).
_SHM_SIGNS = ("shared memory", "(shm)", "/dev/shm", "Bus error", "No space left on device")
_STOP_SIGNS = ("killed by signal: Terminated", "killed by signal: Interrupt")


def worker_failure(exc: BaseException) -> str:
    """One line on why a DataLoader's workers died: 'out of /dev/shm: ...', 'terminated' (a signal
    stopped them: the job is being stopped), else the error's own last line (the worker's exception)."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else type(exc).__name__
    if any(sign in text for sign in _STOP_SIGNS):
        return "terminated"
    if any(sign in text for sign in _SHM_SIGNS):
        return f"{SHM_FAILURE}: {last}"
    return last


# --------------------------------------------------------------------------- micro-benchmarks (L2)


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
    return (2.0 * n ** 3 * done / seconds / 1e12 if done else None), f"{dtype_name} {n}^3 x {done}"


def h2d_bandwidth(device: Device, nbytes: int = 256 * MIB, repeats: int = 10,
                  during: Optional[Callable[[], Any]] = None) -> Tuple[Dict[str, Optional[float]], Any]:
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
    """CUDA: torch's peak allocated bytes on the device; CPU: this process's peak RSS."""
    if device.is_cuda:
        import torch

        return torch.cuda.max_memory_allocated(device.torch_device) / MIB
    try:
        import resource  # not on Windows
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024.0  # macOS: bytes; Linux: KiB


# --------------------------------------------------------------------------- worker memory


def child_pids(proc: str = "/proc") -> List[int]:
    """PIDs of this process's children (`/proc/self/task/*/children`; empty where the kernel lacks it)."""
    pids: List[int] = []
    for task in Path(proc, "self", "task").glob("*"):
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return sorted(set(pids))


def pss_kib(pid: int, proc: str = "/proc") -> Optional[int]:
    """Proportional set size of `pid` in KiB (`grep Pss /proc/PID/smaps_rollup`): shared pages split fairly."""
    try:
        text = Path(proc, str(pid), "smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


def workers_pss_kib(pids: List[int]) -> Optional[int]:
    values = [pss_kib(pid) for pid in pids]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def rss_bytes() -> Optional[int]:
    """This process's resident set (`/proc/self/statm`), the size a forked worker starts from."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def usable_cpus() -> int:
    from bootstrap.compat.probe import probe_usable_cpus

    count, _ = probe_usable_cpus()
    return count or os.cpu_count() or 1

