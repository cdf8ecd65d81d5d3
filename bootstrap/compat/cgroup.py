"""The limits a container's cgroup puts on this process that neither the CPU affinity mask nor
/proc/meminfo shows: a CPU quota (Kubernetes' `limits.cpu`, `docker run --cpus`) and a memory limit
(`limits.memory`, `docker run --memory`). Shell equivalent: `cat /proc/self/cgroup`, then `cpu.max`,
`memory.max` and `memory.current` (cgroup v2) or `cpu.cfs_quota_us`, `memory.limit_in_bytes` (v1)
in that cgroup and each one above it. Docs: docs/checks.md, "What is checked".
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional

MOUNT = "sys/fs/cgroup"
_UNLIMITED_BYTES = 1 << 60  # cgroup v1 writes "no limit" as the largest page count, about 2**63


def cpu_quota(root: str = "/") -> Optional[float]:
    """CPUs' worth of time per period that the tightest quota over this process's cgroups allows; None
    without a quota."""
    quotas = [q for q in map(_cpu_quota_in, _directories(root, "cpu")) if q is not None]
    return min(quotas, default=None)


def memory_limit(root: str = "/") -> Optional[tuple[int, int]]:
    """(limit, headroom) bytes of the tightest memory limit over this process's cgroups: the limit, and
    what it leaves beyond the memory its cgroup uses now (reclaimable page cache counted as free); None
    without a limit."""
    limits = [m for m in map(_memory_limit_in, _directories(root, "memory")) if m is not None]
    return min(limits, key=lambda limit: limit[1], default=None)


def _directories(root: str, controller: str) -> Iterator[Path]:
    """The process's cgroup for `controller` and each above it, to the mount. A container that sees its
    own cgroup as the mount's root (no cgroup namespace, v1) finds no such path there: the mount, then."""
    try:
        lines = Path(root, "proc/self/cgroup").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: one hierarchy for every controller (under unified/ beside v1's)
            mounts = [Path(root, MOUNT), Path(root, MOUNT, "unified")]
            mounts = [m for m in mounts if (m / "cgroup.controllers").exists()]
        elif controller in controllers.split(","):
            mounts = [Path(root, MOUNT, controllers), Path(root, MOUNT, controller)]
        else:
            continue
        for mount in (m for m in mounts if m.is_dir()):
            here = Path(mount, path.strip("/"))
            while here != mount and not here.is_dir():
                here = here.parent
            while True:
                yield here
                if here == mount:
                    break
                here = here.parent
            break


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _cpu_quota_in(directory: Path) -> Optional[float]:
    v2 = _read(directory / "cpu.max")  # "max 100000" or "200000 100000"
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return _ratio(quota, period)
    return _ratio(_read(directory / "cpu.cfs_quota_us") or "", _read(directory / "cpu.cfs_period_us") or "")


def _ratio(quota: str, period: str) -> Optional[float]:
    if not (quota.isdigit() and period.isdigit()) or int(period) == 0 or int(quota) == 0:
        return None  # "max", v1's -1, or unreadable
    return int(quota) / int(period)


def _memory_limit_in(directory: Path) -> Optional[tuple[int, int]]:
    limit = _read(directory / "memory.max") or _read(directory / "memory.limit_in_bytes") or ""
    if not limit.isdigit() or int(limit) >= _UNLIMITED_BYTES:
        return None
    used = _read(directory / "memory.current") or _read(directory / "memory.usage_in_bytes") or "0"
    cache = _stat(directory / "memory.stat", ("inactive_file", "total_inactive_file"))
    in_use = max(0, (int(used) if used.isdigit() else 0) - cache)
    return int(limit), max(0, int(limit) - in_use)


def _stat(path: Path, keys: tuple[str, ...]) -> int:
    """The first of `keys` in a memory.stat file, 0 where absent."""
    values = dict(line.split(" ", 1) for line in (_read(path) or "").splitlines() if " " in line)
    for key in keys:
        if values.get(key, "").strip().isdigit():
            return int(values[key])
    return 0
