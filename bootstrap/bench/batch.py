"""What a batch holds: its tensors, wherever they sit in it, and how many samples it carries.

A batch is whatever the DataLoader yields: a tensor, or tuples, lists, dicts
and namedtuples of them (`default_collate`'s output, or the user's collate
function's, or the user's own dataset's when it yields whole batches), or an
object of the user's own class holding them.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Tuple


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
    """Every tensor in `batch`, in order: through tuples, lists, dicts and namedtuples, and the attributes
    of an object of the user's own batch class (PyTorch's custom-pinning example), which `map_tensors`
    leaves as it is."""
    import torch

    seen = set()

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


_MAX_DEPTH = 8  # a batch is a shallow structure; anything deeper is not looked into


def shared_first_dim(batch: Any) -> Tuple[Optional[int], Tuple[int, ...]]:
    """(the first dimension every tensor in `batch` shares, or None; each tensor's first dimension), scalar
    tensors (a loss weight, a token count) left out. Images and labels of 16 samples share 16;
    torchvision's detection batches (a tuple of images, CHW) and pad_sequence's (T, B) beside (B,) labels
    share none."""
    dims = tuple(int(t.shape[0]) for t in tensors(batch) if t.dim())
    return (dims[0] if dims and len(set(dims)) == 1 else None), dims


def own_batch_counter(typical: int) -> Callable[[Any], int]:
    """How a run counts the samples of a batch the DataLoader did not size (the dataset's own, or a batch
    sampler's): the first dimension its tensors share, else `typical`, the first batch's count. A batch
    the DataLoader sized counts the batch size, whatever its tensors' shapes say (an image's channels, a
    time-major length)."""
    return lambda batch: _or(shared_first_dim(batch)[0], typical)


def _or(value: Optional[int], default: int) -> int:
    return default if value is None else value


def own_batch_problem(batch: Any) -> str:
    """Why the first batch a dataset made itself cannot say how many samples it holds ('' when it can)."""
    shared, dims = shared_first_dim(batch)
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    number = any(isinstance(item, (int, float)) and not isinstance(item, bool) for item in items)
    if number and len(dims) < 2:  # (image, label): one sample; a batch's tensors would share their rows
        return "yields items that hold a plain number beside one tensor, as one sample does, not a whole batch"
    if not dims:
        return f"yields a batch ({type(batch).__name__}) that holds no tensor to count its samples by"
    if shared is None:
        return (
            f"yields a batch whose tensors' first dimensions differ ({', '.join(map(str, dims[:6]))}), so "
            "the samples it holds cannot be counted (time-major tensors?)"
        )
    return ""


def same_batch(first: Any, second: Any) -> bool:
    """Whether two batches hold equal tensors, in the same places (False when they hold none)."""
    import torch

    ours, theirs = list(tensors(first)), list(tensors(second))
    return (
        bool(ours)
        and len(ours) == len(theirs)
        and all(a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(ours, theirs))
    )
