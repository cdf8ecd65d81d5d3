"""`python -m bootstrap bench --effective-batch N [--dataset ...] [--memory-limit SIZE] [--precision P ...]`:
the training tuner (micro-batch, accumulation, precision, memory format, DataLoader) instead of the
loader-only bench. Exit 0 when every check passed or warned, 1 when one failed, 2 on bad input.
docs/benchmark.md, "Tune the training step".
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Optional

from bootstrap.errors import InputError

EFFECTIVE_FIX = "the samples one optimizer update sees in your recipe, e.g. --effective-batch 256"
MEMORY_FIX = "e.g. --memory-limit 2GiB; units B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB"
_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*")
# What the loader-only bench takes that the training tuner has no use for: refused rather than ignored.
NOT_FOR_TRAINING = (
    ("distributed", "--distributed", "the tuner runs one process on one device"),
    ("sampler", "--sampler", "the tuner builds micro-batches of chosen sizes by index"),
    ("batch_sampler", "--batch-sampler", "the tuner builds micro-batches of chosen sizes by index"),
    ("batched", "--batched", "the tuner builds micro-batches of chosen sizes by index"),
    ("storage", "--storage", "the tuner reads the synthetic images from memory"),
    ("cold_cache", "--cold-cache", "the tuner reads the synthetic images from memory"),
    ("data_dir", "--data-dir", "the tuner reads the synthetic images from memory"),
    ("max_workers", "--max-workers", "the DataLoader search sizes its workers from the host"),
    ("target_rate", "--target-rate", "it sizes a loader-only run"),
    ("threshold", "--threshold", "the training checks have no thresholds to set"),
)


def configure(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--effective-batch",
        metavar="N",
        help="tune the training step instead of the loader alone: the samples per optimizer update your recipe "
        "needs; bench recommends micro-batch x accumulation steps, precision, memory format and DataLoader "
        "arguments (--batch-size: your current micro-batch, never recommended against unless beaten)",
    )
    group.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="with --effective-batch: the memory a training step may use, e.g. 2GiB (default: the GPU's own; "
        "on a CPU 80%% of the available memory)",
    )
    group.add_argument(
        "--precision",
        action="append",
        choices=("fp32", "bf16", "fp16"),
        help="with --effective-batch: an autocast precision to try besides fp32 (repeatable; default: bf16 where "
        "the device has it, else fp16 on CUDA)",
    )


def effective_batch(text: str) -> int:
    """`--effective-batch`'s value: a whole number >= 1, else one line naming the flag and the fix."""
    value = text.strip()
    if not re.fullmatch(r"[+]?\d+", value):
        raise InputError(f"--effective-batch {text}", "is not a whole number of samples", EFFECTIVE_FIX)
    if int(value) < 1:
        raise InputError(f"--effective-batch {text}", "must be at least 1 sample", EFFECTIVE_FIX)
    return int(value)


def memory_size(text: str) -> int:
    """`--memory-limit`'s value in bytes: a number and an optional binary (KiB, G) or decimal (GB) unit."""
    found = _SIZE.fullmatch(text)
    unit = found.group(2).lower() if found else ""
    if found is None or unit not in _UNITS:
        raise InputError(f"--memory-limit {text}", "is not a size", MEMORY_FIX)
    nbytes = int(float(found.group(1)) * _UNITS[unit])
    if nbytes < 1:
        raise InputError(f"--memory-limit {text}", "is less than one byte", MEMORY_FIX)
    return nbytes


def wanted(args: argparse.Namespace) -> bool:
    """Whether this run tunes the training step; the training-only flags refused without --effective-batch."""
    if getattr(args, "effective_batch", None) is not None:
        return True
    for name, flag in (("memory_limit", "--memory-limit"), ("precision", "--precision")):
        if getattr(args, name, None):
            raise InputError(flag, "only applies when tuning the training step", "add --effective-batch N")
    return False


def check_flags(args: argparse.Namespace) -> tuple[int, Optional[int]]:
    """(effective batch, memory limit in bytes), each checked, and the loader-only flags refused: all
    before anything is imported or built, so bad input costs nothing."""
    effective = effective_batch(args.effective_batch)
    limit = None if args.memory_limit is None else memory_size(args.memory_limit)
    for name, flag, why in NOT_FOR_TRAINING:
        if getattr(args, name, None) not in (None, False, []):
            raise InputError(flag, f"does not apply with --effective-batch: {why}", f"drop {flag}")
    return effective, limit


def tune(args: argparse.Namespace, options: Any, progress: Any) -> tuple[Any, str]:
    """(the advice, the workload in words) for the run `options` describes (`bench.build_options`)."""
    from bootstrap.bench.training import TrainingOptions
    from bootstrap.bench.training_cli import load_workload, tune
    from bootstrap.bench.training_report import check_out

    effective, limit = check_flags(args)
    check_out(args.out, png=not args.no_png)
    workload = load_workload(options, args.batch_size or 1)
    training = TrainingOptions(
        effective_batch=effective,
        batch_size=args.batch_size,
        budget_s=options.budget_s,
        device=options.device,
        memory_limit=limit,
        precisions=tuple(args.precision) if args.precision else None,
    )
    return tune(workload, training, progress), workload.description


def file_names(args: argparse.Namespace) -> list[str]:
    from bootstrap.bench.training_report import JSON_NAME, PNG_NAME

    return [JSON_NAME] + ([] if args.no_png else [PNG_NAME])


def write(args: argparse.Namespace, advice: Any) -> list[Any]:
    """training.json (and training.png) in --out; the paths written."""
    from bootstrap.bench.training_report import write_reports

    return write_reports(advice, args.out, png=not args.no_png)


def show(args: argparse.Namespace, advice: Any, described: str) -> None:
    """The report on stdout: its JSON envelope with --json, else the text."""
    from bootstrap.bench.training_report import envelope_json, render_text

    if args.json:
        print(envelope_json(advice), end="")
    else:
        print(render_text(advice, described, given=args.batch_size is not None, verbose=args.verbose), end="")
