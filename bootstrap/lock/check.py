"""`bootstrap lock --check`: does the lock still satisfy the spec? Offline, no solve.

Pixi-style static checks, then conda-lock's content hash (memoised: `content_hash.inputs_digests`).
Docs: docs/lock.md, "`lock --check`: is the lock stale?".
"""

from __future__ import annotations

import glob
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeVar

from bootstrap.errors import InputError
from bootstrap.lock.conda import match_specs
from bootstrap.lock.content_hash import conda_lock_accepts_hash, trusted_platforms
from bootstrap.lock.lockfile import (
    META_TORCH_INDEX,
    Lock,
    LockedPackage,
    is_virtual,
    read_lock,
)
from bootstrap.lock.pip import marker_environment, pip_requirements
from bootstrap.lock.spec import EnvSpec, VirtualPackages, read_spec, read_virtual_packages
from bootstrap.lock.variants import META_VARIANT, Variant, check_variant_platforms, is_variant_name, variant_locks
from bootstrap.project import LOCK_SUFFIX, Project
from bootstrap.report import result
from bootstrap.urls import scrub_credentials

if TYPE_CHECKING:
    from packaging.requirements import Requirement
    from rattler import PackageRecord

T = TypeVar("T")


@dataclass(frozen=True)
class Stale:
    """One reason the lock no longer matches its inputs."""

    platform: str  # "*" when it concerns the whole lock
    subject: str  # the spec, record or field concerned
    reason: str

    def __str__(self) -> str:
        return f"{self.platform}: {self.subject}: {self.reason}"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@result
class CheckResult:
    """One env's lock against its spec: fresh, or every reason it is stale."""

    env: str
    variant: str  # "" when the spec declares no variants
    lock_path: Path
    platforms: tuple[str, ...]  # the platforms checked
    stale: tuple[Stale, ...]

    @property
    def fresh(self) -> bool:
        return not self.stale

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "variant": self.variant or None,
            "lock_path": str(self.lock_path),
            "platforms": list(self.platforms),
            "fresh": self.fresh,
            "stale": [s.to_dict() for s in self.stale],
        }


@result
class CheckRun:
    """`bootstrap lock --check [ENV ...]`: one result per env; fresh when every lock is."""

    envs: tuple[CheckResult, ...]

    @property
    def fresh(self) -> bool:
        return all(env.fresh for env in self.envs)

    def to_dict(self) -> dict[str, Any]:
        return {"fresh": self.fresh, "envs": [env.to_dict() for env in self.envs]}


def check_env(
    project: Project, env: str, platforms: tuple[str, ...] = (), variants: tuple[str, ...] = ()
) -> tuple[CheckResult, ...]:
    """The locks of `env` (one per variant) against its spec, on `platforms` (default: all of the spec's)."""
    spec = read_spec(project.spec_path(env))
    for platform in platforms:
        if platform not in spec.platforms:
            raise InputError(
                "--platform",
                f"'{platform}' is not among {spec.path}'s platforms ({', '.join(spec.platforms)})",
                f"check one of them, or add it to `platforms:` in {spec.path.name}",
            )
    locks = variant_locks(project, env, spec, variants)
    check_variant_platforms(env, tuple(variant for variant, _ in locks), platforms, bool(variants))
    check_syntax(spec, [variant for variant, _ in locks])
    vpkgs = read_virtual_packages(project.virtual_packages_path)  # the hash below covers its content
    checked = tuple(
        _check_lock(env, spec.for_variant(variant), vpkgs.for_variant(variant), path, platforms)
        for variant, path in locks
        if not platforms or set(platforms) & set(spec.for_variant(variant).platforms)
    )
    if variants:
        return checked
    return checked + tuple(
        CheckResult(
            env=env,
            variant=name,
            lock_path=path,
            platforms=(),
            stale=(Stale("*", "variant", f"{why}; `make lock` deletes this lock"),),
        )
        for name, path, why in orphan_locks(project, env, spec)
    )


def check_syntax(spec: EnvSpec, variants: Sequence[Optional[Variant]]) -> None:
    """Every conda match spec and pip requirement of the spec, each variant's torch pin too, parses:
    a bad one is named (InputError) before anything reads a lock, solves or fetches."""
    match_specs(spec)
    pip_requirements(spec)
    for variant in variants:
        if variant is not None:
            pip_requirements(spec.for_variant(variant))


def _check_lock(
    env: str, spec: EnvSpec, vpkgs: VirtualPackages, lock_path: Path, platforms: tuple[str, ...]
) -> CheckResult:
    variant = spec.variant.name if spec.variant else ""
    if not lock_path.exists() and spec.variant and not spec.variant.default:
        # A variant just added to the spec: stale, like a platform just added.
        return CheckResult(
            env=env,
            variant=variant,
            lock_path=lock_path,
            platforms=platforms or spec.platforms,
            stale=(Stale("*", lock_path.name, "not locked yet"),),
        )
    if not lock_path.exists():
        raise InputError(lock_path, "no lock for this env", f"run `make lock` (bootstrap lock {env})")
    lock = read_lock(lock_path)
    stale = static_staleness(spec, lock) + _variant_staleness(spec, lock) + hash_staleness(spec, vpkgs, lock)
    platforms = tuple(p for p in platforms if p in spec.platforms)
    if platforms:
        stale = [s for s in stale if s.platform in platforms or s.platform == "*"]
    return CheckResult(
        env=env, variant=variant, lock_path=lock_path, platforms=platforms or spec.platforms, stale=tuple(stale)
    )


def static_staleness(spec: EnvSpec, lock: Lock) -> list[Stale]:
    """Every way the locked records fail the spec, without solving."""
    stale = []
    if tuple(lock.channels) != tuple(spec.channels):
        stale.append(Stale("*", "channels", f"lock has {list(lock.channels)}, spec has {list(spec.channels)}"))
    for platform in sorted(set(spec.platforms) - set(lock.platforms)):
        stale.append(Stale(platform, "platforms", "in the spec but not locked"))
    for platform in sorted(set(lock.platforms) - set(spec.platforms)):
        stale.append(Stale(platform, "platforms", "locked but no longer in the spec"))
    for platform in spec.platforms:
        if platform not in lock.platforms:
            continue
        conda = lock.for_platform(platform, "conda")
        pip = lock.for_platform(platform, "pip")
        requirements = _pip_applying(spec, platform, conda)
        try:
            stale += _conda_unsatisfied(platform, spec, conda)
            stale += _conda_not_closed(platform, conda)
        except _BadEntry as exc:
            raise InputError(lock.path, f"{exc} ({platform})", "regenerate it with `make lock`") from None
        stale += _pip_unsatisfied(platform, requirements, pip)
        stale += _pip_not_closed(platform, pip)
        stale += _not_needed(platform, spec, requirements, conda, pip)
    return stale


def hash_staleness(spec: EnvSpec, vpkgs: VirtualPackages, lock: Lock) -> list[Stale]:
    """Compare the lock's content_hash with conda-lock's, per platform; a platform whose inputs (as
    parsed) are those its recorded hash was computed from is trusted without conda-lock."""
    trusted = trusted_platforms(spec.path, vpkgs.path, lock, spec.variant.name if spec.variant else "")
    return [
        Stale(
            platform,
            "content_hash",
            f"does not match {spec.path.name} + {vpkgs.path.name} (conda-lock --check-input-hash would relock)",
        )
        for platform in lock.platforms
        if platform not in trusted
        and not conda_lock_accepts_hash(spec, vpkgs, platform, lock.content_hash.get(platform, ""))
    ]


def _variant_staleness(spec: EnvSpec, lock: Lock) -> list[Stale]:
    """The lock holds the variant the spec names at its path, from the index the spec names."""
    variant = spec.variant.name if spec.variant else ""
    locked_variant, locked_index = lock.custom.get(META_VARIANT, ""), lock.custom.get(META_TORCH_INDEX, "")
    stale = []
    if locked_variant != variant:
        stale.append(
            Stale("*", "variant", f"lock holds {locked_variant or 'no variant'}, spec expects {variant or 'none'}")
        )
    if locked_index != (spec.torch_index or ""):
        locked, named = locked_index or "the default index", spec.torch_index or "the default index"
        stale.append(Stale("*", "torch index", scrub_credentials(f"locked from {locked}, spec names {named}")))
    return stale


class _BadEntry(Exception):
    """A lock entry rattler cannot parse: `package NAME.field: rattler's reason`."""


def _parsed(what: str, make: Callable[[], T]) -> T:
    from rattler.exceptions import InvalidMatchSpecError, InvalidVersionError

    try:
        return make()
    except (InvalidVersionError, InvalidMatchSpecError) as exc:
        raise _BadEntry(f"{what}: {exc}") from None


def _record(entry: LockedPackage) -> PackageRecord:
    from rattler import BuildString, PackageRecord

    return _parsed(
        f"package {entry.name}.version",
        lambda: PackageRecord(entry.name, entry.version, BuildString(entry.build or "0"), 0, entry.platform),
    )


def _conda_unsatisfied(platform: str, env_spec: EnvSpec, locked: list[LockedPackage]) -> list[Stale]:
    records = [_record(p) for p in locked]
    out = []
    for text, spec in zip(env_spec.conda, match_specs(env_spec)):
        if spec.name.normalized.startswith("__"):
            continue  # a virtual package (`__cuda>=12`) asks the machine, never the lock; the content hash covers those
        if not any(spec.matches(r) for r in records):
            have = [p.describe() for p in locked if p.name == spec.name.normalized]
            out.append(Stale(platform, text, f"not satisfied by the lock (locked: {', '.join(have) or 'nothing'})"))
    return out


def _conda_not_closed(platform: str, locked: list[LockedPackage]) -> list[Stale]:
    from rattler import MatchSpec

    by_name = {p.name: _record(p) for p in locked}
    out = []
    for entry in locked:
        for name, constraint in entry.dependencies.items():
            if is_virtual(name):
                continue  # asked of the machine that installs the lock (`bootstrap env` checks it), never locked
            record = by_name.get(name)
            if record is None:
                out.append(Stale(platform, f"{name} (needed by {entry.name})", "missing from the lock"))
            elif constraint not in ("", "*") and not _parsed(
                f"package {entry.name}.dependencies.{name}",
                lambda: MatchSpec(f"{name} {constraint}"),  # noqa: B023 (called at once, in this iteration)
            ).matches(record):
                out.append(
                    Stale(
                        platform,
                        f"{name} {constraint} (needed by {entry.name})",
                        f"locked {by_name[name].version} does not match",
                    )
                )
    return out


def _pip_applying(spec: EnvSpec, platform: str, conda: list[LockedPackage]) -> list[tuple[str, Requirement]]:
    """(text, Requirement) of the spec's pip entries whose marker holds on `platform` with the
    locked Python."""
    python = next((p.version for p in conda if p.name == "python"), "")
    environment = marker_environment(platform, python)
    return [
        (text, req)
        for text, req in zip(spec.pip, pip_requirements(spec))
        if req.marker is None or not python or req.marker.evaluate(environment)
    ]


def _pip_unsatisfied(
    platform: str, requirements: list[tuple[str, Requirement]], locked: list[LockedPackage]
) -> list[Stale]:
    from packaging.utils import canonicalize_name

    versions = {canonicalize_name(p.name): p.version for p in locked}
    out = []
    for text, req in requirements:
        version = versions.get(canonicalize_name(req.name))
        if version is None:
            out.append(Stale(platform, f"pip: {text}", "not in the lock"))
        elif not req.specifier.contains(version, prereleases=True):
            out.append(Stale(platform, f"pip: {text}", f"locked {version} does not satisfy it"))
    return out


def _not_needed(
    platform: str,
    spec: EnvSpec,
    requirements: list[tuple[str, Requirement]],
    conda: list[LockedPackage],
    pip: list[LockedPackage],
) -> list[Stale]:
    """Records nothing in the spec reaches through dependencies (left over by a hand edit or a
    merge): an env built from the lock would carry them."""
    from packaging.utils import canonicalize_name

    out = []
    roots = {m.name.normalized for m in match_specs(spec)}
    for manager, locked, names in (
        ("conda", conda, roots),
        ("pip", pip, {canonicalize_name(r.name) for _, r in requirements}),
    ):
        key = (lambda name: name) if manager == "conda" else canonicalize_name
        by_name = {key(p.name): p for p in locked}
        reached, todo = set(), [n for n in names if n in by_name]
        while todo:
            name = todo.pop()
            if name not in reached:
                reached.add(name)
                todo += [key(d) for d in by_name[name].locked_dependencies if key(d) in by_name]
        prefix = "pip: " if manager == "pip" else ""
        out += [
            Stale(platform, f"{prefix}{p.describe()}", "locked, but nothing in the spec needs it")
            for name, p in sorted(by_name.items())
            if name not in reached
        ]
    return out


def _pip_not_closed(platform: str, locked: list[LockedPackage]) -> list[Stale]:
    from packaging.utils import canonicalize_name

    names = {canonicalize_name(p.name) for p in locked}
    return [
        Stale(platform, f"pip: {dep} (needed by {entry.name})", "missing from the lock")
        for entry in locked
        for dep in entry.dependencies
        if canonicalize_name(dep) not in names
    ]


def orphan_locks(project: Project, env: str, spec: EnvSpec) -> list[tuple[str, Path, str]]:
    """(variant name, lock path, why) of each variant lock of `env` that no variant of the spec is locked
    in: `envs/<env>.<variant>.conda-lock.yml` whose variant the spec no longer declares, or which is now
    the default (locked in the env's own lock), no env of that name, and the lock itself says it holds
    that variant (a copy the user keeps under such a name, or any file that does not read as a lock,
    is not ours to delete)."""
    declared = {v.name: v.default for v in spec.variants}
    out = []
    for path in sorted(project.envs_dir.glob(f"{glob.escape(env)}.*{LOCK_SUFFIX}")):
        name = path.name[len(env) + 1 : -len(LOCK_SUFFIX)]
        if not is_variant_name(name) or declared.get(name) is False or project.spec_path(f"{env}.{name}").exists():
            continue
        try:
            if read_lock(path).custom.get(META_VARIANT) == name:
                why = (
                    f"{name} is now the default variant, locked in {project.lock_path(env).name}"
                    if name in declared
                    else f"{spec.path.name} no longer declares {name}"
                )
                out.append((name, path, why))
        except InputError:
            continue
    return out
