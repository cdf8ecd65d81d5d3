"""The team's own training input: their Dataset, collate function, model and training step.

`bench --dataset MODULE:FACTORY [--collate MODULE:FN] [--model MODULE:FACTORY]
[--step MODULE:FN] [--path DIR ...]` names them by import path
(`UserWorkload` holds the names); `tune_loader(dataset, ...)` takes the
objects themselves. `parts.resolve` turns either into `parts.UserParts` in
the main process, refusing what cannot be used in one InputError line
naming the reference, with the checks and error wording kept here.

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

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from bootstrap.bench.config import option_name
from bootstrap.bench.sampling import FLAGS as SAMPLING_FLAGS
from bootstrap.bench.sampling import is_stream
from bootstrap.errors import InputError, excerpt

REF_FLAGS = (
    ("dataset", "--dataset"),
    ("collate", "--collate"),
    ("model", "--model"),
    ("step", "--step"),
    *SAMPLING_FLAGS,
)
REF_KEYWORDS = {
    "--dataset": "dataset",
    "--collate": "collate_fn",
    "--model": "model",
    "--step": "step",
    "--sampler": "sampler",
    "--batch-sampler": "batch_sampler",
}


@dataclass(frozen=True)
class UserWorkload:
    """What the run measures instead of the synthetic images: 'MODULE:NAME' references (the CLI) or the
    objects themselves (`tune_loader`). `paths` are prepended to sys.path before importing."""

    dataset: Any
    collate: Any = None
    model: Any = None
    step: Any = None
    paths: Tuple[str, ...] = ()
    sampler: Any = None  # `sampling`: the user's own order, or batches of indices
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
        raise InputError(
            where,
            f"cannot import {module_name}: {describe_error(exc)}",
            "run from the directory that holds it or add --path DIR"
            if not_found
            else "the error is in the module (or what it imports)",
        ) from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise InputError(
                where,
                f"{module_name} has no attribute {attr!r}",
                f"check the name after ':' ({getattr(module, '__file__', module_name)})",
            )
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
MAX_SAMPLES = 2**31 - 1  # torch.randperm's int64 indices: 16 GiB at this length


def clip(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."


def passes_through(exc: BaseException) -> bool:
    """Whether `exc`, raised in the user's code, is not the user's to report: Ctrl-C, or the run's
    watchdog (`watchdog.Stalled`) stopping a run that is stuck."""
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
        raise InputError(
            where,
            f"{given} a {type(dataset).__name__}, not a Dataset",
            "return the Dataset object (an instance with __len__ and __getitem__)",
        )
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
        raise InputError(
            where,
            f"{given} {type(dataset).__name__}, {what} without {' or '.join(missing)}: "
            "bench shuffles the samples by index",
            "wrap the stream in a torch.utils.data.IterableDataset whose __iter__ yields the samples"
            if iterable
            else "give it __len__ and __getitem__",
        )
    try:
        length = len(dataset)
    except Exception as exc:  # noqa: BLE001 (the user's __len__)
        raise InputError(where, f"len(dataset) raised {describe_error(exc)}") from None
    if length > MAX_SAMPLES:
        raise InputError(
            where,
            f"has {excerpt(length)} samples: bench shuffles with torch.randperm, which needs 8 bytes a sample",
            f"give bench a subset (torch.utils.data.Subset) of at most {MAX_SAMPLES:,} samples",
        )
    if length == 0:
        raise InputError(where, "returned an empty dataset (length 0)", "point it at the data it should load")
    if batch_size is not None and length < batch_size:
        raise InputError(
            where,
            f"has {length} samples, fewer than one batch ({batch_size})",
            f"give a smaller {option_name('batch_size', script)}",
        )
    return length
