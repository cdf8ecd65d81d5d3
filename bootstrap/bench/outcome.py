"""What a run concludes, once its phases are over (or cut short): the derived figures, the verdicts,
the closing notes and the snippet, as one frozen `BenchResult`."""

from __future__ import annotations

import statistics

from bootstrap.bench.config import option
from bootstrap.bench.device import peak_memory_mib
from bootstrap.bench.loader import DUPLICATED, NO_BATCH, SHM_FAILURE
from bootstrap.bench.phases import TUNE_PHASES, least_prediction, sample_costs
from bootstrap.bench.results import BenchResult, Metrics
from bootstrap.bench.state import LoaderFailure, RunState
from bootstrap.bench.verdicts import VerdictFacts, evaluate
from bootstrap.fsutil import MIB
from bootstrap.report import Status


def _spread(rates: list[float]) -> float:
    return statistics.pstdev(rates) / statistics.mean(rates) if len(rates) > 1 else 0.0


def derived_metrics(state: RunState) -> Metrics:
    """The figures computed from the measurements, set on `state.metrics` (which it returns)."""
    m, noise_min = state.metrics, state.thresholds.noise_floor_min
    tuned = [x for x in state.measurements if x.phase == "tuned"]
    rates = [w.samples_per_s for w in tuned]
    ceiling, naive = m.ceiling_samples_per_s, m.naive_samples_per_s
    if tuned:
        m.tuned_samples_per_s = median = statistics.median(rates)
        m.tuned_min_samples_per_s, m.tuned_max_samples_per_s = min(rates), max(rates)
        m.tuned_spread_pct = 100.0 * (max(rates) - min(rates)) / median
        m.tuned_window_steps = float(min(w.steps for w in tuned))
        config = tuned[0].config
        m.tuned_prefetched_batches = float(config.num_workers * config.prefetch_factor if config else 0)
        m.stall_host_wait_pct = statistics.median(w.host_wait_pct for w in tuned)
        m.time_to_first_batch_s = tuned[0].first_batch_s
        idle = [100.0 * w.device_idle_s / w.seconds for w in tuned if w.device_idle_s is not None and w.seconds]
        m.stall_device_idle_pct = statistics.median(idle) if idle else None
        if ceiling:
            # Above the ceiling by more than the noise is a measurement error (the host's load changed
            # between the two): reported as `tuned_over_ceiling`, with no efficiency.
            m.tuned_over_ceiling = ratio = median / ceiling
            if ratio <= 1.0 + max(noise_min, 2 * max(state.ceiling.cv if state.ceiling else 0.0, _spread(rates))):
                m.efficiency, m.stall_differential_pct = min(1.0, ratio), max(0.0, 100.0 * (1.0 - ratio))
        again = [x for x in state.measurements if x.phase == "recheck"]
        if again:
            m.recheck_samples_per_s, m.recheck_steps = again[-1].samples_per_s, again[-1].steps
            m.recheck_gap_pct = 100.0 * (again[-1].samples_per_s / median - 1.0)
            m.recheck_noise = max(noise_min, (max(rates) - min(rates)) / median, 2 * again[-1].cv)
        if naive:
            m.speedup = median / naive
            m.speedup_noise = max(noise_min, 2 * max(state.naive.cv if state.naive else 0.0, _spread(rates)))
    _predicted_speedup(state)
    cpu_s, wall_s = m.cpu_s_per_sample, m.wall_s_per_sample
    if cpu_s:
        m.cores_per_device_needed = ceiling * cpu_s if ceiling else None
        m.workers_per_device_needed = ceiling * wall_s if ceiling and wall_s else None
        m.feedable_samples_per_s = max(1, state.cpus - 1) / cpu_s
        if state.options.target_rate:
            m.cores_needed_for_target = state.options.target_rate * cpu_s
    m.peak_memory_mib = peak_memory_mib(state.device) if state.device is not None else None
    m.tuning_seconds, m.tuning_budget_s = state.tuning.seconds or None, state.tuning.budget_s or None
    m.sampler_overhead_pct = state.sampler_report.overhead_pct
    m.tuned_windows = float(len(tuned))
    m.budget_needed_s = state.budget_needed_s() if state.cuts else None
    m.shm_need_mib = shm_need_mib(state)
    return m


def _predicted_speedup(state: RunState) -> None:
    """What the winner should reach: the least of the ceiling, W / l, and the CPUs over the CPU cost of a
    sample (loading plus stepping), against naive."""
    m, best = state.metrics, state.best
    ceiling, naive, cpu_s, wall_s = (
        m.ceiling_samples_per_s,
        m.naive_samples_per_s,
        m.cpu_s_per_sample,
        m.wall_s_per_sample,
    )
    if ceiling and naive and wall_s and best is not None and best.num_workers:
        bounds = [ceiling, best.num_workers / wall_s]
        step_cpu_s = m.step_cpu_s_per_sample
        if cpu_s is not None and step_cpu_s is not None and cpu_s + step_cpu_s > 0:
            bounds.append(state.cpus / (cpu_s + step_cpu_s))
        m.predicted_samples_per_s = min(bounds)
        m.predicted_speedup = min(bounds) / naive
    elif best is not None and naive:
        m.predicted_speedup = 1.0  # no workers won: the tuned loop is the naive pipeline


def shm_need_mib(state: RunState) -> float:
    """/dev/shm the loader needs: workers x prefetch x batch. The workers are the winner's, or, when
    /dev/shm itself capped the search or killed a loader, the count the run wanted; a run the budget
    stopped before its prediction still wanted one worker."""
    best = state.best
    workers, prefetch = (best.num_workers, best.prefetch_factor) if best else (0, 2)
    wanted = state.prediction or least_prediction(state)
    if wanted is not None and wanted.cap_reason.startswith("/dev/shm") and wanted.cap < wanted.predicted:
        workers = max(workers, min(wanted.predicted, state.cpus))
    for failure in state.failures:
        if failure.why.startswith(SHM_FAILURE):
            workers = max(workers, failure.config.num_workers)
            prefetch = max(prefetch, failure.config.prefetch_factor)
    return workers * prefetch * state.batch_bytes / MIB


def verdict_facts(state: RunState) -> VerdictFacts:
    """What the verdicts judge besides the metrics: the host, the winner, how complete the run was."""
    from bootstrap.compat.facts import HostFacts

    host, prediction = state.host or HostFacts(), state.prediction
    return VerdictFacts(
        device_type=state.device_info.get("type", "cpu"),
        gpu_name=state.device_info.get("name", ""),
        cpus=state.cpus,
        cpus_total=host.cpus_total,
        shm_free_mib=host.shm_free_mib,
        shm_need_mib=state.metrics.shm_need_mib,
        shm_failure=next((f.why for f in state.failures if f.why.startswith(SHM_FAILURE)), ""),
        start_method=host.start_method or "",
        start_method_explicit=host.start_method_explicit,
        nofile_soft=host.nofile_soft,
        nofile_hard=host.nofile_hard,
        workers=state.best.num_workers if state.best else None,
        cpu_bound=prediction.cpu_bound if prediction else None,
        pcie=state.pcie,
        worker_cap=prediction.cap if prediction else None,
        predicted_workers=prediction.predicted if prediction else None,
        budget_s=state.options.budget_s,
        partial=state.interrupted,
        left_out=state.cuts_summary(TUNE_PHASES),
        script=state.options.from_script,
    )


def _failure_note(failure: LoaderFailure) -> str:
    died = failure.why.startswith((NO_BATCH, DUPLICATED))
    what = failure.why if died else f"the loader's workers died ({failure.why})"
    return f"{failure.phase} {failure.config.label}: {what}; that config counts as failed"


def tuner_notes(state: RunState) -> list[str]:
    """What the tuner's pick needs said: the configs it tied with (the cheapest was kept), knob changes
    kept as ties, and why it has more workers than CPUs when the samples wait on I/O."""
    notes, ties, best = [], state.tuning.ties, state.best
    if ties is not None and ties.results:
        others = ", ".join(f"{label} ({rate:,.0f}/s)" for label, rate in ties.results)
        label, rate = ties.picked
        notes.append(
            f"tie: {others} {'ties' if len(ties.results) == 1 else 'tie'} with {label} ({rate:,.0f}/s) within "
            f"the noise ({ties.noise or 0:.0%}): the cheapest was kept (fewest workers, then no pinning, "
            "then the smaller prefetch)"
        )
    for name, _tried, kept, gain, noise in state.tuning.knobs:
        if kept and gain <= noise:
            notes.append(f"tie: {name} kept as the cheaper, {gain:+.1%} within the noise ({noise:.1%})")
    prediction = state.prediction
    if best is not None and prediction is not None and not prediction.cpu_bound and best.num_workers > state.cpus:
        cpu_s, wall_s = sample_costs(state.metrics)
        waits = 1.0 - cpu_s / wall_s if wall_s > 0 else 0.0
        notes.append(
            f"num_workers={best.num_workers} is more than the {state.cpus} usable CPUs: a sample waits on I/O "
            f"{waits:.0%} of its time ({cpu_s * 1e3:.2f} ms CPU of {wall_s * 1e3:.2f} ms, measured with "
            "num_workers=0), and a waiting worker holds no CPU; torch's warning that the suggested max number "
            f"of workers is {state.cpus} counts CPUs, not waits"
        )
    return notes


def build_result(state: RunState) -> BenchResult:
    """The frozen result of the run as it stands (complete, cut short by the budget, or interrupted)."""
    from bootstrap.bench.report import dataloader_snippet
    from bootstrap.bench.user import is_stream

    metrics = derived_metrics(state)
    facts = verdict_facts(state)
    checks = evaluate(metrics, facts, state.sampler_report, state.thresholds) if state.device_info else []
    notes = [*state.notes, *(_failure_note(f) for f in state.failures), *tuner_notes(state)]
    if metrics.budget_needed_s is not None:
        needed = metrics.budget_needed_s
        notes.append(
            f"budget too small for a complete run: left out {state.cuts_summary()}; "
            f"~{needed:.0f} s would cover them ({option('budget_s', f'{needed:.0f}', facts.script)})"
        )
    if state.interrupted:
        notes.append("interrupted (Ctrl-C or SIGTERM): partial report of the phases measured so far")
    untuned = next((c for c in checks if c.id == "bench.tuned" and c.status is not Status.OK), None)
    options, user = state.options, None
    workload = state.workload.to_dict()
    if options.user is not None:
        workload["user"] = user = options.user.describe()
        if is_stream(state.dataset):
            user["stream"] = True  # an IterableDataset: read in its own order, which DataLoader must not shuffle
    snippet = ""
    if state.best:
        caveat = untuned.observed if untuned else ""
        snippet = dataloader_snippet(state.best, state.workload, facts.device_type, caveat=caveat, user=user)
    return BenchResult(
        device=dict(state.device_info),
        workload=workload,
        budget_s=options.budget_s,
        thresholds=options.thresholds.to_dict(),
        phases=tuple(state.phase_records),
        measurements=tuple(state.measurements),
        metrics=metrics,
        tuning=state.tuning,
        sampler=state.sampler_report,
        checks=tuple(checks),
        best=state.best,
        snippet=snippet,
        notes=tuple(notes),
        partial=state.interrupted,
        seconds=state.elapsed_at_end_s,
    )
