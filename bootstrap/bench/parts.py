"""The team's own training input resolved: each part imported and built, one batch made in this process.

`resolve` turns a `user.UserWorkload` (references, or the objects themselves)
into `UserParts` in the main process and refuses, with one InputError line
naming the reference, what cannot be used: an import that fails, a missing
attribute, a factory that raises or returns no map-style Dataset, an empty
dataset, samples that do not collate into one batch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Tuple

from bootstrap.bench.config import option_name
from bootstrap.bench.sampling import Sampling, build_sampling, first_list_length, is_stream, loader_kwargs
from bootstrap.bench.user import (
    REF_KEYWORDS,
    SAMPLE_FIX,
    NamedDataset,
    UserWorkload,
    add_paths,
    call_user,
    check_dataset,
    describe_error,
    import_ref,
    passes_through,
)
from bootstrap.errors import InputError


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
        built = call_user(import_ref(user.dataset, "--dataset", user.paths), where)
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
    sampling = build_sampling(
        user, built, where, lambda ref, flag, of: call_user(import_ref(ref, flag, user.paths), f"{flag} {ref}", of)
    )
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
        first = next(batches, _END)
        timed.append(time.perf_counter())
        second = next(batches, _END) if first is not _END and is_stream(dataset) else _END
        timed.append(time.perf_counter())
    except BaseException as exc:  # noqa: BLE001 (the user's __getitem__ or collate; sys.exit too)
        if passes_through(exc) or isinstance(exc, InputError):  # InputError: the sampler's (`sampling.Checked`)
            raise
        raise InputError(where, *_first_batch_failure(user, exc, collating.raised, batch_size is None)) from None
    if first is None:
        raise InputError(*_none_batch(user, where, collate_where))
    if first is _END and sampling.sampler is not None:  # a map-style dataset long enough for one batch
        raise InputError(
            sampling.sampler.where,
            f"drew fewer indices than one batch ({batch_size})",
            f"draw at least one batch, or give a smaller {option_name('batch_size', not named)}",
        )
    if first is _END:  # only a stream can end before its first batch: a map-style one was measured
        if batch_size is None:
            raise InputError(where, "the stream ended before its first batch", "point it at more data")
        raise InputError(
            where,
            f"the stream ended before one batch ({batch_size} samples)",
            f"point it at more data, or give a smaller {option_name('batch_size', not named)}",
        )
    batch_s = timed[2] - timed[1] if second is not _END else timed[1] - timed[0]
    return UserParts(
        dataset,
        collate_fn,
        model_factory,
        step_fn,
        first,
        batch_s,
        _first_batch_samples(first, batch_size, sampling, where, user),
        sampling,
    )


_END = object()  # what `next` gives past the last batch: None is a batch, a collate function's mistake


def _none_batch(user: UserWorkload, where: str, collate_where: str) -> Tuple[str, str, str]:
    """(who, problem, fix) for a first batch that is None: the collate function returned it, or, with
    none, the dataset yielded it as a whole batch (`default_convert` passes None on; `default_collate`
    never makes one)."""
    if user.collate is not None:
        return (
            collate_where,
            "returned None for the first batch",
            "return the batch: a tensor, or a tuple, list or dict of tensors",
        )
    return (
        where,
        "yielded None as a whole batch (read with no collate function)",
        "yield the batch: a tensor, or a tuple, list or dict of tensors",
    )


def _first_batch_samples(
    first: Any, batch_size: Optional[int], sampling: Sampling, where: str, user: UserWorkload
) -> int:
    """The samples in the first batch, which prices set-up: the batch size, else (the dataset's own batches,
    or a batch sampler's) the first dimension its tensors share, or the batch sampler's first list's
    length. A first batch of no samples (a collate that dropped every one) is refused."""
    from bootstrap.bench.batch import own_batch_problem, shared_first_dim

    shared = shared_first_dim(first)[0]
    if shared == 0:
        raise InputError(
            where,
            "its first batch holds no samples (its tensors are empty)",
            "a collate function that drops the samples that failed to load dropped them all: check "
            "the data, or what the collate keeps",
        )
    if sampling.batch_sampler is not None:
        return shared if shared is not None else first_list_length(sampling.batch_sampler, user.batch_sampler)
    if batch_size is not None:
        return batch_size
    problem = own_batch_problem(first)
    if problem:
        named = isinstance(user.dataset, str)
        raise InputError(
            where,
            problem,
            "yield whole batches, samples along the first dimension of every "
            f"tensor (batch-first), or {'drop --batched' if named else 'pass tune_loader a batch_size'} "
            "and let the DataLoader batch the samples",
        )
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
        fix = (
            "with --batched the collate function is given one whole batch the dataset made, not a list of "
            "samples: fix it for that, or drop it"
            if named
            else "with batch_size=None collate_fn is given one whole batch the dataset made, not a list of samples"
        )
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
        model = call_user(factory, where)
        if not isinstance(model, nn.Module):
            raise InputError(where, f"returned {type(model).__name__}, not a torch.nn.Module")
        return model

    return build
