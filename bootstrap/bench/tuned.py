"""The tuned phase: the winner timed in up to TUNED_WINDOWS windows, each only if it fits the budget,
then re-measured once with a fresh loader (`recheck`): the figure the report gives must agree with
an independent measurement of the same config, or the verdicts say they cannot decide.

One loader serves every window (warmed up once), as a training loop would
use it; worker memory (PSS) is read around the windows, and on CUDA the
sampler's GPM and utilisation statistics are taken over each window.
Under torchrun every rank passes the same number of window barriers,
whether its windows were measured or not.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from bootstrap.bench.budget import FLOOR_STEPS
from bootstrap.bench.host import child_pids, workers_pss_kib
from bootstrap.bench.results import LoaderConfig
from bootstrap.bench.state import RunState
from bootstrap.bench.stream import BatchStream, make_loader
from bootstrap.bench.trials import (
    fit_steps,
    loader_failed,
    min_window_s,
    stop_workers,
    stream_counter,
    trainer_for,
    window_plan,
)
from bootstrap.bench.window import WindowPlan, run_window, warm_up

TUNED_WINDOWS = 3
RECHECK_WINDOWS = 1  # the fresh loader's window, priced like a tuned one


def tuned(state: RunState, deadline: float) -> str:
    state.tuned_barriers_due = TUNED_WINDOWS
    note = _tuned_windows(state, deadline)
    while state.barrier is not None and state.tuned_barriers_due > 0:
        _window_barrier(state)  # every rank passes the same number of barriers, measured or not
    return note


def _window_barrier(state: RunState) -> None:
    state.tuned_barriers_due -= 1
    if state.barrier is not None:
        state.barrier()


def _tuned_windows(state: RunState, deadline: float) -> str:
    config = state.best
    if config is None:
        return "skipped: no tuned config"
    workers, costs = config.num_workers, state.costs
    if not state.affords(
        f"tuned {config.label}", costs.least_s(workers), need_s=costs.batch_s + TUNED_WINDOWS * costs.window_s(workers)
    ):
        return state.skipped("a tuned window")
    stream = None
    spec = state.workload
    try:
        stream = BatchStream(
            make_loader(
                state.dataset,
                spec.loader_batch_size,
                config,
                seed=spec.seed,
                collate_fn=state.collate_fn,
                sampling=state.sampling,
            )
        )
        state.costs = state.costs.learn_startup(workers, stream.first_batch_s)
        count = _measure_tuned(state, stream, config, deadline)
        stream.close()
        stream = None
        rechecked = _recheck(state, config, deadline) if count else ""
    except Exception as exc:  # noqa: BLE001 (the user's samples may raise anything: see `loader_failed`)
        loader_failed(state, "tuned", config, exc, stream)
        return f"failed: {state.failures[-1].why}"
    except BaseException:
        stop_workers(stream)
        raise
    finally:
        if stream is not None:
            stream.close()
    return f"{count} windows of {config.label}{rechecked}"


def _recheck(state: RunState, config: LoaderConfig, deadline: float) -> str:
    """One window of a fresh loader with the winner's config, when the budget still pays for it."""
    from bootstrap.bench.trials import measure_loader

    if not state.affords(f"recheck {config.label}", state.costs.least_s(config.num_workers)):
        return "; no time to re-measure"
    window_s = (deadline - time.perf_counter()) / 1.5
    again = measure_loader(state, config, window_s, deadline, "recheck", with_step=True)
    return "" if again is None else f"; re-measured {again.samples_per_s:.1f} samples/s"


def _measure_tuned(state: RunState, stream: Any, config: LoaderConfig, deadline: float) -> int:
    """Warm up, then up to TUNED_WINDOWS windows, each only if it still fits; worker PSS around them."""
    trainer = trainer_for(state, config)
    workers = config.num_workers
    period_s = state.costs.period_s(workers)
    # The recheck builds a fresh loader: it needs its first batch and warm-up as well as a window.
    deadline -= state.costs.least_s(workers) - state.costs.window_s(workers)
    plan = replace(
        fit_steps(window_plan((deadline - time.perf_counter()) / (TUNED_WINDOWS + RECHECK_WINDOWS + 0.5)), period_s),
        drain_steps=1 + workers,
    )
    warm_up(lambda: next(stream), trainer.step, state.device, plan, deadline)
    pids = child_pids() if workers else []
    pss_start_kib = workers_pss_kib(pids)
    if state.sampler is not None:
        state.sampler.gpm_begin()
    count = 0
    for index in range(TUNED_WINDOWS):
        _window_barrier(state)
        least_s = FLOOR_STEPS * state.costs.period_s(workers)
        if not state.affords(f"tuned window #{index + 1}", least_s, need_s=state.costs.window_s(workers)):
            continue
        left_s = deadline - time.perf_counter()
        window_s = max(min_window_s(state, config), left_s / (TUNED_WINDOWS + RECHECK_WINDOWS - index) / 1.05)
        # The step count is priced from the ceiling's period, which a busy host stretches: a window
        # ends near its planned seconds rather than waiting for steps the budget did not pay for.
        plan = fit_steps(
            replace(plan, window_s=window_s, min_steps=WindowPlan().scaled(window_s).min_steps, max_factor=1.2),
            period_s,
        )
        measured = state.record(
            run_window(
                lambda: next(stream),
                trainer.step,
                state.device,
                plan,
                deadline,
                phase="tuned",
                label=f"tuned #{index + 1} {config.label}",
                config=config,
                batch_size=state.workload.batch_size,
                clock_zero=state.clock_zero,
                counted=stream_counter(state, stream),
                first_batch_s=stream.first_batch_s,
                warmup=False,
            )
        )
        count += 1
        if state.sampler is not None:
            state.sampler.stat_window(measured.started_s, measured.started_s + measured.seconds)
    if state.sampler is not None:
        state.sampler.gpm_end()
    pss_end_kib = workers_pss_kib(pids)
    if pss_start_kib and pss_end_kib is not None and count:
        state.metrics["worker_pss_growth_pct"] = 100.0 * (pss_end_kib - pss_start_kib) / pss_start_kib
        state.metrics["worker_pss_mib"] = pss_end_kib / 1024.0
    return count
