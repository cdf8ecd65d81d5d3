"""The bench run: phases inside one time budget, returning a frozen `BenchResult`.

Phases (bench_method.md section 5): checks (L1 facts) -> micro (matmul,
H2D; L2) -> loader (num_workers=0 alone: CPU and wall seconds per sample)
-> ceiling (the step on a batch resident on the device; fp32, and bf16 +
channels_last where the GPU supports them, kept when faster) -> naive
(num_workers=0, no pinning, blocking copies, the ceiling's step) -> scaling (CPU-only: loader rate against
workers) -> tune (see `tune`) -> tuned (three windows of the winner).

Each phase gets a share of the time left, so time one phase does not use
passes to the next and the run ends within the budget. Ctrl-C (and SIGTERM,
through the CLI) ends the run where it is: the result is marked `partial` and holds what was measured.
Nothing here prints; progress goes to the callback the caller passes.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from bootstrap.bench import measure as ms
from bootstrap.bench.budget import FLOOR_STEPS, MIN_WINDOW_BATCHES, Costs, Ledger
from bootstrap.bench.config import BenchOptions
from bootstrap.bench.results import (
    BenchResult, LoaderConfig, Measurement, PhaseRecord, SamplerReport, TuningRecord,
)
from bootstrap.bench.sampler import UtilSampler
from bootstrap.checks import Status
from bootstrap.errors import InputError

MIB = 1 << 20
# (phase, share of the budget); 'micro' and 'scaling' shares go to 'tune' where they do not apply.
# Each phase first gets the least it can do its work in (budget.phase_budget_s), then its share of the rest.
PHASES: Tuple[Tuple[str, float], ...] = (
    ("checks", 0.0), ("micro", 0.03), ("loader", 0.05), ("ceiling", 0.10), ("naive", 0.07),
    ("scaling", 0.07), ("tune", 0.43), ("tuned", 0.25),
)
OPTIONAL_PHASES = ("micro", "scaling")  # run only when the phases after them still get their least
BARRIER_PHASES = ("ceiling", "naive", "tune", "tuned")
TUNED_WINDOWS = 3
NOISY_HOST_PCT = 20.0
BASE_PLAN = ms.WindowPlan()


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
        run.cleanup()
    return run.result()


class _Run:
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
        self.trainers: Dict[Tuple[Optional[str], bool], ms.Trainer] = {}
        self.step_config = LoaderConfig()
        self.ceiling: Optional[Measurement] = None
        self.naive: Optional[Measurement] = None
        self.cpu_bound: Optional[bool] = None
        self.pcie: Optional[Tuple[int, int, int, int]] = None
        self.host: Any = None             # probe.HostFacts, once set up
        self.device: Optional[ms.Device] = None
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
        self.metrics["host_busy_before_pct"] = _host_busy_pct(0.25)
        import torch

        from bootstrap.bench.workloads import SyntheticImages, build_store, resolve_model_name
        from bootstrap.probe import collect_host_facts

        if self.o.device.startswith("cuda") and not torch.cuda.is_available():
            raise InputError("--device", f"{self.o.device}: CUDA is not available to this torch "
                             f"({torch.__version__})", "use --device cpu, or install a CUDA build of torch")
        self.device = ms.Device(self.o.device)
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
        stream = ms.BatchStream(ms.make_loader(decode_only, self.spec.batch_size, LoaderConfig(), seed=self.spec.seed))
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
            raise InputError(flag, f"cannot write the {self.spec.storage} sample files in {where}: "
                             f"{exc.strerror or exc}", "give --data-dir a directory with room to write") from None

    def _checks(self, deadline: float) -> str:
        missing = "; ".join(self.host.missing)
        return f"host facts collected{': ' + missing if missing else ''}"

    # ------------------------------------------------------------------ L2

    def _micro(self, deadline: float) -> str:
        if not self._affords("matmul and copies", 1.0 if self.device.is_cuda else 0.2):
            return self._skipped("the matmul")
        tflops, how = ms.matmul_tflops(self.device, deadline)
        self.metrics["matmul_tflops"] = tflops
        if self.device.is_cuda and self.sampler is not None:
            copies, self.pcie = ms.h2d_bandwidth(self.device, during=self.sampler.pcie_link)
            self.metrics.update(copies)
            self.device_info["pcie"] = list(self.pcie) if self.pcie else None
            import torch

            torch.cuda.reset_peak_memory_stats(self.device.torch_device)
        return f"matmul {how}"

    # ------------------------------------------------------------------ measurements

    def _trainer(self, config: LoaderConfig) -> ms.Trainer:
        key = (config.amp_dtype, config.channels_last)
        if key not in self.trainers:
            self.trainers[key] = ms.Trainer(self.model_name, self.spec.num_classes, self.device,
                                            replace(LoaderConfig(), amp_dtype=config.amp_dtype,
                                                    channels_last=config.channels_last),
                                            step_s=self.spec.step_ms / 1000.0)
            # The first steps of a fresh model pay for lazy initialisation (autograd, cuDNN autotune): not timed,
            # but until the ceiling is measured it is the step time budgets are priced with (an overestimate).
            started = time.perf_counter()
            self.trainers[key].step((self.sample_images, self.sample_labels))
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

    def _plan(self, window_s: float) -> ms.WindowPlan:
        # Workers started together deliver in bursts of num_workers batches; a window several batch
        # latencies long (`_min_window`) bounds that error, a longer warm-up does not.
        return BASE_PLAN.scaled(max(window_s, 0.05))

    @staticmethod
    def _fit_steps(plan: ms.WindowPlan, period_s: float) -> ms.WindowPlan:
        """A plan whose step minimums fit its seconds at `period_s` a step: with slow steps, 100 steps
        (bench_method.md) would stretch each window to `max_factor` x its length and past its budget."""
        if period_s <= 0:
            return plan
        return replace(plan, min_steps=max(plan.floor_steps, min(plan.min_steps, int(plan.window_s / period_s))),
                       warmup_steps=max(1, min(plan.warmup_steps, int(plan.warmup_s / period_s))))

    def _loader_plan(self, config: LoaderConfig, window_s: float, deadline: float,
                     with_step: bool) -> Tuple[ms.WindowPlan, float]:
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
            stream = ms.BatchStream(ms.make_loader(self.dataset, self.spec.batch_size, config, seed=self.spec.seed))
            plan, deadline = self._loader_plan(config, window_s, deadline, with_step)
            if with_step:
                trainer = self._trainer(config)
                m = ms.run_window(lambda: next(stream), trainer.step, self.device, plan, deadline, phase=phase,
                                  label=config.label, config=config, batch_size=self.spec.batch_size,
                                  clock_zero=self.zero, first_batch_s=stream.first_batch_s)
            else:
                m = ms.measure_loader_only(lambda: next(stream), plan, deadline, phase=phase,
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
        why = ms.worker_failure(exc)
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
        m = ms.run_window(lambda: None, lambda _: trainer.step_on_device(images, labels), self.device,
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
        m = ms.run_window(lambda: batch, trainer.step, self.device, self._plan(window), deadline,
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

    def _predict(self) -> Any:
        """tune.WorkerPrediction (W*, the cap and its reason), once the loader and ceiling are measured."""
        from bootstrap.bench import tune

        if self.prediction is None and self.ceiling is not None and "wall_s_per_sample" in self.metrics:
            shm, mem = self.host.shm_free_mib, self.host.memory_available_mib
            self.prediction = tune.predict_workers(
                wall_s_per_sample=self.metrics["wall_s_per_sample"] or 0.0,
                cpu_s_per_sample=self.metrics["cpu_s_per_sample"] or 0.0,
                ceiling_samples_per_s=self.ceiling.samples_per_s, cpus=self.cpus,
                reserved_cpus=2 if self.device.is_cuda else 1, shm_free_bytes=None if shm is None else shm * MIB,
                batch_bytes=self.batch_bytes, mem_available_bytes=None if mem is None else mem * MIB,
                worker_bytes=ms.rss_bytes(), max_workers=self.o.max_workers)
            self.cpu_bound = self.prediction.cpu_bound
        return self.prediction

    def _candidate(self, workers: int) -> LoaderConfig:
        """A worker count as the tuner (and the scaling phase, on a CPU) tries it."""
        cuda = self.device.is_cuda
        return replace(self.step_config, num_workers=workers, pin_memory=cuda, non_blocking=cuda, prefetch_factor=2,
                       persistent_workers=workers > 0)

    def _search_counts(self) -> Tuple[int, ...]:
        """The tuner's worker candidates: from the prediction once known, else as if W* were the CPUs."""
        from bootstrap.bench import tune

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
        from bootstrap.bench import tune

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
            stream = ms.BatchStream(ms.make_loader(self.dataset, self.spec.batch_size, config, seed=self.spec.seed))
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
        ms.warm_up(lambda: next(stream), trainer.step, self.device, plan, deadline)
        pids = ms.child_pids() if config.num_workers else []
        pss_start = ms.workers_pss_kib(pids)
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
            plan = self._fit_steps(replace(plan, window_s=window, min_steps=BASE_PLAN.scaled(window).min_steps), period)
            m = self._record(ms.run_window(
                lambda: next(stream), trainer.step, self.device, plan, deadline, phase="tuned",
                label=f"tuned #{index + 1} {config.label}", config=config, batch_size=self.spec.batch_size,
                clock_zero=self.zero, first_batch_s=stream.first_batch_s, warmup=False))
            count += 1
            if self.sampler is not None:
                self.sampler.stat_window(m.started_s, m.started_s + m.seconds)
        if self.sampler is not None:
            self.sampler.gpm_end()
        pss_end = ms.workers_pss_kib(pids)
        if pss_start and pss_end is not None and count:
            self.metrics["worker_pss_growth_pct"] = 100.0 * (pss_end - pss_start) / pss_start
            self.metrics["worker_pss_mib"] = pss_end / 1024.0
        return count

    # ------------------------------------------------------------------ result

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
        m["peak_memory_mib"] = ms.peak_memory_mib(self.device) if self.device is not None else None
        m["tuning_seconds"] = self.tuning.seconds or None
        m["tuning_budget_s"] = self.tuning.budget_s or None
        m["sampler_overhead_pct"] = self.sampler_report.overhead_pct
        m["tuned_windows"] = float(len(tuned))
        if self.ledger.skipped:
            m["budget_needed_s"] = self._needed_s()

    def _needed_s(self) -> float:
        """A budget for a complete run: setup plus every phase's least, priced with the final costs (and at
        least what this run spent plus what it left out), with a margin for the estimate's error."""
        from bootstrap.bench.budget import advised_budget_s

        setup = self.phases[0].started_s if self.phases else self.elapsed()
        phases = [name for name, _ in PHASES if self.device is not None and self._applies(name)]
        complete = setup + sum(self._minimum_s(name) for name in phases)
        return advised_budget_s(max(complete, self.ledger.needed_s(self.finished_s or self.elapsed())))

    def _shm_need_mib(self) -> float:
        """/dev/shm the loader needs: workers x prefetch x batch. The workers are the winner's, or, when
        /dev/shm itself capped the search or killed a loader, the count the run wanted."""
        workers = self.best.num_workers if self.best else 0
        prefetch = self.best.prefetch_factor if self.best else 2
        p = self.prediction
        if p is not None and p.cap_reason.startswith("/dev/shm") and p.cap < p.predicted:
            workers = max(workers, min(p.predicted, self.cpus))
        for _, config, why in self.failures:
            if why.startswith(ms.SHM_FAILURE):
                workers, prefetch = max(workers, config.num_workers), max(prefetch, config.prefetch_factor)
        return workers * prefetch * self.batch_bytes / MIB

    def _verdict_facts(self) -> Any:
        from bootstrap.bench import verdicts
        from bootstrap.probe import HostFacts

        host = self.host or HostFacts()
        shm_failure = next((why for _, _, why in self.failures if why.startswith(ms.SHM_FAILURE)), "")
        return verdicts.VerdictFacts(
            device_type=self.device_info.get("type", "cpu"), gpu_name=self.device_info.get("name", ""),
            cpus=self.cpus, cpus_total=host.cpus_total, shm_free_mib=host.shm_free_mib,
            shm_need_mib=self.metrics["shm_need_mib"], shm_failure=shm_failure,
            start_method=host.start_method or "", start_method_explicit=host.start_method_explicit,
            nofile_soft=host.nofile_soft, nofile_hard=host.nofile_hard,
            workers=self.best.num_workers if self.best else None, cpu_bound=self.cpu_bound, pcie=self.pcie,
            budget_s=self.o.budget_s, partial=self.interrupted, left_out=self.ledger.summary())

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


def _host_busy_pct(seconds: float) -> Optional[float]:
    """Machine-wide CPU busy % over `seconds` while this process sleeps (/proc/stat; None where absent)."""
    from bootstrap.bench.sampler import read_proc_stat

    first = read_proc_stat()
    if first is None:
        return None
    time.sleep(seconds)
    second = read_proc_stat()
    if second is None or second[1] <= first[1]:
        return None
    return 100.0 * (second[0] - first[0]) / (second[1] - first[1])


def _cuda_uuid(torch: Any, index: Optional[int]) -> Optional[str]:
    """NVML's spelling of the GPU's UUID ('GPU-...'), from torch's device properties where it has them."""
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except (AttributeError, RuntimeError, AssertionError):
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
