"""Facts about this host a run reads as it goes: usable CPUs, how busy the host is, workers' memory.

Shell equivalents: `nproc` (affinity), `grep Pss /proc/PID/smaps_rollup`,
`cat /proc/self/statm`, `head -1 /proc/stat`, `cat /proc/thread-self/schedstat`,
`cat /proc/loadavg`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import List, Optional


def child_pids(proc: str = "/proc") -> List[int]:
    """PIDs of this process's children (`/proc/self/task/*/children`; empty where the kernel lacks it)."""
    pids: List[int] = []
    for task in Path(proc, "self", "task").glob("*"):
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return sorted(set(pids))


def pss_kib(pid: int, proc: str = "/proc") -> Optional[int]:
    """Proportional set size of `pid` in KiB (`grep Pss /proc/PID/smaps_rollup`): shared pages split fairly."""
    try:
        text = Path(proc, str(pid), "smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


def workers_pss_kib(pids: List[int]) -> Optional[int]:
    values = [pss_kib(pid) for pid in pids]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def rss_bytes() -> Optional[int]:
    """This process's resident set (`/proc/self/statm`), the size a forked worker starts from."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def usable_cpus() -> int:
    from bootstrap.compat.host import probe_usable_cpus

    count, _ = probe_usable_cpus()
    return count or os.cpu_count() or 1


def host_busy_pct(seconds: float) -> Optional[float]:
    """Machine-wide CPU busy % over `seconds` while this process sleeps (/proc/stat; None where absent)."""
    from bootstrap.bench.utilization import read_proc_stat

    first = read_proc_stat()
    if first is None:
        return None
    time.sleep(seconds)
    second = read_proc_stat()
    if second is None or second[1] <= first[1]:
        return None
    return 100.0 * (second[0] - first[0]) / (second[1] - first[1])


def run_queue_s(proc: str = "/proc") -> Optional[float]:
    """Seconds this thread has waited on a CPU's run queue, runnable but not running (field 2 of
    `/proc/thread-self/schedstat`, nanoseconds); None where the kernel does not say (not Linux)."""
    for task in ("thread-self", "self"):
        try:
            return int(Path(proc, task, "schedstat").read_text().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return None


def load_average() -> Optional[float]:
    """The one-minute load average (`cat /proc/loadavg`): runnable and waiting tasks; None where absent."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
