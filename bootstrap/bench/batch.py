"""What a batch holds: its tensors, wherever they sit in the tuples, lists, dicts and namedtuples (or the
user's own batch class) the DataLoader yields, and how many samples it carries."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

_MAX_DEPTH = 8  # a batch is a shallow structure; anything deeper is not looked into


def map_tensors(fn: Callable[[Any], Any], batch: Any) -> Any:
    """`batch` with `fn` applied to every tensor in it (through tuples, lists, dicts and namedtuples)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {key: map_tensors(fn, value) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(map_tensors(fn, value) for value in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_tensors(fn, value) for value in batch)
    return batch


def tensors(batch: Any) -> Iterator[Any]:
    """Every tensor in `batch`, in order, the attributes of the user's own batch class included (which
    `map_tensors` leaves as it is)."""
    import torch

    seen: set[int] = set()

    def walk(value: Any, depth: int) -> Iterator[Any]:
        if isinstance(value, torch.Tensor):
            yield value
            return
        if depth > _MAX_DEPTH or id(value) in seen or isinstance(value, (str, bytes, int, float, type)):
            return
        seen.add(id(value))
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            children = getattr(value, "__dict__", {}).values()
        for child in children:
            yield from walk(child, depth + 1)

    return walk(batch, 0)


def shared_first_dim(batch: Any) -> tuple[Optional[int], tuple[int, ...]]:
    """(the first dimension the tensors of `batch` share, or None; each one's), scalar tensors left out.
    Images and labels of 16 samples share 16; pad_sequence's (T, B) beside (B,) labels share none."""
    dims = tuple(int(t.shape[0]) for t in tensors(batch) if t.dim())
    if dims and len(set(dims)) == 1:
        return dims[0], dims
    return None, dims


def own_batch_counter(typical: int) -> Callable[[Any], int]:
    """Counts the samples of a batch the DataLoader did not size (the dataset's own, a batch sampler's): the
    first dimension its tensors share, else `typical`, the first batch's count."""

    def count(batch: Any) -> int:
        shared = shared_first_dim(batch)[0]
        return typical if shared is None else shared

    return count


def own_batch_problem(batch: Any) -> str:
    """Why the first batch a dataset made itself cannot say how many samples it holds ('' when it can)."""
    shared, dims = shared_first_dim(batch)
    items = list(batch.values()) if isinstance(batch, dict) else batch
    sequence = isinstance(items, (list, tuple))
    number = sequence and any(isinstance(item, (int, float)) and not isinstance(item, bool) for item in items)
    if number and len(dims) < 2:  # (image, label): one sample; a batch's tensors would share their rows
        return "yields items that hold a plain number beside one tensor, as one sample does, not a whole batch"
    if not dims:
        return f"yields a batch ({type(batch).__name__}) that holds no tensor to count its samples by"
    if shared is None:
        differ = ", ".join(map(str, dims[:6]))
        return (
            f"yields a batch whose tensors' first dimensions differ ({differ}), so the samples it holds cannot be "
            "counted (time-major tensors?)"
        )
    return ""


def same_batch(first: Any, second: Any) -> bool:
    """Whether two batches hold equal tensors, in the same places (False when they hold none)."""
    import torch

    ours = list(tensors(first))
    theirs = list(tensors(second))
    if not ours or len(ours) != len(theirs):
        return False
    return all(a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(ours, theirs))
