"""The host a DataLoader runs on: its facts, probed (`collect_host_facts`: `nproc; free -m;
df -m /dev/shm .; ulimit -n`), and the pure `host.*` rules `doctor` and `verify` share, sized for
the bench's default loader (`LoaderNeeds`). Docs: docs/checks.md, "What is checked".
"""

from __future__ import annotations

import math
import multiprocessing
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, TypeVar

from bootstrap.compat import cgroup
from bootstrap.compat.facts import DriverFacts, HostFacts
from bootstrap.compat.visible import Visible, visible_gpus, visible_note
from bootstrap.fsutil import MIB
from bootstrap.report import Check, Status

_CONTAINER_CGROUP_WORDS = ("docker", "kubepods", "containerd", "libpod", "lxc")
T = TypeVar("T")


def probe_usable_cpus(root: str = "/") -> tuple[Optional[int], str]:
    """CPUs this process may run on (`nproc`): the affinity mask, which cpusets, Slurm and taskset narrow,
    or fewer where a cgroup CPU quota allows less time (Kubernetes' CPU limit, `docker run --cpus`;
    a quota of 2.5 CPUs counts as 3)."""
    return _cpus_under(cgroup.cpu_quota(root))


def _cpus_under(quota: Optional[float]) -> tuple[Optional[int], str]:
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is None:
        count = os.cpu_count()
        return count, "no CPU affinity on this OS: os.cpu_count()"
    return len(getaffinity(0)) if quota is None else min(len(getaffinity(0)), math.ceil(quota)), ""


def probe_usable_memory(root: str = "/") -> tuple[Optional[tuple[int, int]], str]:
    """(total, available) MiB as `probe_memory` reads them, each no more than a cgroup memory limit
    allows (Kubernetes' memory limit, `docker run --memory`), which /proc/meminfo does not show."""
    return _memory_under(root, cgroup.memory_limit(root))


def _memory_under(root: str, limit: Optional[tuple[int, int]]) -> tuple[Optional[tuple[int, int]], str]:
    memory, reason = probe_memory(str(Path(root) / "proc/meminfo"))
    if memory is None or limit is None:
        return memory, reason
    return (min(memory[0], limit[0] // MIB), min(memory[1], limit[1] // MIB)), ""


def probe_memory(meminfo: str = "/proc/meminfo") -> tuple[Optional[tuple[int, int]], str]:
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


def probe_statvfs(path: str) -> tuple[Optional[tuple[int, int]], str]:
    """(size, free) MiB of the file system holding `path` (`df -m PATH`)."""
    statvfs = getattr(os, "statvfs", None)
    if statvfs is None:
        return None, "os.statvfs is not available on this OS"
    try:
        st = statvfs(path)
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    return (st.f_frsize * st.f_blocks // MIB, st.f_frsize * st.f_bavail // MIB), ""


def probe_nofile() -> tuple[Optional[tuple[int, int]], str]:
    """(soft, hard) open-file limit (`ulimit -n`, `ulimit -Hn`); -1 means unlimited."""
    try:
        import resource  # not on Windows
    except ImportError:
        return None, "no resource module on this OS"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    return ((-1 if soft == unlimited else soft), (-1 if hard == unlimited else hard)), ""


def probe_start_method() -> tuple[Optional[str], bool]:
    """(multiprocessing start method, whether the program set it explicitly).

    Asks without fixing it: `get_start_method()` without allow_none would
    set the default for the whole process. The first of
    `get_all_start_methods()` is the platform default.
    """
    explicit = multiprocessing.get_start_method(allow_none=True)
    if explicit:
        return explicit, True
    return multiprocessing.get_all_start_methods()[0], False


def probe_glibc(confstr: Optional[Callable[[str], Optional[str]]] = None) -> tuple[Optional[str], str]:
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


def probe_macos(
    mac_ver: Callable[[], tuple[str, tuple[str, str, str], str]] = platform.mac_ver,
) -> tuple[Optional[str], str]:
    """The macOS release, "14.5" (`sw_vers -productVersion`); None off macOS."""
    release = mac_ver()[0]
    return (release, "") if release else (None, "not macOS")


def probe_container_hints(root: str = "/") -> tuple[str, ...]:
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


def probe_gpu_signs(root: str = "/") -> tuple[str, ...]:
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


def _listed(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def collect_host_facts(*, root: str = "/", disk_path: str = ".", environ: Mapping[str, str] = os.environ) -> HostFacts:
    """Every host probe in one record; each unavailable value is listed in `missing` with its reason."""
    missing: list[str] = []

    def keep(field: str, found: tuple[T, str]) -> T:
        value, reason = found
        if reason:
            missing.append(f"{field}: {reason}")
        return value

    quota, limit = cgroup.cpu_quota(root), cgroup.memory_limit(root)  # each read once
    cpus = keep("cpus_usable", _cpus_under(quota))
    memory = keep("memory", _memory_under(root, limit))
    shm = keep("shm", probe_statvfs(str(Path(root) / "dev/shm")))
    disk = keep("disk", probe_statvfs(disk_path))
    nofile = keep("nofile", probe_nofile())
    method, explicit = probe_start_method()
    glibc, _ = probe_glibc()
    return HostFacts(
        cpus_usable=cpus,
        cpus_total=os.cpu_count(),
        cpus_quota=quota,
        memory_limit_mib=None if limit is None else limit[0] // MIB,
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


# --------------------------------------------------------------------------- the host rules

GIB_MIB = 1024  # MiB in a GiB


@dataclass(frozen=True)
class LoaderNeeds:
    """The DataLoader that the /dev/shm and CPU checks size for: the bench's default workload.

    A batch of 64 RGB 224x224 images decoded to float32 (38.5 MB) crosses
    /dev/shm once per worker batch; each worker keeps `prefetch_factor`
    batches in flight (docs/benchmark.md, "Thresholds and their basis": free shm >= 2 x need).
    """

    batch_bytes: int = 64 * 3 * 224 * 224 * 4
    prefetch_factor: int = 2
    reserved_cpus: int = 2  # the main process and the pin-memory thread
    cpus_per_gpu_min: int = 3  # DS-Analyzer: 3 (ResNet-50) to 24 cores per GPU hide the prep stall
    shm_pass_factor: float = 2.0
    shm_warn_factor: float = 1.0
    nofile_min: int = 4096
    disk_warn_mib: int = 10 * GIB_MIB
    disk_fail_mib: int = 1 * GIB_MIB
    memory_available_warn_mib: int = 2 * GIB_MIB

    def workers_per_loader(self, cpus: int, loaders: int) -> int:
        return max(1, cpus // max(1, loaders) - self.reserved_cpus)

    def shm_need_mib(self, cpus: int, loaders: int) -> float:
        return loaders * self.workers_per_loader(cpus, loaders) * self.prefetch_factor * self.batch_bytes / MIB


def host_checks(host: HostFacts, nvidia: DriverFacts, needs: LoaderNeeds = LoaderNeeds()) -> list[Check]:
    """CPUs, memory, disk, /dev/shm, open files, start method, container: what a DataLoader depends on.

    Sized for the job's GPUs, as its CPUs are (affinity): those CUDA_VISIBLE_DEVICES leaves it."""
    visible = visible_gpus(nvidia.gpus, host.cuda_visible_devices, host.cuda_device_order)
    return [
        cpus_check(host, visible, needs),
        memory_check(host, visible, needs),
        disk_check(host, needs),
        shm_check(host, visible, needs),
        nofile_check(host, needs),
        start_method_check(host),
        container_check(host),
    ]


def _missing(host: HostFacts, *fields: str) -> str:
    reasons = [m for m in host.missing if m.split(":", 1)[0] in fields]
    return "; ".join(reasons) or "not recorded"


def cpus_check(host: HostFacts, visible: Visible, needs: LoaderNeeds) -> Check:
    cid = "host.cpus"
    if host.cpus_usable is None:
        return Check(cid, Status.SKIP, "unknown", "usable CPUs", detail=_missing(host, "cpus_usable"))
    how = f"a CPU quota of {host.cpus_quota:g}" if host.cpus_quota is not None else "affinity"
    observed = f"{host.cpus_usable} of {host.cpus_total or '?'} CPUs usable ({how})"
    gpus = visible.devices
    if not gpus:
        return Check(cid, Status.OK, observed, f"any (no GPU to feed{visible_note(visible)})")
    minimum = needs.cpus_per_gpu_min * gpus
    expected = f">= {needs.cpus_per_gpu_min} per GPU ({minimum} for {gpus} GPU(s){visible_note(visible)})"
    if host.cpus_usable < minimum:
        return Check(
            cid,
            Status.WARN,
            observed,
            expected,
            f"give the job more CPUs: `docker run --cpus={minimum}`, a pod's `resources.limits.cpu: {minimum}`, "
            f"`srun --cpus-per-task={minimum}`, or widen the affinity (`taskset -cp 0-{minimum - 1} PID`)",
            "DS-Analyzer: 3-24 cores per GPU hide the data-prep stall; fewer starve the GPU",
        )
    return Check(cid, Status.OK, observed, expected)


def memory_check(host: HostFacts, visible: Visible, needs: LoaderNeeds) -> Check:
    cid = "host.memory"
    if host.memory_total_mib is None:
        return Check(cid, Status.SKIP, "unknown", "RAM", detail=_missing(host, "memory"))
    limited = " (cgroup memory limit)" if host.memory_limit_mib is not None else ""
    observed = f"{host.memory_available_mib} MiB available of {host.memory_total_mib} MiB{limited}"
    gpu_mib = sum(g.memory_total_mib or 0 for g in visible.gpus)
    expected = f">= {needs.memory_available_warn_mib} MiB available" + (
        f", total >= GPU memory ({gpu_mib} MiB)" if gpu_mib else ""
    )
    remedy = (
        "free memory or give the job more (`docker run --memory=...`, a pod's `resources.limits.memory`, "
        "`srun --mem=...`); "
        "fewer DataLoader workers (`num_workers`) use less, as each copies the parent's pages"
    )
    if (host.memory_available_mib or 0) < needs.memory_available_warn_mib:
        return Check(cid, Status.WARN, observed, expected, remedy)
    if gpu_mib and host.memory_total_mib < gpu_mib:
        return Check(
            cid,
            Status.WARN,
            observed,
            expected,
            remedy,
            "less RAM than GPU memory: pinned staging buffers and checkpoint loads run short",
        )
    return Check(cid, Status.OK, observed, expected)


def disk_check(host: HostFacts, needs: LoaderNeeds) -> Check:
    cid = "host.disk"
    if host.disk_free_mib is None:
        return Check(cid, Status.SKIP, f"unknown ({host.disk_path})", "free disk", detail=_missing(host, "disk"))
    observed = f"{host.disk_free_mib} MiB free on {host.disk_path}"
    expected = f">= {needs.disk_warn_mib} MiB free"
    remedy = (
        f"free space on the file system of {host.disk_path}: `du -sh ~/.cache/bootstrap ~/.cache/pip "
        "~/.cache/uv` shows caches that can go"
    )
    if host.disk_free_mib < needs.disk_fail_mib:
        return Check(cid, Status.FAIL, observed, expected, remedy)
    if host.disk_free_mib < needs.disk_warn_mib:
        return Check(cid, Status.WARN, observed, expected, remedy)
    return Check(cid, Status.OK, observed, expected)


def shm_check(host: HostFacts, visible: Visible, needs: LoaderNeeds) -> Check:
    """Free /dev/shm against workers x prefetch x batch bytes per loader (PyTorch #5040; docs/benchmark.md, Method)."""
    cid = "host.shm"
    if host.shm_free_mib is None:
        return Check(
            cid, Status.SKIP, "no /dev/shm", "shared memory for DataLoader workers", detail=_missing(host, "shm")
        )
    loaders = max(1, visible.devices)
    cpus = host.cpus_usable or 1
    workers = needs.workers_per_loader(cpus, loaders)
    need = needs.shm_need_mib(cpus, loaders)
    observed = f"{host.shm_free_mib} MiB free of {host.shm_total_mib} MiB"
    expected = f">= {needs.shm_pass_factor:g} x need ({needs.shm_pass_factor * need:.0f} MiB)"
    detail = (
        f"need = {loaders} loader(s) x {workers} workers x prefetch {needs.prefetch_factor} x "
        f"{needs.batch_bytes / MIB:.1f} MiB batch = {need:.0f} MiB; workers die with 'Bus error' when "
        "shm runs out (PyTorch #5040; Docker's default is 64 MB)"
    )
    ratio = host.shm_free_mib / need if need else float("inf")
    if ratio >= needs.shm_pass_factor:
        return Check(cid, Status.OK, observed, expected, detail=detail)
    status = Status.WARN if ratio >= needs.shm_warn_factor else Status.FAIL
    size_gib = max(1, int(-(-needs.shm_pass_factor * need // GIB_MIB)))
    return Check(cid, status, observed, expected, _shm_remedy(host, size_gib), detail)


def _shm_remedy(host: HostFacts, size_gib: int) -> str:
    lower = "or lower num_workers / prefetch_factor / batch size"
    if any("kube" in h for h in host.container_hints):
        return (
            f"mount a memory-backed volume at /dev/shm (`emptyDir: {{medium: Memory, sizeLimit: {size_gib}Gi}}`), "
            + lower
        )
    if host.container_hints:
        return (
            f"start the container with `docker run --ipc=host ...` or `docker run --shm-size={size_gib}g ...`, " + lower
        )
    return f"grow it: `sudo mount -o remount,size={size_gib}G /dev/shm`, " + lower


def nofile_check(host: HostFacts, needs: LoaderNeeds) -> Check:
    cid = "host.nofile"
    if host.nofile_soft is None:
        return Check(cid, Status.SKIP, "unknown", f">= {needs.nofile_min}", detail=_missing(host, "nofile"))
    soft = "unlimited" if host.nofile_soft == -1 else str(host.nofile_soft)
    hard = "unlimited" if host.nofile_hard == -1 else str(host.nofile_hard)
    observed = f"soft {soft}, hard {hard}"
    expected = f"soft >= {needs.nofile_min}"
    if host.nofile_soft == -1 or host.nofile_soft >= needs.nofile_min:
        return Check(cid, Status.OK, observed, expected)
    hard_ok = host.nofile_hard == -1 or (host.nofile_hard or 0) >= 65536
    remedy = (
        "`ulimit -n 65536` in the shell that starts training"
        if hard_ok
        else "raise the hard limit (`docker run --ulimit nofile=65536:65536`, or `nofile` in "
        "/etc/security/limits.conf), then `ulimit -n 65536`"
    )
    return Check(
        cid,
        Status.WARN,
        observed,
        expected,
        remedy + "; or torch.multiprocessing.set_sharing_strategy('file_system')",
        "worker batches travel as file descriptors: a low limit fails with 'Too many open files' / "
        "'received 0 items of ancdata'",
    )


def start_method_check(host: HostFacts) -> Check:
    cid = "host.start_method"
    if host.start_method is None:
        return Check(cid, Status.SKIP, "unknown", "a start method", detail="not recorded")
    origin = "set by the program" if host.start_method_explicit else "platform default"
    notes = {
        "fork": "fork: fast worker start; the Dataset must not touch CUDA ('Cannot re-initialize CUDA in forked "
        "subprocess')",
        "spawn": "spawn: slow worker start and a picklable Dataset; use persistent_workers=True",
        "forkserver": "forkserver (Python 3.14's Linux default): picklable Dataset; use persistent_workers=True",
    }
    return Check(cid, Status.OK, f"{host.start_method} ({origin})", "recorded", detail=notes.get(host.start_method, ""))


def container_check(host: HostFacts) -> Check:
    observed = ", ".join(host.container_hints) if host.container_hints else "none detected"
    detail = (
        "in a container /dev/shm, CPUs and memory are the container's limits, checked above"
        if host.container_hints
        else ""
    )
    return Check("host.container", Status.OK, observed, "recorded", detail=detail)
