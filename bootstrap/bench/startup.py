"""Setting a run up (device, host facts, the workload, the sampler) and cleaning up after it.

`set_up` runs before the first phase and inside the budget: the phases are
priced from what it measures (the sample batch's decode time). `clean_up`
undoes what set-up changed (torch settings, the sample files) and stops the
sampler, whether the run finished, was cut short or failed.
"""

from __future__ import annotations

import contextlib
import platform
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, List, Optional

from bootstrap.bench.budget import Costs, startup_guess_s
from bootstrap.bench.config import option_name
from bootstrap.bench.device import Device, mps_available
from bootstrap.bench.host import host_busy_pct, load_average
from bootstrap.bench.results import LoaderConfig
from bootstrap.bench.sampler import UtilSampler
from bootstrap.bench.state import RunState
from bootstrap.bench.stream import BatchStream, make_loader
from bootstrap.errors import InputError
from bootstrap.fsutil import MIB

NOISY_HOST_PCT = 20.0


def set_up(state: RunState) -> None:
    """Device, host facts, the workload and its sample batch, the sampler, and what the report says of them."""
    # Before this process does anything heavy: how busy is the host already (other jobs)?
    state.metrics["host_busy_before_pct"] = host_busy_pct(0.25)
    import torch

    from bootstrap.bench.workloads import SyntheticImages, build_store, resolve_model_name
    from bootstrap.compat.host import collect_host_facts

    options, spec = state.options, state.workload
    _check_device(torch, options.device, options.from_script)
    state.device = Device(options.device)
    state.host = collect_host_facts()
    state.cpus = options.cpus or state.host.cpus_usable or 1
    state.model_name, model_reason = resolve_model_name(spec.model, state.device.type)
    if not state.device.is_accelerator:
        # Before the first batch and step are timed: they price the phases, which run with these threads.
        _share_cpus_with_workers(state, torch)
    if options.user is not None:
        model_reason = _set_up_user(state, model_reason)
    else:
        state.store = _build_store(state, build_store)
        state.dataset = SyntheticImages(state.store, spec)
        _sample_batch(state, SyntheticImages(state.store, replace(spec, cpu_ms=0.0, io_ms=0.0)))
    uuid, name = None, "Apple MPS" if state.device.is_mps else "CPU"
    index = state.device.torch_device.index if state.is_cuda else None
    if state.is_cuda:
        state.saved_cudnn_benchmark = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
        name = torch.cuda.get_device_name(state.device.torch_device)
        uuid = _cuda_uuid(torch, index)
    state.sampler = UtilSampler(
        nvml_module=options.nvml_module,
        device_index=index,
        device_uuid=uuid,
        interval_s=options.sampler_interval_s,
        clock_zero=state.clock_zero,
    ).start()
    host = state.host
    state.device_info = {
        "type": state.device.type,
        "device_reason": state.device.reason,
        "name": name,
        "index": state.device.torch_device.index,
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
    _notes_on_the_host(state)


def _check_device(torch: Any, device: str, script: bool = False) -> None:
    """One line, before anything is built, for a device this torch cannot use (named as the CLI or
    `tune_loader` spells it)."""
    where = option_name("device", script, where=True)
    cpu, auto = ("device='cpu'", "device='auto'") if script else ("--device cpu", "--device auto")
    if device == "mps" and not mps_available(torch):
        raise InputError(
            where,
            f"mps: Apple MPS is not available to this torch ({torch.__version__})",
            f"MPS needs Apple silicon and macOS 12.3+; use {cpu} or {auto}",
        )
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(
            where,
            f"{device}: CUDA is not available to this torch ({torch.__version__})",
            f"use {cpu}, or install a CUDA build of torch",
        )
    index = device.partition(":")[2]  # cuda:N, validated as digits
    gpus = torch.cuda.device_count() if index else 0
    if index and int(index) >= gpus:
        raise InputError(
            where,
            f"{device}: this torch sees {gpus} GPU{'s' if gpus != 1 else ''} "
            f"(cuda:0{f' .. cuda:{gpus - 1}' if gpus > 1 else ''})",
            "pick one of those; CUDA_VISIBLE_DEVICES renumbers them from 0",
        )


def _share_cpus_with_workers(state: RunState, torch: Any) -> None:
    # The step's OpenMP threads spin while they wait; on cores the loader workers also use, a step
    # can take 30x its time. Give the step half the CPUs and leave the rest to the workers.
    state.saved_torch_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, state.cpus // 2))
    state.notes.append(
        f"host run (CPU): the training step uses {torch.get_num_threads()} torch thread(s) "
        f"(torch.set_num_threads) and the loader workers share the rest of the {state.cpus} CPUs; "
        "the two contend for cores, so the CPU ceiling and tuned rate are host sizing figures, "
        "not a GPU's"
    )


def _notes_on_the_host(state: RunState) -> None:
    busy = state.metrics["host_busy_before_pct"]
    if busy is not None and busy >= NOISY_HOST_PCT:
        others = " (the other local ranks starting up count too)" if state.rank.get("local_world_size", 1) > 1 else ""
        state.notes.append(
            f"the host was {busy:.0f}% busy before the bench started (other processes{others}): "
            "CPU-bound figures are contended"
        )
    # The load average counts the whole machine's runnable tasks, so it is held against all its CPUs.
    load, cpus = load_average(), state.host.cpus_total or state.cpus
    if load is not None and load > cpus:
        state.metrics["load_average"] = load
        state.notes.append(
            f"the load average ({load:.1f}) is above the machine's {cpus} CPUs: processes queue for "
            "the cores, so the rates, and the workers sized from them, fit this load, not a quiet "
            "host"
        )
    if state.workload.step_ms:
        state.notes.append(f"step_ms={state.workload.step_ms:g}: each step sleeps that long (a stand-in device)")


def _sample_batch(state: RunState, decode_only: Any) -> None:
    """The batch the ceiling keeps on the device, made without the workload's extra costs (they do not
    change its pixels); its decode time plus those costs prices the first measurements."""
    spec = state.workload
    stream = BatchStream(make_loader(decode_only, spec.batch_size, LoaderConfig(), seed=spec.seed))
    images, labels = next(stream)
    # The first batch pays for the decoder's own start-up many times over a sample's cost; the second
    # prices the loader-only window, which a too-high guess would stretch past its share of the budget.
    started = time.perf_counter()
    next(stream)
    stream.close()
    decode_s = (time.perf_counter() - started) / spec.batch_size
    extra_cpu_s, extra_io_s = spec.cpu_ms / 1000.0, spec.io_ms / 1000.0
    state.sample_batch = (images, labels)
    state.costs = Costs(
        spec.batch_size,
        decode_s + extra_cpu_s + extra_io_s,
        decode_s + extra_cpu_s,
        state.cpus,
        startup_s=startup_guess_s(state.host.start_method),
    )
    state.batch_bytes = int(images.numel() * images.element_size() + labels.numel() * labels.element_size())


def _set_up_user(state: RunState, model_reason: str) -> str:
    """The user's dataset, collate, model and step (`parts.resolve`: one batch made here, so a dataset that
    cannot feed the run fails now, in one line), then one training step on that batch. Returns what the
    report says of the model."""
    from bootstrap.bench.batch import own_batch_counter, tensors
    from bootstrap.bench.parts import resolve
    from bootstrap.bench.user import is_stream

    user, spec = state.options.user, state.workload
    parts = resolve(user, spec.loader_batch_size, spec.seed)
    state.user_parts, state.dataset, state.collate_fn = parts, parts.dataset, parts.collate_fn
    own = spec.batched or parts.sampling.batch_sampler is not None  # batches the DataLoader did not size
    state.samples_in = own_batch_counter(parts.samples) if own else None
    state.notes.extend(_counting_notes(spec, parts, own))
    if own:
        state.options = replace(state.options, workload=replace(spec, batch_size=parts.samples))
    if is_stream(parts.dataset):
        state.notes.append(
            "the dataset is a stream (IterableDataset), read in its own order: each DataLoader "
            "worker runs its own __iter__, so unless it splits itself by "
            "torch.utils.data.get_worker_info(), N workers yield every sample N times, and the "
            "rates count each copy"
        )
    state.sample_batch = parts.first_batch
    decode_s = parts.batch_s / spec.batch_size
    state.costs = Costs(
        spec.batch_size, decode_s, decode_s, state.cpus, startup_s=startup_guess_s(state.host.start_method)
    )
    state.batch_bytes = sum(t.numel() * t.element_size() for t in tensors(parts.first_batch))
    if parts.model_factory is not None:
        state.model_name = user.model if isinstance(user.model, str) else type(user.model).__name__
        model_reason = "the user's model"
    _first_user_step(state)
    return model_reason


def _counting_notes(spec: Any, parts: Any, own: bool) -> List[str]:
    """What the report says of how it counts samples, where it is not simply --batch-size a batch (`own`:
    the DataLoader did not size the batches)."""
    from bootstrap.bench.batch import shared_first_dim

    shared, dims = shared_first_dim(parts.first_batch)
    if not own:
        if shared is not None and len(dims) >= 2 and shared < spec.batch_size:
            return [
                f"the first batch held {shared} of its {spec.batch_size} samples (a collate function that drops "
                f"what failed to load?): the rates count {spec.batch_size} a batch, more than were delivered"
            ]
        return []
    made = (
        "the dataset yields whole batches (DataLoader batch_size=None)"
        if spec.batched
        else "the batch sampler makes the batches"
    )
    if parts.sampling.batch_sampler is not None:
        how = (
            "its tensors share no first dimension (detection, time-major)"
            if shared is None
            else f"{parts.samples} in the first"
        )
        return [f"{made}, each counted by the list of indices it was made from ({how})"]
    return [f"{made}, each counted by the first dimension its tensors share ({parts.samples} in the first)"]


def _first_user_step(state: RunState) -> None:
    """Build the model and run one step on the first batch: a batch the model or step cannot take is
    one line naming the step, not a traceback from the middle of the run."""
    from bootstrap.bench.device import StepFailed
    from bootstrap.bench.trials import builtin_step_fix, step_error_fix, step_where, trainer_for
    from bootstrap.bench.user import describe_error, passes_through

    user = state.options.user
    try:
        trainer_for(state, LoaderConfig())
    except InputError:
        raise
    except BaseException as exc:  # noqa: BLE001 (the user's model or step, or the built-in step on their batch)
        if passes_through(exc):
            raise
        if isinstance(exc, StepFailed):
            exc = exc.error
        fix = step_error_fix(state, exc)
        if not fix and user.step is None:
            fix = builtin_step_fix(state, state.sample_batch)
        raise InputError(step_where(state), f"failed on the first batch: {describe_error(exc)}", fix) from None


def _build_store(state: RunState, build_store: Callable[..., Any]) -> Any:
    """The samples in their store; files go to a fresh directory (under --data-dir, else the system
    temp dir) that the clean-up removes, so nothing of the user's there is overwritten or left."""
    spec, data_dir = state.workload, state.options.data_dir
    if spec.storage == "memory":
        return build_store(spec, None)
    where = str(data_dir or tempfile.gettempdir())
    try:
        if data_dir is not None:
            missing = [d for d in (data_dir, *data_dir.parents) if not d.exists()]
            data_dir.mkdir(parents=True, exist_ok=True)
            state.made_dir = missing[-1] if missing else None
        state.sample_dir = tempfile.mkdtemp(prefix="bootstrap-bench-", dir=data_dir)
        return build_store(spec, Path(state.sample_dir))
    except OSError as exc:
        flag = "--data-dir" if data_dir is not None else "the temporary directory (TMPDIR)"
        raise InputError(
            flag,
            f"cannot write the sample files (--storage {spec.storage}) in {where}: {exc.strerror or exc}",
            "give --data-dir a directory with room to write",
        ) from None


def _cuda_uuid(torch: Any, index: Optional[int]) -> Optional[str]:
    """NVML's spelling of the GPU's UUID ('GPU-...'), from torch's device properties where it has them."""
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except (AttributeError, RuntimeError, AssertionError):
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def clean_up(state: RunState) -> None:
    """Stop the sampler, restore torch's settings, drop the models, remove the sample files."""
    if state.sampler is not None:
        state.sampler_report = state.sampler.stop()
        state.sampler = None
    if state.saved_cudnn_benchmark is not None:
        import torch

        torch.backends.cudnn.benchmark = state.saved_cudnn_benchmark
    if state.saved_torch_threads is not None:
        import torch

        torch.set_num_threads(state.saved_torch_threads)
    state.trainers.clear()
    if state.sample_dir:
        shutil.rmtree(state.sample_dir, ignore_errors=True)
    if state.made_dir is not None:  # what the run created for --data-dir goes too, unless something else is in it
        made = state.options.data_dir
        for directory in (made, *made.parents):
            with contextlib.suppress(OSError):
                directory.rmdir()
            if directory == state.made_dir:
                break
    state.elapsed_at_end_s = state.elapsed_s()
