"""The team's own workload: their Dataset, collate function, sampler, model and step, and what is wrong
with them, in one line naming the reference (docs/benchmark.md, "Your own dataset").

`bench --dataset MODULE:FACTORY [--collate ...] [--model ...] [--step ...] [--sampler ...]` names them
by import path; `tune_loader(dataset, ...)` passes the objects. `resolve` imports and builds them in
the main process and makes one batch there, so a workload that cannot feed the run fails before it.
"""

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
from typing import Any, Callable, Deque, Dict, Iterator, Optional, Sequence, Tuple

from bootstrap.bench.config import option_name
from bootstrap.errors import InputError, excerpt

REF_FLAGS = (
    ("dataset", "--dataset"),
    ("collate", "--collate"),
    ("model", "--model"),
    ("step", "--step"),
    ("sampler", "--sampler"),
    ("batch_sampler", "--batch-sampler"),
)
REF_KEYWORDS = {"--dataset": "dataset", "--collate": "collate_fn", "--model": "model", "--step": "step"}
REF_KEYWORDS.update({"--sampler": "sampler", "--batch-sampler": "batch_sampler"})
ERROR_CHARS = 200  # of a user's error quoted in a message
SAMPLE_FIX = "fix that sample, or make __getitem__ (a stream: __iter__) skip what it cannot read"
MAX_SAMPLES = 2**31 - 1  # torch.randperm's int64 indices: 16 GiB at this length


@dataclass(frozen=True)
class UserWorkload:
    """What the run measures instead of the synthetic images: 'MODULE:NAME' references (the CLI) or the
    objects themselves (`tune_loader`). `paths` are prepended to sys.path before importing."""

    dataset: Any
    collate: Any = None
    model: Any = None
    step: Any = None
    paths: Tuple[str, ...] = ()
    sampler: Any = None  # the user's own order, or batches of indices
    batch_sampler: Any = None

    def describe(self) -> Dict[str, Any]:
        """The report's account of it: each reference as given, objects by their type."""
        out: Dict[str, Any] = {}
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
        """How a message names part `name`: its flag and reference, else its keyword (`dataset`: 'dataset')."""
        value, flag = getattr(self, name), dict(REF_FLAGS)[name]
        if isinstance(value, str):
            return f"{flag} {value}"
        return "dataset" if name == "dataset" else f"tune_loader({REF_KEYWORDS[flag]}=...)"


# --------------------------------------------------------------------------- references and errors


def check_ref(text: str, flag: str) -> str:
    """`text` if it reads MODULE:NAME (NAME may be dotted), else an InputError naming `flag`."""
    module, sep, name = text.partition(":")
    if not sep or not module.strip() or not name.strip() or ":" in name:
        raise InputError(f"{flag} {text}", "is not MODULE:NAME", f"e.g. {flag} my_data:make_dataset")
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
        if passes_through(exc):
            raise
        not_found = isinstance(exc, ModuleNotFoundError) and module_name.startswith(exc.name or "\0")
        fix = "run from the directory that holds it or add --path DIR" if not_found else ""
        raise InputError(
            where,
            f"cannot import {module_name}: {describe_error(exc)}",
            fix or "the error is in the module (or what it imports)",
        ) from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            fix = f"check the name after ':' ({getattr(module, '__file__', module_name)})"
            raise InputError(where, f"{module_name} has no attribute {attr!r}", fix)
        value = getattr(value, part)
    return value


def add_paths(paths: Sequence[str]) -> None:
    for path in reversed([str(Path(p).absolute()) for p in paths]):
        if path not in sys.path:
            sys.path.insert(0, path)


def describe_error(exc: BaseException) -> str:
    """'TypeName: first line of its message' (the type alone when it has none), clipped: a user's exception
    may carry a whole file in its message, or fail to print at all."""
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # noqa: BLE001 (the user's __str__)
        lines = []
    return clip(f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__)


def clip(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."


def passes_through(exc: BaseException) -> bool:
    """Whether `exc`, raised in the user's code, is not the user's to report: Ctrl-C, or the watchdog
    stopping a run that is stuck."""
    from bootstrap.bench.watchdog import Stalled

    return isinstance(exc, (KeyboardInterrupt, Stalled))


def call_user(factory: Any, where: str, *args: Any) -> Any:
    """`factory(*args)`, the user's: what it raises is one InputError line naming `where`."""
    if not callable(factory):
        raise InputError(where, f"is a {type(factory).__name__}, not a callable", "name a function or class")
    try:
        return factory(*args)
    except BaseException as exc:  # noqa: BLE001 (whatever the user's factory raises is its problem, reported)
        if passes_through(exc):
            raise
        raise InputError(where, f"raised {describe_error(exc)}") from None


def is_stream(dataset: Any) -> bool:
    """Whether DataLoader reads `dataset` as an iterable stream rather than by index."""
    from torch.utils.data import IterableDataset

    return isinstance(dataset, IterableDataset)


# --------------------------------------------------------------------------- the dataset


def check_dataset(dataset: Any, where: str, batch_size: Optional[int], script: bool = False) -> Optional[int]:
    """The dataset's length (None for a stream); an InputError for what is no Dataset or holds too few
    samples (`batch_size` None: its items are batches)."""
    from torch.utils.data import Dataset

    given = "is" if script else "returned"  # tune_loader is handed the object; a factory returns it
    if isinstance(dataset, (str, bytes, dict)):  # have __len__ and __getitem__, but index no samples
        fix = "return the Dataset object (an instance with __len__ and __getitem__)"
        raise InputError(where, f"{given} a {type(dataset).__name__}, not a Dataset", fix)
    if is_stream(dataset):
        return None  # its length, if it has one, is a hint DataLoader does not rely on
    try:
        missing = [name for name in ("__len__", "__getitem__") if not hasattr(dataset, name)]
    except Exception as exc:  # noqa: BLE001 (a __getattr__ that raises what hasattr does not catch)
        raise InputError(where, f"looking up __len__ raised {describe_error(exc)}") from None
    if missing:
        # torch's Dataset base class defines neither __len__ nor a working __getitem__: a subclass must
        what = "a torch.utils.data.Dataset" if isinstance(dataset, Dataset) else "an object"
        iterable = hasattr(type(dataset), "__iter__") or callable(dataset)  # a generator, or its function
        problem = f"{given} {type(dataset).__name__}, {what} without {' or '.join(missing)}: bench shuffles the "
        fix = "wrap the stream in a torch.utils.data.IterableDataset whose __iter__ yields the samples"
        raise InputError(where, problem + "samples by index", fix if iterable else "give it __len__ and __getitem__")
    try:
        length = len(dataset)
    except Exception as exc:  # noqa: BLE001 (the user's __len__)
        raise InputError(where, f"len(dataset) raised {describe_error(exc)}") from None
    if length > MAX_SAMPLES:
        problem = f"has {excerpt(length)} samples: bench shuffles with torch.randperm, which needs 8 bytes a sample"
        raise InputError(
            where, problem, f"give bench a subset (torch.utils.data.Subset) of at most {MAX_SAMPLES:,} samples"
        )
    if length == 0:
        raise InputError(where, "returned an empty dataset (length 0)", "point it at the data it should load")
    if batch_size is not None and length < batch_size:
        problem = f"has {length} samples, fewer than one batch ({batch_size})"
        raise InputError(where, problem, f"give a smaller {option_name('batch_size', script)}")
    return length


# --------------------------------------------------------------------------- the sampler


@dataclass(frozen=True)
class Sampling:
    """The user's own sampler or batch sampler, built; neither: bench's seeded shuffle."""

    sampler: Optional[Checked] = None
    batch_sampler: Optional[Checked] = None


def loader_kwargs(
    dataset: Any, batch_size: Optional[int], seed: int, sampling: Optional[Sampling] = None
) -> Dict[str, Any]:
    """DataLoader's keywords for how batches are formed and ordered: `batch_size` samples a batch, the last
    short one dropped (None: the dataset yields whole batches), drawn by the user's sampler or shuffled by a
    generator seeded afresh (every loader reads the same order); a batch sampler's own batches; a stream in
    its own order (DataLoader refuses to shuffle one)."""
    import torch

    sampling = sampling or Sampling()
    if sampling.batch_sampler is not None:
        return {"batch_sampler": sampling.batch_sampler}
    batching: Dict[str, Any] = {"batch_size": batch_size, "drop_last": batch_size is not None}
    if is_stream(dataset):
        return batching
    if sampling.sampler is not None:
        return {**batching, "sampler": sampling.sampler}
    generator = torch.Generator()
    generator.manual_seed(seed)
    return {**batching, "shuffle": True, "generator": generator}


def build_sampling(user: UserWorkload, dataset: Any, where: str) -> Sampling:
    """The user's sampler and batch sampler for `dataset`: objects as given, 'MODULE:FN' references called
    with the dataset. Refused in one line: both at once, either for a stream, what iterates no indices."""
    given = {name: getattr(user, name) for name in ("sampler", "batch_sampler") if getattr(user, name) is not None}
    if not given:
        return Sampling()
    names = {name: user.where(name) for name in given}
    if len(given) == 2:
        problem = "takes the place of a sampler: DataLoader accepts one or the other"
        raise InputError(names["batch_sampler"], problem, "drop the sampler, or have the batch sampler draw from it")
    name, value = next(iter(given.items()))
    flag = dict(REF_FLAGS)[name]
    if is_stream(dataset):
        problem = f"does not apply to {where}, a stream (IterableDataset), which DataLoader reads in its own order"
        raise InputError(names[name], problem, "drop it, or order the stream in its __iter__")
    built = call_user(import_ref(value, flag, user.paths), names[name], dataset) if isinstance(value, str) else value
    if not hasattr(type(built), "__iter__"):
        lists = "lists of " if name == "batch_sampler" else ""
        problem = f"is a {type(built).__name__}, not a sampler (an iterable of {lists}indices)"
        fix = "give a torch.utils.data.BatchSampler or a sampler yielding lists of indices"
        raise InputError(names[name], problem, fix if lists else "give a torch.utils.data.Sampler")
    if iter(built) is built:  # a generator or another iterator: used up by the first epoch
        problem = f"is an iterator ({type(built).__name__}), used up after one pass"
        raise InputError(names[name], problem, "give a Sampler, whose __iter__ starts afresh each epoch")
    length = len(dataset) if hasattr(dataset, "__len__") else None
    return Sampling(**{name: Checked(built, names[name], length, batches=name == "batch_sampler")})


class Checked:
    """The user's sampler as DataLoader iterates it, in the main process: what it yields checked, and what
    it raises or yields wrongly made one InputError naming it, not a sample that failed to load."""

    def __init__(self, sampler: Any, where: str, length: Optional[int], batches: bool) -> None:
        self.sampler, self.where, self.length, self.batches = sampler, where, length, batches
        self.lengths: Deque[int] = collections.deque()  # a batch sampler's lists drawn, not yet come back

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[Any]:
        try:
            drawn = iter(self.sampler)
        except Exception as exc:  # noqa: BLE001 (the user's __iter__)
            raise InputError(
                self.where, f"raised {_first_line(exc)} when iterated", "fix the sampler's __iter__"
            ) from None
        lengths = self.lengths = collections.deque()  # a new pass: an earlier loader's leftovers are not ours
        while True:
            try:
                item = next(drawn)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 (the user's sampler)
                raise InputError(
                    self.where, f"raised {_first_line(exc)} while drawing indices", "fix the sampler"
                ) from None
            if self.batches:
                self._check_list(item)
                lengths.append(len(item))
            else:
                self._check_index(item)
            yield item

    def _check_list(self, item: Any) -> None:
        if isinstance(item, (str, bytes)) or not hasattr(item, "__len__") or not hasattr(item, "__iter__"):
            problem = f"yielded {type(item).__name__} {excerpt(item)} where a batch sampler yields lists of indices"
            raise InputError(
                self.where, problem, "yield lists of indices (a plain sampler goes in --sampler / sampler=)"
            )
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
            raise InputError(
                self.where, f"yielded index {position}, {outside}", "draw indices from 0 to len(dataset) - 1"
            )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


def first_list_length(batch_sampler: Any, given: Any) -> int:
    """The length of the batch sampler's first list of indices: what a batch whose tensors share no first
    dimension (torchvision's detection batches) counts as."""
    where = f"--batch-sampler {given}" if isinstance(given, str) else "tune_loader(batch_sampler=...)"
    try:
        first = next(iter(batch_sampler), None)
        length = len(first) if first is not None else 0
    except Exception as exc:  # noqa: BLE001 (the user's sampler)
        raise InputError(where, f"raised {type(exc).__name__} while giving its first batch of indices") from None
    if not length:
        fix = "give a batch sampler that yields non-empty lists of indices"
        raise InputError(where, "gave no first batch of indices (empty, or none at all)", fix)
    return length


# --------------------------------------------------------------------------- what workers must import


def check_workers_can_import(sent: Sequence[Tuple[str, Any]]) -> None:
    """Refuse, in one line naming it, an object in `sent` ((where, object) pairs) that refers to a class or
    function of a fileless `__main__` (`python -c`, a notebook), when workers start by spawn or forkserver:
    they cannot import it, and every worker would die with "Can't get attribute"."""
    from bootstrap.compat.host import probe_start_method

    method = probe_start_method()[0]
    if method == "fork" or getattr(sys.modules.get("__main__"), "__file__", None):
        return
    for where, value in sent:
        name = None if value is None else main_reference(value)
        if name is not None:
            problem = f"{name} is defined in __main__ (python -c, a notebook), which DataLoader workers started by"
            fix = "define it in an importable module (a .py file next to the notebook) and import it"
            raise InputError(where, f"{problem} {method} cannot import", fix)


def check_function_pickles(where: str, function: Any) -> None:
    """Refuse, in one line naming it, a collate function that workers started by spawn or forkserver
    cannot receive: a lambda, a nested function. A dataset is left to the run: torch's own pickler sends
    what this one cannot (shared tensors, handles)."""
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
    """Import and build every part, then make one batch in this process (num_workers=0). `batch_size`
    None: the dataset yields whole batches (DataLoader's batch_size=None), each item passed through
    collate_fn alone (default: `default_convert`)."""
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import default_collate, default_convert

    from bootstrap.bench.named import NamedDataset, NamedStream

    add_paths(user.paths)
    collate_fn, step_fn = _part(user, "collate"), _part(user, "step")
    model_factory = _model_factory(user)
    where = user.where() if user.named else f"dataset {type(user.dataset).__name__}"
    checked_size = None if user.batch_sampler is not None else batch_size
    if user.named:
        built = call_user(import_ref(user.dataset, "--dataset", user.paths), where)
        check_dataset(built, where, checked_size)
        wrap = NamedStream if is_stream(built) else NamedDataset
        dataset: Any = wrap(user.dataset, user.paths, built)
    else:
        built = dataset = user.dataset
        check_dataset(built, where, checked_size, script=True)
    sampling = build_sampling(user, built, where)
    check_workers_can_import([(where, dataset), (user.where("collate"), collate_fn)])
    check_function_pickles(user.where("collate"), collate_fn)
    collating = _Collating(collate_fn or (default_collate if batch_size is not None else default_convert))
    try:
        # A stream's second batch prices a batch: the first also pays for opening it (shards on a network
        # mount, a database cursor), once a pass rather than once a batch.
        batches = iter(DataLoader(dataset, collate_fn=collating, **loader_kwargs(dataset, batch_size, seed, sampling)))
        timed = [time.perf_counter()]
        first = next(batches, _END)
        timed.append(time.perf_counter())
        second = next(batches, _END) if first is not _END and is_stream(dataset) else _END
        timed.append(time.perf_counter())
    except BaseException as exc:  # noqa: BLE001 (the user's __getitem__ or collate; sys.exit too)
        if passes_through(exc) or isinstance(exc, InputError):  # InputError: the sampler's (`Checked`)
            raise
        raise InputError(where, *_first_batch_failure(user, exc, collating.raised, batch_size is None)) from None
    _check_first(first, user, where, batch_size, sampling)
    batch_s = timed[2] - timed[1] if second is not _END else timed[1] - timed[0]
    samples = _first_batch_samples(first, batch_size, sampling, where, user)
    return UserParts(dataset, collate_fn, model_factory, step_fn, first, batch_s, samples, sampling)


def _check_first(first: Any, user: UserWorkload, where: str, batch_size: Optional[int], sampling: Sampling) -> None:
    smaller = f"give a smaller {option_name('batch_size', not user.named)}"
    if first is None and user.collate is not None:
        fix = "return the batch: a tensor, or a tuple, list or dict of tensors"
        raise InputError(user.where("collate"), "returned None for the first batch", fix)
    if first is None:  # `default_convert` passes a None item on as the batch; `default_collate` never makes one
        fix = "yield the batch: a tensor, or a tuple, list or dict of tensors"
        raise InputError(where, "yielded None as a whole batch (read with no collate function)", fix)
    if first is _END and sampling.sampler is not None:  # a map-style dataset long enough for one batch
        raise InputError(
            sampling.sampler.where,
            f"drew fewer indices than one batch ({batch_size})",
            f"draw at least one batch, or {smaller}",
        )
    if first is _END and batch_size is None:  # only a stream can end before its first batch
        raise InputError(where, "the stream ended before its first batch", "point it at more data")
    if first is _END:
        problem = f"the stream ended before one batch ({batch_size} samples)"
        raise InputError(where, problem, f"point it at more data, or {smaller}")


def _first_batch_samples(
    first: Any, batch_size: Optional[int], sampling: Sampling, where: str, user: UserWorkload
) -> int:
    """The samples in the first batch: the batch size, else (the dataset's own batches, or a batch
    sampler's) the first dimension its tensors share, or the batch sampler's first list's length."""
    from bootstrap.bench.batch import own_batch_problem, shared_first_dim

    shared = shared_first_dim(first)[0]
    if shared == 0:
        fix = (
            "a collate function that drops the samples that failed to load dropped them all: check the data, or "
            "what the collate keeps"
        )
        raise InputError(where, "its first batch holds no samples (its tensors are empty)", fix)
    if sampling.batch_sampler is not None:
        return shared if shared is not None else first_list_length(sampling.batch_sampler, user.batch_sampler)
    if batch_size is not None:
        return batch_size
    problem = own_batch_problem(first)
    if problem:
        instead = "drop --batched" if user.named else "pass tune_loader a batch_size"
        fix = f"yield whole batches, samples along the first dimension of every tensor (batch-first), or {instead} "
        raise InputError(where, problem, fix + "and let the DataLoader batch the samples")
    assert shared is not None  # no problem: the tensors share their first dimension
    return shared


class _Collating:
    """The collate function, noting whether it raised: a batch that fails to collate (samples of several
    shapes) and a sample that fails to load (`__getitem__` raised) have different fixes."""

    def __init__(self, collate: Callable[..., Any]) -> None:
        self.collate = collate
        self.raised = False

    def __call__(self, samples: Any) -> Any:
        try:
            return self.collate(samples)
        except BaseException:
            self.raised = True
            raise


def _first_batch_failure(user: UserWorkload, exc: BaseException, in_collate: bool, batched: bool) -> Tuple[str, str]:
    """(problem, fix) for the first batch's error, raised by `__getitem__` or, `in_collate`, by collation
    (`batched`: of one whole batch the dataset made)."""
    named = isinstance(user.collate, str)
    by = f" with --collate {user.collate}" if in_collate and named else ""
    if not isinstance(exc, Exception):
        fix = "a sample must return, not exit"
    elif not in_collate:
        fix = SAMPLE_FIX
    elif batched and user.collate is not None:
        whole = "one whole batch the dataset made, not a list of samples"
        fix = (
            f"with --batched the collate function is given {whole}: fix it for that, or drop it"
            if named
            else f"with batch_size=None collate_fn is given {whole}"
        )
    elif named:
        fix = "fix --collate"
    elif user.collate is not None:
        fix = "fix collate_fn: it must make one batch of the samples"
    else:
        own = "give a --collate MODULE:FN" if user.named else "pass a collate_fn"
        fix = f"make samples tensors of one shape, or {own} that makes the batch"
    return f"could not load one batch{by}: {describe_error(exc)}", fix


def _part(user: UserWorkload, name: str) -> Optional[Callable[..., Any]]:
    value = getattr(user, name)
    if value is None:
        return None
    found = import_ref(value, dict(REF_FLAGS)[name], user.paths) if isinstance(value, str) else value
    if not callable(found):
        raise InputError(user.where(name), f"is a {type(found).__name__}, not a callable")
    return found  # type: ignore[no-any-return]


def _model_factory(user: UserWorkload) -> Optional[Callable[[], Any]]:
    """A zero-argument callable building the model. A module given as an object is copied for each build,
    so the bench's training steps never change the caller's weights."""
    import torch.nn as nn

    value = user.model
    if value is None:
        return None
    if isinstance(value, nn.Module):
        return lambda: copy.deepcopy(value)
    factory = _part(user, "model")
    where = f"--model {value}" if isinstance(value, str) else f"model {type(value).__name__}"

    def build() -> Any:
        model = call_user(factory, where)
        if not isinstance(model, nn.Module):
            raise InputError(where, f"returned {type(model).__name__}, not a torch.nn.Module")
        return model

    return build


# --------------------------------------------------------------------------- the step's errors

# What backward() says of a loss that is no scalar, or one that no parameter's computation made.
_NO_LOSS_SIGNS = ("grad can be implicitly created only for scalar outputs", "does not require grad")


def step_where(user: UserWorkload, model_name: str) -> str:
    """How a message names the code the step runs: the user's step, else their model, else the built-in
    step on their dataset."""
    if user.step is not None:
        return user.where("step") if isinstance(user.step, str) else "step"
    if user.model is not None:
        return user.where("model") if isinstance(user.model, str) else "model"
    on = f" on --dataset {user.dataset}" if user.named else ""
    return f"the built-in step ({model_name}){on}"


def step_error_fix(user: UserWorkload, error: BaseException, own_batches: bool) -> str:
    """The fix for what the step raised, where its kind says it whatever the batch: no scalar loss
    tensor returned, a model without parameters, memory that ran out; '' otherwise. `own_batches`: the
    DataLoader did not size the batches (the dataset's own, a batch sampler's)."""
    import torch

    from bootstrap.bench.step import NoParameters, NotALoss

    script = not user.named
    if isinstance(error, NoParameters):
        own_step = "step=" if script else "a --step"
        return (
            "bench's backward pass and SGD update have nothing to train: give a model with parameters, or "
            f"{own_step} that updates the model itself and returns None"
        )
    if user.step is not None and (isinstance(error, NotALoss) or any(s in str(error) for s in _NO_LOSS_SIGNS)):
        return (
            "return the loss as a scalar tensor computed from the model's parameters (bench calls backward() "
            "on it, then takes an SGD step), or None when the step updates the model itself"
        )
    out_of_memory = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    if isinstance(error, (MemoryError, out_of_memory)):
        if own_batches:
            return "the step ran out of memory: make the dataset's (or the batch sampler's) batches smaller"
        return f"the step ran out of memory: give a smaller {option_name('batch_size', script)}"
    return ""


def builtin_step_fix(user: UserWorkload, batch: Any, num_classes: int) -> str:
    """What the built-in step needs that `batch` (the user's) may lack, from what it holds: labels that
    are no tensor (strings) need an index, not a smaller number."""
    import torch

    script = not user.named
    own_step = "or pass step=" if script else "or give --step MODULE:FN"
    if not isinstance(batch, (list, tuple)) or len(batch) != 2:
        pair = isinstance(batch, (list, tuple))
        held = f"{type(batch).__name__} of {len(batch)} items" if pair else type(batch).__name__
        return f"the built-in step takes (images, labels) batches, not a {held}; {own_step}"
    images, labels = batch
    if not isinstance(labels, torch.Tensor):
        held = type(labels).__name__ + (
            f" of {type(labels[0]).__name__}" if isinstance(labels, (list, tuple)) and labels else ""
        )
        return (
            f"the built-in step takes labels as a tensor of class indices below {num_classes}, not a {held}: "
            f"return each label as an int index from __getitem__, {own_step}"
        )
    if not isinstance(images, torch.Tensor):
        return f"the built-in step takes images as one tensor N x 3 x H x W, not a {type(images).__name__}; {own_step}"
    more = "" if script else " (more: `options: {num_classes: N}` in a --config file)"
    return (
        f"the built-in step takes (images, labels) batches: images N x 3 x H x W, labels below {num_classes}{more}; "
        f"{own_step}"
    )


def step_failed(
    user: UserWorkload, exc: Any, during: str, model_name: str, own_batches: bool, num_classes: int
) -> InputError:
    """The one line for a training step that raised (`exc`: a `step.StepFailed`) `during` the run."""
    fix = step_error_fix(user, exc.error, own_batches)
    if not fix and user.step is not None:
        fix = "the step runs in this process on every batch the loader gives: fix it for this batch"
    elif not fix and user.model is not None:
        fix = "the built-in step runs the model on every batch the loader gives: fix the model for this batch"
    elif not fix:
        fix = builtin_step_fix(user, exc.batch, num_classes)
    return InputError(step_where(user, model_name), f"raised {describe_error(exc.error)} {during}", fix)


def user_where(user: UserWorkload) -> str:
    """The user's references a message names: the dataset, and the collate, model and step when given."""
    named = [user.where(name) for name in ("collate", "model", "step") if isinstance(getattr(user, name), str)]
    return " ".join([user.where(), *named])


def code_error(user: UserWorkload, exc: BaseException, phase: str) -> InputError:
    """The one line for what escaped the run's phases from the user's code in this process (sys.exit, an
    exception no phase expects)."""
    if "pickle" in str(exc).lower():  # spawn/forkserver: DataLoader pickles the dataset for each worker
        fix = "under spawn (macOS, Windows, or set_start_method) a dataset must pickle: no lambdas or open handles "
        fix += "in its attributes"
        return InputError(user_where(user), f"cannot be sent to DataLoader workers: {describe_error(exc)}", fix)
    debug = "" if not user.named else " (--debug)"  # a script's traceback shows the cause as it is
    exited = "" if isinstance(exc, Exception) else "a sample, collate or step must return, not exit; "
    problem = f"{describe_error(exc)} in the {phase} phase: stopped"
    return InputError(user_where(user), problem, f"{exited}the traceback is the error's cause{debug}")
