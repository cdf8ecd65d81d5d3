"""`doctor`: which locked torch build of the env runs on this host? Host only, no torch needed.

Facts (`compat.probe`) + each variant lock's torch build (`lock.candidates`) -> the pick
(`compat.pick`) -> checks; nothing here prints. Docs: docs/checks.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from bootstrap.checks.nvidia import nvidia_checks
from bootstrap.checks.variant import variant_check
from bootstrap.compat import jetson
from bootstrap.compat.facts import DriverFacts, HostFacts
from bootstrap.compat.host import LoaderNeeds, host_checks
from bootstrap.compat.pick import Candidate, Pick, not_locked_remedy, pick_variant, runs_on_cpu
from bootstrap.compat.probe import Facts, collect_facts, load_facts, save_facts
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import TorchTarget
from bootstrap.errors import InputError
from bootstrap.fsutil import check_output
from bootstrap.lock.candidates import env_candidates, lock_candidate
from bootstrap.lock.lockfile import Lock
from bootstrap.lock.variants import variant_locks
from bootstrap.platforms import compat_key, conda_subdir, host_platform, os_of
from bootstrap.project import refuse_input
from bootstrap.report import Check, Status, body, remedies, result, worst
from bootstrap.runner import Runner, run

if TYPE_CHECKING:
    from bootstrap.lock.spec import EnvSpec
    from bootstrap.project import Project


@dataclass(frozen=True)
class DoctorOptions:
    lock_path: Optional[Path] = None  # judge this one lock; None: the env's variants (or its one lock), if any
    env: Optional[str] = None  # the project's env whose variants to judge; None: the default env
    platform: Optional[str] = None  # conda subdir to read from the lock; None: the facts' platform
    facts_path: Optional[Path] = None  # re-evaluate recorded facts instead of probing this host
    save_facts: Optional[Path] = None
    root: Optional[Path] = None  # project root; None: found from the current directory
    needs: LoaderNeeds = field(default_factory=LoaderNeeds)


@result
class DoctorResult:
    checks: tuple[Check, ...]
    facts: Facts
    facts_source: str  # "this host" or the recorded file
    target: Optional[TorchTarget]
    lock_path: Optional[Path]  # the lock `lock.torch` judged
    platform: str
    env: Optional[str] = None  # None with --lock
    pick: Optional[Pick] = None  # every lock of the env judged, and the one to install
    variants: bool = False  # the env's spec declares variants (lock.variant carries the pick)

    def extra(self) -> dict[str, Any]:
        return {
            "facts_source": self.facts_source,
            "lock": None if self.lock_path is None else str(self.lock_path),
            "platform": self.platform,
            "target": None if self.target is None else self.target.to_dict(),
            "facts": self.facts.to_dict(),
            "env": self.env,
            "pick": None if self.pick is None else self.pick.to_dict(),
        }

    def to_dict(self) -> dict[str, Any]:
        """The `bootstrap.checks` envelope's body, kind 'doctor'."""
        return body(self.checks, "doctor", self.extra())


@dataclass(frozen=True)
class Subject:
    """What doctor judges: one lock (`--lock`), or the locks of an env of the project."""

    env: Optional[str]
    paths: tuple[Path, ...]  # the locks, the default first; none: no lock at hand
    project: Optional[Project] = None  # when the locks are an env's
    spec: Optional[EnvSpec] = None  # the env's spec, when it declares variants
    installed: str = ""  # the variant installed at <root>/.envs/<env>, when the spec declares variants


def run_doctor(options: DoctorOptions, *, nvml: Any = None, runner: Runner = run) -> DoctorResult:
    """Gather (or load) the facts, judge every locked variant of the env on them, and return every check
    for the one `lock.torch` judges: the installed variant, else the pick, else the default."""
    facts, source = _facts(options, nvml, runner)
    subject = doctor_subject(options)
    lock, why = _first_lock(subject)
    if options.platform is not None and lock is not None and options.platform not in lock.platforms:
        raise InputError(
            "--platform",
            f"'{options.platform}' is not locked in {lock.path.name} ({', '.join(lock.platforms)})",
            "pick one of those",
        )
    platform = options.platform or _platform(options.facts_path is None, facts, lock)
    pick = None if lock is None else pick_variant(facts.nvidia, _candidates(subject, platform, lock))
    judged = None if pick is None else _judged(pick, subject.installed)
    target, why = (None, why) if judged is None else (judged.target, judged.why)
    installs = judged is None or judged.installs
    lock_path = judged.lock_path if judged is not None else (subject.paths[0] if subject.paths else None)
    checks = nvidia_checks(facts.nvidia, facts.host)
    compat_checks = evaluate(facts.nvidia, target, facts.visible()) if target is not None else []
    checks += compat_checks
    where = f"{lock_path.name if lock_path else 'no lock'} [{platform}]"
    checks.append(fit_check(target, why, compat_checks, where, facts.nvidia, _switch(pick, judged, subject), installs))
    if judged is not None and isinstance(judged.lock, Lock) and installs:
        checks += system_checks(judged.lock, platform, facts.host)
    if subject.spec is not None and subject.env is not None and pick is not None:
        checks.append(variant_check(pick, subject.env, subject.installed))
    checks += host_checks(facts.host, facts.nvidia, options.needs)
    return DoctorResult(
        checks=tuple(checks),
        facts=facts,
        facts_source=source,
        target=target,
        lock_path=lock_path,
        platform=platform,
        env=subject.env,
        pick=pick,
        variants=subject.spec is not None,
    )


def _facts(options: DoctorOptions, nvml: Any, runner: Runner) -> tuple[Facts, str]:
    """This host's facts, or the recorded ones; saved when asked (the path checked before probing)."""
    if options.save_facts is not None:
        check_output(options.save_facts, "--save-facts")  # before nvidia-smi may take its time
        if options.lock_path is not None:
            refuse_input(options.save_facts, "--save-facts", {options.lock_path: "the lock --lock names"})
    if options.root is not None and not options.root.is_dir():
        raise InputError(
            "--root", f"{options.root} is not a directory", "give the project's directory (the one with envs/)"
        )
    if options.facts_path is not None:
        return load_facts(options.facts_path), str(options.facts_path)
    facts = collect_facts(nvml, runner)
    if options.save_facts is not None:
        save_facts(facts, options.save_facts)
    return facts, "this host"


def doctor_subject(options: DoctorOptions) -> Subject:
    """`--lock FILE`; else the locks of `--env` (default: the project's default env): each variant's
    when its spec declares them, else its one lock, if it exists."""
    from bootstrap.project import Project, find_root

    if options.lock_path is not None:
        if options.env is not None:
            raise InputError(
                "--env", "does not apply to --lock FILE, which names the lock to judge", "drop one of them"
            )
        return Subject(env=None, paths=(options.lock_path,))
    project = Project(options.root or find_root(Path.cwd()))
    env = project.env_or_default(options.env, "--env")
    if options.env is not None:
        project.resolve_envs([env], "--env")
    spec = _declared_variants(project, env)
    if spec is None:
        path = project.lock_path(env)
        return Subject(env=env, paths=(path,) if os.path.lexists(path) else (), project=project)
    paths = tuple(path for _, path in variant_locks(project, env, spec))
    installed = _installed_variant(project, env, spec) if options.facts_path is None else ""
    return Subject(env=env, paths=paths, project=project, spec=spec, installed=installed)


def _declared_variants(project: Project, env: str) -> Optional[EnvSpec]:
    """The env's spec when it declares variants; None without them, without a spec, or without pyyaml."""
    from bootstrap.lock.spec import read_spec

    if not os.path.lexists(project.spec_path(env)):  # anything else in its place is read, and refused
        return None
    try:
        spec = read_spec(project.spec_path(env))
    except ImportError:  # a bare host python3: the lock's check says why it cannot be read
        return None
    return spec if spec.variants else None


def _installed_variant(project: Project, env: str, spec: EnvSpec) -> str:
    """The variant installed for `env` ("" when none is, or it is none of the spec's): the one its
    one-prefix layout holds, else the one variant with a prefix of its own when only one has (with
    several, each host runs its pick, which doctor judges)."""
    from bootstrap.prefix import read_install_record

    names = {v.name for v in spec.variants}
    found = []
    for prefix in (project.env_prefix(env), *(project.env_prefix(env, v.name) for v in spec.variants)):
        try:
            record = read_install_record(prefix) if (prefix / "conda-meta").is_dir() else None
        except (OSError, ValueError, TypeError):
            record = None
        if record is not None and record.variant in names:
            found.append(record.variant)
    return found[0] if len(found) == 1 else ""


def system_checks(lock: Lock, platform: str, host: HostFacts) -> list[Check]:
    """lock.system: the host's glibc (or macOS) against `lock`'s floor for `platform`, which `make env`
    refuses to go below; none where the lock asks for no minimum (Windows)."""
    from bootstrap.install.floor import GLIBC, HostSystem, host_problem, lock_floor

    cid = "lock.system"
    floor = lock_floor(lock.for_platform(platform))
    os_name = os_of(platform)
    need = floor.of(GLIBC if os_name == "linux" else "macOS") if os_name in ("linux", "macos") else None
    if need is None:
        return []
    expected = f"{need.system} >= {need.version_text} ({need.by})"
    have = host.libc if os_name == "linux" else (f"macOS {host.macos}" if host.macos else "")
    if not have:
        return [
            Check(
                cid,
                Status.SKIP,
                f"{need.system} not recorded",
                expected,
                detail="facts saved by an older bootstrap; record them again with --save-facts",
            )
        ]
    glibc = host.libc[len("glibc ") :] if host.libc.startswith("glibc ") else None
    problem = host_problem(floor, platform, HostSystem(os_name, glibc, host.macos or None))
    if problem is None:
        return [Check(cid, Status.OK, have, expected)]
    return [Check(cid, Status.FAIL, have, expected, remedy=problem.split(": ", 1)[-1], detail=problem)]


def _first_lock(subject: Subject) -> tuple[Optional[Lock], str]:
    """The first lock of the subject that exists, read (it decides the platform), or why there is none."""
    from bootstrap.lock.lockfile import read_lock

    existing = [p for p in subject.paths if os.path.lexists(p) or subject.project is None]
    if not existing:
        return (
            None,
            "no lock at hand: pass --lock FILE or run from the project"
            if not subject.paths
            else f"not locked yet: no {subject.paths[0].name} (`make lock`)",
        )
    try:
        return read_lock(existing[0]), ""
    except ImportError:  # a bare host python3 without pyyaml still gets the driver and GPU report
        return None, (
            f"cannot read {existing[0].name}: pyyaml is not installed here (`make tools` and use .tools/bin/python)"
        )


def _candidates(subject: Subject, platform: str, first: Optional[Lock]) -> list[Candidate]:
    """The subject's locks as candidates; `first`, the one `_first_lock` read, is not read again."""
    if subject.spec is not None and subject.project is not None and subject.env is not None:  # an env's variants
        return env_candidates(subject.project, subject.env, subject.spec, platform, read=first)
    return [lock_candidate(subject.paths[0], platform, read=first)]


def _judged(pick: Pick, installed: str) -> Candidate:
    """The lock `lock.torch` judges: the installed variant, else the one `make env` installs (the pick),
    else the default."""
    verdict = (pick.find(installed) if installed else None) or pick.chosen or pick.verdicts[0]
    return verdict.candidate


def _switch(pick: Optional[Pick], judged: Optional[Candidate], subject: Subject) -> str:
    """When the judged lock is not the pick: the variant that runs here and the command that installs it."""
    if pick is None or pick.chosen is None or judged is None or pick.chosen.candidate is judged:
        return ""
    chosen = pick.chosen
    env = "" if subject.project is None or subject.env == subject.project.default_env else f" ENV={subject.env}"
    return (
        f"variant {chosen.candidate.label} {'runs' if chosen.status is Status.OK else 'runs with a caveat'} "
        f"here ({chosen.build}, from {chosen.candidate.lock_path.name}): `make env{env}` installs it"
    )


def _platform(here: bool, facts: Facts, lock: Optional[Lock]) -> str:
    """The locked platform to judge: this host's subdir, or the one recorded facts' compat key stands for
    (macOS's key names no architecture: the lock decides)."""
    if here:
        return host_platform()
    return conda_subdir(facts.platform or compat_key(host_platform()), lock.platforms if lock is not None else ())


def fit_check(
    target: Optional[TorchTarget],
    why: str,
    compat_checks: Sequence[Check],
    where: str,
    nvidia: DriverFacts,
    switch: str = "",
    installs: bool = True,
) -> Check:
    """The verdict doctor exists for: will the locked torch build run here, and if not, what to change
    (`switch`: another variant of the env that runs here; `installs` False: the lock has nothing for
    this platform, so `make env` fails before any torch is judged)."""
    cid = "lock.torch"
    if target is None:
        if not installs:
            return Check(
                cid,
                Status.FAIL,
                f"nothing to install ({where})",
                "the lock's torch build",
                remedy=switch or not_locked_remedy(nvidia),
                detail=why,
            )
        return Check(cid, Status.SKIP, f"no torch target ({where})", "the lock's torch build", detail=why)
    status = worst(compat_checks)
    build = f"CUDA {target.cuda}" if target.cuda else "CPU build"
    observed = f"torch {target.label} ({build}) from {where}"
    if target.unknown or status is Status.SKIP:
        return Check(cid, Status.SKIP, observed, "a build the packaged tables know", detail=target.unknown or why)
    if jetson.unlisted(nvidia) and status is not Status.FAIL:
        return jetson.fit_check(nvidia, observed, "runs on this Jetson's GPU", target.source)
    if runs_on_cpu(nvidia):
        return Check(
            cid,
            Status.OK,
            observed + ": no NVIDIA GPU here, runs on the CPU",
            "runs on this host",
            detail=nvidia.reason,
        )
    expected = "runs on this driver and these GPUs"
    if status is Status.OK:
        return Check(cid, Status.OK, observed + ": runs here", expected, detail=target.source)
    failing = [c for c in compat_checks if c.status is status]
    remedy = "; ".join(remedies(failing))
    if switch:
        remedy = f"{switch}; or {remedy}" if remedy else switch
    if status is Status.FAIL:
        return Check(cid, Status.FAIL, observed + ": will not run here", expected, remedy, detail=target.source)
    return Check(cid, Status.WARN, observed + ": runs with caveats", expected, remedy, detail=target.source)
