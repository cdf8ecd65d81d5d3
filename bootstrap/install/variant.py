"""Which lock `bootstrap env` installs: the variant `--variant` names, or doctor's pick for this host,
decided before anything is fetched. Docs: docs/env.md, "Torch variants: which lock".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from bootstrap.compat.pick import Pick, Verdict, pick_variant
from bootstrap.errors import InputError
from bootstrap.lock.candidates import env_candidates
from bootstrap.lock.lockfile import read_lock
from bootstrap.lock.spec import read_spec
from bootstrap.lock.variants import variant_locks
from bootstrap.project import Project
from bootstrap.report import Status, result
from bootstrap.runner import Runner, run

if TYPE_CHECKING:
    from bootstrap.compat.facts import DriverFacts

AUTO = "auto"
ALL = "all"  # `env --variant all`: every variant locked for the platform, each into its own prefix
_RUNS = {Status.OK: "runs", Status.WARN: "runs with a caveat", Status.SKIP: "is not judged"}


@dataclass(frozen=True)
class VariantRequest:
    project: Project
    env: str
    platform: str  # the locked platform to install
    name: str = AUTO  # `--variant`
    force: bool = False  # install a named variant even where it will not run
    facts_path: Optional[Path] = None  # judge recorded facts (`doctor --save-facts`) instead of this host's


@result
class VariantChoice:
    """The lock to install, which variant it holds, how it was chosen and why."""

    name: str  # "" when the spec declares no variants
    lock_path: Path
    how: str  # "only" (no variants declared), "auto", "named", "forced"
    why: str
    pick: Optional[Pick] = None
    facts_source: str = ""

    @property
    def skipped(self) -> tuple[tuple[str, Path, str], ...]:
        """(name, lock, why) of each other variant whose lock installs this platform but holds no torch
        to judge (damaged, or edited by hand): passed over by the pick, which the user must hear of."""
        if self.pick is None:
            return ()
        return tuple(
            (v.candidate.label, v.candidate.lock_path, v.candidate.why)
            for v in self.pick.verdicts
            if v.candidate.target is None and v.candidate.installs and v.candidate.name != self.name
        )

    def skipped_lines(self) -> list[str]:
        """One line per variant skipped, naming its lock, why and the fix."""
        return [
            f"skipped variant {name}: {why} (damaged or edited by hand? `make lock` writes it again)"
            for name, _, why in self.skipped
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name or None,
            "lock": str(self.lock_path),
            "how": self.how,
            "why": self.why,
            "skipped": [{"name": name, "lock": str(lock), "why": why} for name, lock, why in self.skipped],
            "facts_source": self.facts_source or None,
            "pick": None if self.pick is None else self.pick.to_dict(),
        }


class NoVariantFits(InputError):
    """`auto` found no locked variant that runs on this host."""


def choose_variant(request: VariantRequest, *, nvml: Any = None, runner: Runner = run) -> VariantChoice:
    """The lock of `request.env` to install (see the module's docstring); an InputError when the named
    variant is unknown, not locked (for this platform), or will not run here without `force`, and when
    `auto` finds no variant that runs."""
    project, env = request.project, request.env
    spec = read_spec(project.spec_path(env))
    named = () if request.name == AUTO else (request.name,)
    locks = variant_locks(project, env, spec, named)  # an unknown name is an InputError naming the known ones
    if not spec.variants:
        return VariantChoice(name="", lock_path=locks[0][1], how="only", why="the env declares no variants")
    first, path = locks[0]
    assert first is not None  # the spec declares variants
    if named and request.force:
        _check_locked(path, first.name, first.platforms, request.platform)
        return VariantChoice(name=first.name, lock_path=path, how="forced", why="asked for with --force")
    nvidia, source = _driver_facts(request, nvml, runner)
    candidates = env_candidates(project, env, spec, request.platform)
    pick = pick_variant(nvidia, candidates)
    for candidate in candidates:  # a lock that cannot be read is bad input, not a variant to pass over
        if candidate.target is None and os.path.lexists(candidate.lock_path):
            read_lock(candidate.lock_path)
    if named:
        return _named(pick, request, first.platforms, source)
    if pick.chosen is None:
        force = "`--variant NAME --force` installs one anyway" if pick.installs_here else ""
        raise NoVariantFits(
            "--variant auto",
            f"no locked variant of {env} runs on this host: {pick.why}",
            "; ".join(part for part in (pick.remedy, force) if part),
        )
    chosen = pick.chosen.candidate
    return VariantChoice(
        name=chosen.name, lock_path=chosen.lock_path, how="auto", why=pick.why, pick=pick, facts_source=source
    )


def _named(pick: Pick, request: VariantRequest, platforms: tuple[str, ...], source: str) -> VariantChoice:
    """The variant asked for, if it is locked here and will run."""
    verdict = next(v for v in pick.verdicts if v.candidate.name == request.name)  # variant_locks knew the name
    path = verdict.candidate.lock_path
    _check_locked(path, request.name, platforms, request.platform)
    if verdict.candidate.target is None:
        raise InputError(f"--variant {request.name}", verdict.reasons[0], "run `make lock`")
    if verdict.status is Status.FAIL:
        raise InputError(
            f"--variant {request.name}",
            f"{verdict.build} will not run on this host ({verdict.reasons[0]})",
            _instead(pick, verdict),
        )
    return VariantChoice(
        name=request.name,
        lock_path=path,
        how="named",
        pick=pick,
        facts_source=source,
        why=f"asked for; {verdict.build} {_RUNS[verdict.status]} here",
    )


def _check_locked(path: Path, name: str, platforms: tuple[str, ...], platform: str) -> None:
    """A variant with no lock yet, or none for this platform, is one line naming the fix."""
    if not path.is_file():
        raise InputError(f"--variant {name}", f"not locked yet: {path} is missing", "run `make lock`")
    if platform not in platforms:
        raise InputError(
            f"--variant {name}",
            f"not locked for {platform} (its platforms: {', '.join(platforms)})",
            "pick another variant, or add the platform to it and run `make lock`",
        )


def _instead(pick: Pick, refused: Verdict) -> str:
    chosen = pick.chosen
    if chosen is not None and chosen is not refused:
        return (
            f"{chosen.candidate.label} would run: `--variant {chosen.candidate.name}` (or auto); "
            "--force installs the other anyway"
        )
    return "no locked variant runs here; --force installs it anyway"


def _driver_facts(request: VariantRequest, nvml: Any, runner: Runner) -> tuple[DriverFacts, str]:
    """This host's NVIDIA facts (NVML, else nvidia-smi), or those recorded in `request.facts_path`; none
    for an env of another OS (`--platform`, a dry run), whose machine this host says nothing about."""
    from bootstrap.compat.facts import DriverFacts
    from bootstrap.compat.probe import load_facts, probe_gpus
    from bootstrap.platforms import conda_subdir, host_platform, os_of

    if request.facts_path is not None:
        facts = load_facts(request.facts_path)
        recorded = conda_subdir(facts.platform) if facts.platform else request.platform
        if recorded != request.platform:  # judged for one machine, planned for another
            raise InputError(
                f"--facts {request.facts_path}",
                f"was recorded on {recorded}, the env is planned for {request.platform}",
                f"add --platform {recorded}, with --dry-run on this machine",
            )
        return facts.nvidia, str(request.facts_path)
    if os_of(request.platform) != os_of(host_platform()):
        return DriverFacts(reason=f"no facts of a {request.platform} machine"), f"none ({request.platform})"
    return probe_gpus(nvml, runner), "this host"


def locked_variants(project: Project, env: str, platform: str) -> tuple[list[str], list[str]]:
    """`--variant all`: the variants of `env` locked for `platform`, default first, and one line for
    each passed over (not locked yet, or not for this platform). `[""]` for an env without variants."""
    spec = read_spec(project.spec_path(env))
    names: list[str] = []
    passed: list[str] = []
    for variant, path in variant_locks(project, env, spec):
        if variant is None:
            return [""], []
        if not path.is_file():
            passed.append(f"variant {variant.name} is not locked yet ({path.name} is missing: `make lock`)")
        elif variant.platforms and platform not in variant.platforms:
            passed.append(f"variant {variant.name} is not locked for {platform} ({', '.join(variant.platforms)})")
        else:
            names.append(variant.name)
    return names, passed


def check_variant_layout(project: Project, env: str) -> None:
    """Refuse an env with variants that an older bootstrap installed in one prefix, `.envs/<env>`
    itself, where each variant now has its own below it. It is not moved: its files name its prefix
    (shebangs, text files with the prefix written in), and jobs may be running from it."""
    old = project.env_prefix(env)
    if not old.is_symlink():
        return
    from bootstrap.prefix import read_install_record

    try:
        record = read_install_record(old)
    except (OSError, ValueError, TypeError):
        record = None
    held = f"variant {record.variant}" if record is not None and record.variant else "one variant"
    make = "make clean-env" + ("" if env == project.default_env else f" ENV={env}")
    raise InputError(
        old,
        f"holds {held} in one prefix, as bootstrap made envs with variants before each variant had "
        f"its own ({old}/<variant>)",
        f"once no job runs from it, remove it with `{make}` (it and its generations), then `make env`",
    )
