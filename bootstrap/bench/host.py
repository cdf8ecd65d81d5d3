"""Facts about this host a run reads as it goes: usable CPUs, how busy the host is, workers' memory.

Shell equivalents: `nproc`, `head -1 /proc/stat`, `cat /proc/loadavg`, `grep Pss /proc/PID/smaps_rollup`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

CpuTimes = tuple[int, int]  # (busy, total) jiffies over all CPUs


def read_proc_stat(path: str = "/proc/stat") -> Optional[CpuTimes]:
    """(busy, total) jiffies over all CPUs from the first line of /proc/stat; None where absent."""
    try:
        with open(path, encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    numbers = [int(x) for x in fields[1:]]
    idle = numbers[3] + (numbers[4] if len(numbers) > 4 else 0)  # idle + iowait
    total = sum(numbers[:8])  # guest time is already inside user/nice
    return total - idle, total


def busy_pct(before: Optional[CpuTimes], after: Optional[CpuTimes]) -> Optional[float]:
    """CPU busy % between two `read_proc_stat` readings; None without both, or with no time between."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return 100.0 * (after[0] - before[0]) / (after[1] - before[1])


def host_busy_pct(seconds: float) -> Optional[float]:
    """Machine-wide CPU busy % over `seconds` while this process sleeps (None where /proc/stat is absent)."""
    first = read_proc_stat()
    if first is None:
        return None
    time.sleep(seconds)
    return busy_pct(first, read_proc_stat())


def _proc_field(path: Path, index: int) -> Optional[int]:
    """Whitespace-separated field `index` of a /proc file, as an integer; None where unreadable."""
    try:
        return int(path.read_text().split()[index])
    except (OSError, ValueError, IndexError):
        return None


def child_pids(proc: str = "/proc") -> list[int]:
    """PIDs of this process's children (`/proc/self/task/*/children`; empty where the kernel lacks it)."""
    pids: list[int] = []
    for task in Path(proc, "self", "task").glob("*"):
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return sorted(set(pids))


def pss_kib(pid: int, proc: str = "/proc") -> Optional[int]:
    """Proportional set size of `pid` in KiB: shared pages split fairly."""
    try:
        text = Path(proc, str(pid), "smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


def workers_pss_kib(pids: list[int]) -> Optional[int]:
    known = [kib for kib in map(pss_kib, pids) if kib is not None]
    return sum(known) if known else None


def rss_bytes() -> Optional[int]:
    """This process's resident set (`/proc/self/statm`), the size a forked worker starts from."""
    pages = _proc_field(Path("/proc/self/statm"), 1)
    return None if pages is None else pages * os.sysconf("SC_PAGE_SIZE")


def usable_cpus() -> int:
    from bootstrap.compat.host import probe_usable_cpus

    count, _ = probe_usable_cpus()
    return count or os.cpu_count() or 1


def run_queue_s(proc: str = "/proc") -> Optional[float]:
    """Seconds this thread has waited on a CPU's run queue, runnable but not running
    (`/proc/thread-self/schedstat`); None where the kernel does not say."""
    for task in ("thread-self", "self"):
        waited_ns = _proc_field(Path(proc, task, "schedstat"), 1)
        if waited_ns is not None:
            return waited_ns / 1e9
    return None


def load_average() -> Optional[float]:
    """The one-minute load average (runnable and waiting tasks); None where absent."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
