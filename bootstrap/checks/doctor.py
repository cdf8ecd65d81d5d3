"""`doctor`: will the locked torch build run on this host? Host only, no torch needed.

    facts: NVML / nvidia-smi, /proc, statvfs (or a recorded `--facts FILE`)
      + target: the lock's torch pip entry for this platform (`compat.torch_target_from_lock_entry`)
      -> checks: nvidia.driver, nvidia.gpuN, cuda.* (`compat.evaluate`), lock.torch, host.*

Shell equivalent of the facts: `nvidia-smi -q; nproc; free -m; df -m /dev/shm .; ulimit -n`.
The host and NVIDIA checks here are shared with `verify`, which runs them
inside the env next to its env and torch checks. Nothing here prints.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bootstrap.checks.model import Check, Status
from bootstrap.compat.facts import P2P_OK, P2P_STATUS, TOPOLOGY, DriverFacts, GpuFacts, HostFacts, Visible, visible_gpus
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import TorchTarget, lock_torch_target
from bootstrap.errors import InputError
from bootstrap.fsutil import MIB, check_output
from bootstrap.compat.probe import Facts, collect_host_facts, probe_gpus, probe_torch
from bootstrap.platforms import compat_key, conda_subdir, host_platform
from bootstrap.runner import Runner, run

GIB_MIB = 1024  # MiB in a GiB
_SEVERITY = {Status.SKIP: 0, Status.OK: 1, Status.WARN: 2, Status.FAIL: 3}
# NVIDIA's RMA guidance for page retirement: 60 retired pages (or a pending retirement) warrants service.
RETIRED_PAGES_WARN = 60


# --------------------------------------------------------------------------- options and result


@dataclass(frozen=True)
class LoaderNeeds:
    """The DataLoader that the /dev/shm and CPU checks size for: the bench's default workload.

    A batch of 64 RGB 224x224 images decoded to float32 (38.5 MB) crosses
    /dev/shm once per worker batch; each worker keeps `prefetch_factor`
    batches in flight (bench_method.md section 3: free shm >= 2 x need).
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


@dataclass(frozen=True)
class DoctorOptions:
    lock_path: Optional[Path] = None  # None: the project's default lock (conda-lock.yml), if any
    platform: Optional[str] = None  # conda subdir to read from the lock; None: the facts' platform
    facts_path: Optional[Path] = None  # re-evaluate recorded facts instead of probing this host
    save_facts: Optional[Path] = None
    root: Optional[Path] = None  # project root; None: found from the current directory
    needs: LoaderNeeds = field(default_factory=LoaderNeeds)


@dataclass(frozen=True)
class DoctorResult:
    checks: Tuple[Check, ...]
    facts: Facts
    facts_source: str  # "this host" or the recorded file
    target: Optional[TorchTarget]
    lock_path: Optional[Path]
    platform: str

    def extra(self) -> Dict[str, Any]:
        return {
            "facts_source": self.facts_source,
            "lock": None if self.lock_path is None else str(self.lock_path),
            "platform": self.platform,
            "target": None if self.target is None else self.target.to_dict(),
            "facts": self.facts.to_dict(),
        }


# --------------------------------------------------------------------------- facts


def load_facts(path: Path) -> Facts:
    """Read a `bootstrap.facts` file written by `--save-facts`."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "file not found", "record one with `python -m bootstrap doctor --save-facts FILE`") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(path, f"not a readable JSON facts file ({exc})",
                         "record it again with `python -m bootstrap doctor --save-facts FILE`") from None
    if not isinstance(raw, dict):
        raise InputError(path, "not a facts file (expected a JSON object)",
                         "record it again with `python -m bootstrap doctor --save-facts FILE`")
    return Facts.from_dict(raw, where=str(path))


def save_facts(facts: Facts, path: Path) -> None:
    """Write `facts` atomically (temp file + rename), so a failed run leaves no half file;
    through a symlink, or straight into a FIFO or /dev/stdout."""
    from bootstrap.fsutil import atomic_write_text, write_failed

    target = check_output(path, "--save-facts")
    try:
        atomic_write_text(target, json.dumps(facts.to_dict(), indent=2, sort_keys=True) + "\n")
    except OSError as exc:  # a full disk, a FIFO whose reader went away, ...: the temp file is already gone
        raise write_failed(exc, path, "--save-facts", "the facts are not saved", target.parent) from None


def gather_facts(*, nvml: Any = None, runner: Runner = run, disk_path: str = ".", with_torch: bool = False,
                 torch_module: Any = None) -> Facts:
    """This host's facts (`collect_facts`, with the disk check on `disk_path`'s file system); torch only on request."""
    torch, torch_reason = probe_torch(torch_module) if with_torch else (None, "not probed (doctor needs no torch)")
    return Facts(host=collect_host_facts(disk_path=disk_path), nvidia=probe_gpus(nvml, runner), torch=torch,
                 torch_reason=torch_reason, python=_python_version(), platform=compat_key(host_platform()))


def _python_version() -> str:
    import platform

    return platform.python_version()


# --------------------------------------------------------------------------- lock target


def default_lock_path(root: Optional[Path]) -> Optional[Path]:
    """The project's default lock (conda-lock.yml at the root found from the current directory)."""
    from bootstrap.project import Project, find_root

    project = Project(root or find_root(Path.cwd()))
    path = project.lock_path(project.default_env)
    return path if path.is_file() else None


def lock_variants(lock_path: Path) -> List[Tuple[str, Path]]:
    """(env, lock path) of every env of the project that holds `lock_path`, default env first."""
    from bootstrap.project import Project, find_root

    project = Project(find_root(lock_path.resolve().parent))
    out = []
    for env in project.env_names() if project.envs_dir.is_dir() else []:
        path = project.lock_path(env)
        if path.is_file():
            out.append((env, path))
    return out


# --------------------------------------------------------------------------- doctor


def run_doctor(options: DoctorOptions, *, nvml: Any = None, runner: Runner = run) -> DoctorResult:
    """Gather (or load) the facts, evaluate them against the lock's torch build, return every check."""
    from bootstrap.lock.lockfile import read_lock

    if options.save_facts is not None:
        check_output(options.save_facts, "--save-facts")  # before nvidia-smi may take its time
    if options.root is not None and not options.root.is_dir():
        raise InputError("--root", f"{options.root} is not a directory", "give the project's directory (the one with envs/)")
    if options.facts_path is not None:
        facts, source = load_facts(options.facts_path), str(options.facts_path)
    else:
        facts, source = gather_facts(nvml=nvml, runner=runner), "this host"
    if options.save_facts is not None:
        save_facts(facts, options.save_facts)
    lock_path = options.lock_path or default_lock_path(options.root)
    lock, why = None, "no lock at hand: pass --lock FILE or run from the project"
    if lock_path is not None:
        try:
            lock = read_lock(lock_path)
        except ImportError:  # a bare host python3 without pyyaml still gets the driver and GPU report
            why = f"cannot read {lock_path.name}: pyyaml is not installed here (`make tools` and use .tools/bin/python)"
    if options.platform is not None and lock is not None and options.platform not in lock.platforms:
        raise InputError("--platform", f"'{options.platform}' is not locked in {lock_path.name} "
                         f"({', '.join(lock.platforms)})", "pick one of those")
    platform = options.platform or _platform(options.facts_path is None, facts, lock)
    target, why = (None, why) if lock is None else lock_torch_target(lock, platform)
    checks = nvidia_checks(facts.nvidia, facts.host)
    compat_checks = evaluate(facts.nvidia, target) if target is not None else []
    checks += compat_checks
    checks.append(fit_check(target, why, compat_checks, lock_path, platform, facts.nvidia,
                            _variants(lock_path, platform, facts.nvidia) if lock is not None else []))
    checks += host_checks(facts.host, facts.nvidia, options.needs)
    return DoctorResult(tuple(checks), facts, source, target, lock_path, platform)


def _platform(here: bool, facts: Facts, lock: Any) -> str:
    """The locked platform to judge: this host's subdir, or the one recorded facts' compat key stands for
    (macOS's key names no architecture: the lock decides)."""
    if here:
        return host_platform()
    return conda_subdir(facts.platform or compat_key(host_platform()), lock.platforms if lock is not None else ())


def _variants(lock_path: Path, platform: str, nvidia: DriverFacts) -> List[Tuple[str, Path, TorchTarget, Status]]:
    """Every lock of the project evaluated on these facts: which one fits this host."""
    from bootstrap.lock.lockfile import read_lock

    out = []
    for env, path in lock_variants(lock_path):
        try:
            target, _ = lock_torch_target(read_lock(path), platform)
        except (InputError, ImportError):
            continue
        if target is not None:
            out.append((env, path, target, worst(evaluate(nvidia, target))))
    return out


def worst(checks: Sequence[Check]) -> Status:
    """The most severe status (skip < ok < warn < fail); skip when there are no checks."""
    return max((c.status for c in checks), key=_SEVERITY.__getitem__, default=Status.SKIP)


def fit_check(target: Optional[TorchTarget], why: str, compat_checks: Sequence[Check], lock_path: Optional[Path],
              platform: str, nvidia: DriverFacts, variants: Sequence[Tuple[str, Path, TorchTarget, Status]]) -> Check:
    """The verdict doctor exists for: will the locked torch build run here, and if not, what to change."""
    cid = "lock.torch"
    where = f"{lock_path.name if lock_path else 'no lock'} [{platform}]"
    if target is None:
        return Check(cid, Status.SKIP, f"no torch target ({where})", "the lock's torch build", detail=why)
    status = worst(compat_checks)
    build = f"CUDA {target.cuda}" if target.cuda else "CPU build"
    observed = f"torch {target.label} ({build}) from {where}"
    if target.unknown or status is Status.SKIP:
        return Check(cid, Status.SKIP, observed, "a build the packaged tables know", detail=target.unknown or why)
    if not nvidia.gpus:
        return Check(cid, Status.OK, observed + ": no NVIDIA GPU here, runs on the CPU",
                     "runs on this host", detail=nvidia.reason)
    expected = "runs on this driver and these GPUs"
    if status is Status.OK:
        return Check(cid, Status.OK, observed + ": runs here", expected, detail=target.source)
    failing = [c for c in compat_checks if c.status is status]
    remedy = "; ".join(f"{c.id}: {c.remedy}" for c in failing if c.remedy)
    if status is Status.FAIL:
        here = lock_path.resolve() if lock_path is not None else None
        fitting = [v for v in variants if v[3] in (Status.OK, Status.WARN) and v[1].resolve() != here]
        if fitting:
            env, path, other, _ = fitting[0]
            remedy = (f"another lock variant fits this host: `make env ENV={env}` (torch {other.label}, "
                      f"{'CUDA ' + other.cuda if other.cuda else 'CPU'}, from {path.name}); or " + remedy)
        return Check(cid, Status.FAIL, observed + ": will not run here", expected, remedy, detail=target.source)
    return Check(cid, Status.WARN, observed + ": runs with caveats", expected, remedy, detail=target.source)


# --------------------------------------------------------------------------- NVIDIA checks


def nvidia_checks(nvidia: DriverFacts, host: Optional[HostFacts] = None) -> List[Check]:
    """The driver, the highest CUDA it supports, each GPU with its health (`nvidia-smi -q`), and for
    the GPUs of the job (`host`'s CUDA_VISIBLE_DEVICES) which they are and peer-to-peer between them."""
    if not nvidia.has_driver:
        return [Check("nvidia.driver", Status.SKIP, "no NVIDIA driver (CPU mode)", "an NVIDIA driver",
                      detail=nvidia.reason or "no driver facts")]
    from bootstrap.compat.versions import cuda_from_int, cuda_supported_by_driver_number

    if nvidia.cuda_driver_version:
        cuda = f"CUDA {cuda_from_int(nvidia.cuda_driver_version)} (reported by the driver)"
    else:
        derived = cuda_supported_by_driver_number(nvidia.driver_version or "", nvidia.os)
        cuda = f"CUDA >= {cuda_from_int(derived)} (from the driver number)" if derived else "CUDA unknown"
    observed = f"driver {nvidia.driver_version or 'unknown'} ({nvidia.os}), {cuda}, {len(nvidia.gpus)} GPU(s)"
    checks = [Check("nvidia.driver", Status.OK, observed, "an NVIDIA driver",
                    detail=f"source: {nvidia.source}" + (f"; {nvidia.reason}" if nvidia.reason else ""))]
    checks += [gpu_check(gpu, nvidia.os) for gpu in nvidia.gpus]
    visible = visible_gpus(nvidia.gpus, host.cuda_visible_devices if host else None)
    return checks + [c for c in (visible_check(nvidia, visible), peer_check(nvidia, visible)) if c is not None]


def visible_check(nvidia: DriverFacts, visible: Visible) -> Optional[Check]:
    """Which of the GPUs CUDA_VISIBLE_DEVICES gives CUDA programs; no row when it is unset."""
    if not visible.note or not nvidia.gpus:
        return None
    cid, expected = "nvidia.visible", "the job's GPUs among those NVML lists"
    total = f"{len(nvidia.gpus)} GPU(s)"
    if visible.devices == 0:
        return Check(cid, Status.WARN, f"{visible.note} leaves CUDA programs none of the {total}", expected,
                     f"`unset CUDA_VISIBLE_DEVICES`, or name GPUs by index (0-{len(nvidia.gpus) - 1}) or by UUID "
                     "(`nvidia-smi -L`): the first entry naming none ends the list, a repeated one empties it")
    named = ", ".join(str(gpu.index) for gpu in visible.gpus) or "one MIG instance"
    return Check(cid, Status.OK, f"{visible.note}: {named} of {total}", expected)


def gpu_check(gpu: GpuFacts, os_name: str = "linux") -> Check:
    """One GPU: name, compute capability, memory; ECC row remapping / page retirement and persistence mode."""
    cid = f"nvidia.gpu{gpu.index}"
    memory = f", {gpu.memory_total_mib} MiB" if gpu.memory_total_mib is not None else ""
    observed = f"{gpu.name}, CC {gpu.cc_text}{memory}"
    extras = []
    if gpu.ecc_enabled is not None:
        extras.append("ECC on" if gpu.ecc_enabled else "ECC off")
    if gpu.persistence_mode is not None:
        extras.append("persistence on" if gpu.persistence_mode else "persistence off")
    if gpu.retired_pages:
        extras.append(f"{gpu.retired_pages} retired pages")
    observed += (" (" + ", ".join(extras) + ")") if extras else ""
    expected = "healthy: no failed or pending row remaps / page retirements"
    detail = "; ".join(gpu.missing)
    if gpu.remapped_rows_failed:
        return Check(cid, Status.FAIL, observed + ": row remapping failed", expected,
                     f"this GPU needs service: drain it and open an RMA (`nvidia-smi -q -d ROW_REMAPPER -i {gpu.index}`)",
                     detail)
    if gpu.remapped_rows_pending or gpu.retired_pages_pending:
        return Check(cid, Status.WARN, observed + ": a memory remap/retirement is pending", expected,
                     f"reset the GPU to apply it: `sudo nvidia-smi -r -i {gpu.index}` (or reboot)", detail)
    if gpu.retired_pages is not None and gpu.retired_pages >= RETIRED_PAGES_WARN:
        return Check(cid, Status.WARN, observed, expected + f", fewer than {RETIRED_PAGES_WARN} retired pages",
                     f"NVIDIA's threshold for service is reached: `nvidia-smi -q -d PAGE_RETIREMENT -i {gpu.index}`",
                     detail)
    if gpu.persistence_mode is False and os_name == "linux":
        return Check(cid, Status.WARN, observed, expected + ", persistence mode on",
                     "enable persistence so each process does not re-initialise the GPU: "
                     "`sudo systemctl enable --now nvidia-persistenced` (or `sudo nvidia-smi -pm 1`)", detail)
    return Check(cid, Status.OK, observed, expected, detail=detail)


def peer_check(nvidia: DriverFacts, visible: Visible) -> Optional[Check]:
    """Peer-to-peer between every two of the job's GPUs (`nvidia-smi topo -p2p r`); None with fewer than two.

    Without it, NCCL and device-to-device copies between that pair go through host memory: the
    job runs, its gradients' all-reduce slower. A warning, then, not a failure."""
    indices = {gpu.index for gpu in visible.gpus}
    if len(indices) < 2:
        return None
    cid, expected = "nvidia.p2p", "peer-to-peer between every two of the job's GPUs"
    note = _visible_note(visible)
    pairs = [p for p in nvidia.peers if p.a in indices and p.b in indices]
    answered = [p for p in pairs if p.read is not None]
    total = len(indices) * (len(indices) - 1) // 2
    why_not_answered = "; ".join(dict.fromkeys(m for p in pairs if p.read is None for m in p.missing)) or \
        ("no answers in these facts: nvidia-smi's CSV has none (NVML answers it)" if nvidia.source == "nvidia-smi"
         else "no answers in these facts (saved before bootstrap asked NVML for them?)")
    if not answered:
        return Check(cid, Status.SKIP, f"unknown for {_pairs(total)}{note}", expected, detail=why_not_answered)
    unanswered = f"; {total - len(answered)} not answered" if len(answered) < total else ""
    without = [p for p in answered if p.read != P2P_OK]
    if not without:
        nvlink = sum(1 for p in answered if p.nvlink == P2P_OK)
        observed = f"{_pairs(len(answered))} peer-to-peer, {nvlink} over NVLink{note}{unanswered}"
        if unanswered:  # no verdict on the pairs NVML did not answer for
            return Check(cid, Status.SKIP, observed, expected, detail=why_not_answered)
        return Check(cid, Status.OK, observed, expected)
    why = Counter(p.read for p in without).most_common(1)[0][0]
    shown = ", ".join(f"{p.a}-{p.b}" for p in without[:6]) + (", ..." if len(without) > 6 else "")
    observed = (f"{len(without)} of {_pairs(len(answered))} without it ({P2P_STATUS.get(why, f'status {why}')}): "
                f"{shown}{note}{unanswered}")
    detail = "; ".join(f"{p.a}-{p.b}: {P2P_STATUS.get(p.read, f'status {p.read}')}, "
                       f"{TOPOLOGY.get(p.topology, 'PCIe path unknown')}"
                       for p in without[:6])
    return Check(cid, Status.WARN, observed, expected, _P2P_REMEDIES.get(why, _P2P_REMEDY_OTHER),
                 f"{detail}; NCCL stages these pairs' traffic through host memory")


def _pairs(count: int) -> str:
    return f"{count} GPU pair" + ("" if count == 1 else "s")


_P2P_REMEDY_OTHER = ("`nvidia-smi topo -p2p r` shows every pair; in a VM, P2P needs the GPUs passed through with "
                     "their PCIe switch and ACS off")
_P2P_PATH = ("their PCIe path (across CPU sockets, or a root complex without P2P) does not carry it: give a job "
             "GPUs under one CPU socket (`nvidia-smi topo -m` shows which)")
_P2P_REMEDIES = {
    1: _P2P_PATH,  # chipset not supported
    3: _P2P_PATH,  # PCIe topology not supported
    2: "these GPUs offer no P2P over PCIe (GeForce boards): nothing to switch on; "
       "`torchrun ... -m bootstrap verify --distributed` measures what it costs the all-reduce",
    4: "P2P is switched off in the NVIDIA driver's configuration: look for a registry key among the nvidia "
       "module's options (`/etc/modprobe.d/`), remove it and reload the module",
}


# --------------------------------------------------------------------------- host checks


def host_checks(host: HostFacts, nvidia: DriverFacts, needs: LoaderNeeds = LoaderNeeds()) -> List[Check]:
    """CPUs, memory, disk, /dev/shm, open files, start method, container: what a DataLoader depends on.

    Sized for the job's GPUs, as its CPUs are (affinity): those CUDA_VISIBLE_DEVICES leaves it."""
    visible = visible_gpus(nvidia.gpus, host.cuda_visible_devices)
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


def _visible_note(visible: Visible) -> str:
    return f", {visible.note}" if visible.note else ""


def cpus_check(host: HostFacts, visible: Visible, needs: LoaderNeeds) -> Check:
    cid = "host.cpus"
    if host.cpus_usable is None:
        return Check(cid, Status.SKIP, "unknown", "usable CPUs", detail=_missing(host, "cpus_usable"))
    observed = f"{host.cpus_usable} of {host.cpus_total or '?'} CPUs usable (affinity)"
    gpus = visible.devices
    if not gpus:
        return Check(cid, Status.OK, observed, f"any (no GPU to feed{_visible_note(visible)})")
    minimum = needs.cpus_per_gpu_min * gpus
    expected = f">= {needs.cpus_per_gpu_min} per GPU ({minimum} for {gpus} GPU(s){_visible_note(visible)})"
    if host.cpus_usable < minimum:
        return Check(cid, Status.WARN, observed, expected,
                     f"give the job more CPUs: `docker run --cpus={minimum}`, `srun --cpus-per-task={minimum}`, "
                     f"or widen the affinity (`taskset -cp 0-{minimum - 1} PID`)",
                     "DS-Analyzer: 3-24 cores per GPU hide the data-prep stall; fewer starve the GPU")
    return Check(cid, Status.OK, observed, expected)


def memory_check(host: HostFacts, visible: Visible, needs: LoaderNeeds) -> Check:
    cid = "host.memory"
    if host.memory_total_mib is None:
        return Check(cid, Status.SKIP, "unknown", "RAM", detail=_missing(host, "memory"))
    observed = f"{host.memory_available_mib} MiB available of {host.memory_total_mib} MiB"
    gpu_mib = sum(g.memory_total_mib or 0 for g in visible.gpus)
    expected = f">= {needs.memory_available_warn_mib} MiB available" + (
        f", total >= GPU memory ({gpu_mib} MiB)" if gpu_mib else "")
    remedy = ("free memory or give the job more (`docker run --memory=...`, `srun --mem=...`); "
              "fewer DataLoader workers (`num_workers`) use less, as each copies the parent's pages")
    if (host.memory_available_mib or 0) < needs.memory_available_warn_mib:
        return Check(cid, Status.WARN, observed, expected, remedy)
    if gpu_mib and host.memory_total_mib < gpu_mib:
        return Check(cid, Status.WARN, observed, expected, remedy,
                     "less RAM than GPU memory: pinned staging buffers and checkpoint loads run short")
    return Check(cid, Status.OK, observed, expected)


def disk_check(host: HostFacts, needs: LoaderNeeds) -> Check:
    cid = "host.disk"
    if host.disk_free_mib is None:
        return Check(cid, Status.SKIP, f"unknown ({host.disk_path})", "free disk", detail=_missing(host, "disk"))
    observed = f"{host.disk_free_mib} MiB free on {host.disk_path}"
    expected = f">= {needs.disk_warn_mib} MiB free"
    remedy = (f"free space on the file system of {host.disk_path}: `du -sh ~/.cache/bootstrap ~/.cache/pip "
              "~/.cache/uv` shows caches that can go")
    if host.disk_free_mib < needs.disk_fail_mib:
        return Check(cid, Status.FAIL, observed, expected, remedy)
    if host.disk_free_mib < needs.disk_warn_mib:
        return Check(cid, Status.WARN, observed, expected, remedy)
    return Check(cid, Status.OK, observed, expected)


def shm_check(host: HostFacts, visible: Visible, needs: LoaderNeeds) -> Check:
    """Free /dev/shm against workers x prefetch x batch bytes per loader (bench_method.md section 3)."""
    cid = "host.shm"
    if host.shm_free_mib is None:
        return Check(cid, Status.SKIP, "no /dev/shm", "shared memory for DataLoader workers",
                     detail=_missing(host, "shm"))
    loaders = max(1, visible.devices)
    cpus = host.cpus_usable or 1
    workers = needs.workers_per_loader(cpus, loaders)
    need = needs.shm_need_mib(cpus, loaders)
    observed = f"{host.shm_free_mib} MiB free of {host.shm_total_mib} MiB"
    expected = f">= {needs.shm_pass_factor:g} x need ({needs.shm_pass_factor * need:.0f} MiB)"
    detail = (f"need = {loaders} loader(s) x {workers} workers x prefetch {needs.prefetch_factor} x "
              f"{needs.batch_bytes / MIB:.1f} MiB batch = {need:.0f} MiB; workers die with 'Bus error' when "
              "shm runs out (PyTorch #5040; Docker's default is 64 MB)")
    ratio = host.shm_free_mib / need if need else float("inf")
    if ratio >= needs.shm_pass_factor:
        return Check(cid, Status.OK, observed, expected, detail=detail)
    status = Status.WARN if ratio >= needs.shm_warn_factor else Status.FAIL
    size_gib = max(1, int(-(-needs.shm_pass_factor * need // GIB_MIB)))
    return Check(cid, status, observed, expected, _shm_remedy(host, size_gib), detail)


def _shm_remedy(host: HostFacts, size_gib: int) -> str:
    lower = "or lower num_workers / prefetch_factor / batch size"
    if any("kube" in h for h in host.container_hints):
        return (f"mount a memory-backed volume at /dev/shm (`emptyDir: {{medium: Memory, sizeLimit: {size_gib}Gi}}`), "
                + lower)
    if host.container_hints:
        return f"start the container with `docker run --ipc=host ...` or `docker run --shm-size={size_gib}g ...`, " + lower
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
    remedy = "`ulimit -n 65536` in the shell that starts training" if hard_ok else \
        "raise the hard limit (`docker run --ulimit nofile=65536:65536`, or `nofile` in /etc/security/limits.conf), " \
        "then `ulimit -n 65536`"
    return Check(cid, Status.WARN, observed, expected,
                 remedy + "; or torch.multiprocessing.set_sharing_strategy('file_system')",
                 "worker batches travel as file descriptors: a low limit fails with 'Too many open files' / "
                 "'received 0 items of ancdata'")


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
    return Check(cid, Status.OK, f"{host.start_method} ({origin})", "recorded",
                 detail=notes.get(host.start_method, ""))


def container_check(host: HostFacts) -> Check:
    observed = ", ".join(host.container_hints) if host.container_hints else "none detected"
    detail = "in a container /dev/shm, CPUs and memory are the container's limits, checked above" \
        if host.container_hints else ""
    return Check("host.container", Status.OK, observed, "recorded", detail=detail)
