"""The measurement loop: a warm-up, then a timed window of steps, cut at its deadline
(docs/benchmark.md, "How a window is measured").

A window discards a warm-up (every worker's first batch among it), then runs steps until its planned
length, synchronising the device at both ends, and records the host's wait in `next()`, the process's
CPU time and, on CUDA, the device-idle gaps between consecutive steps' GPU work (CUDA events). Noise
comes from the window itself: the rate over each third of its steps gives a coefficient of variation.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from bootstrap.bench.loader import WORKER_EXITED, BatchStream, sample_failure, worker_failure
from bootstrap.bench.results import LoaderConfig, Measurement
from bootstrap.bench.state import FLOOR_STEPS, LoaderFailure, RunState
from bootstrap.errors import InputError

Take = Callable[[], Any]
Step = Callable[[Any], None]


@dataclass(frozen=True)
class Window:
    """How long one window warms up and measures: a full window is 15 s and 100 steps after a 5 s,
    20-step warm-up (benchy and DS-Analyzer's practice); shorter ones shrink in proportion."""

    seconds: float
    warmup_s: float = 0.0
    warmup_steps: int = 2
    min_steps: int = FLOOR_STEPS
    drain: int = 1  # warm-up steps run whatever the time: the batch of each worker that started

    @classmethod
    def scaled(cls, seconds: float, drain: int = 1) -> Window:
        ratio = max(0.0, min(1.0, seconds / 15.0))
        steps = max(FLOOR_STEPS, int(100 * ratio))
        return cls(max(seconds, 0.05), 5.0 * ratio, max(2, int(20 * ratio)), steps, drain)


class _CudaGaps:
    """Device-idle time: the sum of gaps between one step's last GPU work and the next step's first."""

    def __init__(self, cuda: bool) -> None:
        self.enabled = cuda
        self.pairs: list[tuple[Any, Any]] = []

    def begin(self) -> Any:
        return self._event() if self.enabled else None

    def end(self, start: Any) -> None:
        if self.enabled:
            self.pairs.append((start, self._event()))

    @staticmethod
    def _event() -> Any:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def idle_s(self) -> Optional[float]:
        """After a synchronize: the gaps between step i's end and step i+1's start, summed, in seconds."""
        if not self.enabled:
            return None
        pairs = self.pairs
        gaps_ms = [max(0.0, float(end.elapsed_time(start))) for (_, end), (start, _) in zip(pairs, pairs[1:])]
        return sum(gaps_ms) / 1000.0


def warm_up(state: RunState, take: Take, step: Optional[Step], plan: Window, deadline: float) -> None:
    """Steps until the warm-up's steps and seconds are done (at most twice its seconds once the workers'
    batches drained), the deadline passed after the drain, or the run's end."""
    started, steps = time.perf_counter(), 0
    while True:
        batch = take()
        if step is not None:
            step(batch)
        steps, now = steps + 1, time.perf_counter()
        elapsed, drained = now - started, steps >= plan.drain
        if (drained and steps >= plan.warmup_steps and elapsed >= plan.warmup_s) or now >= state.run_deadline:
            break
        if drained and (now >= deadline or elapsed >= 2 * plan.warmup_s):
            break
    if step is not None and state.device is not None:
        state.device.sync()


def run_window(
    state: RunState,
    take: Take,
    step: Optional[Step],
    plan: Window,
    deadline: float,
    what: tuple[str, str, Optional[LoaderConfig]],
    counted: Optional[Callable[[Any], int]] = None,
) -> Measurement:
    """Time `step(take())` until the plan ends the window (its seconds and steps, or twice its seconds
    after FLOOR_STEPS), or `deadline` cuts it after FLOOR_STEPS, or the run's end cuts it at once. `step`
    None times the loader alone. Each batch counts the batch size, or what `counted` says."""
    device = state.device if step is not None else None
    gaps = _CudaGaps(device is not None and device.is_cuda)
    if device is not None:
        device.sync()
    started, cpu_started = time.perf_counter(), time.process_time()
    stamps: list[float] = []
    waited, samples, ended_by_plan = 0.0, 0, False
    while True:
        before = time.perf_counter()
        batch = take()
        waited += time.perf_counter() - before
        samples += state.workload.batch_size if counted is None else counted(batch)
        if step is not None:
            mark = gaps.begin()
            step(batch)
            gaps.end(mark)
        now = time.perf_counter()
        stamps.append(now)
        elapsed, steps = now - started, len(stamps)
        ended_by_plan = (elapsed >= plan.seconds and steps >= plan.min_steps) or (
            elapsed >= 2 * plan.seconds and steps >= FLOOR_STEPS
        )
        if ended_by_plan or (now >= deadline and steps >= FLOOR_STEPS) or now >= state.run_deadline:
            break
    if device is not None:
        device.sync()
    seconds = time.perf_counter() - started
    phase, label, config = what
    return Measurement(
        phase=phase,
        label=label,
        config=config,
        steps=len(stamps),
        samples=samples,
        seconds=seconds,
        samples_per_s=samples / seconds if seconds > 0 else 0.0,
        host_wait_s=waited,
        cv=_thirds_cv(started, stamps),
        cpu_s=time.process_time() - cpu_started,
        device_idle_s=gaps.idle_s(),
        truncated=not ended_by_plan,
        started_s=started - state.clock_zero,
    )


def _thirds_cv(started: float, stamps: list[float]) -> float:
    """Coefficient of variation of the step rate over the window's three thirds (0 with < 3 steps)."""
    if len(stamps) < 3:
        return 0.0
    bounds = [0, len(stamps) // 3, 2 * len(stamps) // 3, len(stamps)]
    times = [started, *stamps]
    rates = [(hi - lo) / (times[hi] - times[lo]) for lo, hi in zip(bounds, bounds[1:]) if times[hi] > times[lo]]
    if len(rates) < 2 or statistics.mean(rates) == 0:
        return 0.0
    return statistics.pstdev(rates) / statistics.mean(rates)


def stream_counter(state: RunState, stream: Any) -> Optional[Callable[[Any], int]]:
    """How a window counts the batches `stream` (a BatchStream, or the ceiling's turns) gives: what its
    `samples` says the last one holds (a batch sampler's list), else `state.samples_in`; None (the batch
    size) for batches the DataLoader sized."""
    fallback = state.samples_in
    if fallback is None:
        return None
    return lambda batch: stream.samples if stream.samples is not None else fallback(batch)


Keep = Callable[[Any, Optional[int]], Any]


def measure_loader(
    state: RunState,
    config: LoaderConfig,
    plan: Window,
    deadline: float,
    phase: str,
    *,
    with_step: bool,
    keep: Optional[Keep] = None,
) -> Optional[Measurement]:
    """Build a loader with `config`, warm up and time one window (with or without the training step);
    `keep` is handed each batch and what it holds, and returns the batch. None when its workers died
    (out of /dev/shm, killed): that config failed, the run goes on."""
    spec = state.workload
    if spec.cold_cache:
        from bootstrap.bench.synthetic import drop_page_cache

        drop_page_cache(state.store)
    stream = None
    try:
        stream = state.stream(config)
        take: Take = (lambda: next(stream)) if keep is None else (lambda: keep(next(stream), stream.samples))
        step = state.trainer(config).step if with_step else None
        label = config.label if with_step else f"loader {config.label}"
        warm_up(state, take, step, plan, deadline)
        measured = run_window(state, take, step, plan, deadline, (phase, label, config), stream_counter(state, stream))
        measured = replace(measured, first_batch_s=stream.first_batch_s)
    except Exception as exc:  # noqa: BLE001 (the user's samples may raise anything: see `loader_failed`)
        loader_failed(state, phase, config, exc, stream)
        return None
    except BaseException:
        stop_workers(stream)
        raise
    finally:
        if stream is not None:
            stream.close()
    return state.record(measured, plan.seconds)


def stop_workers(stream: Optional[BatchStream]) -> None:
    """Ctrl-C or a stalled run: terminate the workers now, whatever they are doing. A graceful shutdown
    waits out a timeout for each worker stuck in a sample."""
    if stream is not None:
        stream.close(kill=True)


def loader_failed(
    state: RunState, phase: str, config: LoaderConfig, exc: Exception, stream: Optional[BatchStream]
) -> None:
    """What `exc`, raised while a loader of `config` ran, means for the run; returns only when it is a
    result about that config (its workers died), else raises.

    A sample of the user's dataset that fails to load in the middle of the run is one line naming the
    dataset (bench reads every sample, in shuffled order: the first batch passing does not mean the rest
    will); the built-in workload's errors are bench's own, re-raised. What the training step raised
    (`StepFailed`: it runs in this process, between the loader's batches) is the step's."""
    from bootstrap.bench.step import StepFailed
    from bootstrap.bench.user import SAMPLE_FIX, step_failed

    stop_workers(stream)
    user = state.options.user
    if isinstance(exc, StepFailed):
        own = state.samples_in is not None
        during = f"while bench measured {config.label}"
        raise step_failed(user, exc, during, state.model_name, own, state.workload.num_classes) from None
    why = sample_failure(exc, config.num_workers) if user is not None and not isinstance(exc, InputError) else None
    if why is None:
        if not isinstance(exc, RuntimeError) or not config.num_workers:
            raise exc
        why = worker_failure(exc)
        if why == "terminated":  # the job is being stopped (Slurm signals every process): stop like Ctrl-C
            raise KeyboardInterrupt from exc
        state.failures.append(LoaderFailure(phase, config, why))
        state.say(phase, f"{config.label}: failed: {why}")
        return
    if why.startswith(WORKER_EXITED):  # the worker's own stderr, above, says why; the hint names the likely causes
        raise InputError(user.where(), f"{why}, while bench measured {config.label}") from None
    problem = f"a sample failed to load while bench measured {config.label}: {why}"
    raise InputError(user.where(), problem, SAMPLE_FIX) from None
