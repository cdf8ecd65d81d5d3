"""`bench --effective-batch N`: the workload a bench run measures (the user's `--dataset`, `--model`,
`--step` and `--collate`, loaded as `user.resolve` loads them; else the synthetic images), handed to the
training tuner (`training.run_training`), and its errors named as the command line spells things rather
than as `tune_training`'s keywords. docs/benchmark.md, "Tune the training step"."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from bootstrap.bench.config import BenchOptions
from bootstrap.bench.frames import with_frames
from bootstrap.bench.recipe import TrainingAdvice
from bootstrap.bench.state import ProgressFn
from bootstrap.bench.training import TrainingOptions, run_training
from bootstrap.errors import InputError

# tune_training's keywords -> the flags that set them, for messages that name the one or the other.
FLAGS = {
    "effective_batch": "--effective-batch",
    "batch_size": "--batch-size",
    "budget": "--budget",
    "memory_limit": "--memory-limit",
    "precisions": "--precision",
    "device": "--device",
}
_AT = re.compile(r"^tune_training\((\w+)=\.\.\.\)$")


@dataclass(frozen=True)
class Workload:
    """What the tuner is handed, and how a message names each part."""

    dataset: Any
    model: Callable[[], Any]
    step: Optional[Callable[..., Any]]
    collate: Optional[Callable[..., Any]]
    names: dict[str, str]  # dataset | model | step -> '--dataset my_data:make', 'the built-in model (tiny)', ...
    description: str


def load_workload(options: BenchOptions, first_batch: int) -> Workload:
    """The user's parts as bench builds them (the dataset checked, one batch of `first_batch` samples made),
    or the synthetic images in memory; without `--model`, bench's own model for the device
    (`step.resolve_model_name`)."""
    from bootstrap.bench.device import Device
    from bootstrap.bench.step import build_model, resolve_model_name
    from bootstrap.bench.training import check_device

    try:
        check_device(options.device)  # before Device(), which assumes the device is there
    except InputError as exc:
        raise as_flags(exc, {}) from None
    spec, user = options.workload, options.user
    name, _ = resolve_model_name(spec.model, Device(options.device).type)
    builtin = f"the built-in model ({name})"
    if user is None:
        from bootstrap.bench.synthetic import SyntheticImages, build_store

        dataset = SyntheticImages(build_store(spec, None), spec)
        names = {"dataset": "the synthetic images", "model": builtin, "step": "the built-in step"}
        described = f"synthetic images 3x{spec.crop_size}x{spec.crop_size} uint8, model {name}"
        return Workload(dataset, lambda: build_model(name, spec.num_classes), None, None, names, described)
    from bootstrap.bench.user import resolve

    parts = resolve(user, first_batch, spec.seed)
    model = parts.model_factory or (lambda: build_model(name, spec.num_classes))
    names = {
        "dataset": user.where("dataset"),
        "model": user.where("model") if user.model is not None else builtin,
        "step": user.where("step") if user.step is not None else "the built-in step",
    }
    described = f"dataset {user.dataset}, model {user.model or name}" + (f", step {user.step}" if user.step else "")
    return Workload(parts.dataset, model, parts.step_fn, parts.collate_fn, names, described)


def tune(workload: Workload, options: TrainingOptions, progress: Optional[ProgressFn]) -> TrainingAdvice:
    """`run_training` on the workload; an InputError it raises names the flag or the part at fault."""
    options = replace(options, collate_fn=workload.collate)
    try:
        return run_training(workload.dataset, workload.model, workload.step, options, progress)
    except InputError as exc:
        raise with_frames(as_flags(exc, workload.names), exc) from exc.__cause__


def as_flags(exc: InputError, names: dict[str, str]) -> InputError:
    """`exc` with `tune_training(NAME=...)` named as its flag or part, and the keywords of its fix as flags."""
    found = _AT.match(exc.where)
    if found is None:
        return exc
    keyword = found.group(1)
    where = names.get(keyword) or FLAGS.get(keyword) or exc.where
    fix = exc.fix
    for name, flag in FLAGS.items():
        fix = re.sub(rf"(?<![-\w]){name}=(?!\.\.\.)", f"{flag} ", fix)
        fix = re.sub(rf"(?<![-\w]){name}\b(?!=)", flag, fix)
    fix = fix.replace("step=...", "--step MODULE:FN").replace("collate_fn=...", "--collate MODULE:FN")
    error = InputError(where, exc.problem, fix)
    error.frames = exc.frames
    return error
