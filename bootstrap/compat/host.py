"""Host probes: the CPUs, memory, disk, /dev/shm, open-file limit, C library, macOS release and container
this process runs in, each a value or None with a reason, gathered by `collect_host_facts`.
Shell equivalent: `nproc; free -m; df -m /dev/shm .; ulimit -n`.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import sys
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Tuple

from bootstrap.compat.facts import HostFacts
from bootstrap.fsutil import MIB

_CONTAINER_CGROUP_WORDS = ("docker", "kubepods", "containerd", "libpod", "lxc")


def probe_usable_cpus() -> Tuple[Optional[int], str]:
    """CPUs this process may run on (`nproc`): the affinity mask, which cgroups and taskset narrow."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is None:
        count = os.cpu_count()
        return count, "no CPU affinity on this OS: os.cpu_count()"
    return len(getaffinity(0)), ""


def probe_memory(meminfo: str = "/proc/meminfo") -> Tuple[Optional[Tuple[int, int]], str]:
    """(total, available) MiB (`grep -E 'MemTotal|MemAvailable' /proc/meminfo`)."""
    try:
        text = Path(meminfo).read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        return None, f"{meminfo}: {exc.strerror or exc}"
    kib = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            kib[key.strip()] = int(parts[0])
    if "MemTotal" not in kib:
        return None, f"{meminfo}: no MemTotal line"
    return (kib["MemTotal"] // 1024, kib.get("MemAvailable", kib.get("MemFree", 0)) // 1024), ""


def probe_statvfs(path: str) -> Tuple[Optional[Tuple[int, int]], str]:
    """(size, free) MiB of the file system holding `path` (`df -m PATH`)."""
    statvfs = getattr(os, "statvfs", None)
    if statvfs is None:
        return None, "os.statvfs is not available on this OS"
    try:
        st = statvfs(path)
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    return (st.f_frsize * st.f_blocks // MIB, st.f_frsize * st.f_bavail // MIB), ""


def probe_nofile() -> Tuple[Optional[Tuple[int, int]], str]:
    """(soft, hard) open-file limit (`ulimit -n`, `ulimit -Hn`); -1 means unlimited."""
    try:
        import resource  # not on Windows
    except ImportError:
        return None, "no resource module on this OS"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    return ((-1 if soft == unlimited else soft), (-1 if hard == unlimited else hard)), ""


def probe_start_method() -> Tuple[Optional[str], bool]:
    """(multiprocessing start method, whether the program set it explicitly).

    Asks without fixing it: `get_start_method()` without allow_none would
    set the default for the whole process. The first of
    `get_all_start_methods()` is the platform default.
    """
    explicit = multiprocessing.get_start_method(allow_none=True)
    if explicit:
        return explicit, True
    return multiprocessing.get_all_start_methods()[0], False


def probe_glibc(confstr: Optional[Callable[[str], Optional[str]]] = None) -> Tuple[Optional[str], str]:
    """The glibc this process runs on, "2.36" (`getconf GNU_LIBC_VERSION`); None on musl or off Linux."""
    confstr = confstr or getattr(os, "confstr", None)
    if confstr is None:
        return None, "no os.confstr on this OS"
    try:
        answer = confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):  # the name unknown to this OS, or refused by its C library (musl)
        answer = None
    name, _, version = (answer or "").partition(" ")
    if name != "glibc" or not version:
        return None, f"the C library is not glibc (CS_GNU_LIBC_VERSION: {answer!r})"
    return version, ""


def probe_macos(mac_ver: Callable[[], Tuple[str, Any, str]] = platform.mac_ver) -> Tuple[Optional[str], str]:
    """The macOS release, "14.5" (`sw_vers -productVersion`); None off macOS."""
    release = mac_ver()[0]
    return (release, "") if release else (None, "not macOS")


def probe_container_hints(root: str = "/") -> Tuple[str, ...]:
    """Signs of a container: /.dockerenv, /run/.containerenv, container words in /proc/1/cgroup."""
    base = Path(root)
    hints = [f"/{name}" for name in (".dockerenv", "run/.containerenv") if (base / name).exists()]
    try:
        cgroup = (base / "proc/1/cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cgroup = ""
    hints += [f"cgroup:{word}" for word in _CONTAINER_CGROUP_WORDS if word in cgroup]
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        hints.append("env:KUBERNETES_SERVICE_HOST")
    return tuple(hints)


def probe_wsl(root: str = "/", environ: Mapping[str, str] = os.environ) -> str:
    """Why this looks like WSL, '' if it does not (`grep -i microsoft /proc/sys/kernel/osrelease`). Under
    WSL2 the GPU belongs to the Windows driver, whose numbers NVML reports."""
    base = Path(root)
    try:
        release = (base / "proc/sys/kernel/osrelease").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        release = ""
    if "microsoft" in release.lower():
        return f"/proc/sys/kernel/osrelease: {release[:80]}"
    if environ.get("WSL_DISTRO_NAME"):
        return f"WSL_DISTRO_NAME={environ['WSL_DISTRO_NAME'][:40]}"
    if (base / "usr/lib/wsl/lib/libcuda.so").exists():
        return "/usr/lib/wsl/lib/libcuda.so"
    return ""


def probe_jetson(root: str = "/") -> str:
    """The L4T release of a Jetson (`head -1 /etc/nv_tegra_release`), '' elsewhere: its GPU driver
    comes with JetPack and is not upgraded on its own."""
    try:
        text = (Path(root) / "etc/nv_tegra_release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    first = next((line.strip("# \t") for line in text.splitlines() if line.strip("# \t")), "")
    return first[:120] or "/etc/nv_tegra_release"


def probe_gpu_signs(root: str = "/") -> Tuple[str, ...]:
    """NVIDIA GPUs the kernel shows whether or not a driver library answers (`ls /proc/driver/nvidia/gpus
    /dev/nvidia*`): a container started without `--gpus` still sees the host's /proc/driver/nvidia."""
    base = Path(root)
    signs = [f"/proc/driver/nvidia/gpus/{p.name}" for p in _listed(base / "proc/driver/nvidia/gpus")]
    signs += [
        f"/dev/{p.name}"
        for p in _listed(base / "dev")
        if p.name.startswith("nvidia") and p.name[len("nvidia") :].isdigit()
    ]
    return tuple(signs)


def _listed(folder: Path) -> List[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def collect_host_facts(*, root: str = "/", disk_path: str = ".", environ: Mapping[str, str] = os.environ) -> HostFacts:
    """Every host probe in one record; each unavailable value is listed in `missing` with its reason."""
    missing: List[str] = []

    def keep(field: str, found: Tuple[Any, str]) -> Any:
        value, reason = found
        if reason:
            missing.append(f"{field}: {reason}")
        return value

    cpus = keep("cpus_usable", probe_usable_cpus())
    memory = keep("memory", probe_memory(str(Path(root) / "proc/meminfo")))
    shm = keep("shm", probe_statvfs(str(Path(root) / "dev/shm")))
    disk = keep("disk", probe_statvfs(disk_path))
    nofile = keep("nofile", probe_nofile())
    method, explicit = probe_start_method()
    glibc, _ = probe_glibc()
    return HostFacts(
        cpus_usable=cpus,
        cpus_total=os.cpu_count(),
        memory_total_mib=memory[0] if memory else None,
        memory_available_mib=memory[1] if memory else None,
        shm_total_mib=shm[0] if shm else None,
        shm_free_mib=shm[1] if shm else None,
        disk_path=str(Path(disk_path).resolve()),
        disk_free_mib=disk[1] if disk else None,
        nofile_soft=nofile[0] if nofile else None,
        nofile_hard=nofile[1] if nofile else None,
        start_method=method,
        start_method_explicit=explicit,
        container_hints=probe_container_hints(root),
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
        cuda_device_order=environ.get("CUDA_DEVICE_ORDER"),
        libc=(f"glibc {glibc}" if glibc else "not glibc") if sys.platform.startswith("linux") else "",
        macos=probe_macos()[0] or "",
        missing=tuple(missing),
    )
