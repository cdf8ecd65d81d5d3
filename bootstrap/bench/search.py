"""The worker search of a bench run: loader scaling, the tuner, the tuned windows.

A mixin of `run._Run`, kept apart so each module stays readable: these
methods read and write the run's state (costs, metrics, measurements, the
ledger of what the budget could not pay for). Scaling (CPU hosts) measures
the loader alone at 1, W and all CPUs within the caps; the tuner predicts
W*, searches the candidates (`tune.successive_halving`, with what the run
already measured as first-round results) and tries the knobs; the tuned
phase times the winner in up to TUNED_WINDOWS windows, each only if it
fits the budget.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

from bootstrap.bench import tune
from bootstrap.bench.budget import FLOOR_STEPS
from bootstrap.bench.host import child_pids, rss_bytes, workers_pss_kib
from bootstrap.bench.results import LoaderConfig, Measurement, TuningRecord
from bootstrap.bench.stream import BatchStream, make_loader
from bootstrap.bench.window import WindowPlan, run_window, warm_up
from bootstrap.fsutil import MIB

TUNED_WINDOWS = 3


class WorkerSearch:
    """The scaling, tune and tuned phases of `run._Run` (see the module docstring)."""

    def _predict(self) -> Any:
        """tune.WorkerPrediction (W*, the cap and its reason), once the loader and ceiling are measured."""
        if self.prediction is None and self.ceiling is not None and "wall_s_per_sample" in self.metrics:
            shm, mem = self.host.shm_free_mib, self.host.memory_available_mib
            self.prediction = tune.predict_workers(
                wall_s_per_sample=self.metrics["wall_s_per_sample"] or 0.0,
                cpu_s_per_sample=self.metrics["cpu_s_per_sample"] or 0.0,
                ceiling_samples_per_s=self.ceiling.samples_per_s, cpus=self.cpus,
                reserved_cpus=2 if self.device.is_cuda else 1, shm_free_bytes=None if shm is None else shm * MIB,
                batch_bytes=self.batch_bytes, mem_available_bytes=None if mem is None else mem * MIB,
                worker_bytes=rss_bytes(), max_workers=self.o.max_workers)
            self.cpu_bound = self.prediction.cpu_bound
        return self.prediction

    def _candidate(self, workers: int) -> LoaderConfig:
        """A worker count as the tuner (and the scaling phase, on a CPU) tries it."""
        cuda = self.device.is_cuda
        return replace(self.step_config, num_workers=workers, pin_memory=cuda, non_blocking=cuda, prefetch_factor=2,
                       persistent_workers=workers > 0)

    def _search_counts(self) -> Tuple[int, ...]:
        """The tuner's worker candidates: from the prediction once known, else as if W* were the CPUs."""
        p = self._predict()
        if p is not None:
            return tune.worker_candidates(p.start, p.cap)
        cap = self.cpus if self.o.max_workers is None else self.o.max_workers
        return tune.worker_candidates(max(1, self.cpus - 1), cap)

    def _likely_winner(self) -> int:
        if self.best is not None:
            return self.best.num_workers
        p = self._predict()
        return p.chosen if p is not None else max(self._search_counts())

    def _scaling_counts(self) -> List[int]:
        """Worker counts the scaling phase measures: 1, the verdict's W, and all CPUs, within the caps
        (--max-workers, /dev/shm, RAM). bench_method.md judges S(W) / W at W = min(8, CPUs - 1); on two
        CPUs that is W = 1, which cannot fail, so W is at least 2 where 2 are allowed."""
        p = self._predict()
        cap = p.cap if p is not None else (self.cpus if self.o.max_workers is None else self.o.max_workers)
        widest = min(cap, self.cpus)
        if widest < 1:
            return []
        return sorted({1, self._verdict_workers(widest), widest})

    def _verdict_workers(self, widest: int) -> int:
        return min(widest, max(2, min(8, self.cpus - 1)))

    def _scaling(self, deadline: float) -> str:
        prediction = self._predict()
        if prediction is None:
            return "skipped: needs the loader and ceiling phases"
        counts = self._scaling_counts()
        if not counts:
            return f"skipped: no loader workers allowed ({prediction.cap_reason})"
        verdict_w = self._verdict_workers(max(counts))
        least = sum(self.costs.least_s(w, with_step=False) for w in counts)
        if len(counts) > 2 and time.perf_counter() + least > deadline:
            counts = sorted({1, verdict_w})  # the two the verdict needs
            least = sum(self.costs.least_s(w, with_step=False) for w in counts)
        if not self._affords(" and ".join(f"loader w={w}" for w in counts), least, until=deadline):
            return self._skipped("S(W) for W = " + ", ".join(map(str, counts)))
        rates = self._scaling_rates(counts, deadline)
        measured = [w for w in rates if 1 < w <= verdict_w]
        if rates.get(1) and measured:
            self.metrics["loader_scaling_workers"] = float(max(measured))
            self.metrics["loader_scaling_efficiency"] = rates[max(measured)] / (max(measured) * rates[1])
        return ", ".join(f"S({w}) = {r:.0f}/s" for w, r in rates.items()) or "no worker count measured"

    def _scaling_rates(self, counts: List[int], deadline: float) -> Dict[int, float]:
        rates: Dict[int, float] = {}
        for index, workers in enumerate(counts):
            window = (deadline - time.perf_counter()) / (1.5 * (len(counts) - index))
            m = self._measure_loader(self._candidate(workers), window, deadline, "scaling", with_step=False)
            if m is not None:
                rates[workers] = m.samples_per_s
                self.metrics[f"loader_w{workers}_samples_per_s"] = m.samples_per_s
        return rates

    def _priors(self, configs: List[LoaderConfig]) -> Dict[LoaderConfig, Measurement]:
        """What the run already knows about tuner candidates: the naive phase measured candidate 0 on a CPU,
        and the scaling phase the loader alone. Alone, S samples/s; with the step, at least 1 / (1/S + 1/R)
        (R the ceiling): the rate if loading and stepping did not overlap at all, which workers only beat."""
        known: Dict[LoaderConfig, Measurement] = {}
        if self.naive is not None and self.naive.config is not None:
            known[self.naive.config] = self.naive
        ceiling = self.ceiling.samples_per_s if self.ceiling else 0.0
        for m in self.measurements_of("scaling"):
            if m.config is not None and m.samples_per_s > 0 and ceiling > 0:
                rate = 1.0 / (1.0 / m.samples_per_s + 1.0 / ceiling)
                known[m.config] = replace(m, label=f"{m.label} + step (no-overlap estimate)", samples_per_s=rate)
        return {config: known[config] for config in configs if config in known}

    def _tune(self, deadline: float) -> str:
        prediction = self._predict()
        if prediction is None:
            return "skipped: needs the loader and ceiling phases"
        started = time.perf_counter()
        cuda = self.device.is_cuda
        counts = tune.worker_candidates(prediction.start, prediction.cap)
        configs = [self._candidate(w) for w in counts]
        self.say("tune", f"predicted W* = {prediction.predicted} (cap {prediction.cap}: {prediction.cap_reason}); "
                         f"candidates {', '.join(map(str, counts))}")

        def measure(config: LoaderConfig, window_s: float, phase: str = "tune") -> Optional[Measurement]:
            return self._measure_loader(config, window_s, deadline, phase, with_step=True)

        self.tuning = TuningRecord(
            cpu_s_per_sample=self.metrics["cpu_s_per_sample"], wall_s_per_sample=self.metrics["wall_s_per_sample"],
            predicted_workers=prediction.predicted, cap=prediction.cap, cap_reason=prediction.cap_reason,
            candidates=counts, budget_s=max(0.0, deadline - started))
        search = tune.successive_halving(
            configs, measure, deadline, ceiling_samples_per_s=self.ceiling.samples_per_s,
            early_stop=self.t.early_stop_efficiency, minimum_noise=self.t.noise_floor_min,
            reserve_measurements=3 if cuda else 1, min_window_s=max(0.2, self._min_window(configs[-1])),
            overhead_s=self._startup_guess(), prior=self._priors(configs))
        self._account_search(search, configs)
        if search.winner is None:
            return "skipped: no candidate could be measured"
        self.best = search.winner.config
        self.tuning = replace(self.tuning, winner=self.best, stopped_early=search.stopped_early,
                              rounds=tuple((w, tuple((m.label, m.samples_per_s) for m in ms_)) for w, ms_ in search.rounds),
                              seconds=time.perf_counter() - started)
        changes = tune.knob_changes(search.winner.config, cuda=cuda) if search.winner.config else []
        knobs = tune.try_knobs(search.winner, changes, lambda c, w: measure(c, w, "knob"), search.rounds[-1][0],
                               deadline, self.t.noise_floor_min, overhead_s=search.overhead_s)
        # Knobs refine a searched winner; one left out for time is reported, not counted as a tune cut short.
        self.metrics.update(tune_knobs=float(len(changes)), tune_knobs_tried=float(len(knobs.trials)))
        self.best = knobs.winner.config
        self.tuning = replace(self.tuning, winner=self.best, knobs=knobs.trials, seconds=time.perf_counter() - started)
        return f"winner {self.best.label if self.best else '-'} after {len(self.measurements_of('tune', 'knob'))} trials"

    def _account_search(self, search: Any, configs: List[LoaderConfig]) -> None:
        """How much of the search ran: candidates measured, left out for time (ledger), failed."""
        for config in search.unmeasured:
            self.ledger.skip("tune", config.label, search.cost_s)
        self.metrics["tune_candidates"] = float(len(configs))
        self.metrics["tune_candidates_measured"] = float(len(configs) - len(search.unmeasured) - len(search.failed))
        self.metrics["tune_candidates_failed"] = float(len(search.failed))

    def _tuned(self, deadline: float) -> str:
        self.barriers_due = TUNED_WINDOWS
        note = self._tuned_windows(deadline)
        while self.barrier is not None and self.barriers_due > 0:
            self._window_barrier()  # every rank passes the same number of barriers, measured or not
        return note

    def _window_barrier(self) -> None:
        self.barriers_due -= 1
        if self.barrier is not None:
            self.barrier()

    def _tuned_windows(self, deadline: float) -> str:
        config = self.best
        if config is None:
            return "skipped: no tuned config"
        workers, costs = config.num_workers, self.costs
        if not self._affords(f"tuned {config.label}", costs.least_s(workers),
                             need_s=costs.batch_s + TUNED_WINDOWS * costs.window_s(workers)):
            return self._skipped("a tuned window")
        stream = None
        try:
            stream = BatchStream(make_loader(self.dataset, self.spec.batch_size, config, seed=self.spec.seed))
            count = self._measure_tuned(stream, config, deadline)
        except RuntimeError as exc:
            if not workers:
                raise
            if stream is not None:
                stream.close(kill=True)
            self._worker_failure("tuned", config, exc)
            return f"failed: {self.failures[-1][2]}"
        finally:
            if stream is not None:
                stream.close()
        return f"{count} windows of {config.label}"

    def _measure_tuned(self, stream: Any, config: LoaderConfig, deadline: float) -> int:
        """Warm up, then up to TUNED_WINDOWS windows, each only if it still fits; worker PSS around them."""
        trainer = self._trainer(config)
        period = self.costs.period_s(config.num_workers)
        plan = self._fit_steps(self._plan((deadline - time.perf_counter()) / (TUNED_WINDOWS + 0.5)), period)
        warm_up(lambda: next(stream), trainer.step, self.device, plan, deadline)
        pids = child_pids() if config.num_workers else []
        pss_start = workers_pss_kib(pids)
        if self.sampler is not None:
            self.sampler.gpm_begin()
        count = 0
        for index in range(TUNED_WINDOWS):
            self._window_barrier()
            least = FLOOR_STEPS * self.costs.period_s(config.num_workers)
            if not self._affords(f"tuned window #{index + 1}", least, need_s=self.costs.window_s(config.num_workers)):
                continue
            left = deadline - time.perf_counter()
            window = max(self._min_window(config), left / (TUNED_WINDOWS - index) / 1.05)
            plan = self._fit_steps(replace(plan, window_s=window, min_steps=WindowPlan().scaled(window).min_steps), period)
            m = self._record(run_window(
                lambda: next(stream), trainer.step, self.device, plan, deadline, phase="tuned",
                label=f"tuned #{index + 1} {config.label}", config=config, batch_size=self.spec.batch_size,
                clock_zero=self.zero, first_batch_s=stream.first_batch_s, warmup=False))
            count += 1
            if self.sampler is not None:
                self.sampler.stat_window(m.started_s, m.started_s + m.seconds)
        if self.sampler is not None:
            self.sampler.gpm_end()
        pss_end = workers_pss_kib(pids)
        if pss_start and pss_end is not None and count:
            self.metrics["worker_pss_growth_pct"] = 100.0 * (pss_end - pss_start) / pss_start
            self.metrics["worker_pss_mib"] = pss_end / 1024.0
        return count
