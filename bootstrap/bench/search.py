"""The worker search of a run: the prediction, loader scaling (CPU hosts) and the tuner.

Scaling measures the loader alone at 1, W and all CPUs within the caps;
the tuner predicts W*, searches the candidates (`tune.successive_halving`,
with what the run already measured as first-round results) and tries the
knobs. Both are `phase(state, deadline) -> note` (see `schedule`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

from bootstrap.bench import tune
from bootstrap.bench.host import rss_bytes
from bootstrap.bench.results import LoaderConfig, Measurement, TuningRecord
from bootstrap.bench.state import RunState
from bootstrap.bench.trials import measure_loader, min_window_s, startup_guess_s
from bootstrap.fsutil import MIB


def predict(state: RunState) -> Any:
    """tune.WorkerPrediction (W*, the cap and its reason), once the loader and ceiling are measured."""
    if state.prediction is None and state.ceiling is not None and "wall_s_per_sample" in state.metrics:
        shm_mib, memory_mib = state.host.shm_free_mib, state.host.memory_available_mib
        state.prediction = tune.predict_workers(
            wall_s_per_sample=_wall_off_the_run_queue(state),
            cpu_s_per_sample=state.metrics["cpu_s_per_sample"] or 0.0,
            ceiling_samples_per_s=state.ceiling.samples_per_s,
            cpus=state.cpus,
            reserved_cpus=2 if state.is_cuda else 1,
            shm_free_bytes=None if shm_mib is None else shm_mib * MIB,
            batch_bytes=state.batch_bytes,
            mem_available_bytes=None if memory_mib is None else memory_mib * MIB,
            worker_bytes=rss_bytes(),
            max_workers=state.options.max_workers,
        )
        state.cpu_bound = state.prediction.cpu_bound
    return state.prediction


def _wall_off_the_run_queue(state: RunState) -> float:
    """The loader's wall seconds per sample less its wait for a CPU (`baselines.loader`): what is left
    beyond the CPU time is the wait workers can overlap (I/O), not the contention they would add to."""
    wall = state.metrics["wall_s_per_sample"] or 0.0
    queued = state.metrics.get("run_queue_s_per_sample") or 0.0
    return max(state.metrics.get("cpu_s_per_sample") or 0.0, wall - queued)


def least_prediction(state: RunState) -> Any:
    """The prediction before anything was measured: W* = 1 (every prediction asks for at least one
    worker) under the caps the host's facts alone set (--max-workers, /dev/shm, RAM). None before
    set-up. Unlike `predict`, it changes nothing in the state."""
    if state.host is None or not state.batch_bytes:
        return None
    shm_mib, memory_mib = state.host.shm_free_mib, state.host.memory_available_mib
    return tune.predict_workers(
        wall_s_per_sample=0.0,
        cpu_s_per_sample=0.0,
        ceiling_samples_per_s=0.0,
        cpus=state.cpus,
        shm_free_bytes=None if shm_mib is None else shm_mib * MIB,
        batch_bytes=state.batch_bytes,
        mem_available_bytes=None if memory_mib is None else memory_mib * MIB,
        worker_bytes=rss_bytes(),
        max_workers=state.options.max_workers,
    )


def candidate(state: RunState, workers: int) -> LoaderConfig:
    """A worker count as the tuner (and the scaling phase, on a CPU) tries it."""
    cuda = state.is_cuda
    return replace(
        state.step_config,
        num_workers=workers,
        pin_memory=cuda,
        non_blocking=cuda,
        prefetch_factor=2,
        persistent_workers=workers > 0,
    )


def _worker_cap(state: RunState) -> int:
    """The cap before a prediction: --max-workers, else the usable CPUs."""
    return state.cpus if state.options.max_workers is None else state.options.max_workers


def search_counts(state: RunState) -> Tuple[int, ...]:
    """The tuner's worker candidates: from the prediction once known, else as if W* were the CPUs."""
    prediction = predict(state)
    if prediction is not None:
        return tune.worker_candidates(prediction.start, prediction.cap, io_bound=not prediction.cpu_bound)
    return tune.worker_candidates(max(1, state.cpus - 1), _worker_cap(state))


def likely_winner(state: RunState) -> int:
    """The worker count the tuned windows will most likely time, to price them before the tune ends."""
    if state.best is not None:
        return state.best.num_workers
    prediction = predict(state)
    return prediction.chosen if prediction is not None else max(search_counts(state))


def scaling_counts(state: RunState) -> List[int]:
    """Worker counts the scaling phase measures: 1, the verdict's W, and all CPUs, within the caps
    (--max-workers, /dev/shm, RAM). bench_method.md judges S(W) / W at W = min(8, CPUs - 1); on two
    CPUs that is W = 1, which cannot fail, so W is at least 2 where 2 are allowed."""
    prediction = predict(state)
    cap = prediction.cap if prediction is not None else _worker_cap(state)
    widest = min(cap, state.cpus)
    if widest < 1:
        return []
    return sorted({1, _verdict_workers(state, widest), widest})


def _verdict_workers(state: RunState, widest: int) -> int:
    return min(widest, max(2, min(8, state.cpus - 1)))


def scaling(state: RunState, deadline: float) -> str:
    """CPU hosts: the loader's rate against its workers, S(W), and its efficiency S(W) / (W x S(1))."""
    prediction = predict(state)
    if prediction is None:
        return "skipped: needs the loader and ceiling phases"
    counts = scaling_counts(state)
    if not counts:
        return f"skipped: no loader workers allowed ({prediction.cap_reason})"
    verdict_workers = _verdict_workers(state, max(counts))
    least_s = sum(state.costs.least_s(w, with_step=False) for w in counts)
    if len(counts) > 2 and time.perf_counter() + least_s > deadline:
        counts = sorted({1, verdict_workers})  # the two the verdict needs
        least_s = sum(state.costs.least_s(w, with_step=False) for w in counts)
    if not state.affords(" and ".join(f"loader w={w}" for w in counts), least_s, until=deadline):
        return state.skipped("S(W) for W = " + ", ".join(map(str, counts)))
    rates = _scaling_rates(state, counts, deadline)
    measured = [w for w in rates if 1 < w <= verdict_workers]
    if rates.get(1) and measured:
        state.metrics["loader_scaling_workers"] = float(max(measured))
        state.metrics["loader_scaling_efficiency"] = rates[max(measured)] / (max(measured) * rates[1])
    return ", ".join(f"S({w}) = {r:.0f}/s" for w, r in rates.items()) or "no worker count measured"


def _scaling_rates(state: RunState, counts: List[int], deadline: float) -> Dict[int, float]:
    rates: Dict[int, float] = {}
    for index, workers in enumerate(counts):
        window_s = (deadline - time.perf_counter()) / (1.5 * (len(counts) - index))
        measured = measure_loader(state, candidate(state, workers), window_s, deadline, "scaling", with_step=False)
        if measured is not None:
            rates[workers] = measured.samples_per_s
            state.metrics[f"loader_w{workers}_samples_per_s"] = measured.samples_per_s
    return rates


def _priors(state: RunState, configs: List[LoaderConfig]) -> Dict[LoaderConfig, Measurement]:
    """What the run already knows about tuner candidates: the naive phase measured candidate 0 on a CPU,
    and the scaling phase the loader alone. Alone, S samples/s; with the step, at least 1 / (1/S + 1/R)
    (R the ceiling): the rate if loading and stepping did not overlap at all, which workers only beat."""
    known: Dict[LoaderConfig, Measurement] = {}
    if state.naive is not None and state.naive.config is not None:
        known[state.naive.config] = state.naive
    ceiling_rate = state.ceiling.samples_per_s if state.ceiling else 0.0
    for m in state.measurements_of("scaling"):
        if m.config is not None and m.samples_per_s > 0 and ceiling_rate > 0:
            rate = 1.0 / (1.0 / m.samples_per_s + 1.0 / ceiling_rate)
            known[m.config] = replace(m, label=f"{m.label} + step (no-overlap estimate)", samples_per_s=rate)
    return {config: known[config] for config in configs if config in known}


def tune_phase(state: RunState, deadline: float) -> str:
    """Successive halving over the worker candidates, then the knobs on the winner."""
    prediction = predict(state)
    if prediction is None:
        return "skipped: needs the loader and ceiling phases"
    started = time.perf_counter()
    cuda, limits = state.is_cuda, state.thresholds
    counts = tune.worker_candidates(prediction.start, prediction.cap, io_bound=not prediction.cpu_bound)
    configs = [candidate(state, w) for w in tune.measure_order(counts, prediction.chosen)]
    state.say(
        "tune",
        f"predicted W* = {prediction.predicted} (cap {prediction.cap}: {prediction.cap_reason}); "
        f"candidates {', '.join(map(str, counts))}",
    )

    def measure(config: LoaderConfig, window_s: float, phase: str = "tune") -> Optional[Measurement]:
        return measure_loader(state, config, window_s, deadline, phase, with_step=True)

    state.tuning = TuningRecord(
        cpu_s_per_sample=state.metrics["cpu_s_per_sample"],
        wall_s_per_sample=state.metrics["wall_s_per_sample"],
        predicted_workers=prediction.predicted,
        cap=prediction.cap,
        cap_reason=prediction.cap_reason,
        candidates=counts,
        budget_s=max(0.0, deadline - started),
    )
    search = tune.successive_halving(
        configs,
        measure,
        deadline,
        ceiling_samples_per_s=state.ceiling.samples_per_s,
        early_stop=limits.early_stop_efficiency,
        minimum_noise=limits.noise_floor_min,
        reserve_measurements=(3 if cuda else 1) + min(tune.CONFIRM, len(configs)),
        min_window_s=max(0.2, min_window_s(state, max(configs, key=lambda c: c.num_workers))),
        overhead_s=startup_guess_s(state, prediction.chosen),
        prior=_priors(state, configs),
        confirm=tune.CONFIRM,
        prefer_fewer=prediction.cpu_bound,
    )
    _account_search(state, search, configs)
    state.metrics["tune_repeat_noise"] = search.noise
    if search.winner is None:
        return "skipped: no candidate could be measured"
    state.best = search.winner.config
    state.tuning = replace(
        state.tuning,
        winner=state.best,
        stopped_early=search.stopped_early,
        rounds=tuple(
            (window, tuple((m.label, m.samples_per_s) for m in round_results))
            for window, round_results in search.rounds
        ),
        seconds=time.perf_counter() - started,
    )
    changes = tune.knob_changes(search.winner.config, cuda=cuda) if search.winner.config else []
    knobs = tune.try_knobs(
        search.winner,
        changes,
        lambda c, w: measure(c, w, "knob"),
        search.rounds[-1][0],
        deadline,
        limits.noise_floor_min,
        overhead_s=search.overhead_s,
    )
    # Knobs refine a searched winner; one left out for time is reported, not counted as a tune cut short.
    state.metrics.update(tune_knobs=float(len(changes)), tune_knobs_tried=float(len(knobs.trials)))
    state.best = knobs.winner.config
    state.tuning = replace(state.tuning, winner=state.best, knobs=knobs.trials, seconds=time.perf_counter() - started)
    return f"winner {state.best.label if state.best else '-'} after {len(state.measurements_of('tune', 'knob'))} trials"


def _account_search(state: RunState, search: Any, configs: List[LoaderConfig]) -> None:
    """How much of the search ran: candidates measured, left out for time (ledger), failed."""
    for config in search.unmeasured:
        state.ledger.skip("tune", config.label, search.cost_s)
    state.metrics["tune_candidates"] = float(len(configs))
    state.metrics["tune_candidates_measured"] = float(len(configs) - len(search.unmeasured) - len(search.failed))
    state.metrics["tune_candidates_failed"] = float(len(search.failed))
