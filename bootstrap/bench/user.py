"""The team's own workload (dataset, collate, sampler, model, step), built and checked in the main process,
and the one line that names it when it fails (docs/benchmark.md, "Your own dataset")."""

from __future__ import annotations

import collections
import copy
import importlib
import operator
import pickle
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from bootstrap.bench.config import option_name
from bootstrap.bench.frames import with_frames
from bootstrap.errors import InputError, excerpt

if TYPE_CHECKING:
    from bootstrap.bench.step import StepFailed

REF_FLAGS = (
    ("dataset", "--dataset"),
    ("collate", "--collate"),
    ("model", "--model"),
    ("step", "--step"),
    ("sampler", "--sampler"),
    ("batch_sampler", "--batch-sampler"),
)
_FLAGS = dict(REF_FLAGS)
_EXAMPLES = {  # what each flag's MODULE:NAME names, as a remedy shows it
    "--dataset": "my_data:make_dataset",
    "--collate": "my_data:collate",
    "--model": "my_model:make_model",
    "--step": "my_model:train_step",
    "--sampler": "my_data:make_sampler",
    "--batch-sampler": "my_data:make_batch_sampler",
}
ERROR_CHARS = 200  # of a user's error quoted in a message
SAMPLE_FIX = "fix that sample, or make __getitem__ (a stream: __iter__) skip what it cannot read"
MAX_SAMPLES = 2**31 - 1  # torch.randperm's int64 indices: 16 GiB at this length
_EMPTY_BATCH_FIX = (
    "a collate function that drops the samples that failed to load dropped them all: check the data, or what the "
    "collate keeps"
)
_LOSS_FIX = (
    "return the loss as a scalar tensor computed from the model's parameters (bench calls backward() on it, then "
    "takes an SGD step), or None when the step updates the model itself"
)
_PICKLE_FIX = (
    "under spawn (macOS, Windows, or set_start_method) a dataset must pickle: no lambdas or open handles in its "
    "attributes"
)
# What backward() says of a loss that is no scalar, or one that no parameter's computation made.
_NO_LOSS_SIGNS = ("grad can be implicitly created only for scalar outputs", "does not require grad")


@dataclass(frozen=True)
class UserWorkload:
    """What the run measures instead of the synthetic images: 'MODULE:NAME' references (the CLI) or the
    objects themselves (`tune_loader`). `paths` are prepended to sys.path before importing."""

    dataset: Any
    collate: Any = None
    model: Any = None
    step: Any = None
    paths: tuple[str, ...] = ()
    sampler: Any = None
    batch_sampler: Any = None

    def describe(self) -> dict[str, Any]:
        """The report's account of it: each reference as given, objects by their type."""
        out: dict[str, Any] = {}
        for name, _ in REF_FLAGS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value if isinstance(value, str) else f"<{type(value).__name__} object>"
        if self.paths:
            out["paths"] = list(self.paths)
        return out

    @property
    def named(self) -> bool:
        return isinstance(self.dataset, str)

    def where(self, name: str = "dataset") -> str:
        """How a message names part `name`: '--flag MODULE:NAME', else its tune_loader keyword."""
        value = getattr(self, name)
        if isinstance(value, str):
            return f"{_FLAGS[name]} {value}"
        if name == "dataset":
            return "dataset"
        keyword = "collate_fn" if name == "collate" else name
        return f"tune_loader({keyword}=...)"

    def where_with_type(self, name: str) -> str:
        """Part `name` as '--flag MODULE:NAME', else as its name and the object's type ('dataset Images')."""
        value = getattr(self, name)
        if isinstance(value, str):
            return self.where(name)
        return f"{name} {type(value).__name__}"


# --------------------------------------------------------------------------- references and errors


def check_ref(text: str, flag: str) -> str:
    """`text` if it reads MODULE:NAME (NAME may be dotted), else an InputError naming `flag`."""
    module, sep, name = text.partition(":")
    if not sep or not module.strip() or not name.strip() or ":" in name:
        raise InputError(f"{flag} {text}", "is not MODULE:NAME", f"e.g. {flag} {_EXAMPLES.get(flag, 'my_data:make')}")
    return text


def import_ref(ref: str, flag: str, paths: Sequence[str] = ()) -> Any:
    """The object `ref` ('MODULE:NAME') names, importing MODULE with `paths` first on sys.path."""
    check_ref(ref, flag)
    add_paths(paths)
    module_name, _, attr = ref.partition(":")
    where = f"{flag} {ref}"
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 (a user module's import may raise anything; SystemExit too)
        if passes_through(exc) or missing_torch(exc):  # no torch here: the CLI says where bench runs
            raise
        if isinstance(exc, ModuleNotFoundError) and module_name.startswith(exc.name or "\0"):
            fix = "run from the directory that holds it or add --path DIR"
        else:
            fix = "the error is in the module (or what it imports)"
        raise with_frames(InputError(where, f"cannot import {module_name}: {describe_error(exc)}", fix), exc) from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            fix = f"check the name after ':' ({getattr(module, '__file__', module_name)})"
            raise InputError(where, f"{module_name} has no attribute {attr!r}", fix)
        value = getattr(value, part)
    return value


def missing_torch(exc: BaseException) -> bool:
    """Whether `exc` says torch itself is not installed in this Python (not the user's module's fault)."""
    return isinstance(exc, ModuleNotFoundError) and exc.name == "torch"  # not one of its submodules: a typo


def add_paths(paths: Sequence[str]) -> None:
    for path in reversed([str(Path(p).absolute()) for p in paths]):
        if path not in sys.path:
            sys.path.insert(0, path)


def describe_error(exc: BaseException) -> str:
    """'TypeName: first line of its message', clipped (a user's message may hold a whole file, or not print)."""
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # noqa: BLE001 (the user's __str__)
        lines = []
    return clip(f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__)


def clip(text: str) -> str:
    """`text`, or its first ERROR_CHARS characters ending with '...', cut at the end of a word: where the
    clipped text is all the user gets, a word cut in two reads as a typo."""
    if len(text) <= ERROR_CHARS:
        return text
    cut = text[: ERROR_CHARS - 3]
    space = cut.rfind(" ")
    if space > ERROR_CHARS // 2:  # else one long word (a path, a blob of data): cut inside it
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "..."


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return clip(f"{type(exc).__name__}: {lines[0]}") if lines else type(exc).__name__


def passes_through(exc: BaseException) -> bool:
    """Whether `exc`, raised in the user's code, is not theirs to report: Ctrl-C, or the watchdog's stop."""
    from bootstrap.bench.watchdog import Stalled

    return isinstance(exc, (KeyboardInterrupt, Stalled))


def call_user(factory: Any, where: str, *args: Any) -> Any:
    """`factory(*args)`, the user's: what it raises is one InputError line naming `where`."""
    if not callable(factory):
        raise InputError(where, f"is a {type(factory).__name__}, not a callable", "name a function or class")
    try:
        return factory(*args)
    except BaseException as exc:  # noqa: BLE001 (whatever the user's factory raises is its problem, reported)
        if passes_through(exc) or isinstance(exc, InputError):  # InputError: bootstrap's own, already one line
            raise
        raise InputError(where, f"raised {describe_error(exc)}") from None


def is_stream(dataset: Any) -> bool:
    from torch.utils.data import IterableDataset

    return isinstance(dataset, IterableDataset)


# --------------------------------------------------------------------------- the dataset


def check_dataset(dataset: Any, where: str, batch_size: Optional[int], script: bool = False) -> Optional[int]:
    """The dataset's length (None for a stream), checked; `batch_size` None: its items are whole batches."""
    given = "is" if script else "returned"  # tune_loader is handed the object; a factory returns it
    if isinstance(dataset, (str, bytes, dict)):  # have __len__ and __getitem__, but index no samples
        fix = "return the Dataset object (an instance with __len__ and __getitem__)"
        raise InputError(where, f"{given} a {type(dataset).__name__}, not a Dataset", fix)
    if is_stream(dataset):
        return None  # its length, if it has one, is a hint DataLoader does not rely on
    _check_indexed(dataset, where, given)
    try:
        length = len(dataset)
    except Exception as exc:  # noqa: BLE001 (the user's __len__)
        raise InputError(where, f"len(dataset) raised {describe_error(exc)}") from None
    if length > MAX_SAMPLES:
        problem = f"has {excerpt(length)} samples: bench shuffles with torch.randperm, which needs 8 bytes a sample"
        fix = f"give bench a subset (torch.utils.data.Subset) of at most {MAX_SAMPLES:,} samples"
        raise InputError(where, problem, fix)
    if length == 0:
        raise InputError(where, "returned an empty dataset (length 0)", "point it at the data it should load")
    if batch_size is not None and length < batch_size:
        problem = f"has {length} samples, fewer than one batch ({batch_size})"
        raise InputError(where, problem, f"give a smaller {option_name('batch_size', script)}")
    return length


def _check_indexed(dataset: Any, where: str, given: str) -> None:
    """Refuse a dataset without __len__ and __getitem__: bench shuffles the samples by index."""
    from torch.utils.data import Dataset

    try:
        missing = [name for name in ("__len__", "__getitem__") if not hasattr(dataset, name)]
    except Exception as exc:  # noqa: BLE001 (a __getattr__ that raises what hasattr does not catch)
        raise InputError(where, f"looking up __len__ raised {describe_error(exc)}") from None
    if not missing:
        return
    # torch's Dataset base class defines neither __len__ nor a working __getitem__: a subclass must
    what = "a torch.utils.data.Dataset" if isinstance(dataset, Dataset) else "an object"
    without = " or ".join(missing)
    problem = f"{given} {type(dataset).__name__}, {what} without {without}: bench shuffles the samples by index"
    if hasattr(type(dataset), "__iter__") or callable(dataset):  # a generator, or its function
        fix = "wrap the stream in a torch.utils.data.IterableDataset whose __iter__ yields the samples"
    else:
        fix = "give it __len__ and __getitem__"
    raise InputError(where, problem, fix)


# --------------------------------------------------------------------------- the sampler


@dataclass(frozen=True)
class Sampling:
    """The user's own sampler or batch sampler, built; neither: bench's seeded shuffle."""

    sampler: Optional[Checked] = None
    batch_sampler: Optional[Checked] = None


def loader_kwargs(
    dataset: Any, batch_size: Optional[int], seed: int, sampling: Optional[Sampling] = None
) -> dict[str, Any]:
    """DataLoader's keywords for how batches are formed and ordered: full batches of `batch_size` (None: the
    dataset's own), drawn by the user's sampler or shuffled alike by every loader; a stream in its own order."""
    import torch

    sampling = sampling or Sampling()
    if sampling.batch_sampler is not None:
        return {"batch_sampler": sampling.batch_sampler}
    batching: dict[str, Any] = {"batch_size": batch_size, "drop_last": batch_size is not None}
    if is_stream(dataset):
        return batching
    if sampling.sampler is not None:
        return {**batching, "sampler": sampling.sampler}
    generator = torch.Generator()
    generator.manual_seed(seed)
    return {**batching, "shuffle": True, "generator": generator}


def build_sampling(user: UserWorkload, dataset: Any, where: str) -> Sampling:
    """The user's sampler or batch sampler for `dataset` (a reference is called with it), checked."""
    given = [name for name in ("sampler", "batch_sampler") if getattr(user, name) is not None]
    if not given:
        return Sampling()
    if len(given) == 2:
        problem = "takes the place of a sampler: DataLoader accepts one or the other"
        fix = "drop the sampler, or have the batch sampler draw from it"
        raise InputError(user.where("batch_sampler"), problem, fix)
    name = given[0]
    value = getattr(user, name)
    named_as = user.where(name)
    batches = name == "batch_sampler"
    if is_stream(dataset):
        problem = f"does not apply to {where}, a stream (IterableDataset), which DataLoader reads in its own order"
        raise InputError(named_as, problem, "drop it, or order the stream in its __iter__")
    if isinstance(value, str):
        value = call_user(import_ref(value, _FLAGS[name], user.paths), named_as, dataset)
    if not hasattr(type(value), "__iter__"):
        lists = "lists of " if batches else ""
        problem = f"is a {type(value).__name__}, not a sampler (an iterable of {lists}indices)"
        fix = "give a torch.utils.data.BatchSampler or a sampler yielding lists of indices"
        raise InputError(named_as, problem, fix if batches else "give a torch.utils.data.Sampler")
    if iter(value) is value:  # a generator or another iterator: used up by the first epoch
        problem = f"is an iterator ({type(value).__name__}), used up after one pass"
        raise InputError(named_as, problem, "give a Sampler, whose __iter__ starts afresh each epoch")
    length = len(dataset) if hasattr(dataset, "__len__") else None
    checked = Checked(value, named_as, length, batches)
    return Sampling(batch_sampler=checked) if batches else Sampling(sampler=checked)


class Checked:
    """The user's sampler as DataLoader draws from it: what it raises or yields wrongly is one InputError
    naming it, not a sample that failed to load. `batches`: a batch sampler (it yields lists of indices)."""

    def __init__(self, sampler: Any, where: str, length: Optional[int], batches: bool) -> None:
        self.sampler = sampler
        self.where = where
        self.length = length
        self.batches = batches
        self.lengths: collections.deque[int] = collections.deque()  # a batch sampler's lists drawn, not yet come back

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[Any]:
        try:
            drawn = iter(self.sampler)
        except Exception as exc:  # noqa: BLE001 (the user's __iter__)
            problem = f"raised {_first_line(exc)} when iterated"
            raise InputError(self.where, problem, "fix the sampler's __iter__") from None
        lengths: collections.deque[int] = collections.deque()  # a new pass: an earlier loader's leftovers are not ours
        self.lengths = lengths
        while True:
            try:
                item = next(drawn)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 (the user's sampler)
                problem = f"raised {_first_line(exc)} while drawing indices"
                raise InputError(self.where, problem, "fix the sampler") from None
            if self.batches:
                self._check_list(item)
                lengths.append(len(item))
            else:
                self._check_index(item)
            yield item

    def first_length(self) -> int:
        """The length of the first list of indices this batch sampler gave: the first batch's, as drawn
        (a random batch sampler drawn again could give another)."""
        if self.lengths:
            return self.lengths[0]
        try:
            first = next(iter(self), None)
            length = len(first) if first is not None else 0
        except Exception as exc:  # noqa: BLE001 (the user's sampler)
            problem = f"raised {type(exc).__name__} while giving its first batch of indices"
            raise InputError(self.where, problem) from None
        if not length:
            fix = "give a batch sampler that yields non-empty lists of indices"
            raise InputError(self.where, "gave no first batch of indices (empty, or none at all)", fix)
        return length

    def _check_list(self, item: Any) -> None:
        if isinstance(item, (str, bytes)) or not hasattr(item, "__len__") or not hasattr(item, "__iter__"):
            problem = f"yielded {type(item).__name__} {excerpt(item)} where a batch sampler yields lists of indices"
            fix = "yield lists of indices (a plain sampler goes in --sampler / sampler=)"
            raise InputError(self.where, problem, fix)
        if not len(item):
            raise InputError(self.where, "yielded an empty list of indices", "yield only batches of one index or more")
        for index in item:
            self._check_index(index)

    def _check_index(self, index: Any) -> None:
        try:
            position = operator.index(index)
        except TypeError:  # a key the dataset's __getitem__ takes ((mosaic, index), a file name): its own
            return
        if position < 0 or (self.length is not None and position >= self.length):
            outside = f"outside the dataset's {self.length} samples" if self.length is not None else "below 0"
            fix = "draw indices from 0 to len(dataset) - 1"
            raise InputError(self.where, f"yielded index {position}, {outside}", fix)


# --------------------------------------------------------------------------- what workers must import


def check_workers_can_import(sent: Sequence[tuple[str, Any]]) -> None:
    """Refuse an object of `sent` ((where, object) pairs) that refers to a class or function of a fileless
    `__main__` (`python -c`, a notebook), which workers started by spawn or forkserver cannot import."""
    from bootstrap.compat.host import probe_start_method

    method = probe_start_method()[0]
    if method == "fork" or getattr(sys.modules.get("__main__"), "__file__", None):
        return
    for where, value in sent:
        name = main_reference(value)
        if name is not None:
            defined = f"{name} is defined in __main__ (python -c, a notebook)"
            problem = f"{defined}, which DataLoader workers started by {method} cannot import"
            fix = "define it in an importable module (a .py file next to the notebook) and import it"
            raise InputError(where, problem, fix)


def check_function_pickles(where: str, function: Any) -> None:
    """Refuse a collate function that workers started by spawn or forkserver cannot receive (a lambda)."""
    from bootstrap.compat.host import probe_start_method

    method = probe_start_method()[0]
    if method == "fork" or function is None:
        return
    try:
        pickle.dumps(function)
    except Exception as exc:  # noqa: BLE001 (pickling a user's object may raise anything)
        if isinstance(function, types.FunctionType):
            fix = "define it with def at a module's top level: a lambda or a nested function does not pickle"
        else:
            fix = (
                f"the {type(function).__name__} object is sent with what it holds: keep what does not pickle (a "
                "lock, an open file, a lambda) out of its attributes, or drop it in __getstate__ and remake it on use"
            )
        problem = f"cannot be sent to DataLoader workers started by {method}: {_first_line(exc)}"
        raise InputError(where, problem, fix) from None


def main_reference(value: Any) -> Optional[str]:
    """The qualified name of the first class or function of `__main__` that pickling `value` refers to;
    None when there is none, or when `value` does not pickle at all (the run reports that)."""

    class Found(Exception):
        pass

    class Probe(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            referenced = obj if isinstance(obj, (type, types.FunctionType)) else type(obj)
            if getattr(referenced, "__module__", None) == "__main__":
                raise Found(getattr(referenced, "__qualname__", repr(referenced)))
            if type(obj).__module__.split(".")[0] in ("torch", "numpy") and hasattr(obj, "shape"):
                return (tuple, ())  # a tensor or an array: its class checked above, its data irrelevant
            return NotImplemented

    class Discard:
        def write(self, data: Any) -> int:
            return len(data)

    try:
        Probe(Discard()).dump(value)
    except Found as found:
        return str(found)
    except Exception:  # noqa: BLE001 (a user's __reduce__ or __getstate__ may raise anything)
        return None
    return None


# --------------------------------------------------------------------------- resolving it all


@dataclass
class UserParts:
    """A `UserWorkload` resolved in the main process, its first batch already made."""

    dataset: Any
    collate_fn: Optional[Callable[..., Any]]
    model_factory: Optional[Callable[[], Any]]
    step_fn: Optional[Callable[..., Any]]
    first_batch: Any
    batch_s: float  # one batch loaded in this process (a stream's second: see `resolve`)
    samples: int  # in a batch: the batch size, or the length of the first (a dataset's, a batch sampler's)
    sampling: Sampling = Sampling()


_END = object()  # what `next` gives past the last batch: None is a batch, a collate function's mistake


def resolve(user: UserWorkload, batch_size: Optional[int], seed: int = 0) -> UserParts:
    """Import and build every part, then make one batch in this process. `batch_size` None: the dataset
    yields whole batches, each passed through collate_fn alone (default: `default_convert`)."""
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import default_collate, default_convert

    add_paths(user.paths)
    collate_fn = _part(user, "collate")
    step_fn = _part(user, "step")
    model_factory = _model_factory(user)
    where = user.where_with_type("dataset")
    built, dataset = _build_dataset(user, where, None if user.batch_sampler is not None else batch_size)
    sampling = build_sampling(user, built, where)
    check_workers_can_import([(where, dataset), (user.where("collate"), collate_fn)])
    check_function_pickles(user.where("collate"), collate_fn)
    collating = _Collating(collate_fn or (default_collate if batch_size is not None else default_convert))
    try:
        batches = iter(DataLoader(dataset, collate_fn=collating, **loader_kwargs(dataset, batch_size, seed, sampling)))
        started = time.perf_counter()
        first = next(batches, _END)
        batch_s = time.perf_counter() - started
        if first is not _END and is_stream(dataset):  # its first batch also paid for opening it: time the second
            started = time.perf_counter()
            if next(batches, _END) is not _END:
                batch_s = time.perf_counter() - started
    except BaseException as exc:  # noqa: BLE001 (the user's __getitem__ or collate; sys.exit too)
        if passes_through(exc) or isinstance(exc, InputError):  # InputError: the sampler's (`Checked`)
            raise
        raise _first_batch_error(user, where, exc, collating.raised, batch_size is None) from None
    _check_first(first, user, where, batch_size, sampling)
    samples = _first_batch_samples(first, batch_size, sampling, where, user.named)
    return UserParts(dataset, collate_fn, model_factory, step_fn, first, batch_s, samples, sampling)


def _build_dataset(user: UserWorkload, where: str, batch_size: Optional[int]) -> tuple[Any, Any]:
    """(the user's dataset, checked; what DataLoader reads: a named one travels to workers as its name)."""
    from bootstrap.bench.named import NamedDataset, NamedStream

    if not user.named:
        check_dataset(user.dataset, where, batch_size, script=True)
        return user.dataset, user.dataset
    built = call_user(import_ref(user.dataset, "--dataset", user.paths), where)
    check_dataset(built, where, batch_size)
    wrap = NamedStream if is_stream(built) else NamedDataset
    return built, wrap(user.dataset, user.paths, built)


def _check_first(first: Any, user: UserWorkload, where: str, batch_size: Optional[int], sampling: Sampling) -> None:
    a_batch = "the batch: a tensor, or a tuple, list or dict of tensors"
    if first is None and user.collate is not None:
        raise InputError(user.where("collate"), "returned None for the first batch", f"return {a_batch}")
    if first is None:  # `default_convert` passes a None item on as the batch; `default_collate` never makes one
        raise InputError(where, "yielded None as a whole batch (read with no collate function)", f"yield {a_batch}")
    if first is not _END:
        return
    smaller = f"give a smaller {option_name('batch_size', not user.named)}"
    if sampling.sampler is not None:  # a map-style dataset long enough for one batch
        problem = f"drew fewer indices than one batch ({batch_size})"
        raise InputError(sampling.sampler.where, problem, f"draw at least one batch, or {smaller}")
    if batch_size is None:  # only a stream can end before its first batch
        raise InputError(where, "the stream ended before its first batch", "point it at more data")
    problem = f"the stream ended before one batch ({batch_size} samples)"
    raise InputError(where, problem, f"point it at more data, or {smaller}")


def _first_batch_samples(first: Any, batch_size: Optional[int], sampling: Sampling, where: str, named: bool) -> int:
    """The samples the first batch counts: the batch size, else (the dataset's own batches, or a batch
    sampler's) the first dimension its tensors share, else the batch sampler's first list's length."""
    from bootstrap.bench.batch import own_batch_problem, shared_first_dim

    shared = shared_first_dim(first)[0]
    if shared == 0:
        raise InputError(where, "its first batch holds no samples (its tensors are empty)", _EMPTY_BATCH_FIX)
    if sampling.batch_sampler is not None:
        return shared if shared is not None else sampling.batch_sampler.first_length()
    if batch_size is not None:
        return batch_size
    problem = own_batch_problem(first)
    if problem:
        instead = "drop --batched" if named else "pass tune_loader a batch_size"
        whole = "yield whole batches, samples along the first dimension of every tensor (batch-first)"
        raise InputError(where, problem, f"{whole}, or {instead} and let the DataLoader batch the samples")
    assert shared is not None  # no problem: the tensors share their first dimension
    return shared


class _Collating:
    """The collate function, noting whether it raised: a batch that fails to collate (samples of several
    shapes) and a sample that fails to load have different fixes."""

    def __init__(self, collate: Callable[..., Any]) -> None:
        self.collate = collate
        self.raised = False

    def __call__(self, samples: Any) -> Any:
        try:
            return self.collate(samples)
        except BaseException:
            self.raised = True
            raise


def _first_batch_error(
    user: UserWorkload, where: str, exc: BaseException, in_collate: bool, batched: bool
) -> InputError:
    """The first batch's error, raised by `__getitem__` or, `in_collate`, by collation (`batched`: of one
    whole batch the dataset made)."""
    named = isinstance(user.collate, str)
    if not isinstance(exc, Exception):
        fix = "a sample must return, not exit"
    elif not in_collate:
        fix = SAMPLE_FIX
    elif batched and user.collate is not None:
        whole = "one whole batch the dataset made, not a list of samples"
        if named:
            fix = f"with --batched the collate function is given {whole}: fix it for that, or drop it"
        else:
            fix = f"with batch_size=None collate_fn is given {whole}"
    elif named:
        fix = "fix --collate"
    elif user.collate is not None:
        fix = "fix collate_fn: it must make one batch of the samples"
    else:
        own = "give a --collate MODULE:FN" if user.named else "pass a collate_fn"
        fix = f"make samples tensors of one shape, or {own} that makes the batch"
    by = f" with --collate {user.collate}" if in_collate and named else ""
    return InputError(where, f"could not load one batch{by}: {describe_error(exc)}", fix)


def _part(user: UserWorkload, name: str) -> Optional[Callable[..., Any]]:
    """The user's collate, step or model factory: the object, or what its reference names."""
    value = getattr(user, name)
    if value is None:
        return None
    found = import_ref(value, _FLAGS[name], user.paths) if isinstance(value, str) else value
    if not callable(found):
        raise InputError(user.where(name), f"is a {type(found).__name__}, not a callable")
    return found  # type: ignore[no-any-return]


def _model_factory(user: UserWorkload) -> Optional[Callable[[], Any]]:
    """What builds the model; a module given as an object is copied each time, so its weights are not trained."""
    import torch.nn as nn

    value = user.model
    if value is None:
        return None
    if isinstance(value, nn.Module):
        return lambda: copy.deepcopy(value)
    factory = _part(user, "model")
    where = user.where_with_type("model")

    def build() -> Any:
        model = call_user(factory, where)
        if not isinstance(model, nn.Module):
            raise InputError(where, f"returned {type(model).__name__}, not a torch.nn.Module")
        return model

    return build


# --------------------------------------------------------------------------- the step's errors


def step_where(user: UserWorkload, model_name: str) -> str:
    """How a message names the code the step runs: the user's step, else their model, else the built-in step."""
    for name in ("step", "model"):
        value = getattr(user, name)
        if isinstance(value, str):
            return user.where(name)
        if value is not None:
            return name
    on = f" on --dataset {user.dataset}" if user.named else ""
    return f"the built-in step ({model_name}){on}"


def step_error_fix(user: UserWorkload, error: BaseException, own_batches: bool) -> str:
    """The fix for what the step raised, where its kind says it whatever the batch; '' otherwise.
    `own_batches`: the DataLoader did not size the batches (the dataset's own, a batch sampler's)."""
    import torch

    from bootstrap.bench.step import GraphFreed, NoParameters, NotALoss

    if isinstance(error, GraphFreed):
        return error.fix
    script = not user.named
    if isinstance(error, NoParameters):
        own_step = "step=" if script else "a --step"
        nothing = "bench's backward pass and SGD update have nothing to train"
        return f"{nothing}: give a model with parameters, or {own_step} that updates the model itself and returns None"
    if user.step is not None and (isinstance(error, NotALoss) or any(s in str(error) for s in _NO_LOSS_SIGNS)):
        return _LOSS_FIX
    out_of_memory = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    if not isinstance(error, (MemoryError, out_of_memory)):
        return ""
    if own_batches:
        return "the step ran out of memory: make the dataset's (or the batch sampler's) batches smaller"
    return f"the step ran out of memory: give a smaller {option_name('batch_size', script)}"


def builtin_step_fix(user: UserWorkload, batch: Any, num_classes: int) -> str:
    """What the built-in step needs that `batch` (the user's) may lack: (images, labels), labels a tensor."""
    import torch

    script = not user.named
    own_step = "or pass step=" if script else "or give --step MODULE:FN"
    if not isinstance(batch, (list, tuple)) or len(batch) != 2:
        sequence = isinstance(batch, (list, tuple))
        held = f"{type(batch).__name__} of {len(batch)} items" if sequence else type(batch).__name__
        return f"the built-in step takes (images, labels) batches, not a {held}; {own_step}"
    images, labels = batch
    if not isinstance(labels, torch.Tensor):
        held = type(labels).__name__
        if isinstance(labels, (list, tuple)) and labels:
            held += f" of {type(labels[0]).__name__}"
        takes = f"the built-in step takes labels as a tensor of class indices below {num_classes}"
        return f"{takes}, not a {held}: return each label as an int index from __getitem__, {own_step}"
    if not isinstance(images, torch.Tensor):
        return f"the built-in step takes images as one tensor N x 3 x H x W, not a {type(images).__name__}; {own_step}"
    more = "" if script else " (more: `options: {num_classes: N}` in a --config file)"
    takes = f"the built-in step takes (images, labels) batches: images N x 3 x H x W, labels below {num_classes}"
    return f"{takes}{more}; {own_step}"


def step_failed(
    user: UserWorkload, exc: StepFailed, during: str, model_name: str, own_batches: bool, num_classes: int
) -> InputError:
    """The one line for a training step that raised `during` the run."""
    fix = step_error_fix(user, exc.error, own_batches)
    if not fix and user.step is not None:
        fix = "the step runs in this process on every batch the loader gives: fix it for this batch"
    elif not fix and user.model is not None:
        fix = "the built-in step runs the model on every batch the loader gives: fix the model for this batch"
    elif not fix:
        fix = builtin_step_fix(user, exc.batch, num_classes)
    return InputError(step_where(user, model_name), f"{describe_step_error(exc.error, 'raised ')} {during}", fix)


def describe_step_error(error: BaseException, raised: str = "") -> str:
    """What the step did, for its one line: bench's own words for a loss it could not backpropagate (torch's
    are a paragraph), else `raised` and `describe_error`'s 'TypeName: first line'."""
    from bootstrap.bench.step import GraphFreed

    return str(error) if isinstance(error, GraphFreed) else f"{raised}{describe_error(error)}"


def user_where(user: UserWorkload) -> str:
    """The user's references a message names: the dataset, and the collate, model and step when given."""
    named = [user.where(name) for name in ("collate", "model", "step") if isinstance(getattr(user, name), str)]
    return " ".join([user.where(), *named])


def code_error(user: UserWorkload, exc: BaseException, phase: str) -> InputError:
    """The one line for what escaped the run's phases from the user's code (sys.exit, an unexpected error)."""
    if "pickle" in str(exc).lower():  # spawn/forkserver: DataLoader pickles the dataset for each worker
        return InputError(user_where(user), f"cannot be sent to DataLoader workers: {describe_error(exc)}", _PICKLE_FIX)
    debug = "" if not user.named else " (--debug)"  # a script's traceback shows the cause as it is
    exited = "" if isinstance(exc, Exception) else "a sample, collate or step must return, not exit; "
    problem = f"{describe_error(exc)} in the {phase} phase: stopped"
    return InputError(user_where(user), problem, f"{exited}the traceback is the error's cause{debug}")
