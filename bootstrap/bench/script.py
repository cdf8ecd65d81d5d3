"""`tune_loader`: a training script tunes its own DataLoader in two lines.

    from bootstrap.bench import tune_loader
    kwargs, report = tune_loader(dataset, batch_size=64, budget=60, device="cuda")
    loader = DataLoader(dataset, batch_size=64, shuffle=True, **kwargs)

It runs the whole bench (`run_bench`) on the dataset object in this
process; see `user` for what the dataset, collate, model and step may be.
Workers: with `fork` (Linux's default) they inherit the dataset as it is;
with `spawn` (macOS, Windows) DataLoader pickles it, so it must be
picklable (no lambdas or open handles in its attributes).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from bootstrap.bench.user import UserWorkload


def tune_loader(
    dataset: Any,
    *,
    batch_size: Optional[int],
    budget: float = 60.0,
    device: str = "auto",
    collate_fn: Optional[Callable[..., Any]] = None,
    model: Any = None,
    step: Optional[Callable[..., Any]] = None,
    max_workers: Optional[int] = None,
    progress: Optional[Callable[[Any], None]] = None,
    sampler: Any = None,
    batch_sampler: Any = None,
) -> Tuple[Dict[str, Any], Any]:
    """Tune `DataLoader(dataset, ...)` for this host: (DataLoader keyword arguments, BenchResult).

    The keyword arguments are num_workers, pin_memory and, with workers,
    prefetch_factor and persistent_workers: pass them with your own
    batch_size, shuffle and collate_fn. `batch_size` None: the dataset
    yields whole batches, as DataLoader(batch_size=None) reads it, each
    counted as the length of its first. `sampler` (a Sampler of indices)
    reads the dataset in its order instead of a shuffle; `batch_sampler`
    (index lists) makes the batches, with batch_size=None, as DataLoader
    takes them (`bootstrap.bench.sampling`). `model` is an nn.Module (copied,
    never trained in place) or a zero-argument factory; `step` is
    `step(model, batch, device) -> loss or None` (`bootstrap.bench.user`);
    without them the built-in model trains on (images, labels) batches.
    When the budget ran out before the tuner picked a configuration
    (`report.best` is None; `report.checks` says what was left out), the
    arguments are the fastest loader's it measured, else num_workers=0.
    A sample that fails, or a run still stuck well past its budget (a
    sample that never returns: `bench.watchdog`), raises InputError;
    Ctrl-C raises KeyboardInterrupt, as anywhere else in the script.
    Shell equivalent: `python -m bootstrap bench --dataset MODULE:FACTORY`.
    """
    from bootstrap.bench.config import BenchOptions, WorkloadSpec
    from bootstrap.bench.results import LoaderConfig
    from bootstrap.bench.run import run_bench
    from bootstrap.errors import InputError

    refuse_in_bootstrapping_child()
    if progress is not None and not callable(progress):
        raise InputError(
            "tune_loader(progress=...)",
            f"is a {type(progress).__name__}, not a callable",
            "pass a function taking one Progress event, or None",
        )
    if batch_sampler is not None and batch_size is not None:
        raise InputError(
            "tune_loader(batch_size=...)",
            "does not apply with batch_sampler=..., which makes the batches",
            "pass batch_size=None",
        )
    if batch_size is not None or batch_sampler is not None:
        workload = WorkloadSpec() if batch_size is None else WorkloadSpec(batch_size=batch_size)
    else:
        workload = WorkloadSpec(batched=True)
    options = BenchOptions(
        workload=workload,
        budget_s=budget,
        device=device,
        max_workers=max_workers,
        user=UserWorkload(
            dataset, collate=collate_fn, model=model, step=step, sampler=sampler, batch_sampler=batch_sampler
        ),
    )
    result = run_bench(options, progress)
    if result.partial:  # the CLI reports what was measured; a script stopped with Ctrl-C stops
        raise KeyboardInterrupt
    config = result.best or _best_measured(result) or LoaderConfig()
    return config.dataloader_kwargs(), result


def refuse_in_bootstrapping_child() -> None:
    """Refuse a call made while this process, a worker started by spawn or forkserver, imports the main
    script (as `__mp_main__`): a script that calls tune_loader at module level runs it again in every
    DataLoader worker, a second bench inside the first. multiprocessing marks that import with
    `_inheriting`, the flag its own "An attempt has been made to start a new process before the current
    process has finished its bootstrapping phase" reads; `parent_process()` would also refuse a process the
    user started on purpose, and `__mp_main__` stays the main module's name after the import."""
    import multiprocessing

    from bootstrap.errors import InputError

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise InputError(
            "tune_loader",
            "called while a DataLoader worker (started by spawn or forkserver) imports "
            "the main script: it would run a second bench inside the worker",
            'put the call under `if __name__ == "__main__":`',
        )


def _best_measured(result: Any) -> Any:
    loaders = [m for m in result.measurements if m.phase in ("naive", "tune", "tuned") and m.config is not None]
    return max(loaders, key=lambda m: m.samples_per_s).config if loaders else None
