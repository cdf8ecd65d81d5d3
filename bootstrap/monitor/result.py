"""What one `monitor` run saw, as a value: what `monitor --json` prints when the run ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from bootstrap.monitor.log import rows
from bootstrap.monitor.sampler import Sample
from bootstrap.monitor.summary import GpuStats, RunningSummary
from bootstrap.report import result


@result
class MonitorResult:
    """Each GPU's statistics over the run, its last sample, and where the log went.

    `available` is False, with the `reason`, when there is no GPU to monitor:
    `monitor --once` reports that as a result (a probe), a longer run as an error.
    """

    available: bool
    reason: Optional[str]
    interval_s: Optional[float]  # None with --once
    samples: int
    duration_s: float
    gpu_count: int
    gpus: tuple[GpuStats, ...]
    last: Optional[Sample]
    log_path: Optional[Path]
    log_format: Optional[str]  # "csv" | "jsonl"
    log_rows: int
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "interval_s": self.interval_s,
            "samples": self.samples,
            "duration_s": round(self.duration_s, 3),
            "gpu_count": self.gpu_count,
            "gpus": [stats.to_dict() for stats in self.gpus],
            "last_sample": rows(self.last) if self.last is not None else [],
            "log": None
            if self.log_path is None
            else {"path": str(self.log_path), "format": self.log_format, "rows": self.log_rows},
            "notes": list(self.notes),
        }


def monitor_result(
    summary: RunningSummary,
    interval_s: Optional[float],
    gpu_count: int,
    notes: tuple[str, ...],
    log_path: Optional[Path] = None,
    log_format: Optional[str] = None,
    log_rows: int = 0,
) -> MonitorResult:
    """The result of a run whose samples went into `summary`."""
    return MonitorResult(
        available=True,
        reason=None,
        interval_s=interval_s,
        samples=summary.samples,
        duration_s=summary.duration_s,
        gpu_count=gpu_count,
        gpus=tuple(summary.per_gpu()),
        last=summary.last,
        log_path=log_path,
        log_format=log_format,
        log_rows=log_rows,
        notes=notes,
    )


def unavailable(reason: str) -> MonitorResult:
    """`monitor --once` where there is no GPU to monitor: no sample, and why."""
    return MonitorResult(
        available=False,
        reason=reason,
        interval_s=None,
        samples=0,
        duration_s=0.0,
        gpu_count=0,
        gpus=(),
        last=None,
        log_path=None,
        log_format=None,
        log_rows=0,
        notes=(),
    )
