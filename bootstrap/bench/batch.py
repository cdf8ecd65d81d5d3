"""What a batch holds: its tensors, wherever they sit in it, and how many samples it carries.

A batch is whatever the DataLoader yields: a tensor, or tuples, lists, dicts
and namedtuples of them (`default_collate`'s output, or the user's collate
function's, or the user's own dataset's when it yields whole batches), or an
object of the user's own class holding them.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional


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


def batch_samples(batch: Any) -> Optional[int]:
    """How many samples `batch` holds: the first dimension of its first tensor (None without one, or when
    that tensor is a scalar). A collate function that drops what failed to load makes batches short."""
    tensor = next(tensors(batch), None)
    return int(tensor.shape[0]) if tensor is not None and tensor.dim() else None


def same_batch(first: Any, second: Any) -> bool:
    """Whether two batches hold equal tensors, in the same places (False when they hold none)."""
    import torch

    ours, theirs = list(tensors(first)), list(tensors(second))
    return bool(ours) and len(ours) == len(theirs) and all(
        a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(ours, theirs))
