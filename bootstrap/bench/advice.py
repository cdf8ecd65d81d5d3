"""The text report's first lines: the verdict and the advice in plain words, for a reader who has not read
the method. What to run with, how much faster than the untuned loader, whether the GPU is kept busy, and
the one thing to do first; the figures behind them follow under the report's details heading.
docs/benchmark.md, "Reading the report"."""

from __future__ import annotations

import textwrap
from typing import Optional, Sequence

from bootstrap.bench.results import BenchResult, LoaderConfig, Metrics
from bootstrap.report import Check, Status

COLUMNS = 99  # every line of the summary fits a terminal of 100 columns
LABEL = 12  # "To improve: " and its kin, the text aligned after them
NEXT = {  # the status of the check to act on first, by what it asks of the user
    Status.FAIL: "Fix first",
    Status.WARN: "To improve",
    Status.INCONCLUSIVE: "To be sure",
}
UNTUNED = LoaderConfig()  # the naive phase's loader: no workers, no pinning, blocking copies


def summary_lines(result: BenchResult) -> list[str]:
    """The verdict, what to run with, the speed-up, whether the GPU is kept busy, and what to do first."""
    fields = [("Verdict", verdict_line(result.checks, result.partial)), ("Run with", _run_with(result))]
    if result.snippet:
        fields.append(("", "(the DataLoader(...) to paste is at the end)"))
    fields += [
        ("Speed", _speed(result.metrics, result.best) + _unsure(result.checks, "bench.speedup")),
        ("GPU", _device(result)),
    ]
    first = first_to_act_on(result.checks)
    if first is not None:
        fields.append((NEXT[first.status], f"{_name(first)}: {first.remedy or first.observed}"))
    return [line for label, text in fields for line in field_lines(label, text)]


def field_lines(label: str, text: str) -> list[str]:
    return textwrap.wrap(
        text,
        COLUMNS,
        initial_indent=(f"{label}:" if label else "").ljust(LABEL),
        subsequent_indent=" " * LABEL,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _name(check: Check) -> str:
    return check.id.split(".", 1)[-1]


def _names(checks: Sequence[Check]) -> str:
    return ", ".join(_name(c) for c in checks)


def _counted(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def verdict_line(checks: Sequence[Check], partial: bool) -> str:
    """Passed or failed (the exit status), with the checks that warn or could not tell named."""
    by = {status: [c for c in checks if c.status is status] for status in Status}
    failed, warned, unsure = by[Status.FAIL], by[Status.WARN], by[Status.INCONCLUSIVE]
    interrupted = "INTERRUPTED, a partial report; so far " if partial else ""
    if not checks:
        return interrupted + "none: the run ended before anything was measured"
    if failed:
        head = f"FAILED: {_counted(len(failed), 'check', 'checks')} failed ({_names(failed)})"
    elif warned:
        head = f"passed, with {_counted(len(warned), 'warning', 'warnings')} ({_names(warned)})"
    else:
        head = f"passed: {_counted(len(by[Status.OK]), 'check', 'checks')} ok"
    if failed and warned:
        head += f"; {len(warned)} {'warns' if len(warned) == 1 else 'warn'} ({_names(warned)})"
    if unsure:
        head += f"; {len(unsure)} could not tell ({_names(unsure)})"
    return interrupted + head


def _run_with(result: BenchResult) -> str:
    """The winning DataLoader keywords and loop settings, or why there are none."""
    best = result.best
    if best is None:
        return "no advice: no loader fed the training step within the budget"
    kwargs = ", ".join(f"{name}={value!r}" for name, value in best.dataloader_kwargs().items())
    loop = ["non_blocking=True copies"] * best.non_blocking
    if best.amp_dtype:
        loop.append(f"{best.amp_dtype.replace('float', 'f')} autocast")
    loop += ["channels_last"] * best.channels_last
    text = kwargs + (f"; {', '.join(loop)}" if loop else "")
    needed = result.metrics.budget_needed_s
    if result.snippet.startswith("# NOT FULLY TUNED"):
        more = f": ~{needed:.0f} s would finish it (--budget {needed:.0f})" if needed else ""
        text += f" (the best measured, not fully tuned{more})"
    return text


def _speed(m: Metrics, best: Optional[LoaderConfig]) -> str:
    """The tuned rate against the untuned loader's."""
    tuned, naive = m.tuned_samples_per_s, m.naive_samples_per_s
    if tuned is None:
        return "not measured: the run ended before the tuned loader's windows"
    rate = f"{tuned:,.0f} samples/s"
    if naive is None or not m.speedup:
        return f"{rate}; the untuned loader was not measured"
    if best is not None and _untuned(best):
        return f"{rate}; the untuned loader's own settings won (measured earlier at {naive:,.0f} samples/s)"
    return f"{rate}, {m.speedup:.2f}x the untuned loader (num_workers=0: {naive:,.0f} samples/s)"


def _untuned(config: LoaderConfig) -> bool:
    same = ("num_workers", "pin_memory", "non_blocking")
    return all(getattr(config, name) == getattr(UNTUNED, name) for name in same)


def _device(result: BenchResult) -> str:
    """Whether the device is kept busy: the tuned rate against the step's own on data already there."""
    m = result.metrics
    kind = result.device.get("type", "?")
    if kind == "cpu":
        feeds = m.feedable_samples_per_s
        text = "none on this run (cpu): the rates are this host's, not a GPU's"
        if feeds:
            text = f"none on this run (cpu); this host's loader could feed a GPU ~{feeds:,.0f} samples/s"
        if m.cores_needed_for_target is not None:
            text += f"; --target-rate needs ~{m.cores_needed_for_target:.1f} loader cores"
        return text
    if m.efficiency is None and m.tuned_over_ceiling is not None:
        return "not known: the tuned rate measured above the ceiling, a measurement error (see bench.efficiency)"
    if m.efficiency is None or m.ceiling_samples_per_s is None:
        return "not known: the run did not measure both the tuned loader and the ceiling"
    good = m.efficiency >= float(result.thresholds.get("efficiency_pass", {}).get("value", 0.9))
    busy = "kept busy" if good else "waits for data"
    text = f"{busy}: it trains at {m.efficiency:.0%} of its rate on data already on it"
    text += f" ({m.ceiling_samples_per_s:,.0f} samples/s)" + _unsure(result.checks, "bench.efficiency")
    gpu = result.sampler.gpu
    if gpu is not None and gpu.count and gpu.p95 is not None:
        text += f"; utilization (nvidia-smi's) p95 {gpu.p95:.0f}%"
    return text


def _unsure(checks: Sequence[Check], check_id: str) -> str:
    """What qualifies a figure whose verdict could not tell (a noisy or busy host)."""
    if any(c.id == check_id and c.status is Status.INCONCLUSIVE for c in checks):
        return f"; too noisy to be sure ({check_id})"
    return ""


def first_to_act_on(checks: Sequence[Check]) -> Optional[Check]:
    """The first check, in report order, of the most pressing status: a failure, else a warning, else one
    that could not tell."""
    for status in NEXT:
        for check in checks:
            if check.status is status:
                return check
    return None
