"""A `TrainingAdvice` rendered for `bench --effective-batch`: the text report (the verdict and the recipe in
plain words first, the grid, checks and notes below, the training loop to paste last), training.json (the
`bootstrap.training` envelope) and training.png. docs/benchmark.md, "Tune the training step"."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Optional, Sequence

from bootstrap.bench.advice import NEXT, field_lines, first_to_act_on, verdict_line
from bootstrap.bench.recipe import FORMAT, GridRow, TrainingAdvice
from bootstrap.errors import InputError
from bootstrap.fsutil import check_directory, check_output, write_target
from bootstrap.report import dumps, render_table

JSON_NAME = "training.json"
PNG_NAME = "training.png"
DETAILS = '---- details: docs/benchmark.md, "Tune the training step", explains them ----'
PASTE = "# ---- paste: the training loop with the advice applied ----"
FIXED = "num_workers=4, pin_memory=True, prefetch_factor=2"


def envelope_json(advice: TrainingAdvice) -> str:
    """What `--json` prints and training.json holds: `advice.to_json()`, as every verb's JSON is written."""
    return dumps(FORMAT, advice.to_dict()) + "\n"


# --------------------------------------------------------------------------- text


def render_text(advice: TrainingAdvice, workload: str = "", *, given: bool = True, verbose: bool = False) -> str:
    """The summary, then under DETAILS the workload and notes, the grid, the checks (`verbose`: with their
    evidence), and the snippet last. `given`: the user gave their batch size (else the baseline is fp32 at
    the largest micro-batch timed)."""
    lines = summary_lines(advice, given)
    header = f"training: {advice.device}, effective batch {advice.effective_batch}"
    header += f", largest micro-batch that fits {advice.max_micro_batch}" + (f"; {workload}" if workload else "")
    lines += ["", DETAILS, header] + [f"note: {note}" for note in advice.notes]
    if advice.grid:
        lines += ["", grid_table(advice)]
    if advice.checks:
        lines += ["", render_table(list(advice.checks), show_detail=verbose).rstrip("\n")]
    lines += ["", PASTE, advice.snippet().rstrip("\n")]
    return "\n".join(lines) + "\n"


def summary_lines(advice: TrainingAdvice, given: bool = True) -> list[str]:
    """Verdict, the recipe to run with, what it gained, and the check to act on first."""
    fields = [
        ("Verdict", verdict_line(advice.checks, False)),
        ("Run with", run_with(advice)),
        ("", "(the training loop to paste is at the end)"),
        ("Speed", speed(advice, given)),
    ]
    first = first_to_act_on(advice.checks)
    if first is not None:
        fields.append((NEXT[first.status], f"{first.id.split('.', 1)[-1]}: {first.remedy or first.observed}"))
    return [line for label, text in fields for line in field_lines(label, text)]


def run_with(advice: TrainingAdvice) -> str:
    steps = advice.accumulation_steps
    parts = [
        f"micro-batch {advice.micro_batch} x {steps} accumulation step{'s' if steps != 1 else ''} "
        f"(effective batch {advice.micro_batch * steps})",
        "the step's own precision (it ignores autocast)" if advice.precision_by_step else precision_words(advice),
        "channels_last" if advice.channels_last else "contiguous memory format",
    ]
    kwargs = ", ".join(f"{k}={v!r}" for k, v in advice.dataloader_kwargs.items())
    loader = f"DataLoader({kwargs})" if kwargs else "DataLoader defaults (not tuned: see the notes)"
    return ", ".join(parts) + f"; {loader}"


def precision_words(advice: TrainingAdvice) -> str:
    return {"fp32": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast with a GradScaler"}.get(
        advice.precision, advice.precision
    )


def speed(advice: TrainingAdvice, given: bool = True) -> str:
    """The step's rate and its gain over the user's settings; the whole loop's over the fixed advice."""
    rate = advice.rate
    text = f"{rate:,.0f} samples/s for the step" if rate else "the recommended step was not timed"
    yours = _yours(advice.grid)
    current = advice.gains.get("over_current")
    whose = "your settings" if given else "fp32 at the largest micro-batch timed"
    if yours is not None and current:
        same = (advice.micro_batch, advice.precision, advice.channels_last) == yours.key
        text += (
            f", {whose} kept ({yours.label}: nothing measured beat them)"
            if same
            else f", {current:.2f}x {whose} ({yours.label})"
        )
    elif yours is not None and not yours.fits:
        text += f"; your batch size {yours.micro} does not fit in memory"
    fixed = advice.gains.get("over_fixed_advice")
    if fixed:
        text += f"; the whole loop, DataLoader included, {fixed:.2f}x the fixed advice ({FIXED})"
    else:
        text += "; the whole loop was not compared with the fixed advice (the DataLoader was not tuned)"
    return text


def _yours(grid: Sequence[GridRow]) -> Optional[GridRow]:
    """The user's own configuration: the grid times it first, in fp32, contiguous."""
    return grid[0] if grid and grid[0].precision == "fp32" and not grid[0].channels_last else None


def _size(nbytes: Optional[int]) -> str:
    if nbytes is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes} B"


def grid_table(advice: TrainingAdvice) -> str:
    """One row a configuration timed: micro-batch, precision, layout, samples/s, peak memory, whether it fit."""
    chosen = (advice.micro_batch, advice.precision, advice.channels_last)
    yours = _yours(advice.grid)
    header = ("MICRO", "PRECISION", "LAYOUT", "SAMPLES/S", "TIMED", "PEAK MEMORY", "FITS", "")
    rows = [header]
    for row in advice.grid:
        mark = "<- recommended" if row.key == chosen else ("yours" if yours is not None and row is yours else "")
        rate = "-" if row.samples_per_s is None else f"{row.samples_per_s:,.0f}"
        layout = "channels_last" if row.channels_last else "contiguous"
        fits = "yes" if row.fits else "no"
        timed = str(row.timings) if row.samples_per_s is not None else "-"
        rows.append((str(row.micro), row.precision, layout, rate, timed, _size(row.peak_bytes), fits, mark))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    right = (0, 3, 4, 5)  # numbers align right
    lines = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------- files


def report_paths(out_dir: Path, *, png: bool = True) -> list[Path]:
    return [out_dir / JSON_NAME] + ([out_dir / PNG_NAME] if png else [])


def check_out(out_dir: Path, *, png: bool = True) -> None:
    """Before the run: `--out` is (or can become) a directory whose report files can be replaced."""
    from bootstrap.bench.report import try_writing_in

    check_directory(out_dir, "--out")
    try_writing_in(out_dir)
    if out_dir.is_dir():
        for path in report_paths(out_dir, png=png):
            if write_target(path).is_dir():
                fix = "remove it or give --out another directory"
                raise InputError(path, "is a directory, where bench writes its report", fix)
            check_output(path, "--out")


def write_reports(advice: TrainingAdvice, out_dir: Path, *, png: bool = True) -> list[Path]:
    """training.json (and training.png) in `out_dir`, all or none; the paths written."""
    from bootstrap.bench.report import write_files

    drawn: Optional[Callable[[], bytes]] = None
    if png:  # Pillow only when a picture is asked for
        from bootstrap.bench.training_plot import render_png

        drawn = functools.partial(render_png, advice)
    return write_files(out_dir, report_paths(out_dir, png=png), envelope_json(advice), drawn)
