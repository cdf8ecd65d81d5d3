"""The team's own training input: their Dataset, collate function, model and training step.

`bench --dataset MODULE:FACTORY [--collate MODULE:FN] [--model MODULE:FACTORY]
[--step MODULE:FN] [--path DIR ...]` names them by import path
(`UserWorkload` holds the names); `tune_loader(dataset, ...)` takes the
objects themselves. `resolve` turns either into `UserParts` in the main
process and refuses, with one InputError line naming the reference, what
cannot be used: an import that fails, a missing attribute, a factory that
raises or returns no map-style Dataset, an empty dataset, samples that do
not collate into one batch.

What each reference is:

* dataset factory: called with no arguments, returns a map-style
  `torch.utils.data.Dataset` (or any object with `__len__` and
  `__getitem__`), which the bench shuffles, or an `IterableDataset` (a
  stream: WebDataset shards, a database cursor), read in its own order.
  Each DataLoader worker runs its own `__iter__`: a stream that does not
  split itself by `torch.utils.data.get_worker_info()` yields every sample
  once per worker (`stream.BatchStream` fails such a loader when its first
  two workers' batches are the same; the report warns of the rest).
* collate: `DataLoader(collate_fn=...)`, called with a list of samples.
* model factory: called with no arguments, returns an `nn.Module`.
* step: `step(model, batch, device) -> loss or None`; the batch arrives
  on the device already (tensors in tuples, lists and dicts moved; an
  object of the user's own batch class as it is). A loss
  gets `backward()` and an SGD update from the bench; None means the step
  did its own update.

Workers: under `fork` (Linux's default) they inherit the dataset. Under
`spawn`/`forkserver` (macOS, Windows) DataLoader pickles it; a dataset
named by reference travels as that reference and is rebuilt in each
worker (`NamedDataset`), one handed to `tune_loader` must be picklable,
and neither it nor the collate function may come from a `__main__`
without a file (`spawn.check_workers_can_import`).
"""

from __future__ import annotations

import copy
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from bootstrap.bench.config import option_name
from bootstrap.bench.sampling import FLAGS as SAMPLING_FLAGS
from bootstrap.bench.sampling import Sampling, build_sampling, first_list_length, is_stream, loader_kwargs
from bootstrap.errors import InputError, excerpt

REF_FLAGS = (("dataset", "--dataset"), ("collate", "--collate"), ("model", "--model"), ("step", "--step"),
             *SAMPLING_FLAGS)
REF_KEYWORDS = {"--dataset": "dataset", "--collate": "collate_fn", "--model": "model", "--step": "step",
                "--sampler": "sampler", "--batch-sampler": "batch_sampler"}


@dataclass(frozen=True)
class UserWorkload:
    """What the run measures instead of the synthetic images: 'MODULE:NAME' references (the CLI) or the
    objects themselves (`tune_loader`). `paths` are prepended to sys.path before importing."""

    dataset: Any
    collate: Any = None
    model: Any = None
    step: Any = None
    paths: Tuple[str, ...] = ()
    sampler: Any = None          # `sampling`: the user's own order, or batches of indices
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


@dataclass
class UserParts:
    """A `UserWorkload` resolved in the main process, its first batch already made."""

    dataset: Any
    collate_fn: Optional[Callable[..., Any]]
    model_factory: Optional[Callable[[], Any]]
    step_fn: Optional[Callable[..., Any]]
    first_batch: Any
    batch_s: float  # one batch loaded in this process (a stream's second: see `resolve`)
    samples: int    # in a batch: the batch size, or the length of the first (a dataset's, a batch sampler's)
    sampling: Sampling = Sampling()


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
        raise InputError(where, f"cannot import {module_name}: {describe_error(exc)}",
                         "run from the directory that holds it or add --path DIR" if not_found else
                         "the error is in the module (or what it imports)") from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise InputError(where, f"{module_name} has no attribute {attr!r}",
                             f"check the name after ':' ({getattr(module, '__file__', module_name)})")
        value = getattr(value, part)
    return value


def add_paths(paths: Sequence[str]) -> None:
    for path in reversed([str(Path(p).absolute()) for p in paths]):
        if path not in sys.path:
            sys.path.insert(0, path)


def describe_error(exc: BaseException) -> str:
    """'TypeName: first line of its message' (the type alone when it has none), at most a few hundred
    characters: a user's exception may carry a whole file in its message, or fail to print at all."""
    try:
        lines = str(exc).strip().splitlines()
    except Exception:  # noqa: BLE001 (the user's __str__)
        lines = []
    return clip(f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__)


ERROR_CHARS = 200  # of a user's error quoted in a message
SAMPLE_FIX = "fix that sample, or make __getitem__ (a stream: __iter__) skip what it cannot read"
MAX_SAMPLES = 2 ** 31 - 1  # torch.randperm's int64 indices: 16 GiB at this length


def clip(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS - 3] + "..."


def passes_through(exc: BaseException) -> bool:
    """Whether `exc`, raised in the user's code, is not the user's to report: Ctrl-C, or the run's
    watchdog (`watchdog.Stalled`) stopping a run that is stuck."""
    from bootstrap.bench.watchdog import Stalled

    return isinstance(exc, (KeyboardInterrupt, Stalled))


def _call(factory: Any, where: str, *args: Any) -> Any:
    if not callable(factory):
        raise InputError(where, f"is a {type(factory).__name__}, not a callable", "name a function or class")
    try:
        return factory(*args)
    except BaseException as exc:  # noqa: BLE001 (whatever the user's factory raises is its problem, reported)
        if passes_through(exc):
            raise
        raise InputError(where, f"raised {describe_error(exc)}") from None


class NamedDataset:
    """A dataset built by a factory named 'MODULE:FACTORY': it pickles as that name (plus the --path
    directories) and is rebuilt where it is unpickled, so spawned workers never pickle the object."""

    def __init__(self, ref: str, paths: Sequence[str], dataset: Any) -> None:
        self.ref = ref
        self.paths = tuple(paths)
        self.dataset = dataset
        self.length = len(dataset)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        if self.dataset is None:
            self.dataset = import_ref(self.ref, "--dataset", self.paths)()
        return self.dataset[index]

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["dataset"] = None
        return state


def check_dataset(dataset: Any, where: str, batch_size: Optional[int], script: bool = False) -> Optional[int]:
    """The dataset's length (None for a stream); an InputError for what is no Dataset or holds too few
    samples (`batch_size` None: its items are batches). Hints name the options as the CLI spells them, or
    `tune_loader` for a `script`."""
    from torch.utils.data import Dataset

    given = "is" if script else "returned"  # tune_loader is handed the object; a factory returns it
    if isinstance(dataset, (str, bytes, dict)):  # have __len__ and __getitem__, but index no samples
        raise InputError(where, f"{given} a {type(dataset).__name__}, not a Dataset",
                         "return the Dataset object (an instance with __len__ and __getitem__)")
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
        raise InputError(where, f"{given} {type(dataset).__name__}, {what} without {' or '.join(missing)}: "
                                "bench shuffles the samples by index",
                         "wrap the stream in a torch.utils.data.IterableDataset whose __iter__ yields the samples"
                         if iterable else "give it __len__ and __getitem__")
    try:
        length = len(dataset)
    except Exception as exc:  # noqa: BLE001 (the user's __len__)
        raise InputError(where, f"len(dataset) raised {describe_error(exc)}") from None
    if length > MAX_SAMPLES:
        raise InputError(where, f"has {excerpt(length)} samples: bench shuffles with torch.randperm, which needs "
                                "8 bytes a sample", f"give bench a subset (torch.utils.data.Subset) of at most "
                                                    f"{MAX_SAMPLES:,} samples")
    if length == 0:
        raise InputError(where, "returned an empty dataset (length 0)", "point it at the data it should load")
    if batch_size is not None and length < batch_size:
        raise InputError(where, f"has {length} samples, fewer than one batch ({batch_size})",
                         f"give a smaller {option_name('batch_size', script)}")
    return length


def resolve(user: UserWorkload, batch_size: Optional[int], seed: int = 0) -> UserParts:
    """Import and build every part, then collate one batch in this process (num_workers=0). `batch_size`
    None: the dataset yields whole batches (DataLoader's batch_size=None), each item passed through
    collate_fn alone (default: `default_convert`), the first one's samples counted by the first
    dimension its tensors share (`_first_batch_samples`)."""
    import time

    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import default_collate, default_convert

    add_paths(user.paths)
    collate_fn = _part(user.collate, "--collate", user.paths)
    model_factory = _model_factory(user.model, user.paths)
    step_fn = _part(user.step, "--step", user.paths)
    named = isinstance(user.dataset, str)
    if named:
        where = f"--dataset {user.dataset}"
        built = _call(import_ref(user.dataset, "--dataset", user.paths), where)
        check_dataset(built, where, None if user.batch_sampler is not None else batch_size)
        if is_stream(built):
            from bootstrap.bench.named import NamedStream  # an IterableDataset subclass: torch at import

            dataset: Any = NamedStream(user.dataset, user.paths, built, import_ref)
        else:
            dataset = NamedDataset(user.dataset, user.paths, built)
    else:
        where = f"dataset {type(user.dataset).__name__}"
        built = dataset = user.dataset
        check_dataset(built, where, None if user.batch_sampler is not None else batch_size, script=True)
    sampling = build_sampling(user, built, where, lambda ref, flag, of: _call(import_ref(ref, flag, user.paths),
                                                                              f"{flag} {ref}", of))
    collate_where = f"--collate {user.collate}" if isinstance(user.collate, str) else "tune_loader(collate_fn=...)"
    from bootstrap.bench.spawn import check_function_pickles, check_workers_can_import

    check_workers_can_import([(where, dataset), (collate_where, collate_fn)])
    check_function_pickles(collate_where, collate_fn)
    collating = _Collating(collate_fn or (default_collate if batch_size is not None else default_convert))
    try:
        # A stream's second batch prices a batch: the first also pays for opening it (shards on a network
        # mount, a database cursor), once a pass rather than once a batch.
        batches = iter(DataLoader(dataset, collate_fn=collating, **loader_kwargs(dataset, batch_size, seed, sampling)))
        timed = [time.perf_counter()]
        first = next(batches, None)
        timed.append(time.perf_counter())
        second = next(batches, None) if first is not None and is_stream(dataset) else None
        timed.append(time.perf_counter())
    except BaseException as exc:  # noqa: BLE001 (the user's __getitem__ or collate; sys.exit too)
        if passes_through(exc) or isinstance(exc, InputError):  # InputError: the sampler's (`sampling.Checked`)
            raise
        raise InputError(where, *_first_batch_failure(user, exc, collating.raised, batch_size is None)) from None
    if first is None and sampling.sampler is not None:  # a map-style dataset long enough for one batch
        raise InputError(sampling.sampler.where, f"drew fewer indices than one batch ({batch_size})",
                         f"draw at least one batch, or give a smaller {option_name('batch_size', not named)}")
    if first is None:  # only a stream can end before its first batch: a map-style one was measured
        if batch_size is None:
            raise InputError(where, "the stream ended before its first batch", "point it at more data")
        raise InputError(where, f"the stream ended before one batch ({batch_size} samples)",
                         f"point it at more data, or give a smaller {option_name('batch_size', not named)}")
    batch_s = timed[2] - timed[1] if second is not None else timed[1] - timed[0]
    return UserParts(dataset, collate_fn, model_factory, step_fn, first, batch_s,
                     _first_batch_samples(first, batch_size, sampling, where, user), sampling)


def _first_batch_samples(first: Any, batch_size: Optional[int], sampling: Sampling, where: str,
                         user: UserWorkload) -> int:
    """The samples in the first batch, which prices set-up: the batch size, else (the dataset's own batches,
    or a batch sampler's) the first dimension its tensors share, or the batch sampler's first list's
    length. A first batch of no samples (a collate that dropped every one) is refused."""
    from bootstrap.bench.batch import own_batch_problem, shared_first_dim

    shared = shared_first_dim(first)[0]
    if shared == 0:
        raise InputError(where, "its first batch holds no samples (its tensors are empty)",
                         "a collate function that drops the samples that failed to load dropped them all: check "
                         "the data, or what the collate keeps")
    if sampling.batch_sampler is not None:
        return shared if shared is not None else first_list_length(sampling.batch_sampler, user.batch_sampler)
    if batch_size is not None:
        return batch_size
    problem = own_batch_problem(first)
    if problem:
        named = isinstance(user.dataset, str)
        raise InputError(where, problem, "yield whole batches, samples along the first dimension of every "
                         f"tensor (batch-first), or {'drop --batched' if named else 'pass tune_loader a batch_size'} "
                         "and let the DataLoader batch the samples")
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


def _first_batch_failure(user: UserWorkload, exc: BaseException, in_collate: bool,
                         batched: bool) -> Tuple[str, str]:
    """(problem, fix) for the first batch's error, raised by `__getitem__` or, `in_collate`, by collation
    (`batched`: of one whole batch the dataset made)."""
    named = isinstance(user.collate, str)
    by = f" with --collate {user.collate}" if in_collate and named else ""
    if not isinstance(exc, Exception):
        fix = "a sample must return, not exit"
    elif not in_collate:
        fix = SAMPLE_FIX
    elif batched and user.collate is not None:
        fix = ("with --batched the collate function is given one whole batch the dataset made, not a list of "
               "samples: fix it for that, or drop it" if named else
               "with batch_size=None collate_fn is given one whole batch the dataset made, not a list of samples")
    elif named:
        fix = "fix --collate"
    elif user.collate is not None:
        fix = "fix collate_fn: it must make one batch of the samples"
    else:
        own = "give a --collate MODULE:FN" if isinstance(user.dataset, str) else "pass a collate_fn"
        fix = f"make samples tensors of one shape, or {own} that makes the batch"
    return f"could not load one batch{by}: {describe_error(exc)}", fix


def _part(value: Any, flag: str, paths: Sequence[str]) -> Optional[Callable[..., Any]]:
    if value is None:
        return None
    found = import_ref(value, flag, paths) if isinstance(value, str) else value
    if not callable(found):
        where = f"{flag} {value}" if isinstance(value, str) else f"tune_loader({REF_KEYWORDS[flag]}=...)"
        raise InputError(where, f"is a {type(found).__name__}, not a callable")
    return found


def _model_factory(value: Any, paths: Sequence[str]) -> Optional[Callable[[], Any]]:
    """A zero-argument callable building the model. A module given as an object is copied for each build,
    so the bench's training steps never change the caller's weights."""
    if value is None:
        return None
    import torch.nn as nn

    if isinstance(value, nn.Module):
        return lambda: copy.deepcopy(value)
    factory = _part(value, "--model", paths)
    where = f"--model {value}" if isinstance(value, str) else f"model {type(value).__name__}"

    def build() -> Any:
        model = _call(factory, where)
        if not isinstance(model, nn.Module):
            raise InputError(where, f"returned {type(model).__name__}, not a torch.nn.Module")
        return model

    return build
