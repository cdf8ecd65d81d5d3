"""The records a bench run returns, names with their units (`_samples_per_s`, `_pct`, `_s`); `to_dict()`
gives bench.json's layout, which `report.SCHEMA_VERSION` pins. docs/benchmark.md, "Reading the report"."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Optional

from bootstrap.report import Check, Status, shown, summary


@dataclass(frozen=True)
class LoaderConfig:
    """The DataLoader arguments and training-loop settings one measurement used."""

    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int = 2
    persistent_workers: bool = False
    non_blocking: bool = False
    amp_dtype: Optional[str] = None  # 'bfloat16' or None (fp32)
    channels_last: bool = False

    @property
    def label(self) -> str:
        """As the report's table shows it: `w=4 pf=2 pin nb bf16 cl`."""
        parts = [f"w={self.num_workers}"]
        if self.num_workers:
            parts.append(f"pf={self.prefetch_factor}")
        parts.append("pin" if self.pin_memory else "nopin")
        if self.non_blocking:
            parts.append("nb")
        if self.amp_dtype:
            parts.append(self.amp_dtype.replace("float", "f"))
        if self.channels_last:
            parts.append("cl")
        return " ".join(parts)

    def dataloader_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `torch.utils.data.DataLoader` (prefetch/persistence only with workers)."""
        kwargs: dict[str, Any] = {"num_workers": self.num_workers, "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            kwargs.update(prefetch_factor=self.prefetch_factor, persistent_workers=self.persistent_workers)
        return kwargs

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


@dataclass(frozen=True)
class Measurement:
    """One timed window: warm-up discarded, synchronised at both ends."""

    phase: str  # ceiling | ceiling_h2d | naive | loader | scaling | tune | knob | tuned | recheck
    label: str
    config: Optional[LoaderConfig]
    steps: int
    samples: int
    seconds: float
    samples_per_s: float
    host_wait_s: float = 0.0  # time blocked in next(loader)
    cv: float = 0.0  # coefficient of variation of the rate over the window's thirds
    first_batch_s: Optional[float] = None
    cpu_s: float = 0.0  # CPU seconds of this process during the window
    device_idle_s: Optional[float] = None  # CUDA only: gaps between steps' GPU work
    truncated: bool = False  # a deadline ended it before its planned length
    started_s: float = 0.0  # since the run started (for the timeline)

    @property
    def host_wait_pct(self) -> float:
        return 100.0 * self.host_wait_s / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "config": self.config and self.config.to_dict(), "host_wait_pct": self.host_wait_pct}


Knob = tuple[str, str, bool, float, float]  # (knob, tried label, kept, gain, noise floor)
Rate = tuple[str, float]  # (label, samples/s)


@dataclass(frozen=True)
class Ties:
    """The worker search's pick and the configs equal to it within the noise: it was kept as the cheapest."""

    picked: Rate
    results: tuple[Rate, ...] = ()  # the others, fastest first
    noise: Optional[float] = None  # the noise band they tie within (None: no tie)

    def to_dict(self) -> dict[str, Any]:
        def rate(entry: Rate) -> dict[str, Any]:
            return {"label": entry[0], "samples_per_s": entry[1]}

        return {"picked": rate(self.picked), "noise": self.noise, "results": [rate(r) for r in self.results]}


@dataclass(frozen=True)
class TuningRecord:
    """What the auto-tuner predicted, tried and kept."""

    cpu_s_per_sample: Optional[float] = None
    wall_s_per_sample: Optional[float] = None
    predicted_workers: Optional[int] = None
    cap: Optional[int] = None
    cap_reason: str = ""
    candidates: tuple[int, ...] = ()
    rounds: tuple[tuple[float, tuple[tuple[str, float], ...]], ...] = ()  # (window_s, ((label, samples/s), ...))
    knobs: tuple[Knob, ...] = ()
    winner: Optional[LoaderConfig] = None
    stopped_early: bool = False
    seconds: float = 0.0
    budget_s: float = 0.0
    ties: Optional[Ties] = None  # None: the search picked nothing

    def to_dict(self) -> dict[str, Any]:
        rounds = [
            {"window_s": window_s, "results": [{"label": label, "samples_per_s": rate} for label, rate in results]}
            for window_s, results in self.rounds
        ]
        knob_keys = ("knob", "tried", "kept", "gain", "noise_floor")
        knobs = [dict(zip(knob_keys, knob)) for knob in self.knobs]
        winner = self.winner and self.winner.to_dict()
        ties = self.ties and self.ties.to_dict()
        return {
            **asdict(self),
            "candidates": list(self.candidates),
            "rounds": rounds,
            "knobs": knobs,
            "winner": winner,
            "ties": ties,
        }


@dataclass(frozen=True)
class UtilStats:
    """Sampled utilisation (percent): its source, count and spread."""

    source: str  # 'nvmlDeviceGetSamples', 'nvmlDeviceGetUtilizationRates' or '/proc/stat (all CPUs)'
    count: int
    mean: Optional[float] = None
    p5: Optional[float] = None
    p10: Optional[float] = None
    p50: Optional[float] = None
    p95: Optional[float] = None


Timeline = tuple[tuple[float, float], ...]  # (seconds since the run started, percent)


@dataclass(frozen=True)
class SamplerReport:
    """The utilisation sampler's results: GPU and host series, GPM, and its own cost."""

    gpu: Optional[UtilStats] = None
    host_cpu: Optional[UtilStats] = None
    gpm_sm_active: Optional[float] = None  # 0..1 over the tuned windows
    gpm_reason: str = ""
    reason: str = ""  # why there is no GPU series
    polls: int = 0
    busy_s: float = 0.0  # wall time spent inside polls
    cpu_s: float = 0.0  # the sampler thread's CPU time
    wall_s: float = 0.0
    gpu_timeline: Timeline = ()
    host_timeline: Timeline = ()

    @property
    def overhead_pct(self) -> float:
        """CPU the sampler took, as a share of the time it ran (under the GIL the main thread lost it)."""
        return 100.0 * self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["gpu"], out["host_cpu"]
        out.update(
            gpu_utilization_pct=self.gpu and asdict(self.gpu),
            host_cpu_busy_pct=self.host_cpu and asdict(self.host_cpu),
            overhead_pct=self.overhead_pct,
            gpu_timeline=[list(p) for p in self.gpu_timeline],
            host_timeline=[list(p) for p in self.host_timeline],
        )
        return out


@dataclass(frozen=True)
class PhaseRecord:
    name: str
    started_s: float
    seconds: float
    budget_s: float
    status: str  # done | skipped | interrupted
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Metrics:
    """Every figure a run measured or derived (`bench.json`'s `metrics`); None: not measured."""

    # the host before and during the run
    host_busy_before_pct: Optional[float] = None
    load_average: Optional[float] = None
    # the device micro-benchmarks (CUDA copies only)
    matmul_tflops: Optional[float] = None
    h2d_pinned_gb_per_s: Optional[float] = None
    h2d_pageable_gb_per_s: Optional[float] = None
    d2h_pinned_gb_per_s: Optional[float] = None
    d2h_pageable_gb_per_s: Optional[float] = None
    # the loader alone, num_workers=0: c (CPU) and l (wall) seconds per sample
    loader_only_samples_per_s: Optional[float] = None
    cpu_s_per_sample: Optional[float] = None
    wall_s_per_sample: Optional[float] = None
    run_queue_s_per_sample: Optional[float] = None
    loader_run_queue_pct: Optional[float] = None
    # the step on a batch resident on the device, and the naive loader
    ceiling_samples_per_s: Optional[float] = None
    ceiling_fp32_samples_per_s: Optional[float] = None
    ceiling_amp_samples_per_s: Optional[float] = None
    ceiling_h2d_samples_per_s: Optional[float] = None
    step_cpu_s_per_sample: Optional[float] = None
    naive_samples_per_s: Optional[float] = None
    naive_host_wait_pct: Optional[float] = None
    # CPU hosts: loader rate S(W) by workers, and S(W) / (W x S(1))
    loader_scaling: dict[int, float] = field(default_factory=dict)
    loader_scaling_workers: Optional[float] = None
    loader_scaling_efficiency: Optional[float] = None
    # the search
    tune_candidates: Optional[float] = None
    tune_candidates_measured: Optional[float] = None
    tune_candidates_failed: Optional[float] = None
    tune_repeat_noise: Optional[float] = None
    tune_knobs: Optional[float] = None
    tune_knobs_tried: Optional[float] = None
    tuning_seconds: Optional[float] = None
    tuning_budget_s: Optional[float] = None
    # the tuned windows and the re-measure
    tuned_samples_per_s: Optional[float] = None
    tuned_min_samples_per_s: Optional[float] = None
    tuned_max_samples_per_s: Optional[float] = None
    tuned_spread_pct: Optional[float] = None
    tuned_window_steps: Optional[float] = None
    tuned_prefetched_batches: Optional[float] = None
    tuned_windows: Optional[float] = None
    time_to_first_batch_s: Optional[float] = None
    worker_pss_growth_pct: Optional[float] = None
    worker_pss_mib: Optional[float] = None
    recheck_samples_per_s: Optional[float] = None
    recheck_steps: Optional[float] = None
    recheck_gap_pct: Optional[float] = None
    recheck_noise: Optional[float] = None
    # what the verdicts judge
    efficiency: Optional[float] = None
    tuned_over_ceiling: Optional[float] = None
    stall_host_wait_pct: Optional[float] = None
    stall_device_idle_pct: Optional[float] = None
    stall_differential_pct: Optional[float] = None
    speedup: Optional[float] = None
    speedup_noise: Optional[float] = None
    predicted_samples_per_s: Optional[float] = None
    predicted_speedup: Optional[float] = None
    # sizing: what the ceiling needs, what this host can feed
    cores_per_device_needed: Optional[float] = None
    workers_per_device_needed: Optional[float] = None
    feedable_samples_per_s: Optional[float] = None
    cores_needed_for_target: Optional[float] = None
    shm_need_mib: Optional[float] = None
    peak_memory_mib: Optional[float] = None
    sampler_overhead_pct: Optional[float] = None
    budget_needed_s: Optional[float] = None

    def to_dict(self) -> dict[str, Optional[float]]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "loader_scaling"}
        out.update({f"loader_w{w}_samples_per_s": rate for w, rate in sorted(self.loader_scaling.items())})
        return out


@dataclass(frozen=True, repr=False)
class BenchResult:
    """Everything one bench run measured and decided. `partial` when Ctrl-C cut it short."""

    device: dict[str, Any]
    workload: dict[str, Any]
    budget_s: float
    thresholds: dict[str, dict[str, Any]]
    phases: tuple[PhaseRecord, ...]
    measurements: tuple[Measurement, ...]
    metrics: Metrics
    tuning: TuningRecord
    sampler: SamplerReport
    checks: tuple[Check, ...]
    best: Optional[LoaderConfig]
    snippet: str
    notes: tuple[str, ...] = ()
    partial: bool = False
    seconds: float = 0.0
    ranks: tuple[dict[str, Any], ...] = ()  # --distributed, rank 0: every rank's own report
    aggregate: dict[str, Any] = field(default_factory=dict)

    def measurements_of(self, phase: str) -> list[Measurement]:
        return [m for m in self.measurements if m.phase == phase]

    def __repr__(self) -> str:
        """A few lines for `print(report)` and a notebook: the device, the winner against naive and the
        ceiling, the verdicts, and where the rest is (every field stays an attribute, and in `asdict`)."""
        d, m = self.device, self.metrics
        partial = " [PARTIAL]" if self.partial else ""
        header = f"{d.get('type', '?')} ({d.get('name', '?')}), torch {d.get('torch', '?')}, "
        header += f"{d.get('cpus_usable', '?')} CPUs; {self.seconds:.1f} s of a {self.budget_s:g} s budget{partial}"
        return "\n".join(
            [
                f"BenchResult: {header}",
                f"  {_winner_line(self.best, m)}",
                f"  verdicts: {_verdict_line(self.checks)}",
                "  more: report.checks (each verdict, its remedy), report.notes, report.best, report.metrics",
                "  the full report: print(bootstrap.bench.report.render_text(report))",
            ]
        )


def _rate(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _winner_line(best: Optional[LoaderConfig], m: Metrics) -> str:
    if best is None:
        return "winner: none (the budget ended before the tuner picked: see bench.tuned in report.checks)"
    line = f"winner {best.label}: {_rate(m.tuned_samples_per_s)} samples/s"
    if m.naive_samples_per_s is not None:
        speedup = f" ({m.speedup:.2f}x)" if m.speedup is not None else ""
        line += f"; naive {_rate(m.naive_samples_per_s)}{speedup}"
    if m.ceiling_samples_per_s is not None:
        efficiency = f" (efficiency {m.efficiency:.2f})" if m.efficiency is not None else ""
        line += f"; ceiling {_rate(m.ceiling_samples_per_s)}{efficiency}"
    return line


def _verdict_line(checks: tuple[Check, ...]) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in summary(checks).items() if n)
    judged = [f"{c.id} {c.status.value}" for c in checks if c.status in (Status.FAIL, Status.WARN, Status.INCONCLUSIVE)]
    return f"{counts or 'none'}" + (f"; not ok: {shown(judged)}" if judged else "")
