"""One measurement of a loader config inside a run: its model, its window plan, its window.

Every phase that times a DataLoader goes through `measure_loader`: it sizes
the window to what the phase's deadline leaves (never past the run's end),
builds the loader, and turns workers that died into a recorded failure of
that config instead of the end of the run.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Optional, Tuple

from bootstrap.bench.budget import FLOOR_STEPS, MIN_WINDOW_BATCHES
from bootstrap.bench.config import option_name
from bootstrap.bench.device import NoParameters, NotALoss, StepFailed, Trainer
from bootstrap.bench.results import LoaderConfig, Measurement
from bootstrap.bench.state import LoaderFailure, RunState
from bootstrap.bench.stream import WORKER_EXITED, BatchStream, make_loader, sample_failure, worker_failure
from bootstrap.bench.user import SAMPLE_FIX
from bootstrap.bench.window import WindowPlan, measure_loader_only, run_window
from bootstrap.errors import InputError

BASE_PLAN = WindowPlan()


def trainer_for(state: RunState, config: LoaderConfig) -> Trainer:
    """The model for `config`'s step settings (AMP, channels_last), built once and reused."""
    key = (config.amp_dtype, config.channels_last)
    if key not in state.trainers:
        trainer = Trainer(
            state.model_name,
            state.workload.num_classes,
            state.device,
            replace(LoaderConfig(), amp_dtype=config.amp_dtype, channels_last=config.channels_last),
            step_s=state.workload.step_ms / 1000.0,
            model_factory=getattr(state.user_parts, "model_factory", None),
            step_fn=getattr(state.user_parts, "step_fn", None),
            user_code=state.user_parts is not None,
        )
        state.trainers[key] = trainer
        # The first step of a fresh model pays for lazy initialisation (CUDA context and modules, autograd,
        # cuDNN autotune, which is slow on a cold GPU); the second is what budgets are priced with
        # until the ceiling is measured.
        trainer.step(state.sample_batch)
        state.device.sync()
        started = time.perf_counter()
        trainer.step(state.sample_batch)
        state.device.sync()
        if state.costs is not None and not state.costs.step_s:
            state.costs = replace(state.costs, step_s=time.perf_counter() - started)
    trainer = state.trainers[key]
    trainer.config = replace(trainer.config, non_blocking=config.non_blocking)
    return trainer


def window_plan(window_s: float) -> WindowPlan:
    # Workers started together deliver in bursts of num_workers batches; a window several batch
    # latencies long (`min_window_s`) bounds that error, a longer warm-up does not.
    return BASE_PLAN.scaled(max(window_s, 0.05))


def fit_steps(plan: WindowPlan, period_s: float) -> WindowPlan:
    """A plan whose step minimums fit its seconds at `period_s` a step: with slow steps, 100 steps
    (bench_method.md) would stretch each window to `max_factor` x its length and past its budget."""
    if period_s <= 0:
        return plan
    return replace(
        plan,
        min_steps=max(plan.floor_steps, min(plan.min_steps, int(plan.window_s / period_s))),
        warmup_steps=max(1, min(plan.warmup_steps, int(plan.warmup_s / period_s))),
    )


def min_window_s(state: RunState, config: Optional[LoaderConfig]) -> float:
    """Workers started together deliver in bursts, one per batch latency (batch x l): a window of
    four latencies bounds that error to about a quarter of a burst. 0 for the main process alone."""
    if config is None or not config.num_workers or state.costs is None:
        return 0.0
    return MIN_WINDOW_BATCHES * state.costs.batch_s


def startup_guess_s(state: RunState, workers: int = 0) -> float:
    """Seconds a measurement costs beyond its window: the slowest first batch seen so far, and at least
    the first batch of `workers` workers as the costs price it (`Costs.startup_for`)."""
    firsts = [m.first_batch_s for m in state.measurements if m.first_batch_s is not None]
    priced = state.costs.batch_s + state.costs.startup_for(workers) if state.costs is not None else 0.0
    return max([0.1, priced] + firsts)


def _loader_plan(
    state: RunState, config: LoaderConfig, window_s: float, deadline: float, with_step: bool, stretch: bool = True
) -> Tuple[WindowPlan, float]:
    """(plan, deadline) for one loader measurement. It may run for its least (budget.Costs.least_s)
    even past the phase's deadline (whoever started it checked that it fits the budget), never past
    the run's end. When its first batch, warm-up and window would end past that, the warm-up shrinks
    to the burst of batches already loaded and the window to the time left: slow batches must not
    carry a measurement far past the budget. Without `stretch` (costs still a guess) the window keeps
    to the phase's deadline once it has its floor of steps. The warm-up always drains a batch of each
    worker: the window starts once every worker has started (start-up is the first batch's, apart)."""
    costs, workers = state.costs, config.num_workers
    now = time.perf_counter()
    if not stretch:
        return replace(
            fit_steps(window_plan(window_s), 0.0),
            warmup_steps=1 + workers,
            warmup_s=0.0,
            min_steps=FLOOR_STEPS,
            drain_steps=1 + workers,
        ), min(state.run_deadline, deadline)
    deadline = min(state.run_deadline, max(deadline, now + costs.least_s(workers, with_step)))
    period_s = costs.period_s(workers, with_step)
    plan = replace(
        fit_steps(window_plan(max(window_s, min_window_s(state, config))), period_s), drain_steps=1 + workers
    )
    first_s = costs.batch_s + costs.startup_for(workers)
    expected_s = (
        first_s + max(plan.warmup_s, plan.warmup_steps * period_s) + max(plan.window_s, plan.min_steps * period_s)
    )
    if now + expected_s <= deadline:
        return plan, deadline
    window = max(costs.window_s(workers, with_step), deadline - now - first_s - costs.warm_s(workers, with_step))
    return replace(plan, warmup_steps=1 + workers, warmup_s=0.0, window_s=window, min_steps=FLOOR_STEPS), deadline


def stream_counter(state: RunState, stream: Any) -> Optional[Callable[[Any], int]]:
    """How a window counts the samples of the batches `stream` (a BatchStream, or the ceiling's turns)
    gives: what its `samples` says the last one holds (a batch sampler's list), else `state.samples_in`;
    None (the batch size) for batches the DataLoader sized."""
    fallback = state.samples_in
    if fallback is None:
        return None
    return lambda batch: stream.samples if stream.samples is not None else fallback(batch)


def measure_loader(
    state: RunState,
    config: LoaderConfig,
    window_s: float,
    deadline: float,
    phase: str,
    with_step: bool,
    stretch: bool = True,
    keep: Optional[Callable[[Any, Optional[int]], Any]] = None,
) -> Optional[Measurement]:
    """Build a loader with `config`, warm up, time one window (with or without the training step); `keep`
    is handed each batch and what it holds (`BatchStream.samples`), and returns the batch.

    None when its workers died (out of /dev/shm, killed): that config failed, the run goes on.
    """
    spec = state.workload
    if spec.cold_cache:
        from bootstrap.bench.workloads import drop_page_cache

        drop_page_cache(state.store)
    stream = None
    try:
        stream = BatchStream(
            make_loader(
                state.dataset,
                spec.loader_batch_size,
                config,
                seed=spec.seed,
                collate_fn=state.collate_fn,
                sampling=state.sampling,
            )
        )
        plan, deadline = _loader_plan(state, config, window_s, deadline, with_step, stretch)
        state.costs = state.costs.learn_startup(config.num_workers, stream.first_batch_s)
        take = (lambda: next(stream)) if keep is None else (lambda: keep(next(stream), stream.samples))
        if with_step:
            trainer = trainer_for(state, config)
            measured = run_window(
                take,
                trainer.step,
                state.device,
                plan,
                deadline,
                phase=phase,
                label=config.label,
                config=config,
                batch_size=spec.batch_size,
                clock_zero=state.clock_zero,
                counted=stream_counter(state, stream),
                first_batch_s=stream.first_batch_s,
            )
        else:
            measured = measure_loader_only(
                take,
                plan,
                deadline,
                phase=phase,
                label=f"loader {config.label}",
                config=config,
                batch_size=spec.batch_size,
                clock_zero=state.clock_zero,
                counted=stream_counter(state, stream),
                first_batch_s=stream.first_batch_s,
            )
    except Exception as exc:  # noqa: BLE001 (the user's samples may raise anything: see `loader_failed`)
        loader_failed(state, phase, config, exc, stream)
        return None
    except BaseException:
        stop_workers(stream)
        raise
    finally:
        if stream is not None:
            stream.close()
    return state.record(measured)


def stop_workers(stream: Optional[BatchStream]) -> None:
    """Ctrl-C or a stalled run: terminate the workers now, whatever they are doing. A graceful shutdown
    waits out a timeout for each worker stuck in a sample."""
    if stream is not None:
        stream.close(kill=True)


def loader_failed(
    state: RunState, phase: str, config: LoaderConfig, exc: Exception, stream: Optional[BatchStream]
) -> None:
    """What `exc`, raised while a loader of `config` ran, means for the run; returns only when it is a
    result about that config (its workers died: `record_worker_failure`), else raises.

    A sample of the user's dataset that fails to load (or collate) in the middle of the run is one line
    naming the dataset, not a traceback: bench reads every sample, in shuffled order, so the first batch
    passing does not mean the rest will. The built-in workload's errors are bench's own: re-raised.
    What the training step raised (`StepFailed`: it runs in this process, between the loader's batches)
    is the step's, whatever its type: one line naming the step."""
    stop_workers(stream)
    if isinstance(exc, StepFailed):
        raise step_failed(state, exc, f"while bench measured {config.label}") from None
    why = None
    if state.user_parts is not None and not isinstance(exc, InputError):
        why = sample_failure(exc, config.num_workers)
    if why is None:
        if not isinstance(exc, RuntimeError) or not config.num_workers:
            raise exc
        record_worker_failure(state, phase, config, exc)
        return
    if why.startswith(WORKER_EXITED):  # the worker's own stderr, above, says why; the hint names the likely causes
        raise InputError(dataset_where(state), f"{why}, while bench measured {config.label}") from None
    raise InputError(
        dataset_where(state), f"a sample failed to load while bench measured {config.label}: {why}", SAMPLE_FIX
    ) from None


def dataset_where(state: RunState) -> str:
    """How a message names the user's dataset: the --dataset reference, else 'dataset' (tune_loader)."""
    dataset = state.options.user.dataset
    return f"--dataset {dataset}" if isinstance(dataset, str) else "dataset"


def step_where(state: RunState) -> str:
    """How a message names the code the training step runs: the user's step, else their model, else the
    built-in step on their dataset."""
    user = state.options.user
    if user.step is not None:
        return f"--step {user.step}" if isinstance(user.step, str) else "step"
    if user.model is not None:
        return f"--model {user.model}" if isinstance(user.model, str) else "model"
    on = f" on --dataset {user.dataset}" if isinstance(user.dataset, str) else ""
    return f"the built-in step ({state.model_name}){on}"


def step_failed(state: RunState, exc: StepFailed, during: str) -> InputError:
    """The one line for a training step that raised in the middle of the run (`during`: where it was)."""
    from bootstrap.bench.user import describe_error

    user = state.options.user
    fix = step_error_fix(state, exc.error)
    if not fix and user.step is not None:
        fix = "the step runs in this process on every batch the loader gives: fix it for this batch"
    elif not fix and user.model is not None:
        fix = "the built-in step runs the model on every batch the loader gives: fix the model for this batch"
    elif not fix:
        fix = builtin_step_fix(state, exc.batch)
    return InputError(step_where(state), f"raised {describe_error(exc.error)} {during}", fix)


# What backward() says of a loss that is no scalar, or one that no parameter's computation made.
_NO_LOSS_SIGNS = ("grad can be implicitly created only for scalar outputs", "does not require grad")


def step_error_fix(state: RunState, error: BaseException) -> str:
    """The fix for what the training step raised, where its kind says it whatever the batch: a step that
    returned no scalar loss tensor, a model without parameters, memory that ran out; '' otherwise."""
    import torch

    script = state.options.from_script
    own_step = "step=" if script else "a --step"
    if isinstance(error, NoParameters):
        return (
            f"bench's backward pass and SGD update have nothing to train: give a model with parameters, or "
            f"{own_step} that updates the model itself and returns None"
        )
    if state.options.user.step is not None and (
        isinstance(error, NotALoss) or any(sign in str(error) for sign in _NO_LOSS_SIGNS)
    ):
        return (
            "return the loss as a scalar tensor computed from the model's parameters (bench calls backward() "
            "on it, then takes an SGD step), or None when the step updates the model itself"
        )
    out_of_memory = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    if isinstance(error, (MemoryError, out_of_memory)):
        if state.samples_in is None:  # batches the DataLoader sizes
            return f"the step ran out of memory: give a smaller {option_name('batch_size', script)}"
        return "the step ran out of memory: make the dataset's (or the batch sampler's) batches smaller"
    return ""


def builtin_step_fix(state: RunState, batch: Any) -> str:
    """What the built-in step needs that `batch` (the user's) may lack, from what it holds: labels that
    are no tensor (strings) need an index, not a smaller number."""
    import torch

    script = state.options.from_script
    own_step = "or pass step=" if script else "or give --step MODULE:FN"
    if not isinstance(batch, (list, tuple)) or len(batch) != 2:
        held = (
            f"{type(batch).__name__} of {len(batch)} items"
            if isinstance(batch, (list, tuple))
            else type(batch).__name__
        )
        return f"the built-in step takes (images, labels) batches, not a {held}; {own_step}"
    images, labels = batch
    classes = state.workload.num_classes
    if not isinstance(labels, torch.Tensor):
        held = type(labels).__name__
        if isinstance(labels, (list, tuple)) and labels:
            held += f" of {type(labels[0]).__name__}"
        return (
            f"the built-in step takes labels as a tensor of class indices below {classes}, not a {held}: "
            f"return each label as an int index from __getitem__, {own_step}"
        )
    if not isinstance(images, torch.Tensor):
        return f"the built-in step takes images as one tensor N x 3 x H x W, not a {type(images).__name__}; {own_step}"
    more = "" if script else " (more: `options: {num_classes: N}` in a --config file)"
    return (
        f"the built-in step takes (images, labels) batches: images N x 3 x H x W, labels below {classes}{more}; "
        f"{own_step}"
    )


def record_worker_failure(state: RunState, phase: str, config: LoaderConfig, exc: RuntimeError) -> None:
    """A loader whose workers died is a result about that config, not the end of the run."""
    why = worker_failure(exc)
    if why == "terminated":  # the job is being stopped (Slurm signals every process): stop like Ctrl-C
        raise KeyboardInterrupt from exc
    state.failures.append(LoaderFailure(phase, config, why))
    state.say(phase, f"{config.label}: failed: {why}")
