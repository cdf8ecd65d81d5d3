"""A run's result, computed from its state once the phases are over (or cut short).

`build_result` derives the metrics (tuned median and spread, efficiency,
stalls, speedup and its prediction, sizing figures), the /dev/shm the
loader needs, the verdicts, the closing notes and the snippet, and returns
them as one frozen `BenchResult`.
"""

from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional

from bootstrap.bench.device import peak_memory_mib
from bootstrap.bench.results import BenchResult
from bootstrap.bench.schedule import needed_s
from bootstrap.bench.search import least_prediction
from bootstrap.bench.state import LoaderFailure, RunState
from bootstrap.bench.stream import DUPLICATED, NO_BATCH, SHM_FAILURE
from bootstrap.bench.user import is_stream
from bootstrap.fsutil import MIB
from bootstrap.report import Status

# What a tune stands on: a measurement left out of these (not micro, not scaling) makes it incomplete.
TUNE_PHASES = ("loader", "ceiling", "naive", "tune", "tuned")


def derived_metrics(state: RunState) -> Dict[str, Optional[float]]:
    """The figures computed from the measurements, added to `state.metrics` (which it returns)."""
    m = state.metrics
    tuned = state.measurements_of("tuned")
    ceiling = m.get("ceiling_samples_per_s")
    naive = m.get("naive_samples_per_s")
    cpu_s, wall_s = m.get("cpu_s_per_sample"), m.get("wall_s_per_sample")
    rates: List[float] = [w.samples_per_s for w in tuned]
    if tuned:
        median = statistics.median(rates)
        m["tuned_samples_per_s"] = median
        m["tuned_min_samples_per_s"], m["tuned_max_samples_per_s"] = min(rates), max(rates)
        m["tuned_spread_pct"] = 100.0 * (max(rates) - min(rates)) / median
        m["tuned_window_steps"] = float(min(w.steps for w in tuned))
        workers = tuned[0].config.num_workers
        m["tuned_prefetched_batches"] = float(workers * tuned[0].config.prefetch_factor if workers else 0)
        m["stall_host_wait_pct"] = statistics.median(w.host_wait_pct for w in tuned)
        m["time_to_first_batch_s"] = tuned[0].first_batch_s
        idle = [100.0 * w.device_idle_s / w.seconds for w in tuned if w.device_idle_s is not None and w.seconds]
        m["stall_device_idle_pct"] = statistics.median(idle) if idle else None
    tuned_rate = m.get("tuned_samples_per_s")
    if tuned_rate and ceiling:
        _efficiency(state, tuned_rate, ceiling, rates)
    _recheck(state, rates)
    if tuned_rate and naive:
        m["speedup"] = tuned_rate / naive
    _predicted_speedup(state, ceiling, naive, cpu_s, wall_s)
    if tuned and state.naive is not None:
        spread = statistics.pstdev(rates) / statistics.mean(rates) if len(rates) > 1 else 0.0
        m["speedup_noise"] = max(state.thresholds.noise_floor_min, 2 * max(state.naive.cv, spread))
    if cpu_s:
        m["cores_per_device_needed"] = ceiling * cpu_s if ceiling else None
        m["workers_per_device_needed"] = ceiling * wall_s if ceiling and wall_s else None
        m["feedable_samples_per_s"] = max(1, state.cpus - 1) / cpu_s
        if state.options.target_rate:
            m["cores_needed_for_target"] = state.options.target_rate * cpu_s
    m["peak_memory_mib"] = peak_memory_mib(state.device) if state.device is not None else None
    m["tuning_seconds"] = state.tuning.seconds or None
    m["tuning_budget_s"] = state.tuning.budget_s or None
    m["sampler_overhead_pct"] = state.sampler_report.overhead_pct
    m["tuned_windows"] = float(len(tuned))
    if state.ledger.skipped:
        m["budget_needed_s"] = needed_s(state)
    return m


def _efficiency(state: RunState, tuned_rate: float, ceiling: float, rates: List[float]) -> None:
    """Tuned / ceiling; above 1 by more than the noise it is a measurement error (the host's load
    changed between the two), reported as `tuned_over_ceiling` with no efficiency."""
    m = state.metrics
    ratio = tuned_rate / ceiling
    spread = statistics.pstdev(rates) / statistics.mean(rates) if len(rates) > 1 else 0.0
    noise = max(state.thresholds.noise_floor_min, 2 * max(state.ceiling.cv if state.ceiling else 0.0, spread))
    m["tuned_over_ceiling"] = ratio
    if ratio > 1.0 + noise:
        m["efficiency"], m["stall_differential_pct"] = None, None
        return
    m["efficiency"] = min(1.0, ratio)
    m["stall_differential_pct"] = max(0.0, 100.0 * (1.0 - ratio))


def _recheck(state: RunState, rates: List[float]) -> None:
    """The independent re-measure of the winner against the tuned median, and the noise to judge it by."""
    m = state.metrics
    again = state.measurements_of("recheck")
    if not again or not rates:
        return
    m["recheck_samples_per_s"] = again[-1].samples_per_s
    m["recheck_steps"] = again[-1].steps
    m["recheck_gap_pct"] = 100.0 * (again[-1].samples_per_s / m["tuned_samples_per_s"] - 1.0)
    spread = (max(rates) - min(rates)) / statistics.median(rates)
    m["recheck_noise"] = max(state.thresholds.noise_floor_min, spread, 2 * again[-1].cv)


def _predicted_speedup(
    state: RunState, ceiling: Optional[float], naive: Optional[float], cpu_s: Optional[float], wall_s: Optional[float]
) -> None:
    """What the winner should reach: the least of the ceiling, W / l, and the CPUs over the CPU cost
    of a sample (loading plus stepping), against naive."""
    m, best = state.metrics, state.best
    if ceiling and naive and wall_s and best is not None and best.num_workers:
        bounds = [ceiling, best.num_workers / wall_s]
        step_cpu_s = m.get("step_cpu_s_per_sample")
        if cpu_s is not None and step_cpu_s is not None and cpu_s + step_cpu_s > 0:
            bounds.append(state.cpus / (cpu_s + step_cpu_s))
        m["predicted_samples_per_s"] = min(bounds)
        m["predicted_speedup"] = min(bounds) / naive
    elif best is not None and naive:
        m["predicted_speedup"] = 1.0  # no workers won: the tuned loop is the naive pipeline


def shm_need_mib(state: RunState) -> float:
    """/dev/shm the loader needs: workers x prefetch x batch. The workers are the winner's, or, when
    /dev/shm itself capped the search or killed a loader, the count the run wanted. A run the budget
    stopped before its prediction still wanted one worker: /dev/shm too small for that is a finding."""
    best = state.best
    workers = best.num_workers if best else 0
    prefetch = best.prefetch_factor if best else 2
    wanted = state.prediction or least_prediction(state)
    if wanted is not None and wanted.cap_reason.startswith("/dev/shm") and wanted.cap < wanted.predicted:
        workers = max(workers, min(wanted.predicted, state.cpus))
    for failure in state.failures:
        if failure.why.startswith(SHM_FAILURE):
            workers = max(workers, failure.config.num_workers)
            prefetch = max(prefetch, failure.config.prefetch_factor)
    return workers * prefetch * state.batch_bytes / MIB


def verdict_facts(state: RunState) -> Any:
    """What the verdicts judge besides the metrics: the host, the winner, how complete the run was."""
    from bootstrap.bench import verdicts
    from bootstrap.compat.facts import HostFacts

    host = state.host or HostFacts()
    shm_failure = next((f.why for f in state.failures if f.why.startswith(SHM_FAILURE)), "")
    return verdicts.VerdictFacts(
        device_type=state.device_info.get("type", "cpu"),
        gpu_name=state.device_info.get("name", ""),
        cpus=state.cpus,
        cpus_total=host.cpus_total,
        shm_free_mib=host.shm_free_mib,
        shm_need_mib=state.metrics["shm_need_mib"],
        shm_failure=shm_failure,
        start_method=host.start_method or "",
        start_method_explicit=host.start_method_explicit,
        nofile_soft=host.nofile_soft,
        nofile_hard=host.nofile_hard,
        workers=state.best.num_workers if state.best else None,
        cpu_bound=state.cpu_bound,
        pcie=state.pcie,
        worker_cap=state.prediction.cap if state.prediction else None,
        predicted_workers=state.prediction.predicted if state.prediction else None,
        budget_s=state.options.budget_s,
        partial=state.interrupted,
        left_out=state.ledger.summary(TUNE_PHASES),
    )


def _failure_note(failure: LoaderFailure) -> str:
    what = (
        failure.why if failure.why.startswith((NO_BATCH, DUPLICATED)) else f"the loader's workers died ({failure.why})"
    )
    return f"{failure.phase} {failure.config.label}: {what}; that config counts as failed"


def closing_notes(state: RunState) -> List[str]:
    """Notes on what went wrong or was left out, after the run's own notes."""
    notes = [_failure_note(failure) for failure in state.failures]
    needed = state.metrics.get("budget_needed_s")
    if needed is not None:
        notes.append(
            f"budget too small for a complete run: left out {state.ledger.summary()}; "
            f"~{needed:.0f} s would cover them (--budget {needed:.0f})"
        )
    if state.interrupted:
        notes.append("interrupted (Ctrl-C or SIGTERM): partial report of the phases measured so far")
    return notes


def build_result(state: RunState) -> BenchResult:
    """The frozen result of the run as it stands (complete, cut short by the budget, or interrupted)."""
    from bootstrap.bench import verdicts
    from bootstrap.bench.report import dataloader_snippet

    derived_metrics(state)
    state.metrics["shm_need_mib"] = shm_need_mib(state)
    checks = (
        verdicts.evaluate(state.metrics, verdict_facts(state), state.sampler_report, state.thresholds)
        if state.device_info
        else []
    )
    state.notes.extend(closing_notes(state))
    untuned = next((c for c in checks if c.id == "bench.tuned" and c.status is not Status.OK), None)
    options = state.options
    user = options.user.describe() if options.user is not None else None
    if user is not None and is_stream(state.dataset):
        user["stream"] = True  # an IterableDataset: read in its own order, which DataLoader must not shuffle
    snippet = (
        dataloader_snippet(
            state.best,
            state.workload,
            state.device_info.get("type", "cpu"),
            caveat=untuned.observed if untuned else "",
            user=user,
        )
        if state.best
        else ""
    )
    workload = state.workload.to_dict()
    if user is not None:
        workload["user"] = user
    return BenchResult(
        device=dict(state.device_info),
        workload=workload,
        budget_s=options.budget_s,
        thresholds=options.thresholds.to_dict(),
        phases=tuple(state.phase_records),
        measurements=tuple(state.measurements),
        metrics=dict(state.metrics),
        tuning=state.tuning,
        sampler=state.sampler_report,
        checks=tuple(checks),
        best=state.best,
        snippet=snippet,
        notes=tuple(state.notes),
        partial=state.interrupted,
        seconds=state.elapsed_at_end_s or state.elapsed_s(),
    )
