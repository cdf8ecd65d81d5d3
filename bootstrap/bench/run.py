"""A bench run from start to result: set-up, the phases, clean-up, and the two entry points
(`run_bench`, and `tune_loader` for a training script; docs/benchmark.md).

Ctrl-C (and SIGTERM, through the CLI) ends a run where it is: the result is marked `partial` and holds
what was measured. A run still going well past its budget is stuck (`watchdog`): it stops and raises
one InputError naming the dataset. Nothing here prints; progress goes to the callback the caller passes.
"""

from __future__ import annotations

import contextlib
import platform
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional

from bootstrap.bench.config import BenchOptions, WorkloadSpec, option_name
from bootstrap.bench.device import Device, cuda_uuid, mps_available
from bootstrap.bench.frames import with_frames
from bootstrap.bench.host import host_busy_pct, load_average
from bootstrap.bench.loader import BatchStream, make_loader
from bootstrap.bench.outcome import build_result
from bootstrap.bench.phases import run_phases
from bootstrap.bench.results import BenchResult, LoaderConfig, PhaseRecord
from bootstrap.bench.state import Barrier, ProgressFn, RunState, new_state
from bootstrap.bench.utilization import UtilSampler
from bootstrap.bench.watchdog import Stalled, give_up_s, watchdog
from bootstrap.errors import BootstrapError, InputError
from bootstrap.fsutil import MIB

NOISY_HOST_PCT = 20.0


def run_bench(
    options: BenchOptions,
    progress: Optional[ProgressFn] = None,
    *,
    barrier: Optional[Barrier] = None,
    rank: Optional[dict[str, int]] = None,
    after: Optional[Callable[[RunState], None]] = None,
) -> BenchResult:
    """Every phase within `options.budget_s`; Ctrl-C returns the partial result instead of raising. A run
    stuck past its budget, or the user's code raising what no phase expects (sys.exit, say), raises one
    InputError naming them, after the clean-up. `barrier` (torchrun: `dist.barrier`) is called the same
    number of times on every rank. `after` is handed the run's state once every phase ran, before the
    clean-up (torchrun: the DDP ceiling, on the run's own model, step and batches)."""
    state = new_state(options, progress, barrier=barrier, rank=rank)
    failure: Optional[InputError] = None
    # torch's first import is slow on a busy host: a watchdog firing inside it would leave torch half
    # imported for the rest of the process (a training script calling tune_loader goes on after it).
    # torch._dynamo too: the first optimizer the run builds imports it.
    import torch  # noqa: F401

    with contextlib.suppress(ImportError):  # a torch before 2.0 has none
        import torch._dynamo  # noqa: F401

    try:
        with watchdog(give_up_s(state.options.budget_s)):
            state.say("setup", "building the workload")
            set_up(state)
            run_phases(state)
            if after is not None:
                after(state)
    except KeyboardInterrupt:
        mark_interrupted(state)
    except Stalled as exc:
        failure = with_frames(stalled_error(state), exc)  # where the user's code was when it was stopped
    except BootstrapError as exc:
        with_frames(exc)
        raise
    except BaseException as exc:
        if state.options.user is None:
            raise
        failure = with_frames(user_code_error(state, exc), exc)
        failure.__cause__ = exc  # --debug shows where it came from
    finally:
        try:
            clean_up(state)
        except KeyboardInterrupt:  # the stop came as the run ended (a job's time limit): the clean-up finishes
            mark_interrupted(state)
            clean_up(state)
    if failure is not None:
        raise failure
    return build_result(state)


def mark_interrupted(state: RunState) -> None:
    """Ctrl-C: note where it landed, even between phases or during set-up."""
    state.interrupted = True
    if not state.phase_records or state.phase_records[-1].status != "interrupted":
        record = PhaseRecord(state.phase, state.elapsed_s(), 0.0, 0.0, "interrupted", "interrupted here")
        state.phase_records.append(record)


def stalled_error(state: RunState) -> InputError:
    """The one line for a run the watchdog stopped: where it was, and what usually holds a run."""
    budget_s, user = state.options.budget_s, state.options.user
    past = f"still running {state.elapsed_s() - budget_s:.0f} s past its {budget_s:g} s budget"
    over = f"{past}, in the {state.phase} phase: stopped"
    if user is None:
        return InputError(f"bench --budget {budget_s:g}", over, "give it a larger --budget")
    from bootstrap.bench.user import user_where

    script = state.options.from_script
    problem = f"{over}; a __getitem__ (or __iter__), collate, model or step that never returns?"
    fix = (
        f"time one sample by hand; a dataset this slow needs a larger {option_name('budget_s', script)} "
        f"or a smaller {option_name('batch_size', script)}"
    )
    return InputError(user_where(user), problem, fix)


def user_code_error(state: RunState, exc: BaseException) -> InputError:
    """The one line for what escaped the phases of a run over the user's code."""
    from bootstrap.bench.step import StepFailed
    from bootstrap.bench.user import code_error, step_failed

    user = state.options.user
    if isinstance(exc, StepFailed):
        during = f"in the {state.phase} phase"
        return step_failed(
            user, exc, during, state.model_name, state.samples_in is not None, state.workload.num_classes
        )
    return code_error(user, exc, state.phase)


# --------------------------------------------------------------------------- set-up and clean-up


def set_up(state: RunState) -> None:
    """Device, host facts, the workload and its first batch, the sampler, and what the report says of them."""
    state.metrics.host_busy_before_pct = host_busy_pct(0.25)  # before this process does anything heavy
    import torch

    from bootstrap.bench.step import resolve_model_name
    from bootstrap.compat.host import collect_host_facts

    options = state.options
    _check_device(torch, options.device, options.from_script)
    state.device = device = Device(options.device)
    state.host = host = collect_host_facts()
    state.cpus = options.cpus or host.cpus_usable or 1
    state.model_name, model_reason = resolve_model_name(state.workload.model, device.type)
    if not device.is_accelerator:
        # Before the first batch and step are timed, with the threads the phases run them with.
        _share_cpus_with_workers(state, torch)
    if options.user is not None:
        model_reason = _set_up_user(state, model_reason)
    else:
        _set_up_synthetic(state)
    name, uuid = "Apple MPS" if device.is_mps else "CPU", None
    if device.is_cuda:
        previous, benchmark = torch.cuda.current_device(), torch.backends.cudnn.benchmark
        torch.cuda.set_device(device.torch_device)  # CUDA events and streams of the run are this device's
        torch.backends.cudnn.benchmark = True
        state.undo.append(lambda: torch.cuda.set_device(previous))
        state.undo.append(lambda: setattr(torch.backends.cudnn, "benchmark", benchmark))
        name, uuid = torch.cuda.get_device_name(device.torch_device), cuda_uuid(torch, device.index)
    state.sampler = UtilSampler(
        nvml_module=options.nvml_module,
        device_index=device.index,
        device_uuid=uuid,
        interval_s=options.sampler_interval_s,
        clock_zero=state.clock_zero,
    ).start()
    state.device_info = {
        "type": device.type,
        "device_reason": device.reason,
        "name": name,
        "index": device.torch_device.index,
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "cpus_usable": state.cpus,
        "cpus_total": host.cpus_total,
        "start_method": host.start_method,
        "start_method_explicit": host.start_method_explicit,
        "shm_free_mib": host.shm_free_mib,
        "shm_total_mib": host.shm_total_mib,
        "memory_available_mib": host.memory_available_mib,
        "nofile_soft": host.nofile_soft,
        "model": state.model_name,
        "model_reason": model_reason,
        "batch_mib": state.batch_bytes / MIB,
        "rank": dict(state.rank),
    }
    state.notes.extend(_notes_on_the_host(state))


def _check_device(torch: Any, device: str, script: bool = False) -> None:
    """One line, before anything is built, for a device this torch cannot use."""
    where = option_name("device", script, where=True)
    cpu, auto = ("device='cpu'", "device='auto'") if script else ("--device cpu", "--device auto")
    if device == "mps" and not mps_available(torch):
        problem = f"mps: Apple MPS is not available to this torch ({torch.__version__})"
        raise InputError(where, problem, f"MPS needs Apple silicon and macOS 12.3+; use {cpu} or {auto}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        problem = f"{device}: CUDA is not available to this torch ({torch.__version__})"
        raise InputError(where, problem, f"use {cpu}, or install a CUDA build of torch")
    index = device.partition(":")[2]  # cuda:N, validated as digits
    gpus = torch.cuda.device_count() if index else 0
    if index and int(index) >= gpus:
        seen = f"(cuda:0{f' .. cuda:{gpus - 1}' if gpus > 1 else ''})"
        problem = f"{device}: this torch sees {gpus} GPU{'s' if gpus != 1 else ''} {seen}"
        raise InputError(where, problem, "pick one of those; CUDA_VISIBLE_DEVICES renumbers them from 0")


def _share_cpus_with_workers(state: RunState, torch: Any) -> None:
    # The step's OpenMP threads spin while they wait; on cores the loader workers also use, a step can
    # take many times its time. Give the step half the CPUs and leave the rest to the workers.
    saved = torch.get_num_threads()
    state.undo.append(lambda: torch.set_num_threads(saved))
    torch.set_num_threads(max(1, state.cpus // 2))
    state.notes.append(
        f"host run (CPU): the training step uses {torch.get_num_threads()} torch thread(s) (torch.set_num_threads) "
        f"and the loader workers share the rest of the {state.cpus} CPUs; the two contend for cores, so the CPU "
        "ceiling and tuned rate are host sizing figures, not a GPU's"
    )


def _notes_on_the_host(state: RunState) -> list[str]:
    notes = []
    busy = state.metrics.host_busy_before_pct
    if busy is not None and busy >= NOISY_HOST_PCT:
        others = " (the other local ranks starting up count too)" if state.rank.get("local_world_size", 1) > 1 else ""
        notes.append(
            f"the host was {busy:.0f}% busy before the bench started (other processes{others}): "
            "CPU-bound figures are contended"
        )
    # The load average counts the whole machine's runnable tasks: it is held against all its CPUs.
    load, cpus = load_average(), (state.host.cpus_total if state.host else None) or state.cpus
    if load is not None and load > cpus:
        state.metrics.load_average = load
        notes.append(
            f"the load average ({load:.1f}) is above the machine's {cpus} CPUs: processes queue for the cores, so "
            "the rates, and the workers sized from them, fit this load, not a quiet host"
        )
    if state.workload.step_ms:
        notes.append(f"step_ms={state.workload.step_ms:g}: each step sleeps that long (a stand-in device)")
    return notes


def _set_up_synthetic(state: RunState) -> None:
    """The synthetic samples in their store, and a first batch made without the workload's extra costs
    (they do not change its pixels): the ceiling's batch."""
    from bootstrap.bench.synthetic import SyntheticImages

    spec = state.workload
    state.store = _build_store(state)
    state.dataset = SyntheticImages(state.store, spec)
    decode_only = SyntheticImages(state.store, replace(spec, cpu_ms=0.0, io_ms=0.0))
    stream = BatchStream(make_loader(decode_only, spec.batch_size, LoaderConfig(), seed=spec.seed))
    images, labels = state.sample_batch = next(stream)
    stream.close()
    state.batch_bytes = int(images.numel() * images.element_size() + labels.numel() * labels.element_size())


def _set_up_user(state: RunState, model_reason: str) -> str:
    """The user's dataset, collate, model and step (`user.resolve`: one batch made here, so a dataset
    that cannot feed the run fails now, in one line), then one training step on that batch."""
    from bootstrap.bench.batch import own_batch_counter, tensors
    from bootstrap.bench.user import is_stream, resolve

    user, spec = state.options.user, state.workload
    parts = resolve(user, spec.loader_batch_size, spec.seed)
    state.user, state.dataset, state.collate_fn = parts, parts.dataset, parts.collate_fn
    own = spec.batched or parts.sampling.batch_sampler is not None  # batches the DataLoader did not size
    state.samples_in = own_batch_counter(parts.samples) if own else None
    state.notes.extend(_counting_notes(spec, parts, own))
    if own:
        state.options = replace(state.options, workload=replace(spec, batch_size=parts.samples))
    if is_stream(parts.dataset):
        state.notes.append(
            "the dataset is a stream (IterableDataset), read in its own order: each DataLoader worker runs its own "
            "__iter__, so unless it splits itself by torch.utils.data.get_worker_info(), N workers yield every "
            "sample N times, and the rates count each copy"
        )
    state.sample_batch = parts.first_batch
    state.batch_bytes = sum(t.numel() * t.element_size() for t in tensors(parts.first_batch))
    if parts.model_factory is not None:
        state.model_name = user.model if isinstance(user.model, str) else type(user.model).__name__
        model_reason = "the user's model"
    _first_user_step(state)
    return model_reason


def _counting_notes(spec: WorkloadSpec, parts: Any, own: bool) -> list[str]:
    """What the report says of how it counts samples, where it is not simply the batch size a batch."""
    from bootstrap.bench.batch import shared_first_dim

    shared, dims = shared_first_dim(parts.first_batch)
    if not own:
        if shared is not None and len(dims) >= 2 and shared < spec.batch_size:
            return [
                f"the first batch held {shared} of its {spec.batch_size} samples (a collate function that drops "
                f"what failed to load?): the rates count {spec.batch_size} a batch, more than were delivered"
            ]
        return []
    if spec.batched:
        made = "the dataset yields whole batches (DataLoader batch_size=None)"
    else:
        made = "the batch sampler makes the batches"
    if parts.sampling.batch_sampler is not None:
        how = (
            "its tensors share no first dimension (detection, time-major)"
            if shared is None
            else f"{parts.samples} in the first"
        )
        return [f"{made}, each counted by the list of indices it was made from ({how})"]
    return [f"{made}, each counted by the first dimension its tensors share ({parts.samples} in the first)"]


def _first_user_step(state: RunState) -> None:
    """Build the model and step once on the first batch: a batch the model or step cannot take is one
    line naming the step, not a traceback from the middle of the run."""
    from bootstrap.bench.step import StepFailed
    from bootstrap.bench.user import builtin_step_fix, describe_step_error, passes_through, step_error_fix, step_where

    user = state.options.user
    try:
        state.trainer(LoaderConfig())
    except InputError:
        raise
    except BaseException as exc:  # noqa: BLE001 (the user's model or step, or the built-in step on their batch)
        if passes_through(exc):
            raise
        error = exc.error if isinstance(exc, StepFailed) else exc
        fix = step_error_fix(user, error, state.samples_in is not None)
        if not fix and user.step is None:
            fix = builtin_step_fix(user, state.sample_batch, state.workload.num_classes)
        problem = f"failed on the first batch: {describe_step_error(error)}"
        raise InputError(step_where(user, state.model_name), problem, fix) from None


def _build_store(state: RunState) -> Any:
    """The samples in their store; files go to a fresh directory (under --data-dir, else the system temp
    dir) that the clean-up removes, so nothing of the user's there is overwritten or left behind."""
    from bootstrap.bench.synthetic import build_store

    spec, data_dir = state.workload, state.options.data_dir
    if spec.storage == "memory":
        return build_store(spec, None)
    try:
        if data_dir is not None:
            missing = [d for d in (data_dir, *data_dir.parents) if not d.exists()]
            data_dir.mkdir(parents=True, exist_ok=True)
            if missing:
                state.undo.append(lambda: _remove_made(data_dir, missing[-1]))
        sample_dir = tempfile.mkdtemp(prefix="bootstrap-bench-", dir=data_dir)
        state.undo.append(lambda: shutil.rmtree(sample_dir, ignore_errors=True))
        return build_store(spec, Path(sample_dir))
    except OSError as exc:
        flag = "--data-dir" if data_dir is not None else "the temporary directory (TMPDIR)"
        where = str(data_dir or tempfile.gettempdir())
        problem = f"cannot write the sample files (--storage {spec.storage}) in {where}: {exc.strerror or exc}"
        raise InputError(flag, problem, "give --data-dir a directory with room to write") from None


def _remove_made(data_dir: Path, outermost: Path) -> None:
    """What the run created for --data-dir goes too, unless something else is in it."""
    for directory in (data_dir, *data_dir.parents):
        with contextlib.suppress(OSError):
            directory.rmdir()
        if directory == outermost:
            break


def clean_up(state: RunState) -> None:
    """Stop the sampler, drop the models, undo what set-up changed (torch's settings, the sample files),
    last change first."""
    if state.sampler is not None:
        state.sampler_report = state.sampler.stop()
        state.sampler = None
    state.trainers.clear()
    while state.undo:
        state.undo.pop()()
    state.elapsed_at_end_s = state.elapsed_s()


# --------------------------------------------------------------------------- tune_loader


def tune_loader(  # noqa: PLR0913 (the Python API: DataLoader's own keywords, and the run's)
    dataset: Any,
    *,
    batch_size: Optional[int],
    budget: float = 60.0,
    device: str = "auto",
    collate_fn: Optional[Callable[..., Any]] = None,
    model: Any = None,
    step: Optional[Callable[..., Any]] = None,
    max_workers: Optional[int] = None,
    progress: Optional[ProgressFn] = None,
    sampler: Any = None,
    batch_sampler: Any = None,
) -> tuple[dict[str, Any], BenchResult]:
    """Tune `DataLoader(dataset, ...)` for this host: (DataLoader keyword arguments, BenchResult).

        from bootstrap.bench import tune_loader
        kwargs, report = tune_loader(dataset, batch_size=64, budget=60, device="cuda")
        loader = DataLoader(dataset, batch_size=64, shuffle=True, **kwargs)

    The keyword arguments are num_workers, pin_memory and, with workers, prefetch_factor and
    persistent_workers. `batch_size` None: the dataset yields whole batches. `sampler`, `batch_sampler`,
    `model` (an nn.Module, copied, or a factory) and `step(model, batch, device) -> loss or None` are as
    docs/benchmark.md describes. When the budget ran out before the tuner picked a configuration, the
    arguments are the fastest loader's it measured, else num_workers=0. A sample that fails, or a run
    stuck well past its budget, raises InputError; Ctrl-C raises KeyboardInterrupt.
    Shell equivalent: `python -m bootstrap bench --dataset MODULE:FACTORY`.
    """
    from bootstrap.bench.user import UserWorkload

    refuse_in_bootstrapping_child()
    if progress is not None and not callable(progress):
        problem = f"is a {type(progress).__name__}, not a callable"
        raise InputError("tune_loader(progress=...)", problem, "pass a function taking one Progress event, or None")
    if batch_sampler is not None and batch_size is not None:
        problem = "does not apply with batch_sampler=..., which makes the batches"
        raise InputError("tune_loader(batch_size=...)", problem, "pass batch_size=None")
    if batch_size is not None:
        workload = WorkloadSpec(batch_size=batch_size)
    else:
        workload = WorkloadSpec(batched=batch_sampler is None)
    user = UserWorkload(
        dataset, collate=collate_fn, model=model, step=step, sampler=sampler, batch_sampler=batch_sampler
    )
    options = BenchOptions(workload=workload, budget_s=budget, device=device, max_workers=max_workers, user=user)
    result = run_bench(options, progress)
    if result.partial:  # the CLI reports what was measured; a script stopped with Ctrl-C stops
        raise KeyboardInterrupt
    loaders = [m for m in result.measurements if m.phase in ("naive", "tune", "tuned") and m.config is not None]
    fastest = max(loaders, key=lambda m: m.samples_per_s).config if loaders else None
    return (result.best or fastest or LoaderConfig()).dataloader_kwargs(), result


def refuse_in_bootstrapping_child() -> None:
    """Refuse a call made while this process, a worker started by spawn or forkserver, imports the main
    script (as `__mp_main__`): a script calling tune_loader at module level would run a second bench
    inside every worker. multiprocessing marks that import with `_inheriting`, the flag behind its own
    "An attempt has been made to start a new process before ... bootstrapping phase"."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        problem = (
            "called while a DataLoader worker (started by spawn or forkserver) imports the main script: "
            "it would run a second bench inside the worker"
        )
        raise InputError("tune_loader", problem, 'put the call under `if __name__ == "__main__":`')
