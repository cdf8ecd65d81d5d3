"""The frozen records a bench run returns; rendering lives in `report`.

Metric names carry their units (`samples_per_s`, `_pct`, `_gb_per_s`,
`_mib`, `_s`). Every record has `to_dict()` for the JSON report, whose
layout `report.SCHEMA_VERSION` pins.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from bootstrap.report import Check


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

    def dataloader_kwargs(self) -> Dict[str, Any]:
        """Keyword arguments of `torch.utils.data.DataLoader` (prefetch/persistence only with workers)."""
        kwargs: Dict[str, Any] = {"num_workers": self.num_workers, "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            kwargs["prefetch_factor"] = self.prefetch_factor
            kwargs["persistent_workers"] = self.persistent_workers
        return kwargs

    def to_dict(self) -> Dict[str, Any]:
        return {**asdict(self), "label": self.label}


@dataclass(frozen=True)
class Measurement:
    """One timed window: warm-up discarded, synchronised at both ends."""

    phase: str  # ceiling | ceiling_h2d | naive | loader | scaling | tune | knob | tuned
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
    truncated: bool = False  # ended by the phase deadline before its planned length
    started_s: float = 0.0  # since the run started (for the timeline)

    @property
    def host_wait_pct(self) -> float:
        return 100.0 * self.host_wait_s / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["config"] = None if self.config is None else self.config.to_dict()
        out["host_wait_pct"] = self.host_wait_pct
        return out


@dataclass(frozen=True)
class TuningRecord:
    """What the auto-tuner predicted, tried and kept."""

    cpu_s_per_sample: Optional[float] = None
    wall_s_per_sample: Optional[float] = None
    predicted_workers: Optional[int] = None
    cap: Optional[int] = None
    cap_reason: str = ""
    candidates: Tuple[int, ...] = ()
    rounds: Tuple[Tuple[float, Tuple[Tuple[str, float], ...]], ...] = ()  # (window_s, ((label, samples/s), ...))
    knobs: Tuple[Tuple[str, str, bool, float, float], ...] = ()  # (knob, tried, kept, gain, noise)
    winner: Optional[LoaderConfig] = None
    stopped_early: bool = False
    seconds: float = 0.0
    budget_s: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return {
            "cpu_s_per_sample": self.cpu_s_per_sample,
            "wall_s_per_sample": self.wall_s_per_sample,
            "predicted_workers": self.predicted_workers,
            "cap": self.cap,
            "cap_reason": self.cap_reason,
            "candidates": list(self.candidates),
            "rounds": [
                {"window_s": w, "results": [{"label": label, "samples_per_s": r} for label, r in res]}
                for w, res in self.rounds
            ],
            "knobs": [
                {"knob": k, "tried": t, "kept": kept, "gain": g, "noise_floor": n} for k, t, kept, g, n in self.knobs
            ],
            "winner": None if self.winner is None else self.winner.to_dict(),
            "stopped_early": self.stopped_early,
            "seconds": self.seconds,
            "budget_s": self.budget_s,
        }


@dataclass(frozen=True)
class UtilStats:
    """Summary of sampled utilisation (percent) plus how it was sampled and what sampling cost."""

    source: str  # e.g. 'nvmlDeviceGetSamples', 'nvmlDeviceGetUtilizationRates', '/proc/stat'
    count: int
    mean: Optional[float] = None
    p5: Optional[float] = None
    p10: Optional[float] = None
    p50: Optional[float] = None
    p95: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SamplerReport:
    """The sampler thread's results: GPU and host series, GPM, and its own overhead."""

    gpu: Optional[UtilStats] = None
    host_cpu: Optional[UtilStats] = None
    gpm_sm_active: Optional[float] = None  # 0..1 over the tuned windows
    gpm_reason: str = ""
    reason: str = ""  # why there is no GPU series
    polls: int = 0
    busy_s: float = 0.0  # wall time spent inside polls
    cpu_s: float = 0.0  # the sampler thread's CPU time
    wall_s: float = 0.0
    gpu_timeline: Tuple[Tuple[float, float], ...] = ()  # (seconds since start, %)
    host_timeline: Tuple[Tuple[float, float], ...] = ()

    @property
    def overhead_pct(self) -> float:
        """CPU the sampler took, as a percentage of the time it ran (the GIL makes this time the main thread lost)."""
        return 100.0 * self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> Dict[str, Any]:
        return {
            "gpu_utilization_pct": None if self.gpu is None else self.gpu.to_dict(),
            "host_cpu_busy_pct": None if self.host_cpu is None else self.host_cpu.to_dict(),
            "gpm_sm_active": self.gpm_sm_active,
            "gpm_reason": self.gpm_reason,
            "reason": self.reason,
            "polls": self.polls,
            "busy_s": self.busy_s,
            "cpu_s": self.cpu_s,
            "wall_s": self.wall_s,
            "overhead_pct": self.overhead_pct,
            "gpu_timeline": [list(p) for p in self.gpu_timeline],
            "host_timeline": [list(p) for p in self.host_timeline],
        }


@dataclass(frozen=True)
class PhaseRecord:
    name: str
    started_s: float
    seconds: float
    budget_s: float
    status: str  # done | skipped | interrupted
    note: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BenchResult:
    """Everything one bench run measured and decided. `partial` when Ctrl-C cut it short."""

    device: Dict[str, Any]
    workload: Dict[str, Any]
    budget_s: float
    thresholds: Dict[str, Dict[str, Any]]
    phases: Tuple[PhaseRecord, ...]
    measurements: Tuple[Measurement, ...]
    metrics: Dict[str, Optional[float]]
    tuning: TuningRecord
    sampler: SamplerReport
    checks: Tuple[Check, ...]
    best: Optional[LoaderConfig]
    snippet: str
    notes: Tuple[str, ...] = ()
    partial: bool = False
    seconds: float = 0.0
    ranks: Tuple[Dict[str, Any], ...] = ()  # --distributed, rank 0: every rank's own report
    aggregate: Dict[str, Any] = field(default_factory=dict)

    def measurements_of(self, phase: str) -> List[Measurement]:
        return [m for m in self.measurements if m.phase == phase]
