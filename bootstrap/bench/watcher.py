"""`watch(loader)`: the bench's diagnosis, read from a running training loop (docs/benchmark.md,
"From a running job: `watch`").

    from bootstrap import watch
    for images, labels in watch(loader, every=100):  # yields exactly what loader yields
        ...

Every `every` steps, and when the loop ends (also by `break`, an exception or Ctrl-C), one line:
samples/s, steps/s, the share of wall time the loop waited for data (the time inside `next()` of the
loader's iterator), and the GPU's utilisation where NVML reads it. Only the main process's iterator
is wrapped: DataLoader workers run as they would without it.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
from collections.abc import Iterable as IterableABC
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, Optional, TypeVar, Union

from bootstrap.bench.device import cuda_uuid
from bootstrap.bench.utilization import Series, UtilSampler
from bootstrap.errors import InputError, excerpt

T = TypeVar("T")
LogFn = Callable[[str], None]

SCHEMA = "bootstrap.watch/1"
PATIENCE = 2  # intervals in a row above the threshold before the advice: one slow interval is no pattern
# NVML buffers seconds of samples: reading the buffer twice a second loses none of them.
SAMPLER_INTERVAL_S = 0.5
_WALK_DEPTH = 4  # nesting levels of a batch searched for its tensors
_WALK_ITEMS = 8  # items of a list or dict looked at per level: a list of strings is no tensor


def batch_size_of(batch: Any, depth: int = _WALK_DEPTH) -> Optional[int]:
    """Samples in a collated batch: dim 0 of its first tensor or array, walking tuples, lists and dicts
    (values in order); None where it has none (a scalar has no dim 0)."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) else None
        except (TypeError, ValueError, IndexError):
            return None
    if depth <= 0:
        return None
    if isinstance(batch, Mapping):
        items: Iterable[Any] = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    else:
        return None
    for item in itertools.islice(items, _WALK_ITEMS):
        size = batch_size_of(item, depth - 1)
        if size is not None:
            return size
    return None


@dataclass(frozen=True)
class Interval:
    """One reported interval: steps `step_from`..`step_to` (counted from 1 over the watch's life)."""

    step_from: int
    step_to: int
    wall_s: float
    wait_s: float
    samples: Optional[int]  # None: some batch had no size to read
    gpu_util: Optional[float]  # the GPU's mean utilisation over the interval, 0..1; None: not read
    time: float  # unix time at its end

    @property
    def steps(self) -> int:
        return self.step_to - self.step_from + 1

    @property
    def wait_share(self) -> float:
        return min(1.0, self.wait_s / self.wall_s) if self.wall_s > 0 else 0.0

    @property
    def steps_per_s(self) -> Optional[float]:
        return self.steps / self.wall_s if self.wall_s > 0 else None

    @property
    def samples_per_s(self) -> Optional[float]:
        return self.samples / self.wall_s if self.samples is not None and self.wall_s > 0 else None

    def record(self) -> dict[str, Any]:
        """The interval as one line of the JSONL log (schema bootstrap.watch/1)."""
        return {
            "schema": SCHEMA,
            "step_from": self.step_from,
            "step_to": self.step_to,
            "wall_s": round(self.wall_s, 6),
            "wait_s": round(self.wait_s, 6),
            "wait_share": round(self.wait_share, 4),
            "samples_per_s": _rounded(self.samples_per_s),
            "steps_per_s": _rounded(self.steps_per_s),
            "gpu_util": _rounded(self.gpu_util),
            "time": round(self.time, 3),
        }

    def line(self, gpu: str) -> str:
        """`watch: steps 101-200: 412 samples/s, 3.2 steps/s, waited for data 63% of the time; GPU 0 util 31%`."""
        steps = f"step {self.step_to}" if self.steps == 1 else f"steps {self.step_from}-{self.step_to}"
        rates = ((self.samples_per_s, "samples"), (self.steps_per_s, "steps"))
        said = [f"{_rate(rate)} {unit}/s" for rate, unit in rates if rate is not None]
        said.append(f"waited for data {self.wait_share:.0%} of the time")
        text = f"watch: {steps}: {', '.join(said)}"
        return text + (f"; {gpu} util {self.gpu_util:.0%}" if self.gpu_util is not None else "")


def _rounded(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 4)


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # sys.stderr as it is now: a test or a logger may swap it


def _nowhere(line: str) -> None:
    """Where the report goes once stderr itself fails (closed, a pipe whose reader is gone)."""


class _GpuReader:
    """The utilisation sampler over one iteration of the loop, and the mean of its samples per interval."""

    def __init__(self, label: str, sampler: UtilSampler) -> None:
        self.label = label
        self._sampler = sampler
        self._pending: Series = []  # read, but newer than the last interval's end

    def mean(self, start: float, end: float) -> Optional[float]:
        """Mean utilisation (0..1) of the samples stamped in (start, end]; those after `end` wait for the next
        interval, those before `start` (read after their interval was reported) are dropped."""
        self._pending.extend(self._sampler.take_gpu())
        inside = [value for stamp, value in self._pending if start < stamp <= end]
        self._pending = [(stamp, value) for stamp, value in self._pending if stamp > end]
        return sum(inside) / len(inside) / 100.0 if inside else None

    def stop(self) -> None:
        self._sampler.stop()


def _cuda_device(gpu: Optional[int]) -> Optional[tuple[int, Optional[str]]]:
    """(CUDA index, NVML UUID) of the GPU to read: `gpu`, else the current device of a torch this process
    already imported and runs CUDA on; None for neither. torch is never imported here, nor CUDA initialised
    for a process that did not ask for it."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_available() and (gpu is not None or cuda.is_initialized()):
            index = int(cuda.current_device()) if gpu is None else gpu
            return index, cuda_uuid(torch, index)
    except (RuntimeError, AssertionError, AttributeError):  # a torch whose CUDA cannot start
        pass
    return None if gpu is None else (gpu, None)  # no CUDA torch: NVML's own index


class Watch(Generic[T]):
    """What `watch(...)` returns: iterate it as the loader (each `for` is a new iteration, an epoch); `len()`
    is the loader's. `last` is the latest reported Interval. `nvml_module` stands in for pynvml (tests)."""

    def __init__(  # noqa: PLR0913 (the keywords of watch(), and the NVML stand-in)
        self,
        loader: Iterable[T],
        *,
        every: int = 100,
        batch_size: Optional[int] = None,
        threshold: float = 0.2,
        log: Optional[LogFn] = None,
        log_path: Union[str, os.PathLike[str], None] = None,
        gpu: Optional[int] = None,
        nvml_module: Any = None,
    ) -> None:
        _check_arguments(loader, every, batch_size, threshold, log, gpu)
        self.loader = loader
        self.every = every
        self.batch_size = batch_size
        self.threshold = float(threshold)
        self._log = _stderr if log is None else log
        self.log_path = _writable(log_path)
        self._gpu = gpu
        self._nvml_module = nvml_module
        self._done = 0  # steps reported, over every iteration
        self._above = 0  # intervals in a row that waited above the threshold
        self._advised = False
        self._noted_gpu = False
        self.last: Optional[Interval] = None

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]  # TypeError, as for the loader, where it has none

    def __iter__(self) -> Iterator[T]:
        return self._iterate()

    def _iterate(self) -> Iterator[T]:
        clock, every, fixed = time.perf_counter, self.every, self.batch_size
        reader = self._open_gpu()
        start = began = clock()
        end: Optional[float] = None
        steps, wait, samples, sized = 0, 0.0, 0, True
        try:
            iterator = iter(self.loader)  # starts the workers: time the loop waits for its first batch
            wait = clock() - began
            while True:
                began = clock()
                if steps == every:
                    self._close(reader, start, began, steps, wait, samples if sized else None)
                    start, steps, wait, samples, sized = began, 0, 0.0, 0, True
                try:
                    batch = next(iterator)
                except StopIteration:
                    end = began  # the loader's own wind-down is no step's
                    return
                wait += clock() - began
                steps += 1
                size = fixed or batch_size_of(batch)
                if size is None:
                    sized = False
                else:
                    samples += size
                yield batch
        finally:
            end = clock() if end is None else end
            if reader is not None:
                reader.stop()  # its last poll reads the samples up to the loop's end
            if steps:
                self._close(reader, start, end, steps, wait, samples if sized else None)

    def _open_gpu(self) -> Optional[_GpuReader]:
        device = _cuda_device(self._gpu)
        if device is None:
            return None
        index, uuid = device
        sampler = UtilSampler(
            nvml_module=self._nvml_module,
            device_index=index,
            device_uuid=uuid,
            interval_s=SAMPLER_INTERVAL_S,
            clock_zero=0.0,  # samples on the perf_counter clock the steps are timed on
            proc_stat="",
        ).start()
        if sampler.sampling_gpu:
            return _GpuReader(f"GPU {index}", sampler)
        reason = sampler.stop().reason
        if not self._noted_gpu:
            self._noted_gpu = True
            self._say(f"watch: no utilisation of GPU {index}: {reason}")
        return None

    def _close(
        self, reader: Optional[_GpuReader], start: float, end: float, steps: int, wait: float, samples: Optional[int]
    ) -> None:
        """Report steps [done+1, done+steps], timed from `start` to `end` on the perf_counter clock."""
        interval = Interval(
            step_from=self._done + 1,
            step_to=self._done + steps,
            wall_s=end - start,
            wait_s=wait,
            samples=samples,
            gpu_util=None if reader is None else reader.mean(start, end),
            time=time.time() - (time.perf_counter() - end),
        )
        self._done += steps
        self.last = interval
        self._append(interval)
        self._say(interval.line(reader.label if reader is not None else "GPU"))
        self._above = self._above + 1 if interval.wait_share > self.threshold else 0
        if self._above >= PATIENCE and not self._advised:
            self._advised = True
            self._say(self._advice(interval))

    def _say(self, line: str) -> None:
        """`line` to the log function. One that raises is given up for stderr, and a failing stderr for
        nothing, each said once where it can be: the report must never stop the training."""
        try:
            self._log(line)
        except Exception as exc:  # noqa: BLE001 (the user's log function, or a closed stream)
            from bootstrap.bench.user import describe_error

            failed, self._log = self._log, (_nowhere if self._log is _stderr else _stderr)
            if failed is not _stderr:
                problem = describe_error(exc)
                self._say(f"watch: the log function raised {problem}: the report goes to stderr from here")
                self._say(line)

    def _append(self, interval: Interval) -> None:
        """One JSON line, appended in one write; a file that cannot be written any more stops the log, not
        the training."""
        if self.log_path is None:
            return
        try:
            with open(self.log_path, "a", encoding="utf-8") as out:
                out.write(json.dumps(interval.record()) + "\n")
        except OSError as exc:
            self._say(f"watch: cannot append to {self.log_path} any more ({exc.strerror or exc}): the log stops here")
            self.log_path = None

    def _advice(self, interval: Interval) -> str:
        size = self.batch_size or getattr(self.loader, "batch_size", None)
        if not isinstance(size, int) and interval.samples:
            size = math.ceil(interval.samples / interval.steps)
        shown, what = (str(size), "") if isinstance(size, int) else ("N", "; N: your batch size")
        return (
            f"watch: the loop waited for data over {self.threshold:.0%} of the time {PATIENCE} intervals in a row: "
            f"the DataLoader sets the pace, not the step. Tune it on this host, in the env: "
            f"python -m bootstrap bench --dataset MODULE:FACTORY --batch-size {shown} (MODULE:FACTORY: your module "
            f"and the function in it that returns the Dataset, e.g. my_data:make{what}), "
            f"or from Python tune_loader(dataset, batch_size={shown})"
        )


def watch(  # noqa: PLR0913 (a keyword each, as DataLoader has)
    loader: Iterable[T],
    *,
    every: int = 100,
    batch_size: Optional[int] = None,
    threshold: float = 0.2,
    log: Optional[LogFn] = None,
    log_path: Union[str, os.PathLike[str], None] = None,
    gpu: Optional[int] = None,
) -> Watch[T]:
    """Wrap a DataLoader (any iterable of batches) to report, every `every` steps and when the loop ends,
    how fast it goes and how much of its time it waits for data:

        for images, labels in watch(loader, every=100, log_path="watch.jsonl"):
            ...

    `batch_size`: samples per batch, where dim 0 of the batch's first tensor is not it. `threshold`: the share
    of time waiting for data above which, for 2 intervals in a row, it says once how to tune the loader.
    `log`: a function taking each line (default: print to stderr), e.g. `logging.getLogger(__name__).info`.
    `log_path`: a JSONL file each interval is appended to as one object (schema bootstrap.watch/1). `gpu`: the
    CUDA device whose utilisation NVML reads (default: torch's current device, where this process runs
    CUDA; none without NVIDIA). Step numbers count on across epochs: each `for` over the result starts the
    loader again, its last interval is reported when it ends, and the next epoch's first interval begins.
    Bad arguments raise InputError before the first batch.
    """
    return Watch(loader, every=every, batch_size=batch_size, threshold=threshold, log=log, log_path=log_path, gpu=gpu)


def _check_arguments(loader: Any, every: Any, batch_size: Any, threshold: Any, log: Any, gpu: Any) -> None:
    """One InputError line naming the keyword and the fix, for the first bad argument."""
    if not isinstance(loader, IterableABC):
        problem = f"an object of type {type(loader).__name__} is not iterable"
        raise InputError("watch(loader)", problem, "pass the DataLoader, or any iterable of batches, the loop reads")
    if not _whole(every, 1):
        raise InputError(f"watch(every={excerpt(every)})", "is not a whole number of steps >= 1", "e.g. every=100")
    if batch_size is not None and not _whole(batch_size, 1):
        fix = "pass the samples per batch, or leave it out to read dim 0 of the batch's first tensor"
        raise InputError(f"watch(batch_size={excerpt(batch_size)})", "is not a whole number >= 1", fix)
    number = isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
    if not (number and 0 < threshold < 1):
        fix = "e.g. threshold=0.2: advice once the loop waits for data over 20% of the time"
        raise InputError(f"watch(threshold={excerpt(threshold)})", "is not a share strictly between 0 and 1", fix)
    if log is not None and not callable(log):
        fix = "pass a function taking one line, e.g. print or logging.getLogger(__name__).info, or None"
        raise InputError(f"watch(log={excerpt(log)})", f"is a {type(log).__name__}, not a callable", fix)
    if gpu is not None and not _whole(gpu, 0):
        fix = "pass the CUDA device index, e.g. gpu=0, or None for torch's current device"
        raise InputError(f"watch(gpu={excerpt(gpu)})", "is not a device index >= 0", fix)


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _writable(path: Union[str, os.PathLike[str], None]) -> Optional[Path]:
    """`path`, checked to be appendable now (and created, empty, if missing), so that a typo fails before the
    first batch rather than an hour into training."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        fix = "pass a file path such as 'runs/watch.jsonl', or None for no log"
        raise InputError(f"watch(log_path={excerpt(path)})", "is not a file path", fix)
    where, log_path = f"watch(log_path={str(path)!r})", Path(path)
    if not log_path.parent.is_dir():
        fix = f"create {log_path.parent} first, or give a path in a directory that exists"
        raise InputError(where, f"no directory {log_path.parent} to write the log in", fix)
    try:
        with open(log_path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        fix = "give a path in a directory you can write to"
        raise InputError(where, f"cannot be written: {exc.strerror or exc}", fix) from None
    return log_path
