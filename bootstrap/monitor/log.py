"""`monitor --csv FILE` / `--jsonl FILE`: one row per GPU and sample, units in the column names,
streamed to `FILE.partial` and renamed to FILE at the end."""

from __future__ import annotations

import contextlib
import csv
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from bootstrap.errors import BootstrapError, InputError
from bootstrap.fsutil import check_output, is_special, locks_unsupported, write_failed
from bootstrap.monitor.sampler import Sample

# The columns of --csv / --jsonl, units in the names.
COLUMNS = (
    "timestamp",
    "elapsed_s",
    "gpu_index",
    "gpu_uuid",
    "gpu_name",
    "gpu_utilization_pct",
    "memory_utilization_pct",
    "memory_used_mib",
    "memory_total_mib",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "process_count",
    "process_memory_used_mib",
    "processes",  # CSV: "pid:name:memory_used_mib" joined by ';'; JSONL: a list of objects
)


def rows(sample: Sample) -> list[dict[str, Any]]:
    """One row per GPU, keyed by COLUMNS; missing values are None."""
    stamp = datetime.fromtimestamp(sample.timestamp, tz=timezone.utc).isoformat(timespec="milliseconds")
    stamp = stamp.replace("+00:00", "Z")
    out = []
    for gpu in sample.gpus:
        known = [p.memory_used_mib for p in gpu.processes if p.memory_used_mib is not None]
        out.append(
            {
                "timestamp": stamp,
                "elapsed_s": round(sample.elapsed_s, 3),
                "gpu_index": gpu.index,
                "gpu_uuid": gpu.uuid,
                "gpu_name": gpu.name,
                "gpu_utilization_pct": gpu.utilization_pct,
                "memory_utilization_pct": gpu.memory_utilization_pct,
                "memory_used_mib": gpu.memory_used_mib,
                "memory_total_mib": gpu.memory_total_mib,
                "temperature_c": gpu.temperature_c,
                "power_w": None if gpu.power_w is None else round(gpu.power_w, 3),
                "power_limit_w": None if gpu.power_limit_w is None else round(gpu.power_limit_w, 3),
                "sm_clock_mhz": gpu.sm_clock_mhz,
                "process_count": len(gpu.processes),
                "process_memory_used_mib": sum(known) if known else (0 if not gpu.processes else None),
                "processes": [
                    {"pid": p.pid, "name": p.name, "memory_used_mib": p.memory_used_mib} for p in gpu.processes
                ],
            }
        )
    return out


def csv_cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ";".join(
            f"{p['pid']}:{_safe_name(p['name'])}:{'' if p['memory_used_mib'] is None else p['memory_used_mib']}"
            for p in value
        )
    return str(value)


def _safe_name(name: Optional[str]) -> str:
    return "" if name is None else name.replace(":", "_").replace(";", "_")


class SampleLog:
    """`--csv FILE` / `--jsonl FILE`: rows streamed to `FILE.partial`, renamed to FILE at the end.

    Readers of FILE see a complete log or none (the project's atomic-write
    rule); `FILE.partial` can be followed with `tail -f` meanwhile and keeps
    the data if the process is killed outright.
    """

    def __init__(self, path: Path, fmt: str, flag: str = "--csv") -> None:
        if fmt not in ("csv", "jsonl"):
            raise ValueError(fmt)
        self.path = check_output(path, flag)
        self.fmt = fmt
        self.flag = flag
        self.direct = is_special(self.path)  # a FIFO or /dev/stdout: streamed to, nothing to rename
        self.partial = self.path if self.direct else self.path.with_name(self.path.name + ".partial")
        self.rows_written = 0
        try:
            flags = os.O_WRONLY if self.direct else os.O_WRONLY | os.O_CREAT | os.O_EXCL
            fd = os.open(self.partial, flags, 0o644)
        except FileExistsError:
            raise _partial_exists(self.partial) from None
        except OSError as exc:
            raise InputError(self.path, f"cannot write: {exc.strerror}", "choose another file") from None
        if not self.direct:
            _hold(fd)
        self._handle = open(fd, "w", encoding="utf-8", newline="")
        self._csv = csv.writer(self._handle, lineterminator="\n") if fmt == "csv" else None
        if self._csv is not None:
            self._csv.writerow(COLUMNS)

    def write(self, sample: Sample) -> None:
        try:
            for row in rows(sample):
                if self._csv is not None:
                    self._csv.writerow([csv_cell(row[c]) for c in COLUMNS])
                else:
                    self._handle.write(json.dumps(row, separators=(",", ":")) + "\n")
                self.rows_written += 1
            self._handle.flush()
        except OSError as exc:
            raise self._failed(exc) from None

    def commit(self) -> None:
        """Close and rename to the final name."""
        try:
            self._handle.flush()
            if self.direct:
                self._handle.close()
                return
            os.fsync(self._handle.fileno())
            self._handle.close()
            os.replace(self.partial, self.path)
        except OSError as exc:
            raise self._failed(exc) from None

    def discard(self) -> None:
        with contextlib.suppress(OSError):  # what is still buffered cannot be written (a full disk): it goes anyway
            self._handle.close()
        if not self.direct and self.partial.exists():
            self.partial.unlink()

    def _failed(self, exc: OSError) -> BootstrapError:
        """The one line for a log that cannot be written any more (a full disk); the partial file is removed
        first, so the free space reported is what is left without it."""
        self.discard()
        return write_failed(exc, self.path, self.flag, "the log is removed" if not self.direct else "logging stopped")


def _hold(fd: int) -> None:
    """Lock the partial file while this monitor writes it, so that the next one can tell a writer from a
    file a killed monitor left (the lock goes with the process)."""
    try:
        import fcntl
    except ImportError:  # Windows: the message cannot tell the two apart
        return
    with contextlib.suppress(OSError):  # a file system without locks: likewise
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _partial_exists(partial: Path) -> InputError:
    """Why `partial` is in the way: a monitor still writing it (its lock is held), or one killed outright
    (SIGKILL, a crash) whose rows are in it. Neither is overwritten."""
    either = InputError(
        partial,
        "exists: another monitor is writing it, or one was killed",
        "stop the other monitor, or move the file away",
    )
    try:
        import fcntl

        fd = os.open(partial, os.O_RDONLY)
    except (ImportError, OSError):
        return either
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:  # held; or, on a file system without locks, it cannot tell
        if locks_unsupported(exc):
            return either
        return InputError(partial, "exists: another monitor is writing it", "stop it, or log to another file")
    finally:
        os.close(fd)
    return InputError(
        partial,
        "was left by a monitor that was killed; it holds that run's rows",
        "move it away (or delete it) and run again",
    )
