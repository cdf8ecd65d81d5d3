"""A bench run's result: derived metrics, verdicts, notes and the snippet, as one `BenchResult`.

A mixin of `run._Run`, kept apart so each module stays readable: it reads
the run's measurements and state once the phases are over (or cut short).
"""

from __future__ import annotations

import statistics
from typing import Any

from bootstrap.bench.device import peak_memory_mib
from bootstrap.bench.results import BenchResult
from bootstrap.bench.stream import SHM_FAILURE
from bootstrap.checks.model import Status
from bootstrap.fsutil import MIB

# What a tune stands on: a measurement left out of these (not micro, not scaling) makes it incomplete.
TUNE_PHASES = ("loader", "ceiling", "naive", "tune", "tuned")


class Outcome:
    """`_Run.result()` and what it derives (see the module docstring)."""

    def _derived(self) -> None:
        m = self.metrics
        tuned = self.measurements_of("tuned")
        ceiling = m.get("ceiling_samples_per_s")
        naive = m.get("naive_samples_per_s")
        c, l = m.get("cpu_s_per_sample"), m.get("wall_s_per_sample")
        if tuned:
            rates = [w.samples_per_s for w in tuned]
            m["tuned_samples_per_s"] = statistics.median(rates)
            m["tuned_min_samples_per_s"], m["tuned_max_samples_per_s"] = min(rates), max(rates)
            m["tuned_spread_pct"] = 100.0 * (max(rates) - min(rates)) / statistics.median(rates) if rates else None
            m["stall_host_wait_pct"] = statistics.median(w.host_wait_pct for w in tuned)
            m["time_to_first_batch_s"] = tuned[0].first_batch_s
            idle = [100.0 * w.device_idle_s / w.seconds for w in tuned if w.device_idle_s is not None and w.seconds]
            m["stall_device_idle_pct"] = statistics.median(idle) if idle else None
        best = m.get("tuned_samples_per_s")
        if best and ceiling:
            m["efficiency"] = best / ceiling
            m["stall_differential_pct"] = max(0.0, 100.0 * (1.0 - best / ceiling))
        if best and naive:
            m["speedup"] = best / naive
        if ceiling and naive and l and self.best is not None and self.best.num_workers:
            bounds = [ceiling, self.best.num_workers / l]
            step_cpu = m.get("step_cpu_s_per_sample")
            if c is not None and step_cpu is not None and c + step_cpu > 0:
                bounds.append(self.cpus / (c + step_cpu))
            m["predicted_samples_per_s"] = min(bounds)
            m["predicted_speedup"] = min(bounds) / naive
        elif self.best is not None and naive:
            m["predicted_speedup"] = 1.0  # no workers won: the tuned loop is the naive pipeline
        if tuned and self.naive is not None:
            spread = statistics.pstdev(rates) / statistics.mean(rates) if len(rates) > 1 else 0.0
            m["speedup_noise"] = max(self.t.noise_floor_min, 2 * max(self.naive.cv, spread))
        if c:
            m["cores_per_device_needed"] = ceiling * c if ceiling else None
            m["workers_per_device_needed"] = ceiling * l if ceiling and l else None
            m["feedable_samples_per_s"] = max(1, self.cpus - 1) / c
            if self.o.target_rate:
                m["cores_needed_for_target"] = self.o.target_rate * c
        m["peak_memory_mib"] = peak_memory_mib(self.device) if self.device is not None else None
        m["tuning_seconds"] = self.tuning.seconds or None
        m["tuning_budget_s"] = self.tuning.budget_s or None
        m["sampler_overhead_pct"] = self.sampler_report.overhead_pct
        m["tuned_windows"] = float(len(tuned))
        if self.ledger.skipped:
            m["budget_needed_s"] = self._needed_s()

    def _shm_need_mib(self) -> float:
        """/dev/shm the loader needs: workers x prefetch x batch. The workers are the winner's, or, when
        /dev/shm itself capped the search or killed a loader, the count the run wanted."""
        workers = self.best.num_workers if self.best else 0
        prefetch = self.best.prefetch_factor if self.best else 2
        p = self.prediction
        if p is not None and p.cap_reason.startswith("/dev/shm") and p.cap < p.predicted:
            workers = max(workers, min(p.predicted, self.cpus))
        for _, config, why in self.failures:
            if why.startswith(SHM_FAILURE):
                workers, prefetch = max(workers, config.num_workers), max(prefetch, config.prefetch_factor)
        return workers * prefetch * self.batch_bytes / MIB

    def _verdict_facts(self) -> Any:
        from bootstrap.bench import verdicts
        from bootstrap.compat.facts import HostFacts

        host = self.host or HostFacts()
        shm_failure = next((why for _, _, why in self.failures if why.startswith(SHM_FAILURE)), "")
        return verdicts.VerdictFacts(
            device_type=self.device_info.get("type", "cpu"), gpu_name=self.device_info.get("name", ""),
            cpus=self.cpus, cpus_total=host.cpus_total, shm_free_mib=host.shm_free_mib,
            shm_need_mib=self.metrics["shm_need_mib"], shm_failure=shm_failure,
            start_method=host.start_method or "", start_method_explicit=host.start_method_explicit,
            nofile_soft=host.nofile_soft, nofile_hard=host.nofile_hard,
            workers=self.best.num_workers if self.best else None, cpu_bound=self.cpu_bound, pcie=self.pcie,
            budget_s=self.o.budget_s, partial=self.interrupted, left_out=self.ledger.summary(TUNE_PHASES))

    def _closing_notes(self) -> None:
        for phase, config, why in self.failures:
            self.notes.append(f"{phase} {config.label}: the loader's workers died ({why}); that config counts as failed")
        needed = self.metrics.get("budget_needed_s")
        if needed is not None:
            self.notes.append(f"budget too small for a complete run: left out {self.ledger.summary()}; "
                              f"~{needed:.0f} s would cover them (--budget {needed:.0f})")
        if self.interrupted:
            self.notes.append("interrupted (Ctrl-C or SIGTERM): partial report of the phases measured so far")

    def result(self) -> BenchResult:
        from bootstrap.bench import verdicts
        from bootstrap.bench.report import dataloader_snippet

        self._derived()
        self.metrics["shm_need_mib"] = self._shm_need_mib()
        checks = verdicts.evaluate(self.metrics, self._verdict_facts(), self.sampler_report, self.t) \
            if self.device_info else []
        self._closing_notes()
        untuned = next((c for c in checks if c.id == "bench.tuned" and c.status is not Status.OK), None)
        snippet = dataloader_snippet(self.best, self.spec, self.device_info.get("type", "cpu"),
                                     caveat=untuned.observed if untuned else "") if self.best else ""
        return BenchResult(
            device=dict(self.device_info), workload=self.spec.to_dict(), budget_s=self.o.budget_s,
            thresholds=self.o.thresholds.to_dict(), phases=tuple(self.phases), measurements=tuple(self.measurements),
            metrics=dict(self.metrics), tuning=self.tuning, sampler=self.sampler_report, checks=tuple(checks),
            best=self.best, snippet=snippet, notes=tuple(self.notes), partial=self.interrupted,
            seconds=self.finished_s or self.elapsed())
