"""`python -m bootstrap bench [--budget S] [--device D] [--config FILE] [--threshold NAME=VALUE ...] [--json] ...`.

Settings from the defaults, then `--config FILE`'s `options`, then the flags; exit 1 when a verdict
fails, 130 (143 for SIGTERM) when interrupted. Docs: docs/benchmark.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterator, Optional

from bootstrap.bench.config import (
    MODELS,
    RUN_OPTIONS,
    STORAGES,
    BenchOptions,
    ThresholdSet,
    WorkloadSpec,
    check_options,
    flag_name,
    load_config,
    parse_threshold_flags,
)
from bootstrap.commands import argtypes, bench_training
from bootstrap.commands.signals import sigterm_as_interrupt
from bootstrap.errors import EXIT_INTERRUPTED, InputError
from bootstrap.fsutil import disk_full, out_of_space
from bootstrap.report import exit_code

if TYPE_CHECKING:
    from bootstrap.bench import Progress, UserWorkload

_WORKLOAD_OPTIONS = tuple(f.name for f in fields(WorkloadSpec))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget", dest="budget_s", type=float, metavar="SECONDS", help="time for all measured phases (default 120)"
    )
    parser.add_argument(
        "--device", help="auto (default: cuda, else mps, else cpu), cpu, cuda, cuda:N or mps (Apple silicon)"
    )
    parser.add_argument(
        "--out",
        type=argtypes.path,
        default=Path("."),
        metavar="DIR",
        help="where bench.json and bench.png go (training.json and training.png with --effective-batch; default: .)",
    )
    parser.add_argument("--no-png", action="store_true", help="do not draw bench.png (training.png)")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("-v", "--verbose", action="store_true", help="show each verdict's evidence")
    parser.add_argument(
        "--distributed", action="store_true", help="under torchrun: every rank runs the phases, rank 0 reports"
    )
    parser.add_argument(
        "--config", type=argtypes.path, metavar="FILE", help="YAML/JSON file with `thresholds:` and `options:` mappings"
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one verdict threshold, e.g. efficiency_pass=0.85 (repeatable)",
    )
    own = parser.add_argument_group('your own workload (docs/benchmark.md, "Your own dataset")')
    own.add_argument(
        "--dataset",
        metavar="MODULE:FACTORY",
        help="measure your Dataset or IterableDataset: FACTORY() returns it (instead of the synthetic images)",
    )
    own.add_argument("--collate", metavar="MODULE:FN", help="with --dataset: the DataLoader's collate_fn")
    own.add_argument(
        "--step",
        metavar="MODULE:FN",
        help="with --dataset: the training step, FN(model, batch, device): return the loss and bench calls "
        "backward() and steps, or call backward() and step yourself and return None",
    )
    own.add_argument(
        "--sampler",
        metavar="MODULE:FN",
        help="with --dataset: FN(dataset) returns the Sampler to read it with (instead of a shuffle)",
    )
    own.add_argument(
        "--batch-sampler",
        metavar="MODULE:FN",
        help="with --dataset: FN(dataset) returns the batch sampler that makes the batches (instead of --batch-size)",
    )
    own.add_argument(
        "--batched",
        action="store_true",
        default=None,
        help="with --dataset: it yields whole batches (DataLoader batch_size=None), each counted by "
        "the first dimension its tensors share",
    )
    own.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="DIR",
        help="import those modules from DIR too (repeatable; default: the working directory)",
    )
    load = parser.add_argument_group("workload")
    load.add_argument(
        "--model",
        metavar="NAME|MODULE:FACTORY",
        help=f"{', '.join(MODELS)} (auto: ResNet-50 on a GPU with torchvision, else a small CNN), "
        "or with --dataset your FACTORY() returning an nn.Module",
    )
    load.add_argument("--batch-size", type=int)
    load.add_argument("--samples", type=int, help="distinct samples stored (default 512)")
    load.add_argument("--epoch-batches", type=int, help="batches per epoch, cycling over the samples (default 1000)")
    load.add_argument("--image-size", type=int, help="stored image side in pixels (default 256)")
    load.add_argument("--crop-size", type=int, help="random crop side fed to the model (default 224)")
    load.add_argument("--cpu-ms", type=float, help="extra CPU milliseconds per sample (augmentation cost)")
    load.add_argument("--io-ms", type=float, help="extra latency per sample in ms (storage/network; costs no CPU)")
    load.add_argument("--step-ms", type=float, help=argparse.SUPPRESS)  # a known stand-in device time (tests)
    load.add_argument("--storage", choices=STORAGES, help="memory (default), files (one per sample) or packed (memmap)")
    load.add_argument(
        "--cold-cache",
        action="store_true",
        default=None,
        help="files/packed: evict our files from the page cache before each phase",
    )
    load.add_argument(
        "--data-dir",
        type=argtypes.path,
        help="files/packed: the file system to test; a directory made there holds them and is "
        "removed at the end (default: the temp dir)",
    )
    training = parser.add_argument_group('the training step (docs/benchmark.md, "Tune the training step")')
    bench_training.configure(training)
    tuner = parser.add_argument_group("tuner and sizing")
    tuner.add_argument("--max-workers", type=int, help="cap the worker search (default: from CPUs, shm, RAM)")
    tuner.add_argument(
        "--target-rate",
        type=float,
        metavar="SAMPLES_PER_S",
        help="CPU sizing: how many loader cores a GPU eating this many samples/s needs",
    )


def build_options(args: argparse.Namespace) -> BenchOptions:
    """Defaults < config file `options` < flags; thresholds: defaults < file < --threshold.

    Each value is checked where it was given, so an error names the flag or `FILE: options.NAME`.
    """
    thresholds = ThresholdSet()
    settings: dict[str, Any] = {}
    names: dict[str, str] = {}
    if args.config is not None:
        thresholds, file_options = load_config(args.config, thresholds)
        settings.update(file_options)
        names.update({name: f"{args.config}: options.{name}" for name in file_options})
    user = _user_workload(args)
    flags = {
        name: getattr(args, name)
        for name in RUN_OPTIONS + _WORKLOAD_OPTIONS
        if getattr(args, name, None) is not None and not (name == "model" and user is not None and user.model)
    }
    settings.update(check_options(flags, flag_name))
    names.update({name: flag_name(name) for name in flags})
    if args.threshold:
        thresholds = thresholds.override(parse_threshold_flags(args.threshold), "--threshold")
    if settings.get("batched") and "batch_size" in settings:
        raise InputError(
            names["batch_size"],
            "does not apply to a dataset that yields whole batches (batched): their own length is the batch size",
            "drop one of them",
        )
    if user is not None and user.batch_sampler is not None:
        for name in ("batch_size", "batched"):
            if settings.get(name) not in (None, False):
                raise InputError(
                    names[name], "does not apply with --batch-sampler, which makes the batches", "drop one of them"
                )
    workload = WorkloadSpec(**{k: v for k, v in settings.items() if k in _WORKLOAD_OPTIONS})
    run_settings = {k: v for k, v in settings.items() if k in RUN_OPTIONS}
    if user is not None:
        synthetic = [name for name in settings if name in _SYNTHETIC_ONLY]
        if synthetic:
            name = synthetic[0]
            raise InputError(
                names[name],
                "describes the synthetic images, not --dataset's",
                f"drop {flag_name(name)}" if name in flags else "remove it from the file's options",
            )
    options = BenchOptions(workload=workload, thresholds=thresholds, user=user, **run_settings).validate(names)
    if user is not None:
        _import_refs(user, options.budget_s)
    return options


def _import_refs(user: Any, budget_s: float) -> None:
    """Import each reference, so a name that does not import is refused before the run says anything. An
    import that never returns (a module waiting on a mount or a lock) is stopped as a stuck run is."""
    # The user's modules import torch: its first import, slow on a busy host, is not theirs to time out.
    import torch  # noqa: F401

    from bootstrap.bench.frames import with_frames
    from bootstrap.bench.user import REF_FLAGS, import_ref
    from bootstrap.bench.watchdog import Stalled, give_up_s, watchdog

    limit_s = give_up_s(budget_s)
    for name, flag in REF_FLAGS:
        ref = getattr(user, name)
        if isinstance(ref, str):
            try:
                with watchdog(limit_s):
                    import_ref(ref, flag, user.paths)
            except Stalled as exc:
                stopped = InputError(
                    f"{flag} {ref}",
                    f"its import was still running after {limit_s:.0f} s: stopped",
                    "does the module wait on a mount, a lock or the network when imported?",
                )
                raise with_frames(stopped, exc) from None  # where the import was waiting


# What only the synthetic workload has: refused beside --dataset rather than silently ignored.
_SYNTHETIC_ONLY = (
    "samples",
    "epoch_batches",
    "image_size",
    "crop_size",
    "cpu_ms",
    "io_ms",
    "storage",
    "cold_cache",
    "jpeg_quality",
    "data_dir",
)


def _user_workload(args: argparse.Namespace) -> Optional[UserWorkload]:
    """--dataset and its companions as a `UserWorkload`, or None for the synthetic images."""
    from bootstrap.bench.user import UserWorkload, check_ref

    model = getattr(args, "model", None)
    model_ref = model if model is not None and ":" in model else None
    dataset = getattr(args, "dataset", None)
    if dataset is None:
        for flag, value in (
            ("--collate", getattr(args, "collate", None)),
            ("--step", getattr(args, "step", None)),
            ("--model", model_ref),
            ("--path", (getattr(args, "path", None) or [None])[0]),
            ("--sampler", getattr(args, "sampler", None)),
            ("--batch-sampler", getattr(args, "batch_sampler", None)),
        ):
            if value is not None:
                raise InputError(flag, "only applies to your own dataset", "add --dataset MODULE:FACTORY")
        return None
    for path in args.path:  # a typo here would only surface as "cannot import" later
        if not Path(path).is_dir():
            raise InputError(f"--path {path}", "is not a directory", "give the directory that holds the module")
    refs = {
        name: check_ref(value, f"--{name.replace('_', '-')}") if value is not None else None
        for name, value in (
            ("dataset", dataset),
            ("collate", args.collate),
            ("model", model_ref),
            ("step", args.step),
            ("sampler", args.sampler),
            ("batch_sampler", args.batch_sampler),
        )
    }
    return UserWorkload(paths=tuple(args.path), **refs)


def _progress(event: Progress) -> None:
    print(
        f"bench [{event.elapsed_s:6.1f}/{event.budget_s:g} s] {event.phase}: {event.message}",
        file=sys.stderr,
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    from bootstrap.bench.report import check_out, envelope_json, render_text, write_reports

    progress = None if args.quiet else _progress
    if bench_training.wanted(args):
        return _run_training(args, progress)
    reporter = True
    args.out = args.out.absolute()  # the user's code may change directory before the report is written
    with stdout_kept_for(args.json), sigterm_as_interrupt() as terminated:
        options = build_options(args)  # imports --dataset's module: what it prints is the user's output
        check_out(args.out, png=not args.no_png)  # a bad --out costs nothing: it fails before the run
        if args.distributed:
            from bootstrap.bench.distributed import run_distributed

            result, reporter = run_distributed(options, progress)
        else:
            from bootstrap.bench.run import run_bench

            result = run_bench(options, progress)
    code = exit_code(result.checks)
    if result.partial:
        code = 128 + terminated[0] if terminated else EXIT_INTERRUPTED
    if not reporter:
        return code
    try:
        written, failure = write_reports(result, args.out, png=not args.no_png), None
    except OSError as exc:
        written, failure = [], exc
    if args.json:
        print(envelope_json(result), end="")
    else:
        print(render_text(result, verbose=args.verbose), end="")
    if failure is not None:
        args.json = False  # stdout holds the report's envelope: no error envelope after it, the line goes to stderr
        raise _not_written(failure, args.out, ["bench.json"] + ([] if args.no_png else ["bench.png"]))
    print(
        f"wrote {', '.join(str(p) for p in written)}" + (" (partial)" if result.partial else ""),
        file=sys.stderr if args.json else sys.stdout,
        flush=True,
    )
    return code


def _run_training(args: argparse.Namespace, progress: Any) -> int:
    """`--effective-batch`: the training tuner on the workload bench would measure (docs/benchmark.md,
    "Tune the training step"). Its flags are checked before anything is imported."""
    bench_training.check_flags(args)
    args.out = args.out.absolute()  # the user's code may change directory before the report is written
    with stdout_kept_for(args.json), sigterm_as_interrupt():
        options = build_options(args)  # imports --dataset's module: what it prints is the user's output
        advice, described = bench_training.tune(args, options, progress)
    try:
        written, failure = bench_training.write(args, advice), None
    except OSError as exc:
        written, failure = [], exc
    bench_training.show(args, advice, described)
    if failure is not None:
        args.json = False  # stdout holds the report's envelope: no error envelope after it, the line goes to stderr
        raise _not_written(failure, args.out, bench_training.file_names(args))
    print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr if args.json else sys.stdout, flush=True)
    return exit_code(advice.checks)


@contextlib.contextmanager
def stdout_kept_for(json_out: bool) -> Iterator[None]:
    """With --json, stdout carries the report alone: whatever the user's dataset, model or step print
    (here, or in DataLoader workers, which inherit the file descriptor) goes to stderr until the run ends."""
    if not json_out:
        yield
        return
    sys.stdout.flush()
    out_fd, err_fd = _fileno(sys.stdout), _fileno(sys.stderr)
    saved = None
    if out_fd is not None and err_fd is not None:
        saved = os.dup(out_fd)
        os.dup2(err_fd, out_fd)
    real, sys.stdout = sys.stdout, sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stdout = real
        if saved is not None and out_fd is not None:
            os.dup2(saved, out_fd)
            os.close(saved)


def _fileno(stream: IO[str]) -> Optional[int]:
    try:
        return stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):  # a test's captured stream has no descriptor
        return None


def _not_written(exc: OSError, out: Path, files: list[str]) -> Exception:
    """The one line for a report the run produced but could not store (it was printed above)."""
    names = " and ".join(files)
    outcome = f"{names} not written (any from an earlier run are left as they were); the report is above"
    if out_of_space(exc):
        return disk_full(
            f"writing {names}", {"--out": out}, outcome, "free space or give --out another directory", cause=exc
        )
    return InputError(out, f"could not write {names}: {exc.strerror or exc}; {outcome}", "give --out another directory")
