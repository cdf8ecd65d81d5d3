"""The phases before the search: host facts, device micro-benchmarks, the loader alone, the ceiling, naive.

Each is `phase(state, deadline) -> note` (see `schedule`). The loader
phase measures `num_workers=0` alone: the CPU and wall seconds per sample
that price every later measurement and predict the worker count, and, for
the user's dataset, keeps the first few batches it loads. The ceiling is
the training step on those batches in turn (a batch of another shape costs
another step: padded sequences, images of several sizes), already on the
device (fp32, and bf16 + channels_last where the GPU supports them, kept
when faster), with, on CUDA, a transfer-inclusive variant. Naive is
`num_workers=0`, no pinning, blocking copies, with the ceiling's step.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from typing import Any, Callable, Optional

from bootstrap.bench.batch import map_tensors, shared_first_dim
from bootstrap.bench.device import h2d_bandwidth, matmul_tflops
from bootstrap.bench.host import run_queue_s
from bootstrap.bench.results import LoaderConfig, Measurement
from bootstrap.bench.state import RunState
from bootstrap.bench.trials import measure_loader, stream_counter, trainer_for, window_plan
from bootstrap.bench.window import run_window


def checks(state: RunState, _deadline: float) -> str:
    missing = "; ".join(state.host.missing)
    return f"host facts collected{': ' + missing if missing else ''}"


def micro(state: RunState, deadline: float) -> str:
    """Matmul TFLOP/s, and on CUDA host<->device bandwidth with the PCIe link read while it is busy."""
    if not state.affords("matmul and copies", 1.0 if state.is_cuda else 0.2):
        return state.skipped("the matmul")
    tflops, how = matmul_tflops(state.device, deadline)
    state.metrics["matmul_tflops"] = tflops
    if state.is_cuda and state.sampler is not None:
        copies, state.pcie = h2d_bandwidth(state.device, during=state.sampler.pcie_link)
        state.metrics.update(copies)
        state.device_info["pcie"] = list(state.pcie) if state.pcie else None
        import torch

        torch.cuda.reset_peak_memory_stats(state.device.torch_device)
    return f"matmul {how}"


def loader(state: RunState, deadline: float) -> str:
    if not state.affords("loader w=0", state.costs.least_s(0, with_step=False)):
        return state.skipped("the loader-only window")
    window_s = (deadline - time.perf_counter()) / 1.5
    # The costs are still set-up's guess from one batch, often several times the real cost: the window
    # keeps to the phase's slice rather than to what that guess says a window needs.
    # The synthetic batches all cost the same step: the ceiling keeps set-up's one.
    keep = None if state.options.user is None else (lambda batch, samples: _keep_for_ceiling(state, batch, samples))
    queued, began = run_queue_s(), time.perf_counter()
    measured = measure_loader(
        state, LoaderConfig(), window_s, deadline, "loader", with_step=False, stretch=False, keep=keep
    )
    samples = max(1, measured.samples)  # a collate that drops every sample it is given yields empty batches
    cpu_s, wall_s = measured.cpu_s / samples, measured.seconds / samples
    # On a busy host the loading thread also waits for a CPU: that wait is contention, not I/O, and
    # counted as I/O it would have the tuner add workers that only queue for the same cores.
    queue_share = _run_queue_share(queued, time.perf_counter() - began)
    state.metrics.update(
        loader_only_samples_per_s=measured.samples_per_s,
        cpu_s_per_sample=cpu_s,
        wall_s_per_sample=wall_s,
        run_queue_s_per_sample=wall_s * (queue_share or 0.0),
        loader_run_queue_pct=None if queue_share is None else 100.0 * queue_share,
    )
    state.costs = replace(
        state.costs, wall_s_per_sample=max(cpu_s, wall_s * (1.0 - (queue_share or 0.0))), cpu_s_per_sample=cpu_s
    )
    if queue_share is not None and queue_share >= RUN_QUEUE_NOTE:
        state.notes.append(
            f"the loader phase waited {queue_share:.0%} of its time for a CPU (run queue, "
            "/proc/thread-self/schedstat): the host is busy; that wait is not counted as I/O, and "
            "the rates are contended"
        )
    queue = f" ({queue_share:.0%} waiting for a CPU)" if queue_share else ""
    return f"c = {cpu_s * 1000:.2f} ms CPU, l = {wall_s * 1000:.2f} ms wall per sample{queue}"


RUN_QUEUE_NOTE = 0.10  # of the loader phase's time waiting for a CPU: the report says the host is busy


def _run_queue_share(before: Optional[float], elapsed_s: float) -> Optional[float]:
    """The share of `elapsed_s` this thread spent waiting on a run queue since `before` (`run_queue_s`)."""
    after = run_queue_s()
    if before is None or after is None or elapsed_s <= 0:
        return None
    return min(0.95, max(0.0, (after - before) / elapsed_s))


def ceiling_least_s(state: RunState) -> float:
    """A warm-up and five resident steps; before a step was timed, a guess at building the model and
    its first step."""
    if state.costs is None:
        return 0.0
    if state.costs.step_s:
        return 10 * state.costs.step_s
    return 3.0 if state.is_cuda else 1.0


def ceiling(state: RunState, deadline: float) -> str:
    if not state.affords("the model's first step", ceiling_least_s(state)):
        return state.skipped("building the model")
    configs = [LoaderConfig()]
    if state.is_cuda:
        import torch

        if state.user_parts is not None:
            state.notes.append(
                "the user's workload: its step is measured as given (AMP and channels_last are not tried)"
            )
        elif torch.cuda.is_bf16_supported():
            configs.append(LoaderConfig(amp_dtype="bfloat16", channels_last=True))
        else:
            state.notes.append("bf16 autocast not supported on this GPU: AMP not tuned")
    slots = len(configs) + (1 if state.is_cuda else 0)
    results = []
    for config in configs:
        results.append(_resident(state, config, slots, deadline))
        slots -= 1
    base = results[0]
    if base is None:
        return state.skipped("the ceiling")
    chosen = base
    if len(results) > 1 and results[1] is not None:
        amp = results[1]
        gain = amp.samples_per_s / base.samples_per_s - 1.0
        state.metrics["ceiling_amp_samples_per_s"] = amp.samples_per_s
        if gain > max(state.thresholds.noise_floor_min, 2 * max(base.cv, amp.cv)):
            chosen = amp
    state.metrics["ceiling_fp32_samples_per_s"] = base.samples_per_s
    state.step_config = chosen.config or LoaderConfig()
    state.ceiling = chosen
    state.costs = replace(state.costs, step_s=chosen.seconds / max(1, chosen.steps))
    state.metrics["ceiling_samples_per_s"] = chosen.samples_per_s
    state.metrics["step_cpu_s_per_sample"] = chosen.cpu_s / chosen.samples if chosen.samples else None
    copied = _with_copy(state, deadline) if state.is_cuda else None
    if copied is not None:
        state.metrics["ceiling_h2d_samples_per_s"] = copied.samples_per_s
    return f"step config {state.step_config.label}"


CEILING_BATCHES = 8  # the loader phase's first batches the ceiling steps on, in turn
CEILING_BYTES = 256 * 1024 * 1024  # at most this much of them (as loaded) held on the device


def _keep_for_ceiling(state: RunState, batch: Any, samples: Optional[int]) -> Any:
    room = min(CEILING_BATCHES, max(1, CEILING_BYTES // max(1, state.batch_bytes)))
    # An empty batch (a collate that dropped every sample it was given) has no step to price.
    if len(state.ceiling_batches) < room and shared_first_dim(batch)[0] != 0:
        state.ceiling_batches.append((batch, samples))
    return batch


class _Turns:
    """The ceiling's batches in turn, each made by `make` once, and what the batch last given holds
    (`samples`, as a BatchStream says it: `trials.stream_counter` counts them)."""

    def __init__(self, state: RunState, make: Callable[[Any], Any]) -> None:
        kept = state.ceiling_batches or [(state.sample_batch, None)]
        self._cycle = itertools.cycle([(make(batch), samples) for batch, samples in kept])
        self.samples: Optional[int] = None

    def __call__(self) -> Any:
        batch, self.samples = next(self._cycle)
        return batch


def _resident(state: RunState, config: LoaderConfig, slots: int, deadline: float) -> Optional[Measurement]:
    trainer = trainer_for(state, config)
    # A resident step is the fastest thing measured: five of them cost little and steady the figure.
    if not state.affords(f"ceiling {config.label}", 10 * state.costs.step_s):
        return None
    window_s = (deadline - time.perf_counter()) / (1.4 * slots)
    resident = _Turns(state, lambda batch: trainer.prepare(batch, non_blocking=False))
    plan = replace(window_plan(window_s), floor_steps=5, min_steps=max(5, window_plan(window_s).min_steps))
    # Each step gets its own containers of the resident tensors: a step that pops a key from its batch
    # dict (HF's `labels = batch.pop("labels")`) must find it again on the next turn.
    return state.record(
        run_window(
            lambda: map_tensors(lambda tensor: tensor, resident()),
            trainer.run,
            state.device,
            plan,
            deadline,
            phase="ceiling",
            label=f"ceiling {config.label}",
            config=config,
            batch_size=state.workload.batch_size,
            clock_zero=state.clock_zero,
            counted=stream_counter(state, resident),
        )
    )


def _with_copy(state: RunState, deadline: float) -> Optional[Measurement]:
    """Transfer-inclusive ceiling: a pinned host batch copied non_blocking every step."""
    config = replace(state.step_config, pin_memory=True, non_blocking=True)
    trainer = trainer_for(state, config)
    if not state.affords(f"ceiling+h2d {config.label}", 10 * state.costs.step_s):
        return None
    pinned = _Turns(state, lambda batch: map_tensors(lambda t: t.pin_memory(), batch))
    window_s = (deadline - time.perf_counter()) / 1.4
    return state.record(
        run_window(
            pinned,
            trainer.step,
            state.device,
            window_plan(window_s),
            deadline,
            phase="ceiling_h2d",
            label=f"ceiling+h2d {config.label}",
            config=config,
            batch_size=state.workload.batch_size,
            clock_zero=state.clock_zero,
            counted=stream_counter(state, pinned),
        )
    )


def naive(state: RunState, deadline: float) -> str:
    # The same training step as the ceiling (bench_method.md: "same training config"), so the
    # speedup over naive measures the loader settings alone.
    config = replace(state.step_config, num_workers=0, pin_memory=False, non_blocking=False, persistent_workers=False)
    if not state.affords(f"naive {config.label}", state.costs.least_s(0)):
        return state.skipped("the naive loader")
    window_s = (deadline - time.perf_counter()) / 1.5
    state.naive = measure_loader(state, config, window_s, deadline, "naive", with_step=True)
    state.metrics["naive_samples_per_s"] = state.naive.samples_per_s
    state.metrics["naive_host_wait_pct"] = state.naive.host_wait_pct
    return f"num_workers=0, pin_memory=False, non_blocking=False, step {config.label}"
