"""`doctor`: will the locked torch build run on this host? Host only, no torch needed.

    facts: NVML / nvidia-smi, /proc, statvfs (or a recorded `--facts FILE`)   (`compat.probe`)
      + target: the lock's torch pip entry for this platform                 (`compat.target`)
      -> checks: nvidia.* (`checks.nvidia`), cuda.* (`compat.rules`), lock.torch, host.* (`checks.host`)

Shell equivalent of the facts: `nvidia-smi -q; nproc; free -m; df -m /dev/shm .; ulimit -n`.
What is doctor's own is the `lock.torch` verdict: which lock variant of the
project fits this host. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bootstrap.checks import model
from bootstrap.checks.host import LoaderNeeds, host_checks
from bootstrap.checks.model import Check, Status, worst
from bootstrap.checks.nvidia import nvidia_checks
from bootstrap.compat.facts import DriverFacts
from bootstrap.compat.probe import Facts, collect_facts, load_facts, save_facts
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import TorchTarget, lock_torch_target
from bootstrap.errors import InputError
from bootstrap.fsutil import check_output
from bootstrap.platforms import compat_key, conda_subdir, host_platform
from bootstrap.project import default_lock_path
from bootstrap.report import result
from bootstrap.runner import Runner, run


@dataclass(frozen=True)
class DoctorOptions:
    lock_path: Optional[Path] = None  # None: the project's default lock (conda-lock.yml), if any
    platform: Optional[str] = None  # conda subdir to read from the lock; None: the facts' platform
    facts_path: Optional[Path] = None  # re-evaluate recorded facts instead of probing this host
    save_facts: Optional[Path] = None
    root: Optional[Path] = None  # project root; None: found from the current directory
    needs: LoaderNeeds = field(default_factory=LoaderNeeds)


@result
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

    def to_dict(self) -> Dict[str, Any]:
        """The `bootstrap.checks` envelope's body, kind 'doctor'."""
        return model.body(self.checks, "doctor", self.extra())


def run_doctor(options: DoctorOptions, *, nvml: Any = None, runner: Runner = run) -> DoctorResult:
    """Gather (or load) the facts, evaluate them against the lock's torch build, return every check."""
    from bootstrap.lock.lockfile import read_lock

    if options.save_facts is not None:
        check_output(options.save_facts, "--save-facts")  # before nvidia-smi may take its time
    if options.root is not None and not options.root.is_dir():
        raise InputError("--root", f"{options.root} is not a directory",
                         "give the project's directory (the one with envs/)")
    if options.facts_path is not None:
        facts, source = load_facts(options.facts_path), str(options.facts_path)
    else:
        facts, source = collect_facts(nvml, runner), "this host"
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
    return DoctorResult(checks=tuple(checks), facts=facts, facts_source=source, target=target, lock_path=lock_path,
                        platform=platform)


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
