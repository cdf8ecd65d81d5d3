"""`python -m bootstrap monitor [--interval S] [--count N] [--csv FILE | --jsonl FILE] [--once] [--json]`.

Docs: docs/checks.md, "Watching the GPUs: `monitor`".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

from bootstrap.commands import argtypes
from bootstrap.commands.signals import sigterm_as_interrupt
from bootstrap.errors import EXIT_OK, excerpt

if TYPE_CHECKING:
    from bootstrap.monitor.log import SampleLog
    from bootstrap.monitor.sampler import GpuSampler, Sample
    from bootstrap.monitor.summary import RunningSummary

T = TypeVar("T")

_CLEAR = "\x1b[H\x1b[J"  # cursor home, clear to the end of the screen


MAX_INTERVAL_S = 86400.0  # a day between samples; more is a typo, and sleep() overflows past time_t


def _positive_float(text: str) -> float:
    value = _number(float, text, f"seconds, > 0 and <= {MAX_INTERVAL_S:g}")
    if not 0 < value <= MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"must be > 0 and <= {MAX_INTERVAL_S:g} s, got {excerpt(text)}")
    return value


def _positive_int(text: str) -> int:
    value = _number(int, text, "a whole number >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {excerpt(text)}")
    return value


def _number(kind: Callable[[str], T], text: str, wanted: str) -> T:
    """`kind(text)`, or argparse's one-line error saying what was wanted (not 'invalid _positive_int value')."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}") from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interval", type=_positive_float, default=1.0, metavar="S", help="seconds between samples (default: 1)"
    )
    parser.add_argument(
        "--count", type=_positive_int, default=None, metavar="N", help="stop after N samples (default: until Ctrl-C)"
    )
    parser.add_argument("--once", action="store_true", help="print one sample and exit; exit 0 even without a driver")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--csv", type=argtypes.path, metavar="FILE", help="also log one row per GPU and sample as CSV")
    out.add_argument("--jsonl", type=argtypes.path, metavar="FILE", help="also log one JSON object per GPU and sample")
    parser.add_argument(
        "--json", action="store_true", help="no table: when the run ends, print its statistics and last sample as JSON"
    )


def run(args: argparse.Namespace) -> int:
    from bootstrap.fsutil import check_output
    from bootstrap.monitor.result import monitor_result, unavailable
    from bootstrap.monitor.sampler import GpuSampler, NvmlUnavailable
    from bootstrap.monitor.summary import SPARK, RunningSummary
    from bootstrap.report import dumps

    log_path, fmt = (args.csv, "csv") if args.csv else (args.jsonl, "jsonl") if args.jsonl else (None, "")
    if log_path is not None:
        check_output(log_path, f"--{fmt}")  # a typo fails before NVML is touched
    sampler = GpuSampler()
    try:
        sampler.open()
    except NvmlUnavailable as exc:
        if args.once:
            print(dumps("bootstrap.monitor", unavailable(str(exc)).to_dict()) if args.json else exc)
            return EXIT_OK
        raise

    ascii_only = not _can_print(SPARK)
    summary = RunningSummary()
    try:
        rows_logged = _record(args, sampler, summary, (log_path, fmt), ascii_only)
    finally:
        sampler.close()

    if args.json:
        done = monitor_result(
            summary,
            None if args.once else args.interval,
            sampler.gpu_count,
            sampler.notes,
            log_path,
            fmt or None,
            rows_logged,
        )
        print(dumps("bootstrap.monitor", done.to_dict()))
    elif not args.once:
        print(_summary(summary, ascii_only))
    if log_path is not None:
        print(f"wrote {log_path} ({summary.samples} samples)", file=sys.stderr if args.json else sys.stdout)
    for note in sampler.notes:
        print(f"note: not available: {note}", file=sys.stderr)
    return EXIT_OK


def _record(
    args: argparse.Namespace,
    sampler: GpuSampler,
    summary: RunningSummary,
    log_to: tuple[Optional[Path], str],
    ascii_only: bool,
) -> int:
    """Sample until --count or Ctrl-C (or SIGTERM); the rows logged to `log_to` (path, format), whose file
    is kept when the run ends or its reader goes away, and removed on an error."""
    from bootstrap.monitor.log import SampleLog

    log: Optional[SampleLog] = None
    try:
        log = SampleLog(log_to[0], log_to[1], f"--{log_to[1]}") if log_to[0] is not None else None
        with sigterm_as_interrupt() as received:
            try:
                _show(args, sampler, summary, log, ascii_only)
            except KeyboardInterrupt:
                if not args.json:
                    sys.stdout.write("\n")
            except BrokenPipeError:  # `monitor --csv F | head`, a pager quit: the samples taken are kept
                if log is not None:
                    log.commit()
                    log = None
                raise
            received.wind_down()  # a signal now (`timeout` signals the whole process group) is only noted
            if log is None:
                return 0
            log.commit()
            rows, log = log.rows_written, None
            return rows
    finally:
        if log is not None:
            log.discard()  # an error, not an interruption: the command failed, so nothing is left


def _show(
    args: argparse.Namespace, sampler: GpuSampler, summary: RunningSummary, log: Optional[SampleLog], ascii_only: bool
) -> None:
    """Take the samples: each into the summary, the log and (without --json) the screen."""
    from bootstrap.monitor.sampler import run_samples

    live = sys.stdout.isatty() and not args.once
    for sample in run_samples(sampler, args.interval, 1 if args.once else args.count):
        summary.add(sample)
        if log is not None:
            log.write(sample)
        if not args.json:
            frame = _frame(sample, summary, args, ascii_only, sampler.gpu_count)
            sys.stdout.write((_CLEAR if live else "") + frame + ("" if live else "\n\n"))
            sys.stdout.flush()


def _can_print(text: str) -> bool:
    try:
        text.encode(sys.stdout.encoding or "ascii")
        return True
    except (UnicodeEncodeError, LookupError):
        return False


def _frame(sample: Sample, summary: RunningSummary, args: argparse.Namespace, ascii_only: bool, gpu_count: int) -> str:
    from bootstrap.monitor.log import rows
    from bootstrap.monitor.summary import sparkline

    stats = {s.index: s for s in summary.per_gpu()}
    when = rows(sample)[0]["timestamp"] if sample.gpus else ""
    head = f"{when}  {gpu_count} GPU{'s' if gpu_count != 1 else ''}"
    if not args.once:
        head += f", sample {summary.samples} every {args.interval:g} s (Ctrl-C for the summary)"
    columns = (
        f"{'GPU':>3}  {'NAME':<26} {'UTIL':>5}  {'MEMORY USED/TOTAL':>20}  {'TEMP':>5}  "
        f"{'POWER/LIMIT':>13}  {'SM CLOCK':>9}"
    )
    if not args.once:
        columns += f"  {'MEAN':>5} {'P95':>5}  RECENT"
    lines = [head, columns]
    for gpu in sample.gpus:
        line = (
            f"{gpu.index:>3}  {gpu.name[:26]:<26} {_pct(gpu.utilization_pct):>5}  "
            f"{_pair(gpu.memory_used_mib, gpu.memory_total_mib, 'MiB'):>20}  {_unit(gpu.temperature_c, 'C'):>5}  "
            f"{_pair(_round(gpu.power_w), _round(gpu.power_limit_w), 'W'):>13}  {_unit(gpu.sm_clock_mhz, 'MHz'):>9}"
        )
        if not args.once:
            s = stats[gpu.index]
            line += (
                f"  {_pct(s.utilization_mean_pct):>5} {_pct(s.utilization_p95_pct):>5}  "
                f"{sparkline(s.recent, ascii_only)}"
            )
        lines.append(line)
        for proc in gpu.processes:
            lines.append(
                f"{'':>5}pid {proc.pid:<8} {(proc.name or '?')[:24]:<24} {_unit(proc.memory_used_mib, 'MiB'):>12}"
            )
    return "\n".join(lines)


def _summary(summary: RunningSummary, ascii_only: bool) -> str:
    from bootstrap.monitor.summary import sparkline

    if not summary.samples:
        return "summary: no sample taken"
    lines = [
        f"summary: {summary.samples} sample{'s' if summary.samples != 1 else ''} over "
        f"{summary.duration_s:.{1 if summary.duration_s >= 0.1 else 3}f} s"
    ]
    for s in summary.per_gpu():
        parts = [
            f"utilization mean {_pct(s.utilization_mean_pct)}, p95 {_pct(s.utilization_p95_pct)}, "
            f"max {_pct(s.utilization_max_pct)}",
            f"memory peak {_unit(s.memory_used_peak_mib, 'MiB')}",
            f"power mean {_unit(_round(s.power_mean_w, 1), 'W')}",
            f"temperature max {_unit(s.temperature_max_c, 'C')}",
        ]
        lines.append(f"GPU {s.index} {s.name}: " + "; ".join(parts))
        if s.overview:
            lines.append(f"  utilization over the run: {sparkline(s.overview, ascii_only)}")
    return "\n".join(lines)


def _pct(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}%" if value == int(value) else f"{value:.1f}%"


def _round(value: Optional[float], digits: int = 0) -> Optional[float]:
    if value is None:
        return None
    return round(value, digits) if digits else float(round(value))


def _num(value: float) -> str:
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return str(value)


def _unit(value: Optional[float], unit: str) -> str:
    return "n/a" if value is None else f"{_num(value)} {unit}"


def _pair(used: Optional[float], total: Optional[float], unit: str) -> str:
    if used is None and total is None:
        return "n/a"
    parts = ["?" if used is None else _num(used), "?" if total is None else _num(total)]
    return f"{parts[0]}/{parts[1]} {unit}"
