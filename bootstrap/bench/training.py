"""The training-step tuner behind `tune_training`: the largest micro-batch that fits in memory, the step's
rate over micro-batch x precision x memory format, the gradient accumulation that reaches the effective
batch, the checks that the recommendation trains as the user's own settings do, then the DataLoader for
the chosen step (docs/benchmark.md, "Tune the training step").

The decisions (`largest_fitting`, `grid_sizes`, `recommend`, `accumulation_plan`) are pure functions over
what was measured, so that they are tested without timing anything; `Workbench` does the measuring.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import numbers
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Generator, Iterator, Optional, Sequence

from bootstrap.bench.recipe import AUTOCAST_DTYPES, PRECISIONS, GridRow, TrainingAdvice
from bootstrap.bench.state import Progress, ProgressFn
from bootstrap.errors import InputError, excerpt
from bootstrap.report import Check, Status

FIXED_ADVICE: dict[str, Any] = {"num_workers": 4, "pin_memory": True, "prefetch_factor": 2}
# Cumulative shares of the budget: the search ends by the first, the grid by the second, the re-timing of
# its choice by the third, the checks by the fourth; the DataLoader has the rest.
SEARCH_END, GRID_END, CONFIRM_END, CHECKS_END = 0.15, 0.55, 0.65, 0.7
CONFIRM_ROUNDS = 2  # re-timings of each contender and of the user's own, in turns, besides the grid's
CONTENDERS = 3  # the grid's fastest rows re-timed against the user's own
GRID_SIZES = 4  # micro-batch sizes timed, besides the user's own: each is timed at every precision and layout
WARMUP_STEPS = 2  # the first steps pay for allocations and kernel selection
WINDOWS = 3  # the rate is the median of this many windows of timed steps
CHECK_STEPS = 4  # steps whose losses the precision check compares
CHECK_BATCH = 64  # samples a batch of the precision check holds at most: numerics, not speed
PREDICT_MARGIN = 1.25  # a size predicted this far over the limit is refused without running it
HOST_MEMORY_SHARE = 0.8  # of the available memory a CPU run may plan for, without memory_limit
MIN_LOADER_S = 15.0  # below this, the DataLoader keeps the fixed advice's safe default


@dataclass(frozen=True)
class TrainingOptions:
    """One tuning run (`tune_training`'s keywords; the command line builds the same). `precisions` None:
    every precision the device computes; the tolerances are relative."""

    effective_batch: int
    batch_size: Optional[int] = None  # the user's current micro-batch: the baseline never to be slower than
    budget_s: float = 120.0
    device: str = "auto"
    memory_limit: Optional[int] = None  # bytes a step may use; None: the GPU's own, or a share of the host's
    precisions: Optional[tuple[str, ...]] = None
    collate_fn: Optional[Callable[..., Any]] = None
    loss_tolerance: float = 0.05
    grad_tolerance: float = 1e-3
    min_gain: float = 0.03  # closer than this to the user's rate is within a busy host's noise
    tune_loader: bool = True
    seed: int = 0

    def validate(self) -> TrainingOptions:
        fix = "the samples one optimizer step sees in your recipe, e.g. effective_batch=256"
        _whole("effective_batch", self.effective_batch, fix)
        if self.batch_size is not None:
            _whole("batch_size", self.batch_size, "the batch size your DataLoader uses now, or None")
            if self.batch_size > self.effective_batch:
                problem = f"{self.batch_size} is above the effective batch, {self.effective_batch}, that it makes up"
                raise InputError(_at("batch_size"), problem, "give the micro-batch of the recipe you tune")
        if self.memory_limit is not None:
            _whole("memory_limit", self.memory_limit, "bytes a training step may use, e.g. 8 * 2**30")
        from bootstrap.bench.config import MAX_BUDGET_S

        budget = self.budget_s
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= MAX_BUDGET_S:
            problem = f"expected seconds in (0, {MAX_BUDGET_S:g}], got {excerpt(budget)}"
            raise InputError(_at("budget"), problem, "e.g. budget=120")
        if self.collate_fn is not None and not callable(self.collate_fn):
            problem = f"is a {type(self.collate_fn).__name__}, not a callable"
            raise InputError(_at("collate_fn"), problem, "pass the collate function your DataLoader uses, or None")
        for name in ("loss_tolerance", "grad_tolerance", "min_gain"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise InputError(_at(name), f"expected a number >= 0, got {excerpt(value)}")
        for precision in self.precisions or ():
            if precision not in PRECISIONS:
                raise InputError(_at("precisions"), f"unknown precision {excerpt(precision)}", "fp32, bf16 or fp16")
        return self


def _at(name: str) -> str:
    return f"tune_training({name}=...)"


def _whole(name: str, value: Any, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InputError(_at(name), f"expected a whole number >= 1, got {excerpt(value)}", fix)


# --------------------------------------------------------------------------- the pure decisions


@dataclass(frozen=True)
class Probe:
    """One micro-batch size tried for memory: its peak (estimated, measured or predicted) and the verdict."""

    size: int
    peak_bytes: Optional[int]
    fits: bool
    how: str  # measured | predicted | out of memory


def largest_fitting(
    probe: Callable[[int], Probe], cap: int, out_of_time: Callable[[], bool]
) -> tuple[int, list[Probe]]:
    """The largest size up to `cap` that `probe` says fits, by doubling then bisecting, and every probe
    made; 0 when not even one sample fits. Sizes start at 2 (a BatchNorm after a Linear cannot train on one
    sample), then 1 if 2 does not fit. `out_of_time` stops the search at the largest size found so far."""
    tried: list[Probe] = []

    def fits(size: int) -> bool:
        tried.append(probe(size))
        return tried[-1].fits

    good = min(2, cap)
    if not fits(good):
        if good == 1 or not fits(1):
            return 0, tried
        return 1, tried
    bad: Optional[int] = None
    while bad is None and good < cap and not out_of_time():
        size = min(2 * good, cap)
        good, bad = (size, None) if fits(size) else (good, size)
    while bad is not None and bad - good > 1 and not out_of_time():
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    return good, tried


def predicted_peak(measured: Sequence[tuple[int, int]], size: int) -> Optional[int]:
    """A step's peak at `size`, on the line through the two largest sizes measured (activations grow with
    the batch; parameters and optimizer state do not); None with fewer than two."""
    if len(measured) < 2:
        return None
    (s1, p1), (s2, p2) = sorted(measured)[-2:]
    slope = (p2 - p1) / (s2 - s1)
    return int(p2 + slope * (size - s2))


def grid_sizes(max_micro: int, effective: int, current: Optional[int], ceiling: Optional[int] = None) -> list[int]:
    """The micro-batch sizes to time: the largest that fits and divides the effective batch, the powers of
    two below it that divide it too (GRID_SIZES in all), and the user's own size where it is below
    `ceiling`, the smallest size the search did not find to fit (by default, the one past `max_micro`).
    One sample a step only where nothing larger fits, as the search does: BatchNorm cannot train on it,
    and no size is slower; where no larger size divides the effective batch, the largest that fits is
    timed instead, for `accumulation_plan` to round."""
    least = 1 if max_micro == 1 else 2
    divisors = [d for d in range(least, max_micro + 1) if effective % d == 0]
    top = divisors[-1] if divisors else max_micro
    powers = [p for p in (2**i for i in range(top.bit_length())) if least <= p < top and effective % p == 0]
    sizes = {top, *powers[-(GRID_SIZES - 1) :]}
    if current is not None and current < (ceiling or max_micro + 1):
        sizes.add(current)
    return sorted(sizes)


def recommend(
    grid: Sequence[GridRow],
    baseline: tuple[int, str, bool],
    min_gain: float,
    precisions: Optional[Sequence[str]] = None,
) -> Optional[GridRow]:
    """The fastest row that fit (of `precisions`, if given), unless it does not beat the user's own
    (`baseline`: their micro-batch, fp32, contiguous) by more than `min_gain`: then theirs. Among rows
    within `min_gain` of the fastest, a difference the host's noise could make, the least change wins: fp32,
    then contiguous, then the largest micro-batch (the fewest accumulation steps). None when no row was timed."""
    rows = [r for r in grid if r.fits and r.samples_per_s and (precisions is None or r.precision in precisions)]
    if not rows:
        return None
    fastest = max(r.samples_per_s or 0.0 for r in rows)
    close = [r for r in rows if (r.samples_per_s or 0.0) * (1.0 + min_gain) >= fastest]
    best = min(close, key=lambda r: (r.precision != "fp32", r.channels_last, -r.micro, -(r.samples_per_s or 0.0)))
    base = next((r for r in grid if r.key == baseline and r.fits and r.samples_per_s), None)
    if base is not None and (best.samples_per_s or 0.0) <= (base.samples_per_s or 0.0) * (1.0 + min_gain):
        return base
    return best


@dataclass(frozen=True)
class Plan:
    """How the effective batch is reached: `micro` samples a step, `steps` steps per optimizer update."""

    micro: int
    steps: int
    note: str = ""

    @property
    def effective(self) -> int:
        return self.micro * self.steps


def accumulation_plan(effective: int, micro: int, max_micro: int) -> Plan:
    """`effective / micro` steps when it divides; else the divisor of `effective` nearest to `micro` (at
    most `max_micro`, and no less than half of `micro`); else `micro` with the nearest whole number of
    steps, and a note of the effective batch that makes."""
    if effective % micro == 0:
        return Plan(micro, effective // micro)
    divisors = [d for d in range(1, max_micro + 1) if effective % d == 0]
    nearest = min(divisors, key=lambda d: (abs(d - micro), -d))
    if 2 * nearest >= micro:
        note = f"micro-batch {nearest} instead of {micro}: it divides the effective batch {effective}"
        return Plan(nearest, effective // nearest, note)
    steps = max(1, round(effective / micro))
    note = (
        f"no micro-batch near {micro} divides the effective batch {effective}: {steps} step{'s' * (steps != 1)} "
        f"of {micro} make {steps * micro} samples an update"
    )
    return Plan(micro, steps, note)


# --------------------------------------------------------------------------- measuring


class OutOfMemory(Exception):
    """A step at some size did not fit: raised by the device, or refused against the memory limit."""


class _Saved:
    """The tensors autograd saves for backward during a step: the bytes of their distinct storages (the
    parameters' and the batch's left out: counted apart) and their dtypes."""

    def __init__(self, exclude: set[int]) -> None:
        self.exclude = exclude
        self.storages: dict[int, int] = {}
        self.dtypes: set[Any] = set()

    def pack(self, tensor: Any) -> Any:
        self.dtypes.add(tensor.dtype)
        try:
            storage = tensor.untyped_storage()
            pointer = storage.data_ptr()
        except (RuntimeError, NotImplementedError):  # a tensor with no storage of its own (sparse, nested)
            return tensor
        if pointer and pointer not in self.exclude:
            self.storages[pointer] = max(self.storages.get(pointer, 0), int(storage.nbytes()))
        return tensor

    @property
    def nbytes(self) -> int:
        return sum(self.storages.values())

    def hooks(self) -> Any:
        import torch

        return torch.autograd.graph.saved_tensors_hooks(self.pack, _unpack)


def _unpack(tensor: Any) -> Any:
    return tensor


def _storage_pointers(tensors: Any) -> set[int]:
    pointers = set()
    for tensor in tensors:
        try:
            pointers.add(int(tensor.untyped_storage().data_ptr()))
        except (RuntimeError, NotImplementedError):
            continue
    return pointers


def tensor_bytes(tensors: Any) -> int:
    return sum(int(t.numel() * t.element_size()) for t in tensors)


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's out-of-memory error (a class on every torch build), or the CPU allocator's refusal."""
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc) if isinstance(exc, RuntimeError) else ""
    return "can't allocate memory" in text or "out of memory" in text


@dataclass
class Clock:
    """The budget: when each part must end, and the progress events."""

    budget_s: float
    progress: Optional[ProgressFn] = None
    started: float = field(default_factory=time.perf_counter)

    def by(self, share: float) -> float:
        return self.started + share * self.budget_s

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    def say(self, phase: str, message: str) -> None:
        if self.progress is not None:
            self.progress(Progress(phase, self.elapsed_s(), self.budget_s, message))


class Workbench:
    """The user's dataset, model and step, and the measurements made on them: every configuration starts
    from the same initial weights (`base`, kept on the host), on batches built once and moved to the device."""

    def __init__(self, dataset: Any, model: Any, step: Optional[Callable[..., Any]], options: TrainingOptions) -> None:
        import torch
        from torch.utils.data.dataloader import default_collate

        from bootstrap.bench.device import Device

        self.torch = torch
        self.options = options
        self.device = Device(options.device)
        self.dataset = dataset
        self.length = _dataset_length(dataset)
        self.step_fn = step
        self.base = _base_model(model).to("cpu")
        self.collate = options.collate_fn or default_collate
        self.where = _at("step") if step is not None else _at("model")
        self.host_batches: dict[int, Any] = {}
        self.limit: Optional[int] = None  # bytes a step may use (`memory_limit`), once the search has set it

    # -- batches and models

    def host_batch(self, size: int) -> Any:
        """`size` samples (the dataset's first, repeated past its end) collated as the DataLoader would."""
        from bootstrap.bench.user import call_user

        if size not in self.host_batches:
            samples = [call_user(self.dataset.__getitem__, _at("dataset"), i % self.length) for i in range(size)]
            self.host_batches[size] = self._collated(samples)
        return self.host_batches[size]

    def _collated(self, samples: list[Any]) -> Any:
        from bootstrap.bench.user import call_user, describe_error

        if self.options.collate_fn is not None:
            return call_user(self.collate, _at("collate_fn"), samples)
        try:
            return self.collate(samples)
        except Exception as exc:  # noqa: BLE001 (default_collate on the user's samples)
            problem = f"its samples do not batch with default_collate: {describe_error(exc)}"
            raise InputError(_at("dataset"), problem, "pass collate_fn=..., as your DataLoader does") from None

    def shape(self, batch: Any, channels_last: bool) -> Any:
        """A batch on the device as the step takes it: the built-in step's uint8 images scaled to float,
        and each 4-D float tensor channels-last when asked."""
        from bootstrap.bench.batch import map_tensors

        torch, target = self.torch, self.device.torch_device

        def move(tensor: Any) -> Any:
            tensor = tensor.to(target)
            if self.step_fn is None and tensor.dtype == torch.uint8:
                tensor = tensor.float().div_(255)
            if channels_last and tensor.dim() == 4 and tensor.is_floating_point():
                tensor = tensor.contiguous(memory_format=torch.channels_last)
            return tensor

        return map_tensors(move, batch)

    def batch(self, size: int, channels_last: bool = False) -> Any:
        return self.shape(self.host_batch(size), channels_last)

    def takes_channels_last(self) -> bool:
        """Whether the batch holds a 4-D float tensor (images): the only inputs channels-last applies to."""
        from bootstrap.bench.batch import tensors

        return any(t.dim() == 4 and t.is_floating_point() for t in tensors(self.batch(1)))

    def model(self, channels_last: bool) -> tuple[Any, Any]:
        """A copy of the initial model on the device, in train mode, and an SGD optimizer over it."""
        model = copy.deepcopy(self.base).to(self.device.torch_device)
        if channels_last:
            model = model.to(memory_format=self.torch.channels_last)
        parameters = [p for p in model.parameters() if p.requires_grad]
        optimizer = self.torch.optim.SGD(parameters, lr=0.01, momentum=0.9) if parameters else None
        return model.train(), optimizer

    def scaler(self, precision: str) -> Any:
        return self.torch.amp.GradScaler(self.device.type) if precision == "fp16" else None

    # -- one step

    def loss(self, model: Any, batch: Any, precision: str) -> Any:
        """The forward pass (the user's step, or cross-entropy on (inputs, targets)) under autocast."""
        torch = self.torch
        dtype = getattr(torch, AUTOCAST_DTYPES[precision]) if precision in AUTOCAST_DTYPES else None
        with torch.autocast(device_type=self.device.type, dtype=dtype, enabled=dtype is not None):
            if self.step_fn is not None:
                return self.step_fn(model, batch, self.device.torch_device)
            if not isinstance(batch, (list, tuple)) or len(batch) < 2:
                problem = f"the built-in step takes (inputs, targets) batches, got a {type(batch).__name__}"
                raise InputError(_at("dataset"), problem, "pass step=... that computes the loss from your batch")
            return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])

    def update(self, loss: Any, optimizer: Any, scaler: Any) -> None:
        """backward on `loss` (None: the step updated the model itself) and an optimizer step."""
        if loss is None:
            return
        if not isinstance(loss, self.torch.Tensor):
            raise TypeError(f"returned a {type(loss).__name__}, not a loss tensor")
        if optimizer is None:
            raise ValueError("the model has no parameters to train")
        optimizer.zero_grad(set_to_none=True)
        try:
            (scaler.scale(loss) if scaler is not None else loss).backward()
        except RuntimeError as exc:
            from bootstrap.bench.step import _BACKWARD_TWICE, GraphFreed

            if self.step_fn is not None and _BACKWARD_TWICE in str(exc):
                # no optimizer state yet: the model's first update, so the step itself ran backward()
                raise GraphFreed(first=not optimizer.state) from exc
            raise
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()

    def step(self, model: Any, optimizer: Any, batch: Any, precision: str, scaler: Any = None) -> Optional[float]:
        """One training step, finished on the device; its loss (None: the step returned none)."""
        return self.guarded(functools.partial(self._step, model, optimizer, batch, precision, scaler))  # type: ignore[no-any-return]

    def _step(self, model: Any, optimizer: Any, batch: Any, precision: str, scaler: Any) -> Optional[float]:
        loss = self.loss(model, batch, precision)
        self.update(loss, optimizer, scaler)
        self.device.sync()
        return None if loss is None else float(loss.detach().float())

    def failed(self, exc: BaseException) -> InputError:
        from bootstrap.bench.step import GraphFreed
        from bootstrap.bench.user import describe_step_error

        fix = "the tuner runs it on micro-batches of several sizes, built from your dataset: fix it for those"
        if isinstance(exc, GraphFreed):
            fix = exc.fix
        return InputError(self.where, describe_step_error(exc, "raised "), fix)

    # -- memory

    def free(self) -> None:
        """What a size left on the GPU given back before the next: a host's tensors go with their last
        reference, and a collection there would cost more than a small step."""
        if self.device.is_cuda:
            gc.collect()
            self.torch.cuda.empty_cache()

    def peak(self, size: int, precision: str = "fp32", channels_last: bool = False) -> Optional[int]:
        """The step's peak memory at `size` (CUDA: torch's peak allocation; elsewhere the estimate of
        `estimate`); None when it ran out of memory."""
        try:
            model, optimizer = self.model(channels_last)
            batch = self.batch(size, channels_last)
            return self.measured_peak(model, optimizer, batch, precision)[0]
        except OutOfMemory:
            return None
        finally:
            model = optimizer = batch = None
            self.free()

    def measured_peak(self, model: Any, optimizer: Any, batch: Any, precision: str) -> tuple[int, set[Any]]:
        """One step's peak bytes, and the dtypes of what it saved for backward."""
        torch, scaler = self.torch, self.scaler(precision)
        exclude = _storage_pointers([*model.parameters(), *_tensors(batch)])
        saved = _Saved(exclude)
        if self.device.is_cuda:
            torch.cuda.reset_peak_memory_stats(self.device.torch_device)
        with saved.hooks():
            self.step(model, optimizer, batch, precision, scaler)
        if self.device.is_cuda:
            return int(torch.cuda.max_memory_allocated(self.device.torch_device)), saved.dtypes
        return self.estimate(model, optimizer, batch, saved), saved.dtypes

    def estimate(self, model: Any, optimizer: Any, batch: Any, saved: _Saved) -> int:
        """What a step holds at its peak, where no allocator reports it: parameters, their gradients,
        the optimizer's state, the tensors saved for backward and the batch."""
        parameters = [p for p in model.parameters()]
        grads = tensor_bytes(p for p in parameters if p.requires_grad)
        state = [v for s in (optimizer.state.values() if optimizer is not None else ()) for v in s.values()]
        optimizer_bytes = tensor_bytes(v for v in state if isinstance(v, self.torch.Tensor))
        return tensor_bytes(parameters) + grads + optimizer_bytes + saved.nbytes + tensor_bytes(_tensors(batch))

    def memory_limit(self) -> Optional[int]:
        """The bytes a step may use: the option; else, off CUDA (which raises its own out-of-memory), a
        share of the host's available memory."""
        if self.options.memory_limit is not None or self.device.is_cuda:
            return self.options.memory_limit
        from bootstrap.compat.host import probe_usable_memory

        memory, _ = probe_usable_memory()
        return None if memory is None else int(memory[1] * (1 << 20) * HOST_MEMORY_SHARE)

    def prober(self, limit: Optional[int]) -> Callable[[int], Probe]:
        """`peak` against `limit`; a size whose peak, on the line through those measured, is well over the
        limit is refused without running it (a host step that large could exhaust the machine)."""
        measured: list[tuple[int, int]] = []

        def probe(size: int) -> Probe:
            predicted = predicted_peak(measured, size) if limit is not None else None
            if limit is not None and predicted is not None and predicted > limit * PREDICT_MARGIN:
                return Probe(size, predicted, False, "predicted")
            peak = self.peak(size)
            if peak is None:
                self.free()  # the error's frames, released only now, held the tensors of that size
                return Probe(size, None, False, "out of memory")
            measured.append((size, peak))
            return Probe(size, peak, limit is None or peak <= limit, "measured")

        return probe

    # -- rates

    def time_row(self, size: int, precision: str, channels_last: bool, seconds: float) -> GridRow:
        """The step's samples/s at this configuration, on one batch already on the device: warm-up steps
        discarded (the first also gives the peak), then the median of WINDOWS windows of timed steps."""
        limit = self.limit
        try:
            model, optimizer = self.model(channels_last)
            batch, scaler = self.batch(size, channels_last), self.scaler(precision)
            peak, _ = self.measured_peak(model, optimizer, batch, precision)
            if limit is not None and peak > limit:
                return GridRow(size, precision, channels_last, None, peak, False)
            for _ in range(WARMUP_STEPS - 1):
                self.step(model, optimizer, batch, precision, scaler)
            times = self._timed(model, optimizer, batch, precision, scaler, time.perf_counter() + seconds)
        except OutOfMemory:
            return GridRow(size, precision, channels_last, None, None, False)
        finally:
            model = optimizer = batch = scaler = None
            self.free()
        return GridRow(size, precision, channels_last, window_rate(times, size), peak, True)

    def _timed(self, model: Any, optimizer: Any, batch: Any, precision: str, scaler: Any, until: float) -> list[float]:
        times: list[float] = []
        while len(times) < WINDOWS or time.perf_counter() < until:
            started = time.perf_counter()
            self.step(model, optimizer, batch, precision, scaler)
            times.append(time.perf_counter() - started)
        return times

    def autocast_applies(self, precision: str, size: int) -> bool:
        """Whether a step under `precision`'s autocast computes anything in it: a step that casts its own
        inputs, or turns autocast off, saves no tensor of that dtype for backward."""
        dtype = getattr(self.torch, AUTOCAST_DTYPES[precision])
        try:
            model, optimizer = self.model(False)
            _, dtypes = self.measured_peak(model, optimizer, self.batch(size), precision)
        except OutOfMemory:
            return True  # it did run at this size in fp32: judged again on the grid's rows
        finally:
            model = optimizer = None
            self.free()
        return dtype in dtypes

    def losses(self, precision: str, size: int, channels_last: bool = False) -> list[Optional[float]]:
        """The losses of CHECK_STEPS steps from the initial weights, each on its own batch of the dataset."""
        model, optimizer = self.model(channels_last)
        scaler = self.scaler(precision)
        batches = [self.shape(self._nth_batch(size, i), channels_last) for i in range(CHECK_STEPS)]
        try:
            return [self.step(model, optimizer, batch, precision, scaler) for batch in batches]
        finally:
            model = optimizer = None
            self.free()

    def _nth_batch(self, size: int, index: int) -> Any:
        start = (index * size) % self.length
        return self.collate([self.dataset[(start + i) % self.length] for i in range(size)])

    def samples_batch(self, start: int, count: int) -> Any:
        """A batch of the dataset's samples start .. start + count (wrapping around), on the device."""
        samples = [self.dataset[(start + i) % self.length] for i in range(count)]
        return self.shape(self.collate(samples), False)

    def accumulated_grads(self, parts: int, micro: int) -> Optional[tuple[list[Any], list[Any]]]:
        """(the gradients of one batch of `parts x micro` samples, those of `parts` micro-batches of the
        same samples each backpropagated as loss / parts), from the initial weights, in fp32; None when the
        step returns no loss. Dropout is off for both: its masks differ between the two, not the sum."""
        torch = self.torch
        model, _ = self.model(False)
        for module in model.modules():
            if isinstance(module, torch.nn.modules.dropout._DropoutNd):
                module.eval()
        parameters = [p for p in model.parameters() if p.requires_grad]
        runs = ([self.samples_batch(0, parts * micro)], [self.samples_batch(i * micro, micro) for i in range(parts)])
        found = []
        try:
            for batches in runs:
                model.zero_grad(set_to_none=True)
                if not self.guarded(functools.partial(self._accumulate, model, batches)):
                    return None
                found.append([None if p.grad is None else p.grad.detach().clone() for p in parameters])
        finally:
            model = None
            self.free()
        return found[0], found[1]

    def _accumulate(self, model: Any, batches: Sequence[Any]) -> bool:
        """backward on each batch's loss / len(batches); False when the step returns no loss."""
        for batch in batches:
            loss = self.loss(model, batch, "fp32")
            if loss is None:
                return False
            (loss / len(batches)).backward()
        return True

    def guarded(self, call: Callable[[], Any]) -> Any:
        """`call()`, what the user's model or step raises in one line; running out of memory as OutOfMemory."""
        try:
            return call()
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 (the user's model or step may raise anything)
            if is_out_of_memory(exc):
                raise OutOfMemory(str(exc)) from exc
            raise self.failed(exc) from exc

    def pipeline_rate(self, kwargs: dict[str, Any], row: GridRow, seconds: float) -> Optional[float]:
        """Samples/s of the whole loop, DataLoader(**kwargs) included, at this row's configuration."""
        import warnings

        from torch.utils.data import DataLoader

        if self.length < row.micro:
            return None
        model, optimizer = self.model(row.channels_last)
        scaler, samples, started = self.scaler(row.precision), 0, 0.0
        with warnings.catch_warnings():
            # pin_memory without an accelerator, and the fixed advice's 4 workers on a smaller host, say so
            warnings.simplefilter("ignore")
            loader = DataLoader(
                self.dataset, batch_size=row.micro, shuffle=True, drop_last=True, collate_fn=self.collate, **kwargs
            )
            batches = _endless(loader)
            try:
                for done in range(WARMUP_STEPS + 1_000_000):
                    if done == WARMUP_STEPS:
                        started, samples = time.perf_counter(), 0
                    elif done > WARMUP_STEPS and time.perf_counter() - started >= seconds:
                        break
                    batch = self.shape(next(batches), row.channels_last)
                    self.step(model, optimizer, batch, row.precision, scaler)
                    samples += row.micro
            finally:
                batches.close()
                model = optimizer = None
                self.free()
        return samples / max(time.perf_counter() - started, 1e-9)


def window_rate(times: Sequence[float], size: int) -> float:
    """Samples/s: the median over WINDOWS contiguous windows of the timed steps (a busy moment on a shared
    host slows one window, not the figure)."""
    per = max(1, len(times) // WINDOWS)
    windows = [times[i : i + per] for i in range(0, per * WINDOWS, per) if times[i : i + per]]
    return float(statistics.median(size * len(w) / max(sum(w), 1e-9) for w in windows))


def _tensors(batch: Any) -> Iterator[Any]:
    from bootstrap.bench.batch import tensors

    return tensors(batch)


def _dataset_length(dataset: Any) -> int:
    from bootstrap.bench.user import describe_error, passes_through

    try:
        length = len(dataset)
        dataset[0]  # noqa: B018 (a map-style dataset answers an index)
    except (TypeError, NotImplementedError, AttributeError):
        problem = "has no len() or no indexing: the tuner builds micro-batches of chosen sizes by index"
        raise InputError(_at("dataset"), problem, "pass a map-style Dataset (with __len__ and __getitem__)") from None
    except IndexError:
        length = 0
    except BaseException as exc:  # noqa: BLE001 (the user's __len__ or __getitem__, reported)
        if passes_through(exc):
            raise
        raise InputError(_at("dataset"), f"raised {describe_error(exc)}", "fix its __len__ and __getitem__") from None
    if length < 1:
        raise InputError(_at("dataset"), "is empty", "pass a dataset with samples in it")
    return int(length)


def _base_model(model: Any) -> Any:
    """The model every configuration starts from: a copy of the module (the user's weights are not
    trained), or what the factory builds."""
    import torch.nn as nn

    if isinstance(model, nn.Module):
        return copy.deepcopy(model)
    if not callable(model):
        raise InputError(_at("model"), f"is a {type(model).__name__}", "pass an nn.Module or a function returning one")
    from bootstrap.bench.user import call_user

    built = call_user(model, _at("model"))
    if not isinstance(built, nn.Module):
        raise InputError(_at("model"), f"returned a {type(built).__name__}, not a torch.nn.Module")
    return built


def _endless(loader: Any) -> Generator[Any, None, None]:
    while True:
        yield from loader


# --------------------------------------------------------------------------- the checks


def compare_losses(
    reference: Sequence[Optional[float]], losses: Sequence[Optional[float]], precision: str, tolerance: float
) -> Check:
    """`training.precision`: `precision`'s losses against fp32's, step by step, from the same weights on the
    same batches; relative to fp32's loss."""
    check_id, expected = "training.precision", f"{precision} losses within {tolerance:.1%} of fp32's"
    if any(loss is None for loss in (*reference, *losses)):
        observed = "the step returned no loss (it updates the model itself): nothing to compare"
        return Check(check_id, Status.SKIP, observed, expected)
    gaps = [abs(b - a) / max(abs(a), 1e-12) for a, b in zip(reference, losses) if a is not None and b is not None]
    worst = max(gaps, default=0.0)
    detail = "losses fp32 / " + precision + ": " + "; ".join(f"{a:.6g} / {b:.6g}" for a, b in zip(reference, losses))
    if worst <= tolerance:
        observed = f"{precision} losses within {worst:.2%} of fp32's over {len(gaps)} steps"
        return Check(check_id, Status.OK, observed, expected, detail=detail)
    observed = f"{precision} losses differ from fp32's by up to {worst:.2%} over {len(gaps)} steps"
    remedy = f"fp32 is recommended instead: the model's values may overflow or lose precision in {precision}"
    return Check(check_id, Status.FAIL, observed, expected, remedy, detail)


def compare_grads(whole: Sequence[Any], accumulated: Sequence[Any], plan: Plan, parts: int, tolerance: float) -> Check:
    """`training.accumulation`: gradients of one batch against those of `parts` micro-batches (loss / parts),
    the largest difference relative to the largest gradient."""
    pairs = [(a, b) for a, b in zip(whole, accumulated) if a is not None and b is not None]
    scale = max((float(a.abs().max()) for a, _ in pairs), default=0.0)
    worst = max((float((a - b).abs().max()) for a, b in pairs), default=0.0) / max(scale, 1e-12)
    check_id = "training.accumulation"
    expected = f"gradients of {parts} micro-batches (loss / {parts}) within {tolerance:g} of one batch's"
    if worst <= tolerance:
        observed = f"{plan.steps} steps of {plan.micro}: gradients match one batch's (relative gap {worst:.1e})"
        return Check(check_id, Status.OK, observed, expected)
    observed = f"accumulated gradients differ from one batch's by {worst:.1e} of the largest"
    remedy = (
        "a loss summed over the batch (reduction='sum') needs no division by the steps; a loss that depends on "
        "the whole batch (contrastive, in-batch negatives) changes with the micro-batch: keep steps=1 or adapt it"
    )
    return Check(check_id, Status.FAIL, observed, expected, remedy)


def batchnorm_check(plan: Plan) -> Check:
    """`training.accumulation` for a model with BatchNorm: each micro-batch is normalised by its own statistics."""
    observed = (
        f"the model has BatchNorm: over {plan.steps} steps of {plan.micro}, each normalises by the statistics of "
        f"{plan.micro} samples, not {plan.effective}"
    )
    remedy = (
        "expect training to differ from one batch of the effective size (PyTorch's BatchNorm docs: statistics per "
        "batch); a larger micro-batch, or GroupNorm/LayerNorm, keeps it closer"
    )
    return Check("training.accumulation", Status.WARN, observed, "accumulation equivalent to one large batch", remedy)


def not_slower_check(
    grid: Sequence[GridRow], choice: GridRow, baseline: tuple[int, str, bool], given: bool = True
) -> Check:
    """`training.not_slower`: the recommendation against the user's own settings (their micro-batch, fp32,
    contiguous), as measured; without a batch size `given`, against fp32 at the largest micro-batch timed."""
    base = next((r for r in grid if r.key == baseline), None)
    whose, theirs = ("yours", "your batch size") if given else ("plain fp32", "plain fp32 at")
    expected = f"no slower than {whose} ({baseline[0]} fp32)"
    if base is None or not base.fits or not base.samples_per_s or not choice.samples_per_s:
        why = "does not fit in memory" if base is not None and not base.fits else "was not timed"
        return Check("training.not_slower", Status.SKIP, f"{theirs} {baseline[0]} {why}", expected)
    gain = choice.samples_per_s / base.samples_per_s
    if choice.key == base.key:
        observed = f"{whose} kept: nothing measured beat {base.samples_per_s:.0f} samples/s"
    else:
        observed = f"{choice.label}: {choice.samples_per_s:.0f} samples/s, {gain:.2f}x {whose}"
    status = Status.OK if gain >= 1.0 else Status.FAIL
    return Check("training.not_slower", status, observed, expected)


def has_batchnorm(model: Any) -> bool:
    from torch.nn.modules.batchnorm import _BatchNorm

    return any(isinstance(module, _BatchNorm) for module in model.modules())


# --------------------------------------------------------------------------- the run


def tune_training(  # noqa: PLR0913 (the Python API: what a training script knows, as keywords)
    dataset: Any,
    model: Any,
    *,
    effective_batch: int,
    batch_size: Optional[int] = None,
    step: Optional[Callable[..., Any]] = None,
    budget: float = 120.0,
    device: str = "auto",
    memory_limit: Optional[int] = None,
    precisions: Optional[Sequence[str]] = None,
    collate_fn: Optional[Callable[..., Any]] = None,
    progress: Optional[ProgressFn] = None,
) -> TrainingAdvice:
    """Tune the training step for an effective batch of `effective_batch` samples per optimizer update:
    micro-batch, accumulation steps, precision, memory format and DataLoader arguments, each checked.

        from bootstrap import tune_training
        advice = tune_training(dataset, model, effective_batch=256, batch_size=32)
        print(advice.snippet())

    `model` is an nn.Module (copied: its weights are not trained) or a factory; `step(model, batch, device)
    -> loss or None` as for `tune_loader` (None: cross-entropy on (inputs, targets) batches). `batch_size` is
    the micro-batch used now: never recommended against unless beaten; `collate_fn` the DataLoader's.
    `memory_limit` (bytes) bounds a step's memory (CUDA: its own out-of-memory does too). Bad input, or a
    step that does not fit one sample, raises InputError. docs/benchmark.md, "Tune the training step".
    """
    from bootstrap.bench.run import refuse_in_bootstrapping_child

    refuse_in_bootstrapping_child()
    if progress is not None and not callable(progress):
        problem = f"is a {type(progress).__name__}, not a callable"
        raise InputError(_at("progress"), problem, "pass a function taking one Progress event, or None")
    if precisions is not None and (isinstance(precisions, str) or not isinstance(precisions, Sequence)):
        raise InputError(_at("precisions"), f"expected a list such as ['fp32', 'bf16'], got {excerpt(precisions)}")
    options = TrainingOptions(
        effective_batch=effective_batch,
        batch_size=batch_size,
        budget_s=budget,
        device=device,
        memory_limit=memory_limit,
        precisions=None if precisions is None else tuple(precisions),
        collate_fn=collate_fn,
    )
    return run_training(dataset, model, step, options, progress)


def run_training(
    dataset: Any,
    model: Any,
    step: Optional[Callable[..., Any]],
    options: TrainingOptions,
    progress: Optional[ProgressFn] = None,
) -> TrainingAdvice:
    """`tune_training` over a `TrainingOptions` (what the command line builds)."""
    options = options.validate()
    # The first optimizer imports torch._dynamo, slow on a busy host: paid before the budget's clock starts,
    # as a bench run does, so that it does not eat the micro-batch search's share.
    with contextlib.suppress(ImportError):
        import torch._dynamo  # noqa: F401
    clock = Clock(options.budget_s, progress)
    check_device(options.device)
    bench = Workbench(dataset, model, step, options)
    with _host_threads(bench) as notes:
        return _tune(bench, clock, notes)


@contextlib.contextmanager
def _host_threads(bench: Workbench) -> Generator[list[str], None, None]:
    """On the host's CPU, the step runs on half the CPUs, as a bench run's does: in training the DataLoader's
    workers have the rest, and OpenMP threads that spin on cores others use make a step many times slower."""
    notes: list[str] = []
    if bench.device.is_accelerator:
        yield notes
        return
    from bootstrap.bench.host import usable_cpus

    torch, cpus = bench.torch, usable_cpus()
    saved = torch.get_num_threads()
    torch.set_num_threads(max(1, cpus // 2))
    notes.append(
        f"host run (CPU): the step was timed with {torch.get_num_threads()} torch thread(s) of the {cpus} CPUs "
        "(torch.set_num_threads), leaving the rest to the DataLoader's workers"
    )
    try:
        yield notes
    finally:
        torch.set_num_threads(saved)


def _tune(bench: Workbench, clock: Clock, notes: list[str]) -> TrainingAdvice:
    options = bench.options
    precisions = supported_precisions(bench.device, options.precisions)
    max_micro, ceiling = search(bench, clock, notes)
    sizes = grid_sizes(max_micro, options.effective_batch, options.batch_size, ceiling)
    settable = [p for p in precisions if p == "fp32" or bench.autocast_applies(p, sizes[0])]
    by_step = len(settable) < len(precisions)
    if by_step:
        notes.append(
            "precision could not be changed from outside: the step ignores torch.autocast; its own is measured"
        )
    layouts = (False, True) if bench.takes_channels_last() else (False,)
    baseline = (options.batch_size or sizes[-1], "fp32", False)
    grid = time_grid(bench, clock, Configs(sizes, tuple(settable), layouts, baseline))
    max_micro = max([max_micro, *(r.micro for r in grid if r.fits)])  # the user's own, past a search cut short
    current = options.batch_size
    if current is not None and current > bench.length:
        notes.append(f"your batch_size {current} is above the dataset's {bench.length} samples: not timed")
    elif current is not None and current > max_micro:
        notes.append(f"your batch_size {current} is above the largest micro-batch that fits, {max_micro}")
    return advise(bench, clock, grid, Found(max_micro, baseline, by_step, tuple(notes)))


@dataclass(frozen=True)
class Configs:
    """The configurations the grid times, the user's own (`baseline`) first."""

    sizes: Sequence[int]
    precisions: tuple[str, ...]
    layouts: tuple[bool, ...]
    baseline: tuple[int, str, bool]

    def ordered(self) -> list[tuple[int, str, bool]]:
        rest = [(s, p, cl) for s in self.sizes for p in self.precisions for cl in self.layouts]
        first = [self.baseline] if self.baseline[0] in self.sizes else []
        return first + [key for key in rest if key != self.baseline]


@dataclass(frozen=True)
class Found:
    """What the search and the grid found besides the grid itself."""

    max_micro: int
    baseline: tuple[int, str, bool]
    by_step: bool
    notes: tuple[str, ...]


def check_device(device: str) -> None:
    import torch

    from bootstrap.bench.device import mps_available

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(_at("device"), f"{device}: CUDA is not available to this torch", "use device='cpu' or 'auto'")
    if device == "mps" and not mps_available(torch):
        raise InputError(_at("device"), "mps: Apple MPS is not available to this torch", "use device='cpu' or 'auto'")
    if device not in ("auto", "cpu", "cuda", "mps") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise InputError(
            _at("device"), f"{excerpt(device)} is not auto, cpu, cuda, cuda:N or mps", "e.g. device='cuda:0'"
        )


def supported_precisions(device: Any, requested: Optional[Sequence[str]]) -> tuple[str, ...]:
    """fp32, and the autocast the device computes well: bf16 on a CPU and on CUDA where the GPU has it in
    hardware, else fp16 with a GradScaler; MPS is timed in fp32 only. Requested ones it lacks: InputError."""
    usual: tuple[str, ...] = ("fp32", "bf16") if device.type == "cpu" else ("fp32",)
    able = usual
    if device.is_cuda:
        usual = ("fp32", "bf16") if device.bf16_supported() else ("fp32", "fp16")
        able = (*usual, "fp16") if "fp16" not in usual else usual
    if requested is None:
        return usual
    for precision in requested:
        if precision not in able:
            problem = f"{precision} is not computed by this {device.type} device (or not in hardware)"
            raise InputError(_at("precisions"), problem, f"use {' or '.join(able)}")
    return ("fp32", *(p for p in able if p in requested and p != "fp32"))


def search(bench: Workbench, clock: Clock, notes: list[str]) -> tuple[int, int]:
    """The largest micro-batch that fits, capped at the dataset's length and the effective batch, and the
    ceiling: the smallest size found not to fit, else the one past the cap. A search cut short by its
    budget share knows nothing of the sizes between the two, the user's own among them."""
    options = bench.options
    bench.limit = limit = bench.memory_limit()
    cap = min(bench.length, options.effective_batch)
    clock.say("search", f"the largest micro-batch that fits, up to {cap}")
    deadline = clock.by(SEARCH_END)
    found, tried = largest_fitting(bench.prober(limit), cap, lambda: time.perf_counter() > deadline)
    if found == 0:
        first = tried[-1]
        held = f"{_mib(first.peak_bytes)} MiB" if first.peak_bytes else "out of memory"
        allowed = f" against the limit of {_mib(limit)} MiB" if limit else ""
        problem = f"a training step does not fit even one sample: {held}{allowed}"
        raise InputError(bench.where, problem, "raise memory_limit, or use a smaller model or input")
    refused = [p.size for p in tried if not p.fits]
    if found < cap and not refused:
        notes.append(f"the search for the largest micro-batch ran out of its budget share at {found}")
    if limit is not None and options.memory_limit is None:
        notes.append(f"memory limit: {HOST_MEMORY_SHARE:.0%} of the host's available memory, {limit / 2**30:.1f} GiB")
    return found, min(refused, default=cap + 1)


def _mib(nbytes: int) -> str:
    """Bytes in MiB, with the digits a small model's few KiB need."""
    return f"{nbytes / 2**20:.1f}" if nbytes >= 2**20 else f"{nbytes / 2**20:.3g}"


def time_grid(bench: Workbench, clock: Clock, configs: Configs) -> list[GridRow]:
    """Each configuration timed in its share of what is left of the grid's part of the budget."""
    keys = configs.ordered()
    deadline, grid = clock.by(GRID_END), []
    clock.say("grid", f"{len(keys)} configurations: sizes {', '.join(map(str, configs.sizes))}")
    for index, (size, precision, channels_last) in enumerate(keys):
        share = max(0.0, deadline - time.perf_counter()) / (len(keys) - index)
        grid.append(bench.time_row(size, precision, channels_last, share))
    size = configs.baseline[0]
    if size not in configs.sizes and size <= bench.length:  # left out for not fitting
        grid.insert(0, GridRow(size, "fp32", False, None, None, False))
    return grid


def advise(bench: Workbench, clock: Clock, grid: list[GridRow], found: Found) -> TrainingAdvice:
    """The recommendation from the grid, checked, with the DataLoader tuned for it."""
    options, notes = bench.options, list(found.notes)
    choice = recommend(grid, found.baseline, options.min_gain)
    if choice is None:
        raise InputError(_at("budget"), "no configuration could be timed", "give it a larger budget")
    clock.say("checks", f"checking {choice.label}")
    precision = _precision_check(bench, choice, found.by_step)
    allowed = ("fp32",) if precision.status is Status.FAIL else None
    if allowed:
        choice = recommend(grid, found.baseline, options.min_gain, allowed) or choice
    checked = choice.precision
    grid, choice = confirm(bench, clock, grid, choice, found.baseline, allowed)
    if choice.precision != checked:  # re-timed, a row of another precision won: the check is of that one
        precision = _precision_check(bench, choice, found.by_step)
    plan = accumulation_plan(options.effective_batch, choice.micro, found.max_micro)
    if plan.note:
        notes.append(plan.note)
    checks = (
        precision,
        _accumulation_check(bench, plan, found.max_micro),
        not_slower_check(grid, choice, found.baseline, given=options.batch_size is not None),
    )
    kwargs, over_fixed = _dataloader(bench, clock, choice, plan, notes)
    base = next((r for r in grid if r.key == found.baseline and r.samples_per_s), None)
    over_current = (
        choice.samples_per_s / base.samples_per_s if base and base.samples_per_s and choice.samples_per_s else None
    )
    return TrainingAdvice(
        micro_batch=plan.micro,
        accumulation_steps=plan.steps,
        precision=choice.precision,
        channels_last=choice.channels_last,
        dataloader_kwargs=kwargs,
        grid=tuple(grid),
        max_micro_batch=found.max_micro,
        effective_batch=options.effective_batch,
        device=bench.device.type,
        checks=checks,
        notes=tuple(notes),
        gains={"over_current": over_current, "over_fixed_advice": over_fixed},
        precision_by_step=found.by_step,
        collate_fn=None if options.collate_fn is None else getattr(options.collate_fn, "__name__", "collate_fn"),
    )


def confirm(  # noqa: PLR0913 (the grid, the choice, and what the choice may be)
    bench: Workbench,
    clock: Clock,
    grid: list[GridRow],
    choice: GridRow,
    baseline: tuple[int, str, bool],
    allowed: Optional[Sequence[str]] = None,
) -> tuple[list[GridRow], GridRow]:
    """The fastest rows of the grid of the `allowed` precisions (`choice` among them) and the user's own
    re-timed in turns, so that a busy moment during the grid makes none of them look faster: each keeps
    the median of its timings, and the choice is made again among them (`recommend`: it must still beat
    the user's by `min_gain`)."""
    fastest = sorted(
        (r for r in grid if r.fits and r.samples_per_s and (allowed is None or r.precision in allowed)),
        key=lambda r: -(r.samples_per_s or 0.0),
    )
    base = next((r for r in grid if r.key == baseline and r.fits and r.samples_per_s), None)
    contenders: list[GridRow] = []
    for row in (base, choice, *fastest):
        if row is not None and all(row.key != c.key for c in contenders):
            contenders.append(row)
    contenders = contenders[: CONTENDERS + 1]
    if len(contenders) < 2:
        return grid, choice
    rates: dict[tuple[int, str, bool], list[float]] = {r.key: [r.samples_per_s or 0.0] for r in contenders}
    clock.say("confirm", f"{', '.join(r.label for r in contenders)}: again, in turns")
    deadline = clock.by(CONFIRM_END)
    turns = CONFIRM_ROUNDS * len(contenders)
    for turn in range(turns):
        row = contenders[turn % len(contenders)]
        share = max(0.0, deadline - time.perf_counter()) / (turns - turn)
        timed = bench.time_row(row.micro, row.precision, row.channels_last, share)
        if timed.samples_per_s:
            rates[row.key].append(timed.samples_per_s)
    kept = [
        replace(r, samples_per_s=statistics.median(rates[r.key]), timings=len(rates[r.key])) if r.key in rates else r
        for r in grid
    ]
    retimed = [r for r in kept if r.key in rates]
    return kept, recommend(retimed, baseline, bench.options.min_gain, allowed) or choice


def _precision_check(bench: Workbench, choice: GridRow, by_step: bool) -> Check:
    if by_step:
        observed = "could not be changed from outside: the step ignores torch.autocast, so its own precision is kept"
        return Check("training.precision", Status.SKIP, observed, "a precision the tuner can set")
    if choice.precision == "fp32":
        return Check(
            "training.precision", Status.OK, "fp32 recommended: nothing to compare", "fp32 or a checked autocast"
        )
    size = min(choice.micro, CHECK_BATCH)
    try:
        reference = bench.losses("fp32", size, choice.channels_last)
        losses = bench.losses(choice.precision, size, choice.channels_last)
    except OutOfMemory:
        return Check("training.precision", Status.SKIP, "out of memory while checking", "a loss comparison")
    return compare_losses(reference, losses, choice.precision, bench.options.loss_tolerance)


def _accumulation_check(bench: Workbench, plan: Plan, max_micro: int) -> Check:
    wanted = bench.options.effective_batch
    if plan.effective != wanted:  # no micro-batch that fits divides it (`accumulation_plan`'s note)
        steps = f"{plan.steps} step{'s' * (plan.steps != 1)}"
        observed = f"{steps} of {plan.micro} make {plan.effective} samples an update, not {wanted}"
        remedy = f"an effective batch that a micro-batch up to {max_micro} divides, e.g. {plan.effective}"
        return Check("training.accumulation", Status.WARN, observed, f"{wanted} samples an update", remedy)
    if plan.steps == 1:
        observed = f"no accumulation: one micro-batch of {plan.micro} is the effective batch"
        return Check("training.accumulation", Status.OK, observed, "accumulation equivalent to one large batch")
    if has_batchnorm(bench.base):
        return batchnorm_check(plan)
    parts, micro = 2, max(1, min(plan.micro, max_micro // 2, CHECK_BATCH))
    try:
        grads = bench.accumulated_grads(parts, micro)
    except OutOfMemory:
        grads = None
    if grads is None:
        observed = "the step returned no loss (it updates the model itself): the tuner cannot accumulate for it"
        return Check("training.accumulation", Status.SKIP, observed, "divide the loss by the steps yourself")
    return compare_grads(grads[0], grads[1], plan, parts, bench.options.grad_tolerance)


def _dataloader(
    bench: Workbench, clock: Clock, choice: GridRow, plan: Plan, notes: list[str]
) -> tuple[dict[str, Any], Optional[float]]:
    """The DataLoader arguments for the chosen step (`tune_loader`, in what is left of the budget), and the
    whole loop's rate with them over the fixed advice's at the user's own settings."""
    left = clock.budget_s - clock.elapsed_s()
    if not bench.options.tune_loader or left < MIN_LOADER_S:
        why = "tune_loader=False" if not bench.options.tune_loader else f"{left:.0f} s of the budget left"
        notes.append(f"the DataLoader was not tuned ({why}): its defaults")
        return {}, None
    from bootstrap.bench.run import tune_loader

    row = GridRow(plan.micro, choice.precision, choice.channels_last, None, None, True)
    compare_s = min(10.0, 0.1 * left)
    clock.say("loader", f"tuning the DataLoader for {row.label}")
    kwargs, _ = tune_loader(
        bench.dataset,
        batch_size=plan.micro,
        budget=left - 2 * compare_s - 2.0,
        device=bench.options.device,
        collate_fn=bench.options.collate_fn,
        model=lambda: bench.model(choice.channels_last)[0],
        progress=lambda event: clock.say("loader", f"{event.phase}: {event.message}"),
        step=lambda model, batch, _device: bench.loss(
            model, bench.shape(batch, choice.channels_last), choice.precision
        ),
    )
    clock.say("loader", "the whole loop against the fixed advice")
    yours = GridRow(bench.options.batch_size or plan.micro, "fp32", False, None, None, True)
    tuned = bench.pipeline_rate(kwargs, row, compare_s)
    fixed = bench.pipeline_rate(FIXED_ADVICE, yours, compare_s)
    return kwargs, (tuned / fixed if tuned and fixed else None)
