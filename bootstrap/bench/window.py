"""Timed windows: a warm-up, then steps until the plan or the deadline ends them.

A window discards a warm-up (the first batch timed separately), then runs
steps until its planned length, synchronising the device at both ends
(`torch.cuda.synchronize`), and records the host's wait in `next()`, the
process CPU time and, on CUDA, the device-idle gaps between consecutive
steps' GPU work (CUDA events). Noise comes from the window itself: the rate
over each third of its steps gives a coefficient of variation.

Shell equivalents: none; this is what `benchy` / DS-Analyzer time by hand.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from bootstrap.bench.device import Device
from bootstrap.bench.results import LoaderConfig, Measurement


@dataclass(frozen=True)
class WindowPlan:
    """How long to warm up and measure; a window also ends at the phase deadline."""

    warmup_steps: int = 20
    warmup_s: float = 5.0
    window_s: float = 15.0
    min_steps: int = 100
    max_factor: float = 2.0  # warm-up / window never run past this x their planned seconds ...
    floor_steps: int = 3  # ... unless fewer steps than this ran (a rate needs a few steps; CV needs thirds)
    drain_steps: int = 1  # warm-up steps that must run whatever the time (workers' start-up queue)

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
        """Call after a synchronize: the gaps between step i's end and step i+1's start, summed, in seconds."""
        if not self.enabled:
            return None
        gaps = [max(0.0, self.pairs[i][1].elapsed_time(self.pairs[i + 1][0])) for i in range(len(self.pairs) - 1)]
        return sum(gaps) / 1000.0


def run_window(
    next_batch: Callable[[], Any],
    step: Callable[[Any], None],
    device: Device,
    plan: WindowPlan,
    deadline: float,
    *,
    phase: str,
    label: str,
    config: Optional[LoaderConfig],
    batch_size: int,
    clock_zero: float,
    first_batch_s: Optional[float] = None,
    warmup: bool = True,
    counted: Optional[Callable[[Any], int]] = None,
) -> Measurement:
    """Warm up, then time steps of `step(next_batch())` until the plan or `deadline` (perf_counter) ends it.
    Each batch counts `batch_size` samples, or what `counted` says it holds (`batch.own_batch_counter`)."""
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
    samples = 0
    while True:
        before = time.perf_counter()
        batch = next_batch()
        waited += time.perf_counter() - before
        samples += batch_size if counted is None else counted(batch)
        mark = gaps.begin()
        step(batch)
        gaps.end(mark)
        now = time.perf_counter()
        stamps.append(now)
        count = len(stamps)
        if (
            (now >= planned_end and count >= plan.min_steps)
            or (now >= soft_end and count >= plan.floor_steps)
            or now >= hard_end
        ):
            break
    device.sync()
    ended = time.perf_counter()
    seconds = ended - started
    steps = len(stamps)
    truncated = steps < plan.min_steps or ended - started < plan.window_s
    return Measurement(
        phase=phase,
        label=label,
        config=config,
        steps=steps,
        samples=samples,
        seconds=seconds,
        samples_per_s=samples / seconds if seconds > 0 else 0.0,
        host_wait_s=waited,
        cv=_thirds_cv(started, stamps),
        first_batch_s=first_batch_s,
        cpu_s=time.process_time() - cpu_started,
        device_idle_s=gaps.idle_s(),
        truncated=truncated,
        started_s=started - clock_zero,
    )


def warm_up(
    next_batch: Callable[[], Any], step: Callable[[Any], None], device: Device, plan: WindowPlan, deadline: float
) -> None:
    started = time.perf_counter()
    soft_end = min(deadline, started + max(plan.warmup_s, 0.05) * plan.max_factor)
    hard_end = max(deadline, soft_end) + max(1.0, plan.warmup_s)
    steps = 0
    while True:
        step(next_batch())
        steps += 1
        now = time.perf_counter()
        if (
            (steps >= max(plan.warmup_steps, plan.drain_steps) and now - started >= plan.warmup_s)
            or (now >= soft_end and steps >= plan.drain_steps)
            or now >= hard_end
        ):
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


def measure_loader_only(
    next_batch: Callable[[], Any],
    plan: WindowPlan,
    deadline: float,
    *,
    phase: str,
    label: str,
    config: LoaderConfig,
    batch_size: int,
    clock_zero: float,
    first_batch_s: Optional[float],
    counted: Optional[Callable[[Any], int]] = None,
) -> Measurement:
    """Iterate the loader with no training step: its own samples/s and (with 0 workers) CPU-s per sample."""
    cpu = _NullDevice()
    return run_window(
        next_batch,
        lambda _batch: None,
        cpu,
        plan,
        deadline,
        phase=phase,
        label=label,
        config=config,
        batch_size=batch_size,
        clock_zero=clock_zero,
        first_batch_s=first_batch_s,
        counted=counted,
    )


class _NullDevice:
    is_cuda = False
    type = "cpu"

    def sync(self) -> None:
        return None
