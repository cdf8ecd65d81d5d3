"""The phases of a run, in order, and their shares of the budget (docs/benchmark.md, "Phases and budget").

Each phase is `run(state, deadline) -> note`. The phases share what set-up left of the budget by
fixed shares: each ends by a fixed point (its share and those before it), and each measurement in it
is cut at that point, so a slow phase leaves the later ones less, never the run more. What a deadline
cut short or left out is recorded (`RunState.cuts`) with about what it lacked: the report turns that
into the budget a complete run needs.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from bootstrap.bench import tuner
from bootstrap.bench.batch import map_tensors, shared_first_dim
from bootstrap.bench.config import option_name
from bootstrap.bench.device import h2d_bandwidth, matmul_tflops
from bootstrap.bench.host import child_pids, rss_bytes, run_queue_s, workers_pss_kib
from bootstrap.bench.loader import BatchStream
from bootstrap.bench.measure import (
    Window,
    loader_failed,
    measure_loader,
    run_window,
    stop_workers,
    stream_counter,
    warm_up,
)
from bootstrap.bench.results import LoaderConfig, Measurement, Metrics, PhaseRecord, Ties, TuningRecord
from bootstrap.bench.state import RunState
from bootstrap.bench.step import Trainer
from bootstrap.fsutil import MIB


@dataclass(frozen=True)
class Phase:
    name: str
    share: float  # of the budget; a phase that does not apply gives its share to the others
    run: Callable[[RunState, float], str]
    barrier: bool = False  # torchrun: every rank waits at its start
    cuda_never: bool = False  # a host's sizing figure, which a CUDA run does not need


def run_phases(state: RunState) -> None:
    """Each phase that applies, in order, ending by its fixed point of what set-up left of the budget."""
    phases = [p for p in PHASES if not (p.cuda_never and state.is_cuda)]
    total, done = sum(p.share for p in phases), 0.0
    start = time.perf_counter()
    for phase in phases:
        done += phase.share
        run_phase(state, phase, start + (state.run_deadline - start) * done / total)


def run_phase(state: RunState, phase: Phase, ends: float) -> None:
    state.phase = phase.name
    if state.barrier is not None and phase.barrier:
        state.barrier()
    started = time.perf_counter()
    slice_s = max(0.0, ends - started)
    status, note = "skipped", "skipped: the budget is spent"
    try:
        state.say(phase.name, f"start ({slice_s:.1f} s of {max(0.0, state.run_deadline - started):.1f} s left)")
        if started < state.run_deadline or phase.name == "checks":
            note = phase.run(state, ends)
            status = "skipped" if note.startswith("skipped") else "done"
        else:
            state.cut(phase.name, f"the {phase.name} phase", phase.share * state.options.budget_s)
    except KeyboardInterrupt:
        status, note = "interrupted", ""
        raise
    finally:
        seconds = time.perf_counter() - started
        state.phase_records.append(PhaseRecord(phase.name, started - state.clock_zero, seconds, slice_s, status, note))


# --------------------------------------------------------------------------- before the search


def checks(state: RunState, _deadline: float) -> str:
    missing = "; ".join(state.host.missing) if state.host is not None else ""
    return f"host facts collected{': ' + missing if missing else ''}"


def micro(state: RunState, deadline: float) -> str:
    """Matmul TFLOP/s, and on CUDA host<->device bandwidth with the PCIe link read while it is busy."""
    assert state.device is not None
    tflops, how = matmul_tflops(state.device, deadline)
    state.metrics.matmul_tflops = tflops
    if state.is_cuda and state.sampler is not None:
        import torch

        copies, state.pcie = h2d_bandwidth(state.device, during=state.sampler.pcie_link)
        for name, value in copies.items():
            setattr(state.metrics, name, value)
        state.device_info["pcie"] = list(state.pcie) if state.pcie else None
        torch.cuda.reset_peak_memory_stats(state.device.torch_device)
    return f"matmul {how}"


RUN_QUEUE_NOTE = 0.10  # of the loader phase's time waiting for a CPU: the report says the host is busy


def loader(state: RunState, deadline: float) -> str:
    """num_workers=0 alone: the CPU (c) and wall (l) seconds per sample that predict the workers; for
    the user's workload, the first batches it loads are kept for the ceiling."""
    keep = None if state.options.user is None else (lambda batch, samples: _keep_for_ceiling(state, batch, samples))
    queued, began = run_queue_s(), time.perf_counter()
    plan = Window((deadline - began) / 1.5, warmup_steps=1)
    measured = measure_loader(state, LoaderConfig(), plan, deadline, "loader", with_step=False, keep=keep)
    assert measured is not None  # a loader without workers has none to die: its errors are raised
    samples = max(1, measured.samples)  # a collate that drops every sample it is given yields empty batches
    cpu_s, wall_s = measured.cpu_s / samples, measured.seconds / samples
    # On a busy host the loading thread also waits for a CPU: that wait is contention, not I/O, and
    # counted as I/O it would have the tuner add workers that only queue for the same cores.
    after, elapsed = run_queue_s(), time.perf_counter() - began
    share = None if queued is None or after is None or elapsed <= 0 else min(0.95, max(0.0, (after - queued) / elapsed))
    m = state.metrics
    m.loader_only_samples_per_s, m.cpu_s_per_sample, m.wall_s_per_sample = measured.samples_per_s, cpu_s, wall_s
    m.run_queue_s_per_sample = wall_s * (share or 0.0)
    m.loader_run_queue_pct = None if share is None else 100.0 * share
    if share is not None and share >= RUN_QUEUE_NOTE:
        state.notes.append(
            f"the loader phase waited {share:.0%} of its time for a CPU (run queue, /proc/thread-self/schedstat): "
            "the host is busy; that wait is not counted as I/O, and the rates are contended"
        )
    queue = f" ({share:.0%} waiting for a CPU)" if share else ""
    return f"c = {cpu_s * 1000:.2f} ms CPU, l = {wall_s * 1000:.2f} ms wall per sample{queue}"


CEILING_BATCHES = 8  # the loader phase's first batches the ceiling steps on, in turn
CEILING_BYTES = 256 * MIB  # at most this much of them (as loaded) held on the device


def _keep_for_ceiling(state: RunState, batch: Any, samples: Optional[int]) -> Any:
    room = min(CEILING_BATCHES, max(1, CEILING_BYTES // max(1, state.batch_bytes)))
    # An empty batch (a collate that dropped every sample it was given) has no step to price.
    if len(state.ceiling_batches) < room and shared_first_dim(batch)[0] != 0:
        state.ceiling_batches.append((batch, samples))
    return batch


class _Turns:
    """The ceiling's batches in turn, each made by `make` once, and what the batch last given holds."""

    def __init__(self, state: RunState, make: Callable[[Any], Any]) -> None:
        kept = state.ceiling_batches or [(state.sample_batch, None)]
        self._cycle = itertools.cycle([(make(batch), samples) for batch, samples in kept])
        self.samples: Optional[int] = None

    def __call__(self) -> Any:
        batch, self.samples = next(self._cycle)
        return batch


def ceiling(state: RunState, deadline: float) -> str:
    """The step on the loader's first batches, already on the device (fp32, and on a GPU with bf16
    hardware bf16 + channels_last, kept when faster), and on CUDA with the copy from pinned memory."""
    configs = [LoaderConfig()]
    if state.is_cuda and state.user is not None:
        state.notes.append("the user's workload: its step is measured as given (AMP and channels_last are not tried)")
    elif state.is_cuda and state.device is not None and state.device.bf16_supported():
        configs.append(LoaderConfig(amp_dtype="bfloat16", channels_last=True))
    elif state.is_cuda:
        state.notes.append("bf16 autocast not supported on this GPU: AMP not tuned")
    results = [_resident(state, config, len(configs) - i + state.is_cuda, deadline) for i, config in enumerate(configs)]
    base = chosen = results[0]
    if len(results) > 1:
        amp = results[1]
        state.metrics.ceiling_amp_samples_per_s = amp.samples_per_s
        if amp.samples_per_s / base.samples_per_s - 1.0 > tuner.noise_floor(
            base, amp, state.thresholds.noise_floor_min
        ):
            chosen = amp
    m = state.metrics
    m.ceiling_fp32_samples_per_s, m.ceiling_samples_per_s = base.samples_per_s, chosen.samples_per_s
    m.step_cpu_s_per_sample = chosen.cpu_s / chosen.samples if chosen.samples else None
    state.step_config, state.ceiling = chosen.config or LoaderConfig(), chosen
    state.step_s = chosen.seconds / max(1, chosen.steps)
    if state.is_cuda:
        m.ceiling_h2d_samples_per_s = _with_copy(state, deadline).samples_per_s
    return f"step config {state.step_config.label}"


def resident_batches(state: RunState, trainer: Trainer) -> tuple[Callable[[], Any], Optional[Callable[[Any], int]]]:
    """The ceiling's batches already on the device, in turn, and how a window counts them: the source of
    the ceiling and of the DDP ceiling (`distributed`)."""
    resident = _Turns(state, lambda batch: trainer.prepare(batch, non_blocking=False))
    # Each step gets its own containers of the resident tensors: a step that pops a key from its batch
    # dict (HF's `labels = batch.pop("labels")`) must find it again on the next turn.
    take = lambda: map_tensors(lambda tensor: tensor, resident())  # noqa: E731 (the window's source)
    return take, stream_counter(state, resident)


def _resident(state: RunState, config: LoaderConfig, slots: int, deadline: float) -> Measurement:
    trainer = state.trainer(config)
    take, counted = resident_batches(state, trainer)
    plan = Window.scaled((deadline - time.perf_counter()) / (1.4 * slots))
    plan = replace(plan, min_steps=max(5, plan.min_steps))  # resident steps are the fastest measured: five cost little
    warm_up(state, take, trainer.run, plan, deadline)
    measured = run_window(
        state, take, trainer.run, plan, deadline, ("ceiling", f"ceiling {config.label}", config), counted
    )
    return state.record(measured, plan.seconds)


def _with_copy(state: RunState, deadline: float) -> Measurement:
    """Transfer-inclusive ceiling: a pinned host batch copied non_blocking every step."""
    config = replace(state.step_config, pin_memory=True, non_blocking=True)
    trainer = state.trainer(config)
    pinned = _Turns(state, lambda batch: map_tensors(lambda t: t.pin_memory(), batch))
    plan = Window.scaled((deadline - time.perf_counter()) / 1.4)
    what = ("ceiling_h2d", f"ceiling+h2d {config.label}", config)
    warm_up(state, pinned, trainer.step, plan, deadline)
    measured = run_window(state, pinned, trainer.step, plan, deadline, what, stream_counter(state, pinned))
    return state.record(measured, plan.seconds)


def naive(state: RunState, deadline: float) -> str:
    # The ceiling's step (the method's "same training config"): the speedup over naive is the loader's.
    config = replace(state.step_config, num_workers=0, pin_memory=False, non_blocking=False, persistent_workers=False)
    plan = Window.scaled((deadline - time.perf_counter()) / 1.5)
    state.naive = measure_loader(state, config, plan, deadline, "naive", with_step=True)
    if state.naive is not None:
        state.metrics.naive_samples_per_s = state.naive.samples_per_s
        state.metrics.naive_host_wait_pct = state.naive.host_wait_pct
    return f"num_workers=0, pin_memory=False, non_blocking=False, step {config.label}"


# --------------------------------------------------------------------------- the worker search


def predict(state: RunState) -> Optional[tuner.WorkerPrediction]:
    """W*, where the search starts and the cap, once the loader and ceiling are measured."""
    m = state.metrics
    if state.prediction is None and state.ceiling is not None and m.wall_s_per_sample is not None:
        cpu_s, wall_s = sample_costs(m)
        state.prediction = _predict(state, wall_s, cpu_s, state.ceiling.samples_per_s)
    return state.prediction


def sample_costs(m: Metrics) -> tuple[float, float]:
    """(CPU, wall) seconds per sample that the workers share: the wall time less the loader's wait for a
    CPU, so that what is left beyond the CPU time is what workers can overlap (I/O, sleeps)."""
    cpu_s = m.cpu_s_per_sample or 0.0
    return cpu_s, max(cpu_s, (m.wall_s_per_sample or 0.0) - (m.run_queue_s_per_sample or 0.0))


def least_prediction(state: RunState) -> Optional[tuner.WorkerPrediction]:
    """The prediction before anything was measured: W* = 1 under the caps the host's facts alone set."""
    return _predict(state, 0.0, 0.0, 0.0) if state.host is not None and state.batch_bytes else None


def _predict(state: RunState, wall_s: float, cpu_s: float, ceiling: float) -> tuner.WorkerPrediction:
    host = state.host
    shm, memory = (host.shm_free_mib, host.memory_available_mib) if host is not None else (None, None)
    limits = tuner.Limits(
        cpus=state.cpus,
        reserved_cpus=2 if state.is_cuda else 1,
        shm_free_bytes=None if shm is None else int(shm * MIB),
        batch_bytes=state.batch_bytes,
        mem_available_bytes=None if memory is None else int(memory * MIB),
        worker_bytes=rss_bytes(),
        max_workers=state.options.max_workers,
        max_workers_name=option_name("max_workers", state.options.from_script, where=True),
    )
    return tuner.predict_workers(wall_s, cpu_s, ceiling, limits)


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


def scaling(state: RunState, deadline: float) -> str:
    """CPU hosts: the loader's rate against its workers, S(W), at 1, W and all CPUs within the caps, and
    S(W) / (W x S(1)) at W = min(8, CPUs - 1), at least 2 (on two CPUs W = 1 could not fail)."""
    prediction = predict(state)
    if prediction is None:
        return "skipped: needs the loader and ceiling phases"
    widest = min(prediction.cap, state.cpus)
    if widest < 1:
        return f"skipped: no loader workers allowed ({prediction.cap_reason})"
    judged = min(widest, max(2, min(8, state.cpus - 1)))
    counts = sorted({1, judged, widest})
    rates: dict[int, float] = {}
    for index, workers in enumerate(counts):
        if time.perf_counter() >= deadline:
            state.cut("scaling", f"loader w={workers}", state.options.budget_s * 0.05 / len(counts))
            continue
        plan = Window.scaled((deadline - time.perf_counter()) / (1.5 * (len(counts) - index)), drain=1 + workers)
        measured = measure_loader(state, candidate(state, workers), plan, deadline, "scaling", with_step=False)
        if measured is not None:
            rates[workers] = state.metrics.loader_scaling[workers] = measured.samples_per_s
    best = max((w for w in rates if 1 < w <= judged), default=None)
    if rates.get(1) and best is not None:
        state.metrics.loader_scaling_workers = float(best)
        state.metrics.loader_scaling_efficiency = rates[best] / (best * rates[1])
    return ", ".join(f"S({w}) = {r:.0f}/s" for w, r in rates.items()) or "no worker count measured"


def _priors(state: RunState, configs: list[LoaderConfig]) -> dict[LoaderConfig, Measurement]:
    """What the run already knows of the candidates: the naive phase measured candidate 0 on a CPU, and
    the scaling phase the loader alone at S samples/s; with the step, at least 1 / (1/S + 1/R) (R the
    ceiling): the rate if loading and stepping did not overlap at all, which workers only beat."""
    known: dict[LoaderConfig, Measurement] = {}
    if state.naive is not None and state.naive.config is not None:
        known[state.naive.config] = state.naive
    ceiling_rate = state.ceiling.samples_per_s if state.ceiling else 0.0
    for m in state.measurements:
        if m.phase == "scaling" and m.config is not None and m.samples_per_s > 0 and ceiling_rate > 0:
            rate = 1.0 / (1.0 / m.samples_per_s + 1.0 / ceiling_rate)
            known[m.config] = replace(m, label=f"{m.label} + step (no-overlap estimate)", samples_per_s=rate)
    return {config: known[config] for config in configs if config in known}


def tune(state: RunState, deadline: float) -> str:
    """Successive halving over the worker candidates, then the knobs on the winner."""
    prediction = predict(state)
    if prediction is None or state.ceiling is None:
        return "skipped: needs the loader and ceiling phases"
    started, limits = time.perf_counter(), state.thresholds
    counts = tuner.worker_candidates(prediction.start, prediction.cap, io_bound=not prediction.cpu_bound)
    configs = [candidate(state, w) for w in tuner.measure_order(counts, prediction.chosen)]
    state.say(
        "tune",
        f"predicted W* = {prediction.predicted} (cap {prediction.cap}: {prediction.cap_reason}); "
        f"candidates {', '.join(map(str, counts))}",
    )

    def measure(config: LoaderConfig, window_s: float, phase: str = "tune") -> Optional[Measurement]:
        plan = Window.scaled(window_s, drain=1 + config.num_workers)
        return measure_loader(state, config, plan, deadline, phase, with_step=True)

    m = state.metrics
    state.tuning = TuningRecord(
        cpu_s_per_sample=m.cpu_s_per_sample,
        wall_s_per_sample=m.wall_s_per_sample,
        predicted_workers=prediction.predicted,
        cap=prediction.cap,
        cap_reason=prediction.cap_reason,
        candidates=counts,
        budget_s=max(0.0, deadline - started),
    )
    # Workers started together deliver in bursts, one batch each per batch latency: a window of four
    # latencies bounds that error to about a quarter of a burst.
    batch_s = state.workload.batch_size * (m.wall_s_per_sample or 0.0)
    firsts = [x.first_batch_s for x in state.measurements if x.first_batch_s is not None]
    options = tuner.SearchOptions(
        ceiling_samples_per_s=state.ceiling.samples_per_s,
        early_stop=limits.early_stop_efficiency,
        minimum_noise=limits.noise_floor_min,
        reserve_measurements=(3 if state.is_cuda else 1) + min(tuner.CONFIRM, len(configs)),
        min_window_s=max(0.2, 4 * batch_s if max(counts) else 0.0),
        overhead_s=max([0.1, *firsts]),
        confirm=tuner.CONFIRM,
        prefer_fewer=prediction.cpu_bound,
    )
    search = tuner.successive_halving(configs, measure, deadline, options, _priors(state, configs))
    for config in search.unmeasured:
        state.cut("tune", config.label, search.cost_s)
    m.tune_candidates = float(len(configs))
    m.tune_candidates_measured = float(len(configs) - len(search.unmeasured) - len(search.failed))
    m.tune_candidates_failed, m.tune_repeat_noise = float(len(search.failed)), search.noise
    if search.winner is None or search.winner.config is None:
        return "skipped: no candidate could be measured"
    rounds = tuple((window, tuple((x.label, x.samples_per_s) for x in results)) for window, results in search.rounds)
    changes = tuner.knob_changes(search.winner.config, cuda=state.is_cuda)
    window_s = search.rounds[-1][0]

    def fits() -> bool:
        return time.perf_counter() + window_s * tuner.MEASURE_OVERHEAD + search.overhead_s <= deadline

    knob = lambda c, w: measure(c, w, "knob")  # noqa: E731 (the knob trials' phase)
    knobs = tuner.try_knobs(search.winner, changes, knob, window_s, limits.noise_floor_min, fits)
    # Knobs refine a searched winner; one left out for time is reported, not counted as a tune cut short.
    m.tune_knobs, m.tune_knobs_tried = float(len(changes)), float(len(knobs.trials))
    state.best = knobs.winner.config
    picked = (search.winner.label, search.winner.samples_per_s)
    ties = Ties(picked, tuple((x.label, x.samples_per_s) for x in search.ties), search.tie_noise)
    state.tuning = replace(
        state.tuning,
        winner=state.best,
        ties=ties,
        stopped_early=search.stopped_early,
        rounds=rounds,
        knobs=knobs.trials,
        seconds=time.perf_counter() - started,
    )
    trials = sum(1 for x in state.measurements if x.phase in ("tune", "knob"))
    return f"winner {state.best.label if state.best else '-'} after {trials} trials"


# --------------------------------------------------------------------------- the tuned windows

TUNED_WINDOWS = 3


def tuned(state: RunState, deadline: float) -> str:
    """The winner timed in TUNED_WINDOWS windows of one loader, as a training loop uses it (worker PSS
    read around them, GPU statistics taken over them), then re-measured with a fresh loader: the figure
    the report gives must agree with an independent one. Under torchrun every rank passes the same
    number of window barriers, measured or not."""
    due = [TUNED_WINDOWS]

    def barrier() -> None:
        due[0] -= 1
        if state.barrier is not None:
            state.barrier()

    config, stream = state.best, None
    if config is None:
        note = "skipped: no tuned config"
    else:
        try:
            stream = state.stream(config)
            count = _tuned_windows(state, stream, config, deadline, barrier)
            stream.close()
            stream = None  # a fresh loader re-measures the winner: its workers start anew
            note = f"{count} windows of {config.label}{_recheck(state, config, deadline) if count else ''}"
        except Exception as exc:  # noqa: BLE001 (the user's samples may raise anything: see `loader_failed`)
            loader_failed(state, "tuned", config, exc, stream)
            note = f"failed: {state.failures[-1].why}"
        except BaseException:
            stop_workers(stream)
            raise
        finally:
            if stream is not None:
                stream.close()
    while state.barrier is not None and due[0] > 0:
        barrier()
    return note


def _tuned_windows(
    state: RunState, stream: BatchStream, config: LoaderConfig, deadline: float, barrier: Callable[[], None]
) -> int:
    """Warm up, then up to TUNED_WINDOWS windows while the deadline allows; worker PSS around them."""
    trainer, workers = state.trainer(config), config.num_workers
    take = lambda: next(stream)  # noqa: E731 (one name for the three windows' source)
    slots = TUNED_WINDOWS + 1.5  # the windows, the re-measure, and the warm-ups
    slot_s = (deadline - time.perf_counter()) / slots
    plan = Window.scaled(slot_s, drain=1 + workers)
    # The windows end where the re-measure's slot begins: on a host slower than the windows' plan
    # (a window may run to twice its seconds), the fresh loader still gets its start and a window.
    recheck_at = deadline - slot_s
    counted, count = stream_counter(state, stream), 0
    warm_up(state, take, trainer.step, plan, deadline)
    pids = child_pids() if workers else []
    pss_start_kib = workers_pss_kib(pids)
    if state.sampler is not None:
        state.sampler.gpm_begin()
    for index in range(TUNED_WINDOWS):
        barrier()
        label = f"tuned #{index + 1} {config.label}"
        window_s = (recheck_at - time.perf_counter()) / (TUNED_WINDOWS - index) * 0.95
        if window_s <= 0:
            state.cut("tuned", label, plan.seconds)
            continue
        window = Window.scaled(window_s, drain=1 + workers)
        # Each window ends by its own share, not at twice it: on a slow host the later windows keep theirs.
        ends = min(recheck_at, time.perf_counter() + window_s)
        measured = run_window(state, take, trainer.step, window, ends, ("tuned", label, config), counted)
        measured = state.record(replace(measured, first_batch_s=stream.first_batch_s), window.seconds)
        count += 1
        if state.sampler is not None:
            state.sampler.stat_window(measured.started_s, measured.started_s + measured.seconds)
    if state.sampler is not None:
        state.sampler.gpm_end()
    pss_end_kib = workers_pss_kib(pids)
    if pss_start_kib and pss_end_kib is not None and count:
        state.metrics.worker_pss_growth_pct = 100.0 * (pss_end_kib - pss_start_kib) / pss_start_kib
        state.metrics.worker_pss_mib = pss_end_kib / 1024.0
    return count


def _recheck(state: RunState, config: LoaderConfig, deadline: float) -> str:
    """One window of a fresh loader with the winner's config, while the deadline allows."""
    left_s = deadline - time.perf_counter()
    if left_s <= 0:
        state.cut("tuned", f"recheck {config.label}", state.measurements[-1].seconds)
        return "; no time to re-measure"
    plan = Window.scaled(left_s / 1.5, drain=1 + config.num_workers)
    again = measure_loader(state, config, plan, deadline, "recheck", with_step=True)
    return "" if again is None else f"; re-measured {again.samples_per_s:.1f} samples/s"


PHASES: tuple[Phase, ...] = (
    Phase("checks", 0.0, checks),
    Phase("micro", 0.02, micro),
    Phase("loader", 0.05, loader),
    Phase("ceiling", 0.08, ceiling, barrier=True),
    Phase("naive", 0.05, naive, barrier=True),
    Phase("scaling", 0.05, scaling, cuda_never=True),
    Phase("tune", 0.45, tune, barrier=True),
    Phase("tuned", 0.30, tuned, barrier=True),
)
PRE_TUNE = ("checks", "micro", "loader", "ceiling", "naive", "scaling")  # at most a quarter of the budget
TUNE_PHASES = ("loader", "ceiling", "naive", "tune", "tuned")  # what a tune stands on: a cut here makes it incomplete
