"""The state of one bench run: one value the phases read and fill in, and its bookkeeping.

`RunState` is created once (`new_state`), set up by `startup.set_up`, then
handed to each phase function (`phase(state, deadline) -> note`) in turn;
`outcome.build_result` derives the frozen `BenchResult` from it. Clock
readings are `time.perf_counter()` values (`clock_zero`, `run_deadline`,
a phase's `deadline`); durations end in `_s`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from bootstrap.bench.budget import Costs, Ledger
from bootstrap.bench.config import BenchOptions, Thresholds, WorkloadSpec
from bootstrap.bench.results import LoaderConfig, Measurement, PhaseRecord, SamplerReport, TuningRecord


@dataclass(frozen=True)
class Progress:
    """One progress event: the phase, time used of the budget, and what just happened."""

    phase: str
    elapsed_s: float
    budget_s: float
    message: str


ProgressFn = Callable[[Progress], None]


class LoaderFailure(NamedTuple):
    """A loader whose workers died (out of /dev/shm, killed): a result about that config."""

    phase: str
    config: LoaderConfig
    why: str


@dataclass
class RunState:
    """Everything a run has set up and measured so far (see the module docstring)."""

    # What was asked, and how the run reports back
    options: BenchOptions
    progress: ProgressFn
    barrier: Optional[Callable[[], None]]  # torchrun: dist.barrier, called alike on every rank
    rank: Dict[str, int]
    clock_zero: float  # perf_counter when the run began
    run_deadline: float  # perf_counter when the budget ends
    current_phase: str = "setup"

    # Set up once (startup.set_up)
    host: Any = None  # compat.facts.HostFacts
    device: Any = None  # device.Device
    cpus: int = 1
    model_name: str = ""
    store: Any = None  # workloads.MemoryStore / files / packed
    dataset: Any = None  # workloads.SyntheticImages, or the user's (parts.resolve)
    collate_fn: Any = None  # the user's --collate, else DataLoader's default
    user_parts: Any = None  # parts.UserParts when the run measures the user's workload
    sample_batch: Optional[Tuple[Any, Any]] = None  # the first batch: the ceiling's when the loader phase kept none
    ceiling_batches: List[Any] = field(default_factory=list)  # batches the loader phase loaded, for the ceiling
    samples_in: Optional[Callable[[Any], int]] = None  # samples in a batch it did not size (own_batch_counter)
    batch_bytes: int = 0
    sampler: Any = None  # sampler.UtilSampler while it runs
    device_info: Dict[str, Any] = field(default_factory=dict)

    # What the clean-up (startup.clean_up) restores or removes
    saved_cudnn_benchmark: Optional[bool] = None
    saved_torch_threads: Optional[int] = None
    sample_dir: Optional[str] = None
    made_dir: Optional[Path] = None  # the outermost directory of --data-dir that the run created
    trainers: Dict[Tuple[Optional[str], bool], Any] = field(default_factory=dict)  # (amp, channels_last)

    # What the phases found
    costs: Optional[Costs] = None
    step_config: LoaderConfig = field(default_factory=LoaderConfig)
    ceiling: Optional[Measurement] = None
    naive: Optional[Measurement] = None
    prediction: Any = None  # tune.WorkerPrediction, once the loader and ceiling are known
    cpu_bound: Optional[bool] = None
    pcie: Optional[Tuple[int, int, int, int]] = None
    best: Optional[LoaderConfig] = None
    tuning: TuningRecord = field(default_factory=TuningRecord)
    tuned_barriers_due: int = 0  # tuned-window barriers still owed this phase (torchrun)
    measurements: List[Measurement] = field(default_factory=list)
    phase_records: List[PhaseRecord] = field(default_factory=list)
    metrics: Dict[str, Optional[float]] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    failures: List[LoaderFailure] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)  # measurements the budget could not pay for

    # How it ended
    interrupted: bool = False
    sampler_report: SamplerReport = field(default_factory=lambda: SamplerReport(reason="not started"))
    elapsed_at_end_s: float = 0.0

    @property
    def workload(self) -> WorkloadSpec:
        return self.options.workload

    @property
    def sampling(self) -> Any:
        """The user's sampler or batch sampler (`sampling.Sampling`); None: bench's shuffle."""
        return self.user_parts.sampling if self.user_parts is not None else None

    @property
    def thresholds(self) -> Thresholds:
        return self.options.thresholds.values

    @property
    def is_cuda(self) -> bool:
        return self.device is not None and self.device.is_cuda

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.clock_zero

    def say(self, phase: str, message: str) -> None:
        self.progress(Progress(phase, self.elapsed_s(), self.options.budget_s, message))

    def record(self, measurement: Measurement) -> Measurement:
        self.measurements.append(measurement)
        self.say(
            measurement.phase,
            f"{measurement.label}: {measurement.samples_per_s:,.1f} samples/s over "
            f"{measurement.seconds:.2f} s ({measurement.steps} steps)",
        )
        return measurement

    def measurements_of(self, *phases: str) -> List[Measurement]:
        return [m for m in self.measurements if m.phase in phases]

    def affords(self, what: str, least_s: float, until: Optional[float] = None, need_s: Optional[float] = None) -> bool:
        """True when a measurement whose shortest useful run takes `least_s` ends by `until` (default: the
        run's end, never later); otherwise it is left out and entered in the ledger with what a useful
        run of it costs (`need_s`, default `least_s`)."""
        until = self.run_deadline if until is None else min(until, self.run_deadline)
        if time.perf_counter() + least_s <= until:
            return True
        self.ledger.skip(self.current_phase, what, least_s if need_s is None else need_s)
        return False

    def skipped(self, what: str) -> str:
        """The phase note for a measurement `affords` just left out."""
        left = max(0.0, self.run_deadline - time.perf_counter())
        return f"skipped: {what} needs ~{self.ledger.skipped[-1][2]:.1f} s, {left:.1f} s of the budget left"


def new_state(
    options: BenchOptions,
    progress: Optional[ProgressFn] = None,
    *,
    barrier: Optional[Callable[[], None]] = None,
    rank: Optional[Dict[str, int]] = None,
) -> RunState:
    """A fresh run of `options` (validated): its budget starts now."""
    options = options.validate()
    zero = time.perf_counter()
    return RunState(
        options=options,
        progress=progress or (lambda _event: None),
        barrier=barrier,
        rank=dict(rank or {}),
        clock_zero=zero,
        run_deadline=zero + options.budget_s,
    )
