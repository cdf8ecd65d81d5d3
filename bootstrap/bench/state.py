"""The state of one bench run: what set-up built, what the phases found, and the run's bookkeeping.

Clock readings are `time.perf_counter()` values (`clock_zero`, `run_deadline`, a phase's deadline);
durations end in `_s`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from bootstrap.bench.config import BenchOptions, Thresholds, WorkloadSpec
from bootstrap.bench.results import LoaderConfig, Measurement, Metrics, PhaseRecord, SamplerReport, TuningRecord

if TYPE_CHECKING:
    from bootstrap.bench.device import Device
    from bootstrap.bench.loader import BatchStream
    from bootstrap.bench.step import Trainer
    from bootstrap.bench.tuner import WorkerPrediction
    from bootstrap.bench.user import Sampling, UserParts
    from bootstrap.bench.utilization import UtilSampler
    from bootstrap.compat.facts import HostFacts


FLOOR_STEPS = 3  # a rate needs a few steps, and its CV needs thirds
CUT_SHARE = 0.25  # a window ended this much short of its plan was cut, not just ended by a busy moment


@dataclass(frozen=True)
class Progress:
    """One progress event: the phase, time used of the budget, and what just happened."""

    phase: str
    elapsed_s: float
    budget_s: float
    message: str


ProgressFn = Callable[[Progress], None]
Barrier = Callable[[], None]


class LoaderFailure(NamedTuple):
    """A loader whose workers died (out of /dev/shm, killed): a result about that config."""

    phase: str
    config: LoaderConfig
    why: str


class Cut(NamedTuple):
    """A measurement the budget cut short or left out, and about what more it needed."""

    phase: str
    what: str
    need_s: float


@dataclass
class RunState:
    """Everything a run has set up and measured so far."""

    options: BenchOptions
    progress: ProgressFn
    barrier: Optional[Barrier]  # torchrun: dist.barrier, called alike on every rank
    rank: dict[str, int]
    clock_zero: float
    run_deadline: float
    phase: str = "setup"
    # set up once
    host: Optional[HostFacts] = None
    device: Optional[Device] = None
    cpus: int = 1
    model_name: str = ""
    dataset: Any = None  # synthetic.SyntheticImages, or the user's (`user.resolve`)
    store: Any = None  # the synthetic samples' store, for --cold-cache
    collate_fn: Optional[Callable[..., Any]] = None
    user: Optional[UserParts] = None
    sample_batch: Any = None  # the first batch: the ceiling's when the loader phase kept none
    ceiling_batches: list[tuple[Any, Optional[int]]] = field(default_factory=list)
    samples_in: Optional[Callable[[Any], int]] = None  # samples in a batch the DataLoader did not size
    batch_bytes: int = 0
    sampler: Optional[UtilSampler] = None
    device_info: dict[str, Any] = field(default_factory=dict)
    undo: list[Callable[[], None]] = field(default_factory=list)  # what clean-up restores, last first
    trainers: dict[tuple[Optional[str], bool], Trainer] = field(default_factory=dict)
    # what the phases found
    step_config: LoaderConfig = field(default_factory=LoaderConfig)
    step_s: float = 0.0  # one step on a resident batch, as the ceiling (or set-up) timed it
    ceiling: Optional[Measurement] = None
    naive: Optional[Measurement] = None
    prediction: Optional[WorkerPrediction] = None
    pcie: Optional[tuple[int, int, int, int]] = None
    best: Optional[LoaderConfig] = None
    tuning: TuningRecord = field(default_factory=TuningRecord)
    measurements: list[Measurement] = field(default_factory=list)
    phase_records: list[PhaseRecord] = field(default_factory=list)
    metrics: Metrics = field(default_factory=Metrics)
    notes: list[str] = field(default_factory=list)
    failures: list[LoaderFailure] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)
    # how it ended
    interrupted: bool = False
    sampler_report: SamplerReport = field(default_factory=lambda: SamplerReport(reason="not started"))
    elapsed_at_end_s: float = 0.0

    @property
    def workload(self) -> WorkloadSpec:
        return self.options.workload

    @property
    def thresholds(self) -> Thresholds:
        return self.options.thresholds.values

    @property
    def sampling(self) -> Optional[Sampling]:
        return self.user.sampling if self.user is not None else None

    @property
    def is_cuda(self) -> bool:
        return self.device is not None and self.device.is_cuda

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.clock_zero

    def say(self, phase: str, message: str) -> None:
        self.progress(Progress(phase, self.elapsed_s(), self.options.budget_s, message))

    def record(self, m: Measurement, planned_s: float = 0.0) -> Measurement:
        """Keep `m`; a window a deadline cut well short enters the cuts with about what it lacked."""
        self.measurements.append(m)
        self.say(m.phase, f"{m.label}: {m.samples_per_s:,.1f} samples/s over {m.seconds:.2f} s ({m.steps} steps)")
        lacked_s = max(0.0, planned_s - m.seconds) + max(0, FLOOR_STEPS - m.steps) * m.seconds / max(1, m.steps)
        if m.truncated and (m.steps < FLOOR_STEPS or lacked_s > CUT_SHARE * planned_s):
            self.cut(m.phase, m.label, lacked_s)
        return m

    def cut(self, phase: str, what: str, need_s: float) -> None:
        self.cuts.append(Cut(phase, what, max(0.0, need_s)))

    def cuts_summary(self, phases: tuple[str, ...] = ()) -> str:
        """'PHASE: WHAT (~SECONDS s); ...' for each cut, of `phases` only when given."""
        shown = [c for c in self.cuts if not phases or c.phase in phases]
        return "; ".join(f"{c.phase}: {c.what} (~{c.need_s:.1f} s)" for c in shown)

    def budget_needed_s(self) -> float:
        """A budget that would have paid for what was cut too: what the run spent plus what the cuts
        lacked, a tenth more for the estimate's error, rounded up to 5 s."""
        spent = self.elapsed_at_end_s or self.elapsed_s()
        return float(5 * math.ceil((spent + sum(c.need_s for c in self.cuts)) * 1.1 / 5))

    def stream(self, config: LoaderConfig) -> BatchStream:
        """A fresh DataLoader of the run's dataset with `config`, read as a stream of batches."""
        from bootstrap.bench.loader import BatchStream, make_loader

        spec = self.workload
        sampling, collate_fn = self.sampling, self.collate_fn
        loader = make_loader(
            self.dataset, spec.loader_batch_size, config, seed=spec.seed, collate_fn=collate_fn, sampling=sampling
        )
        return BatchStream(loader)

    def trainer(self, config: LoaderConfig) -> Trainer:
        """The model for `config`'s step settings (AMP, channels_last), built once and reused. Its first
        two steps on the sample batch pay for lazy initialisation (CUDA context, autograd, cuDNN's
        autotune) outside every window; the second times the step until the ceiling does."""
        from bootstrap.bench.step import Trainer

        key = (config.amp_dtype, config.channels_last)
        if key not in self.trainers:
            assert self.device is not None
            step_config = LoaderConfig(amp_dtype=config.amp_dtype, channels_last=config.channels_last)
            step_s = self.workload.step_ms / 1000.0
            trainer = Trainer(
                self.model_name, self.workload.num_classes, self.device, step_config, step_s=step_s, user=self.user
            )
            self.trainers[key] = trainer
            for timed in (False, True):
                started = time.perf_counter()
                trainer.step(self.sample_batch)
                self.device.sync()
                if timed and not self.step_s:
                    self.step_s = time.perf_counter() - started
        trainer = self.trainers[key]
        trainer.config = replace(trainer.config, non_blocking=config.non_blocking)
        return trainer


def new_state(
    options: BenchOptions,
    progress: Optional[ProgressFn] = None,
    *,
    barrier: Optional[Barrier] = None,
    rank: Optional[dict[str, int]] = None,
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
