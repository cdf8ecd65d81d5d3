"""The bench run: phases inside one time budget, returning a frozen `BenchResult`.

Phases (bench_method.md section 5): checks (L1 facts) -> micro (matmul,
H2D; L2) -> loader (num_workers=0 alone: CPU and wall seconds per sample)
-> ceiling (the step on a batch resident on the device; fp32, and bf16 +
channels_last where the GPU supports them, kept when faster) -> naive
(num_workers=0, no pinning, blocking copies, the ceiling's step) ->
scaling (CPU-only: loader rate against workers) -> tune (see `tune`) ->
tuned (three windows of the winner). The last three live in `search`, the
assembly of the result in `outcome`.

Each phase first gets the least it needs, priced from the costs measured so
far (`budget`), then its share of what is left; a measurement starts only
when it ends inside the budget, and what the budget could not pay for is
reported with the budget a complete run would need. Ctrl-C (and SIGTERM,
through the CLI) ends the run where it is: the result is marked `partial`
and holds what was measured. Nothing here prints; progress goes to the
callback the caller passes.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from bootstrap.bench.budget import FLOOR_STEPS, MIN_WINDOW_BATCHES, Costs, Ledger
from bootstrap.bench.config import BenchOptions
from bootstrap.bench.device import Device, Trainer, h2d_bandwidth, matmul_tflops
from bootstrap.bench.host import host_busy_pct
from bootstrap.bench.outcome import Outcome
from bootstrap.bench.results import (
    BenchResult, LoaderConfig, Measurement, PhaseRecord, SamplerReport, TuningRecord,
)
from bootstrap.bench.sampler import UtilSampler
from bootstrap.bench.search import TUNED_WINDOWS, WorkerSearch
from bootstrap.bench.stream import BatchStream, make_loader, worker_failure
from bootstrap.bench.window import WindowPlan, measure_loader_only, run_window
from bootstrap.errors import InputError
from bootstrap.fsutil import MIB

# (phase, share of the budget); 'micro' and 'scaling' shares go to 'tune' where they do not apply.
# Each phase first gets the least it can do its work in (budget.phase_budget_s), then its share of the rest.
PHASES: Tuple[Tuple[str, float], ...] = (
    ("checks", 0.0), ("micro", 0.03), ("loader", 0.05), ("ceiling", 0.10), ("naive", 0.07),
    ("scaling", 0.07), ("tune", 0.43), ("tuned", 0.25),
)
OPTIONAL_PHASES = ("scaling",)  # runs only when the phases after it still get their least
BARRIER_PHASES = ("ceiling", "naive", "tune", "tuned")
NOISY_HOST_PCT = 20.0
BASE_PLAN = WindowPlan()


@dataclass(frozen=True)
class Progress:
    """One progress event: the phase, time used of the budget, and what just happened."""

    phase: str
    elapsed_s: float
    budget_s: float
    message: str


ProgressFn = Callable[[Progress], None]


def run_bench(options: BenchOptions, progress: Optional[ProgressFn] = None, *,
              barrier: Optional[Callable[[], None]] = None, rank: Optional[Dict[str, int]] = None) -> BenchResult:
    """Run every phase within `options.budget_s`; Ctrl-C returns the partial result instead of raising.

    `barrier` (torchrun: `dist.barrier`) is called at the start of the
    ceiling, naive, tune and tuned phases and of each tuned window, the same
    number of times on every rank.
    """
    run = _Run(options.validate(), progress or (lambda event: None), barrier, rank or {})
    try:
        run.execute()
    except KeyboardInterrupt:
        run.mark_interrupted()
    finally:
        try:
            run.cleanup()
        except KeyboardInterrupt:  # the stop came as the run ended (a job's time limit): the clean-up still finishes
            run.mark_interrupted()
            run.cleanup()
    return run.result()


class _Run(WorkerSearch, Outcome):
    def __init__(self, options: BenchOptions, progress: ProgressFn, barrier: Optional[Callable[[], None]],
                 rank: Dict[str, int]) -> None:
        self.o = options
        self.t = options.thresholds.values
        self.spec = options.workload
        self.emit = progress
        self.barrier = barrier
        self.rank = rank
        self.zero = time.perf_counter()
        self.end = self.zero + options.budget_s
        self.ledger = Ledger()            # measurements the budget could not pay for
        self.costs: Optional[Costs] = None
        self.prediction: Any = None       # tune.WorkerPrediction, once the loader and ceiling are known
        self.failures: List[Tuple[str, LoaderConfig, str]] = []  # (phase, config, why): loaders whose workers died
        self.interrupted = False
        self.barriers_due = 0             # tuned-window barriers still owed this phase (torchrun)
        self.current = "setup"
        self.measurements: List[Measurement] = []
        self.phases: List[PhaseRecord] = []
        self.metrics: Dict[str, Optional[float]] = {}
        self.notes: List[str] = []
        self.device_info: Dict[str, Any] = {}
        self.tuning = TuningRecord()
        self.best: Optional[LoaderConfig] = None
        self.sampler: Optional[UtilSampler] = None
        self.sampler_report = SamplerReport(reason="not started")
        self.tmpdir: Optional[str] = None
        self.trainers: Dict[Tuple[Optional[str], bool], Trainer] = {}
        self.step_config = LoaderConfig()
        self.ceiling: Optional[Measurement] = None
        self.naive: Optional[Measurement] = None
        self.cpu_bound: Optional[bool] = None
        self.pcie: Optional[Tuple[int, int, int, int]] = None
        self.host: Any = None             # probe.HostFacts, once set up
        self.device: Optional[Device] = None
        self.batch_bytes = 0
        self.cpus = 1
        self.cudnn_benchmark: Optional[bool] = None
        self.torch_threads: Optional[int] = None
        self.finished_s = 0.0

    # ------------------------------------------------------------------ driver

    def elapsed(self) -> float:
        return time.perf_counter() - self.zero

    def say(self, phase: str, message: str) -> None:
        self.emit(Progress(phase, self.elapsed(), self.o.budget_s, message))

    def _affords(self, what: str, least_s: float, until: Optional[float] = None,
                 need_s: Optional[float] = None) -> bool:
        """True when a measurement whose shortest useful run takes `least_s` ends by `until` (default: the
        run's end, never later); otherwise it is left out and entered in the ledger with what a useful
        run of it costs (`need_s`, default `least_s`)."""
        until = self.end if until is None else min(until, self.end)
        if time.perf_counter() + least_s <= until:
            return True
        self.ledger.skip(self.current, what, least_s if need_s is None else need_s)
        return False

    def _skipped(self, what: str) -> str:
        left = max(0.0, self.end - time.perf_counter())
        return f"skipped: {what} needs ~{self.ledger.skipped[-1][2]:.1f} s, {left:.1f} s of the budget left"

    def _minimum_s(self, phase: str) -> float:
        """The least phase `phase` can do its work in, priced with the costs known now."""
        from bootstrap.bench.budget import search_s, tuned_s

        c = self.costs
        if c is None:
            return 0.0
        least = {
            "micro": lambda: 1.0 if self.device.is_cuda else 0.2,
            "loader": lambda: c.least_s(0, with_step=False),
            # a warm-up and five resident steps; before a step was timed, building the model and its first step
            "ceiling": lambda: 10 * c.step_s if c.step_s else (3.0 if self.device.is_cuda else 1.0),
            "naive": lambda: c.least_s(0),
            "scaling": lambda: sum(c.least_s(w, with_step=False) for w in self._scaling_counts()),
            "tune": lambda: search_s(c, self._search_counts(), reserve=3 if self.device.is_cuda else 1,
                                     overhead_s=self._startup_guess()),
            "tuned": lambda: tuned_s(c, self._likely_winner(), TUNED_WINDOWS),
        }
        return least[phase]() if phase in least else 0.0

    def execute(self) -> None:
        self.say("setup", "building the workload")
        self._setup()
        steps = {"checks": self._checks, "micro": self._micro, "loader": self._loader, "ceiling": self._ceiling,
                 "naive": self._naive, "scaling": self._scaling, "tune": self._tune, "tuned": self._tuned}
        applicable = [(name, weight) for name, weight in PHASES if self._applies(name)]
        for index, (name, _) in enumerate(applicable):
            self._phase(name, applicable[index:], steps[name])

    def _applies(self, name: str) -> bool:
        if name == "scaling":
            return not self.device.is_cuda
        return True

    def _phase(self, name: str, later: List[Tuple[str, float]], body: Callable[[float], str]) -> None:
        """Run phase `name` with its slice of what is left (its least first, then its share of the rest)."""
        from bootstrap.bench.budget import phase_budget_s

        self.current = name
        if self.barrier is not None and name in BARRIER_PHASES:
            self.barrier()
        started = time.perf_counter()
        remaining = max(0.0, self.end - started)
        least = [(phase, weight, self._minimum_s(phase)) for phase, weight in later]
        budget = phase_budget_s(name, remaining, least)
        try:
            self.say(name, f"start ({budget:.1f} s of {remaining:.1f} s left)")
            note = self._cannot_start(name, remaining, least) or body(started + budget)
        except KeyboardInterrupt:
            self.phases.append(PhaseRecord(name, started - self.zero, time.perf_counter() - started, budget, "interrupted"))
            raise
        self.phases.append(PhaseRecord(name, started - self.zero, time.perf_counter() - started, budget,
                                       "skipped" if note.startswith("skipped") else "done", note))

    def _cannot_start(self, name: str, remaining: float, least: List[Tuple[str, float, float]]) -> str:
        """Why phase `name` does not run at all ('' when it runs): the budget is spent, or it is optional
        and would leave the phases after it less than their least."""
        floor, own = sum(seconds for _, _, seconds in least), least[0][2]
        if remaining <= 0 and name != "checks":
            why = "skipped: the budget is spent"
        elif name in OPTIONAL_PHASES and own > 0 and remaining < floor:
            why = f"skipped: the phases from here need ~{floor:.1f} s, {remaining:.1f} s left; the tuner comes first"
        else:
            return ""
        self.ledger.skip(name, f"the {name} phase", own)
        return why

    def mark_interrupted(self) -> None:
        """Ctrl-C: note where it landed, even between phases or during setup."""
        self.interrupted = True
        if not self.phases or self.phases[-1].status != "interrupted":
            now = self.elapsed()
            self.phases.append(PhaseRecord(self.current, now, 0.0, 0.0, "interrupted", "interrupted here"))

    def cleanup(self) -> None:
        if self.sampler is not None:
            self.sampler_report = self.sampler.stop()
            self.sampler = None
        if self.cudnn_benchmark is not None:
            import torch

            torch.backends.cudnn.benchmark = self.cudnn_benchmark
        if self.torch_threads is not None:
            import torch

            torch.set_num_threads(self.torch_threads)
        self.trainers.clear()
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        self.finished_s = self.elapsed()

    # ------------------------------------------------------------------ setup and L1

    def _setup(self) -> None:
        import platform

        # Before this process does anything heavy: how busy is the host already (other jobs)?
        self.metrics["host_busy_before_pct"] = host_busy_pct(0.25)
        import torch

        from bootstrap.bench.workloads import SyntheticImages, build_store, resolve_model_name
        from bootstrap.compat.probe import collect_host_facts

        if self.o.device.startswith("cuda") and not torch.cuda.is_available():
            raise InputError("--device", f"{self.o.device}: CUDA is not available to this torch "
                             f"({torch.__version__})", "use --device cpu, or install a CUDA build of torch")
        index = self.o.device.partition(":")[2]  # cuda:N, validated as digits
        gpus = torch.cuda.device_count() if index else 0
        if index and int(index) >= gpus:
            raise InputError("--device", f"{self.o.device}: this torch sees {gpus} GPU{'s' if gpus != 1 else ''} "
                             f"(cuda:0{f' .. cuda:{gpus - 1}' if gpus > 1 else ''})",
                             "pick one of those; CUDA_VISIBLE_DEVICES renumbers them from 0")
        self.device = Device(self.o.device)
        self.host = collect_host_facts()
        self.cpus = self.o.cpus or self.host.cpus_usable or 1
        self.model_name, model_reason = resolve_model_name(self.spec.model, self.device.type)
        self.store = self._build_store(build_store)
        self.dataset = SyntheticImages(self.store, self.spec)
        self._sample_batch(SyntheticImages(self.store, replace(self.spec, cpu_ms=0.0, io_ms=0.0)))
        uuid, name = None, "CPU"
        if self.device.is_cuda:
            self.cudnn_benchmark = torch.backends.cudnn.benchmark
            torch.backends.cudnn.benchmark = True
            name = torch.cuda.get_device_name(self.device.torch_device)
            uuid = _cuda_uuid(torch, self.device.torch_device.index)
        self.sampler = UtilSampler(nvml_module=self.o.nvml_module,
                                   device_index=self.device.torch_device.index if self.device.is_cuda else None,
                                   device_uuid=uuid, interval_s=self.o.sampler_interval_s,
                                   clock_zero=self.zero).start()
        self.device_info = {
            "type": self.device.type, "name": name, "index": self.device.torch_device.index,
            "torch": torch.__version__, "cuda": getattr(torch.version, "cuda", None),
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "cpus_usable": self.cpus, "cpus_total": self.host.cpus_total,
            "start_method": self.host.start_method, "start_method_explicit": self.host.start_method_explicit,
            "shm_free_mib": self.host.shm_free_mib, "shm_total_mib": self.host.shm_total_mib,
            "memory_available_mib": self.host.memory_available_mib, "nofile_soft": self.host.nofile_soft,
            "model": self.model_name, "model_reason": model_reason, "batch_mib": self.batch_bytes / MIB,
            "rank": dict(self.rank),
        }
        if not self.device.is_cuda:
            # The step's OpenMP threads spin while they wait; on cores the loader workers also use, a step
            # can take 30x its time. Give the step half the CPUs and leave the rest to the workers.
            self.torch_threads = torch.get_num_threads()
            torch.set_num_threads(max(1, self.cpus // 2))
            self.device_info["torch_threads"] = torch.get_num_threads()
            self.notes.append(f"host run (CPU): the training step uses {torch.get_num_threads()} torch thread(s) "
                              f"(torch.set_num_threads) and the loader workers share the rest of the {self.cpus} CPUs; "
                              "the two contend for cores, so the CPU ceiling and tuned rate are host sizing figures, "
                              "not a GPU's")
        busy = self.metrics["host_busy_before_pct"]
        if busy is not None and busy >= NOISY_HOST_PCT:
            others = " (the other local ranks starting up count too)" if self.rank.get("local_world_size", 1) > 1 else ""
            self.notes.append(f"the host was {busy:.0f}% busy before the bench started (other processes{others}): "
                              "CPU-bound figures are contended")
        if self.spec.step_ms:
            self.notes.append(f"step_ms={self.spec.step_ms:g}: each step sleeps that long (a stand-in device)")

    def _sample_batch(self, decode_only: Any) -> None:
        """The batch the ceiling keeps on the device, made without the workload's extra costs (they do not
        change its pixels); its decode time plus those costs prices the first measurements."""
        started = time.perf_counter()
        stream = BatchStream(make_loader(decode_only, self.spec.batch_size, LoaderConfig(), seed=self.spec.seed))
        self.sample_images, self.sample_labels = next(stream)
        stream.close()
        decode = (time.perf_counter() - started) / self.spec.batch_size
        extra_cpu, extra_io = self.spec.cpu_ms / 1000.0, self.spec.io_ms / 1000.0
        self.costs = Costs(self.spec.batch_size, decode + extra_cpu + extra_io, decode + extra_cpu, self.cpus)
        self.batch_bytes = int(self.sample_images.numel() * self.sample_images.element_size()
                               + self.sample_labels.numel() * self.sample_labels.element_size())

    def _build_store(self, build_store: Callable[..., Any]) -> Any:
        """The samples in their store; files go to a fresh directory (under --data-dir, else the system
        temp dir) that the clean-up removes, so nothing of the user's there is overwritten or left."""
        if self.spec.storage == "memory":
            return build_store(self.spec, None)
        where = str(self.o.data_dir or tempfile.gettempdir())
        try:
            if self.o.data_dir is not None:
                self.o.data_dir.mkdir(parents=True, exist_ok=True)
            self.tmpdir = tempfile.mkdtemp(prefix="bootstrap-bench-", dir=self.o.data_dir)
            return build_store(self.spec, Path(self.tmpdir))
        except OSError as exc:
            flag = "--data-dir" if self.o.data_dir is not None else "the temporary directory (TMPDIR)"
            raise InputError(flag, f"cannot write the sample files (--storage {self.spec.storage}) in {where}: "
                             f"{exc.strerror or exc}", "give --data-dir a directory with room to write") from None

    def _checks(self, deadline: float) -> str:
        missing = "; ".join(self.host.missing)
        return f"host facts collected{': ' + missing if missing else ''}"

    # ------------------------------------------------------------------ L2

    def _micro(self, deadline: float) -> str:
        if not self._affords("matmul and copies", 1.0 if self.device.is_cuda else 0.2):
            return self._skipped("the matmul")
        tflops, how = matmul_tflops(self.device, deadline)
        self.metrics["matmul_tflops"] = tflops
        if self.device.is_cuda and self.sampler is not None:
            copies, self.pcie = h2d_bandwidth(self.device, during=self.sampler.pcie_link)
            self.metrics.update(copies)
            self.device_info["pcie"] = list(self.pcie) if self.pcie else None
            import torch

            torch.cuda.reset_peak_memory_stats(self.device.torch_device)
        return f"matmul {how}"

    # ------------------------------------------------------------------ measurements

    def _trainer(self, config: LoaderConfig) -> Trainer:
        key = (config.amp_dtype, config.channels_last)
        if key not in self.trainers:
            self.trainers[key] = Trainer(self.model_name, self.spec.num_classes, self.device,
                                            replace(LoaderConfig(), amp_dtype=config.amp_dtype,
                                                    channels_last=config.channels_last),
                                            step_s=self.spec.step_ms / 1000.0)
            # The first step of a fresh model pays for lazy initialisation (CUDA context and modules, autograd,
            # cuDNN autotune: tens of seconds on a cold GPU); the second is what budgets are priced with
            # until the ceiling is measured.
            batch = (self.sample_images, self.sample_labels)
            self.trainers[key].step(batch)
            self.device.sync()
            started = time.perf_counter()
            self.trainers[key].step(batch)
            self.device.sync()
            if self.costs is not None and not self.costs.step_s:
                self.costs = replace(self.costs, step_s=time.perf_counter() - started)
        trainer = self.trainers[key]
        trainer.config = replace(trainer.config, non_blocking=config.non_blocking)
        return trainer

    def _record(self, m: Measurement) -> Measurement:
        self.measurements.append(m)
        self.say(m.phase, f"{m.label}: {m.samples_per_s:,.1f} samples/s over {m.seconds:.2f} s ({m.steps} steps)")
        return m

    def _plan(self, window_s: float) -> WindowPlan:
        # Workers started together deliver in bursts of num_workers batches; a window several batch
        # latencies long (`_min_window`) bounds that error, a longer warm-up does not.
        return BASE_PLAN.scaled(max(window_s, 0.05))

    @staticmethod
    def _fit_steps(plan: WindowPlan, period_s: float) -> WindowPlan:
        """A plan whose step minimums fit its seconds at `period_s` a step: with slow steps, 100 steps
        (bench_method.md) would stretch each window to `max_factor` x its length and past its budget."""
        if period_s <= 0:
            return plan
        return replace(plan, min_steps=max(plan.floor_steps, min(plan.min_steps, int(plan.window_s / period_s))),
                       warmup_steps=max(1, min(plan.warmup_steps, int(plan.warmup_s / period_s))))

    def _loader_plan(self, config: LoaderConfig, window_s: float, deadline: float,
                     with_step: bool) -> Tuple[WindowPlan, float]:
        """(plan, deadline) for one loader measurement. It may run for its least (budget.Costs.least_s)
        even past the phase's deadline (whoever started it checked that it fits the budget), never past
        the run's end. When its first batch, warm-up and window would end past that, the warm-up shrinks
        to the burst of batches already loaded and the window to the time left: slow batches must not
        carry a measurement far past the budget."""
        c, workers = self.costs, config.num_workers
        now = time.perf_counter()
        deadline = min(self.end, max(deadline, now + c.least_s(workers, with_step)))
        period = c.period_s(workers, with_step)
        plan = self._fit_steps(self._plan(max(window_s, self._min_window(config))), period)
        first = c.batch_s + (c.startup_s if workers else 0.0)
        expected = first + max(plan.warmup_s, plan.warmup_steps * period) + max(plan.window_s, plan.min_steps * period)
        if now + expected <= deadline:
            return plan, deadline
        window = max(c.window_s(workers, with_step), deadline - now - first - c.warm_s(workers, with_step))
        return replace(plan, warmup_steps=1 + workers, warmup_s=0.0, window_s=window, min_steps=FLOOR_STEPS), deadline

    def _measure_loader(self, config: LoaderConfig, window_s: float, deadline: float, phase: str,
                        with_step: bool) -> Optional[Measurement]:
        """Build a loader with `config`, warm up, time one window (with or without the training step).

        None when its workers died (out of /dev/shm, killed): that config failed, the run goes on.
        """
        if self.spec.cold_cache:
            from bootstrap.bench.workloads import drop_page_cache

            drop_page_cache(self.store)
        stream = None
        try:
            stream = BatchStream(make_loader(self.dataset, self.spec.batch_size, config, seed=self.spec.seed))
            plan, deadline = self._loader_plan(config, window_s, deadline, with_step)
            if with_step:
                trainer = self._trainer(config)
                m = run_window(lambda: next(stream), trainer.step, self.device, plan, deadline, phase=phase,
                                  label=config.label, config=config, batch_size=self.spec.batch_size,
                                  clock_zero=self.zero, first_batch_s=stream.first_batch_s)
            else:
                m = measure_loader_only(lambda: next(stream), plan, deadline, phase=phase,
                                           label=f"loader {config.label}", config=config,
                                           batch_size=self.spec.batch_size, clock_zero=self.zero,
                                           first_batch_s=stream.first_batch_s)
        except RuntimeError as exc:
            if not config.num_workers:
                raise
            if stream is not None:
                stream.close(kill=True)
            self._worker_failure(phase, config, exc)
            return None
        finally:
            if stream is not None:
                stream.close()
        return self._record(m)

    def _worker_failure(self, phase: str, config: LoaderConfig, exc: RuntimeError) -> None:
        """A loader whose workers died is a result about that config, not the end of the run."""
        why = worker_failure(exc)
        if why == "terminated":  # the job is being stopped (Slurm signals every process): stop like Ctrl-C
            raise KeyboardInterrupt from exc
        self.failures.append((phase, config, why))
        self.say(phase, f"{config.label}: failed: {why}")

    def _loader(self, deadline: float) -> str:
        if not self._affords("loader w=0", self.costs.least_s(0, with_step=False)):
            return self._skipped("the loader-only window")
        window = (deadline - time.perf_counter()) / 1.5
        m = self._measure_loader(LoaderConfig(), window, deadline, "loader", with_step=False)
        c, l = m.cpu_s / m.samples, m.seconds / m.samples
        self.metrics.update(loader_only_samples_per_s=m.samples_per_s, cpu_s_per_sample=c, wall_s_per_sample=l)
        self.costs = replace(self.costs, wall_s_per_sample=l, cpu_s_per_sample=c)
        return f"c = {c * 1000:.2f} ms CPU, l = {l * 1000:.2f} ms wall per sample"

    def _ceiling(self, deadline: float) -> str:
        if not self._affords("the model's first step", self._minimum_s("ceiling")):
            return self._skipped("building the model")
        configs = [LoaderConfig()]
        if self.device.is_cuda:
            import torch

            if torch.cuda.is_bf16_supported():
                configs.append(LoaderConfig(amp_dtype="bfloat16", channels_last=True))
            else:
                self.notes.append("bf16 autocast not supported on this GPU: AMP not tuned")
        slots = len(configs) + (1 if self.device.is_cuda else 0)
        results = []
        for config in configs:
            results.append(self._resident(config, slots, deadline))
            slots -= 1
        base = results[0]
        if base is None:
            return self._skipped("the ceiling")
        chosen = base
        if len(results) > 1 and results[1] is not None:
            amp = results[1]
            gain = amp.samples_per_s / base.samples_per_s - 1.0
            self.metrics["ceiling_amp_samples_per_s"] = amp.samples_per_s
            if gain > max(self.t.noise_floor_min, 2 * max(base.cv, amp.cv)):
                chosen = amp
        self.metrics["ceiling_fp32_samples_per_s"] = base.samples_per_s
        self.step_config = chosen.config or LoaderConfig()
        self.ceiling = chosen
        self.costs = replace(self.costs, step_s=self.spec.batch_size / chosen.samples_per_s)
        self.metrics["ceiling_samples_per_s"] = chosen.samples_per_s
        self.metrics["step_cpu_s_per_sample"] = chosen.cpu_s / chosen.samples if chosen.samples else None
        copied = self._with_copy(deadline) if self.device.is_cuda else None
        if copied is not None:
            self.metrics["ceiling_h2d_samples_per_s"] = copied.samples_per_s
        return f"step config {self.step_config.label}"

    def _resident(self, config: LoaderConfig, slots: int, deadline: float) -> Optional[Measurement]:
        trainer = self._trainer(config)
        # A resident step is the fastest thing measured: five of them cost little and steady the figure.
        if not self._affords(f"ceiling {config.label}", 10 * self.costs.step_s):
            return None
        window_s = (deadline - time.perf_counter()) / (1.4 * slots)
        images, labels = trainer.to_device(self.sample_images, self.sample_labels, non_blocking=False)
        plan = replace(self._plan(window_s), floor_steps=5, min_steps=max(5, self._plan(window_s).min_steps))
        m = run_window(lambda: None, lambda _: trainer.step_on_device(images, labels), self.device,
                          plan, deadline, phase="ceiling", label=f"ceiling {config.label}",
                          config=config, batch_size=self.spec.batch_size, clock_zero=self.zero)
        return self._record(m)

    def _with_copy(self, deadline: float) -> Optional[Measurement]:
        """Transfer-inclusive ceiling: a pinned host batch copied non_blocking every step."""
        config = replace(self.step_config, pin_memory=True, non_blocking=True)
        trainer = self._trainer(config)
        if not self._affords(f"ceiling+h2d {config.label}", 10 * self.costs.step_s):
            return None
        batch = (self.sample_images.pin_memory(), self.sample_labels.pin_memory())
        window = (deadline - time.perf_counter()) / 1.4
        m = run_window(lambda: batch, trainer.step, self.device, self._plan(window), deadline,
                          phase="ceiling_h2d", label=f"ceiling+h2d {config.label}", config=config,
                          batch_size=self.spec.batch_size, clock_zero=self.zero)
        return self._record(m)

    def _naive(self, deadline: float) -> str:
        # The same training step as the ceiling (bench_method.md: "same training config"), so the
        # speedup over naive measures the loader settings alone.
        config = replace(self.step_config, num_workers=0, pin_memory=False, non_blocking=False,
                         persistent_workers=False)
        if not self._affords(f"naive {config.label}", self.costs.least_s(0)):
            return self._skipped("the naive loader")
        window = (deadline - time.perf_counter()) / 1.5
        self.naive = self._measure_loader(config, window, deadline, "naive", with_step=True)
        self.metrics["naive_samples_per_s"] = self.naive.samples_per_s
        self.metrics["naive_host_wait_pct"] = self.naive.host_wait_pct
        return f"num_workers=0, pin_memory=False, non_blocking=False, step {config.label}"

    def _needed_s(self) -> float:
        """A budget for a complete run: setup plus every phase's least, priced with the final costs (and at
        least what this run spent plus what it left out), with a margin for the estimate's error."""
        from bootstrap.bench.budget import advised_budget_s

        setup = self.phases[0].started_s if self.phases else self.elapsed()
        phases = [name for name, _ in PHASES if self.device is not None and self._applies(name)]
        complete = setup + sum(self._minimum_s(name) for name in phases)
        return advised_budget_s(max(complete, self.ledger.needed_s(self.finished_s or self.elapsed())))

    def _min_window(self, config: Optional[LoaderConfig]) -> float:
        """Workers started together deliver in bursts, one per batch latency (batch x l): a window of
        four latencies bounds that error to about a quarter of a burst. 0 for the main process alone."""
        if config is None or not config.num_workers or self.costs is None:
            return 0.0
        return MIN_WINDOW_BATCHES * self.costs.batch_s

    def _startup_guess(self) -> float:
        """Seconds a measurement costs beyond its window: the slowest first batch seen so far, at least 0.1 s."""
        firsts = [m.first_batch_s for m in self.measurements if m.first_batch_s is not None]
        return max([0.1] + firsts)

    def measurements_of(self, *phases: str) -> List[Measurement]:
        return [m for m in self.measurements if m.phase in phases]



def _cuda_uuid(torch: Any, index: Optional[int]) -> Optional[str]:
    """NVML's spelling of the GPU's UUID ('GPU-...'), from torch's device properties where it has them."""
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except (AttributeError, RuntimeError, AssertionError):
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
