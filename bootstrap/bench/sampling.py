"""The order and grouping a loader reads the dataset in: bench's seeded shuffle, or the team's own
sampler (`WeightedRandomSampler` for imbalanced classes, a `DistributedSampler`) or batch sampler
(length-bucketed batches of padded sequences).

    --sampler MODULE:FN / tune_loader(sampler=...)              FN(dataset) -> a Sampler of indices
    --batch-sampler MODULE:FN / tune_loader(batch_sampler=...)  FN(dataset) -> a sampler of index lists

A batch sampler makes the batches: it takes the place of the batch size (each batch counts the list of
indices it was made from), as in `DataLoader`, where the two are mutually exclusive. A stream (IterableDataset) takes
neither: DataLoader reads it in its own order.
"""

from __future__ import annotations

import collections
import operator
from dataclasses import dataclass
from typing import Any, Deque, Dict, Iterator, Optional

from bootstrap.errors import InputError, excerpt

FLAGS = (("sampler", "--sampler"), ("batch_sampler", "--batch-sampler"))


def is_stream(dataset: Any) -> bool:
    """Whether DataLoader reads `dataset` as an iterable stream rather than by index."""
    from torch.utils.data import IterableDataset

    return isinstance(dataset, IterableDataset)


@dataclass(frozen=True)
class Sampling:
    """The user's own sampler or batch sampler, built; neither: bench's seeded shuffle."""

    sampler: Any = None
    batch_sampler: Any = None


def loader_kwargs(
    dataset: Any, batch_size: Optional[int], seed: int, sampling: Optional[Sampling] = None
) -> Dict[str, Any]:
    """DataLoader's keywords for how batches are formed and ordered: `batch_size` samples a batch, the last
    short one dropped (None: the dataset yields whole batches), drawn by the user's sampler or shuffled by
    a generator seeded afresh (every loader reads the same order); a batch sampler's own batches; a
    stream in its own order (DataLoader refuses to shuffle one)."""
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


def build_sampling(user: Any, dataset: Any, where: str, build: Any) -> Sampling:
    """The user's sampler and batch sampler for `dataset`: objects as given, 'MODULE:FN' references called
    with the dataset (`build(ref, flag, dataset)`). Refused in one line: both at once, either for a
    stream, and what iterates no indices."""
    given = {name: getattr(user, name) for name, _ in FLAGS if getattr(user, name) is not None}
    if not given:
        return Sampling()
    names = {
        name: f"--{name.replace('_', '-')} {value}" if isinstance(value, str) else f"tune_loader({name}=...)"
        for name, value in given.items()
    }
    if len(given) == 2:
        raise InputError(
            names["batch_sampler"],
            "takes the place of a sampler: DataLoader accepts one or the other",
            "drop the sampler, or have the batch sampler draw from it",
        )
    name, value = next(iter(given.items()))
    if is_stream(dataset):
        raise InputError(
            names[name],
            f"does not apply to {where}, a stream (IterableDataset), which DataLoader reads in its own order",
            "drop it, or order the stream in its __iter__",
        )
    built = build(value, f"--{name.replace('_', '-')}", dataset) if isinstance(value, str) else value
    if not hasattr(type(built), "__iter__"):
        raise InputError(
            names[name],
            f"is a {type(built).__name__}, not a sampler (an iterable of "
            f"{'lists of ' if name == 'batch_sampler' else ''}indices)",
            "give a torch.utils.data.Sampler"
            if name == "sampler"
            else "give a torch.utils.data.BatchSampler or a sampler yielding lists of indices",
        )
    if iter(built) is built:  # a generator or another iterator: used up by the first epoch
        raise InputError(
            names[name],
            f"is an iterator ({type(built).__name__}), used up after one pass",
            "give a Sampler, whose __iter__ starts afresh each epoch",
        )
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
            raise self._error(f"raised {_describe(exc)} when iterated", "fix the sampler's __iter__") from None
        lengths = self.lengths = collections.deque()  # a new pass: an earlier loader's leftovers are not ours
        while True:
            try:
                item = next(drawn)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 (the user's sampler)
                raise self._error(f"raised {_describe(exc)} while drawing indices", "fix the sampler") from None
            item = self._checked(item)
            if self.batches:
                lengths.append(len(item))
            yield item

    def _checked(self, item: Any) -> Any:
        if not self.batches:
            self._index(item)
            return item
        if isinstance(item, (str, bytes)) or not hasattr(item, "__len__") or not hasattr(item, "__iter__"):
            raise self._error(
                f"yielded {_shown(item)} where a batch sampler yields lists of indices",
                "yield lists of indices (a plain sampler goes in --sampler / sampler=)",
            )
        if not len(item):
            raise self._error("yielded an empty list of indices", "yield only batches of one index or more")
        for index in item:
            self._index(index)
        return item

    def _index(self, index: Any) -> None:
        try:
            position = operator.index(index)
        except TypeError:  # a key the dataset's __getitem__ takes ((mosaic, index), a file name): its own
            return
        if position < 0 or (self.length is not None and position >= self.length):
            raise self._error(
                f"yielded index {position}, outside the dataset's {self.length} samples"
                if self.length is not None
                else f"yielded index {position}, below 0",
                "draw indices from 0 to len(dataset) - 1",
            )

    def _error(self, problem: str, fix: str) -> InputError:
        return InputError(self.where, problem, fix)


def _describe(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {excerpt(value)}"


def first_list_length(batch_sampler: Any, given: Any) -> int:
    """The length of the batch sampler's first list of indices: what a batch whose tensors do not share a
    first dimension (torchvision's detection batches) counts as. `given`: the reference or object, for
    the message."""
    where = f"--batch-sampler {given}" if isinstance(given, str) else "tune_loader(batch_sampler=...)"
    try:
        first = next(iter(batch_sampler), None)
        length = len(first) if first is not None else 0
    except Exception as exc:  # noqa: BLE001 (the user's sampler)
        raise InputError(where, f"raised {type(exc).__name__} while giving its first batch of indices") from None
    if not length:
        raise InputError(
            where,
            "gave no first batch of indices (empty, or none at all)",
            "give a batch sampler that yields non-empty lists of indices",
        )
    return length
