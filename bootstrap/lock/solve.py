"""`bootstrap lock`: solve an env for its platforms and write its conda-lock.yml.

spec + virtual packages --rattler--> conda records per platform
                        --uv------> pip wheels per platform (in parallel)
                        --conda-lock writer--> lock (atomic), diff vs the old one
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from bootstrap import __version__
from bootstrap.errors import BootstrapError, InputError, SolveError, in_variant
from bootstrap.fsutil import disk_full, flocked, out_of_space, write_target
from bootstrap.lock.check import check_syntax, orphan_locks
from bootstrap.lock.conda import solve_conda, to_locked
from bootstrap.lock.content_hash import conda_lock_content_hashes, inputs_digests, inputs_key, recorded_digests
from bootstrap.lock.lockfile import (
    META_MIRRORS,
    META_TORCH_INDEX,
    META_VERSION,
    Lock,
    LockedPackage,
    read_lock,
)
from bootstrap.lock.mirrors import Mirror, lock_record
from bootstrap.lock.pip import PipOptions, resolve_all, target_for
from bootstrap.lock.spec import EnvSpec, VirtualPackages, read_spec, read_virtual_packages
from bootstrap.lock.variants import META_VARIANT, Variant, check_variant_platforms, variant_locks
from bootstrap.lock.write import LockContent, PlatformDiff, diff_locks, write_locks
from bootstrap.project import Project
from bootstrap.report import result

if TYPE_CHECKING:
    from rattler import RepoDataRecord


@dataclass(frozen=True)
class LockOptions:
    platforms: tuple[str, ...] = ()  # a subset to relock; the others are kept from the old lock
    variants: tuple[str, ...] = ()  # a subset of the spec's variants to relock; default: every one
    mirrors: tuple[Mirror, ...] = ()
    pip: PipOptions = PipOptions()
    cache_dir: Optional[Path] = None
    dry_run: bool = False
    # A relock keeps every locked version the spec still allows (conda-lock's `--update`, `uv pip
    # compile -P`), except those of `update` (conda or pip names); `upgrade` keeps none.
    update: tuple[str, ...] = ()
    upgrade: bool = False


@result
class LockResult:
    """One env locked (or, with `dry_run`, solved): what moved on each of its platforms."""

    env: str
    variant: str  # "" when the spec declares no variants
    path: Path
    written: bool
    new: bool  # there was no lock before
    platforms: tuple[str, ...]  # the platforms solved this time; the others were kept (`--platform`)
    counts: dict[str, dict[str, int]]  # every platform of the spec -> {"conda": n, "pip": n}
    diffs: tuple[PlatformDiff, ...]  # every platform of the spec, against the lock before
    seconds: dict[str, float] = field(default_factory=dict)  # conda_solve, pip_resolve, write

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "variant": self.variant or None,
            "lock_path": str(self.path),
            "written": self.written,
            "new": self.new,
            "solved": list(self.platforms),
            "platforms": [
                {
                    "platform": diff.platform,
                    "conda_packages": self.counts[diff.platform]["conda"],
                    "pip_packages": self.counts[diff.platform]["pip"],
                    "added": list(diff.added),
                    "removed": list(diff.removed),
                    "changed": list(diff.changed),
                }
                for diff in self.diffs
            ],
            "seconds": {step: round(value, 3) for step, value in self.seconds.items()},
        }


@result
class DroppedLock:
    """The lock of a variant no variant of the spec is locked in any more, deleted by a relock (listed
    with `dry_run`): the spec dropped the variant, or made it the default."""

    env: str
    variant: str
    path: Path
    deleted: bool
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "variant": self.variant,
            "lock_path": str(self.path),
            "deleted": self.deleted,
            "why": self.why,
        }


@result
class LockRun:
    """`bootstrap lock [ENV ...]`: one result per env (per variant of it), in the order they were locked."""

    dry_run: bool
    envs: tuple[LockResult, ...]
    dropped: tuple[DroppedLock, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "envs": [env.to_dict() for env in self.envs],
            "dropped": [lock.to_dict() for lock in self.dropped],
        }


def lock_env(
    project: Project,
    env: str,
    options: LockOptions = LockOptions(),
    notify: Callable[[str], None] = lambda _message: None,
    progress: Callable[[str], None] = lambda _message: None,
) -> tuple[LockResult, ...]:
    """Solve `env` and write its lock, one per variant. Every variant is solved before any lock is
    written, so a variant that fails leaves every lock as it was. Two runs on one env take turns (an
    flock on the spec), so a `--platform` relock never writes over another's platforms with what it
    read before. `notify`: why the run waits; `progress`: one line as each long phase starts."""
    spec, locks, vpkgs = _checked_inputs(project, env, options)
    waiting = f"waiting for another `bootstrap lock` of {env} to finish"
    with nullcontext() if options.dry_run else flocked(spec.path, notify, waiting):
        plans = [
            _solve_variant(project, env, spec, lock, vpkgs, options, progress)
            for lock in locks
            if not options.platforms or set(options.platforms) & set(spec.for_variant(lock[0]).platforms)
        ]
        return _write_plans(plans, options)


def check_inputs(project: Project, envs: Sequence[str], options: LockOptions) -> None:
    """Read and check the inputs of every env (specs, variants, syntax, virtual packages, options)
    before any is solved, so that bad input in a later env writes nothing for an earlier one."""
    for env in envs:
        _checked_inputs(project, env, options)


def _checked_inputs(
    project: Project, env: str, options: LockOptions
) -> tuple[EnvSpec, list[tuple[Optional[Variant], Path]], VirtualPackages]:
    """(spec, [(variant, lock path)], virtual packages) of `env`, each checked; InputError otherwise."""
    spec = read_spec(project.spec_path(env))
    locks = variant_locks(project, env, spec, options.variants)
    check_syntax(spec, [variant for variant, _ in locks])  # before any solving
    check_update(project, (env,), options)
    vpkgs = read_virtual_packages(project.virtual_packages_path)
    _check_platforms(spec, options.platforms)
    check_variant_platforms(env, tuple(variant for variant, _ in locks), options.platforms, bool(options.variants))
    for variant, path in locks if options.platforms else ():
        _check_kept_variant(project, env, variant, path)
    return spec, locks, vpkgs


def _check_kept_variant(project: Project, env: str, variant: Optional[Variant], lock_path: Path) -> None:
    """A `--platform` relock keeps the other platforms' records of the lock at `lock_path`: refused
    when that lock holds another variant (the variants were reordered or renamed), whose records
    would be kept under this variant's name."""
    old = _read_old_lock(lock_path, project.root)
    held, name = (old.custom.get(META_VARIANT, "") if old else ""), (variant.name if variant else "")
    if old is not None and held != name:
        holds = f"variant {held}" if held else "no variant"
        wanted = f"variant {name}" if name else "the spec's only build"
        raise InputError(
            lock_path,
            f"holds {holds}, not {wanted} (variants reordered or renamed): --platform would "
            "keep its other platforms' records under the wrong name",
            f"relock every platform: `bootstrap lock {env}` without --platform",
        )


def drop_orphan_locks(project: Project, env: str, options: LockOptions) -> tuple[DroppedLock, ...]:
    """Delete the locks `orphan_locks` finds, so that no stale lock of a removed variant, or of one
    that became the default, lingers beside the others (only listed with `dry_run`; kept with `--variant`
    or `--platform`)."""
    if options.variants or options.platforms:  # a partial relock: the orphan may hold what it did not relock
        return ()
    dropped = []
    for name, path, why in orphan_locks(project, env, read_spec(project.spec_path(env))):
        if not options.dry_run:
            path.unlink(missing_ok=True)
        dropped.append(DroppedLock(env=env, variant=name, path=path, deleted=not options.dry_run, why=why))
    return tuple(dropped)


@dataclass(frozen=True)
class _Plan:
    """One variant solved, not yet written."""

    content: LockContent
    result: LockResult


def _solve_variant(
    project: Project,
    env: str,
    spec: EnvSpec,
    lock: tuple[Optional[Variant], Path],
    vpkgs: VirtualPackages,
    options: LockOptions,
    progress: Callable[[str], None],
) -> _Plan:
    """`_solve` for one variant of `spec` and its lock path; what fails is named by the variant
    (`variants[1] (cu126): ...`)."""
    variant, lock_path = lock
    if variant is None:
        return _solve(project, env, spec, vpkgs, lock_path, options, progress)
    try:
        return _solve(project, env, spec.for_variant(variant), vpkgs.for_variant(variant), lock_path, options, progress)
    except BootstrapError as exc:
        raise in_variant(exc, spec.path, f"variants[{spec.variants.index(variant)}] ({variant.name})") from exc


def _solve(
    project: Project,
    env: str,
    spec: EnvSpec,
    vpkgs: VirtualPackages,
    lock_path: Path,
    options: LockOptions,
    progress: Callable[[str], None],
) -> _Plan:
    """Solve one variant (`spec` is what it is locked from): the lock to write and what moved."""
    platforms = tuple(p for p in spec.platforms if not options.platforms or p in options.platforms)
    old = _read_old_lock(lock_path, project.root)
    if not options.dry_run:
        _check_writable(lock_path)  # before the solve, so an unwritable lock fails before the wait
    seconds = {}

    title = f"{env} [{spec.variant.name}]" if spec.variant else env
    started = time.perf_counter()
    conda = {}
    for p in platforms:
        progress(f"{title} {p}: solving the conda part ...")
        conda[p] = solve_conda(
            spec, p, vpkgs.for_platform(p), options.mirrors, options.cache_dir, _preferred(old, p, "conda", options)
        )
    seconds["conda_solve"] = time.perf_counter() - started

    started = time.perf_counter()
    targets = (
        [target_for(p, _python_version(spec, p, records), vpkgs) for p, records in conda.items()] if spec.pip else []
    )
    if targets:  # uv resolves the platforms side by side: one line for them all
        progress(f"{title} {', '.join(t.platform for t in targets)}: resolving the pip part with uv ...")
    pip = resolve_all(spec, targets, options.pip, prefer={p: _preferred(old, p, "pip", options) for p in platforms})
    seconds["pip_resolve"] = time.perf_counter() - started

    packages = [to_locked(r, p) for p, records in conda.items() for r in records]
    packages += [pkg for entries in pip.values() for pkg in entries]
    packages += _kept_from(old, spec, platforms)
    content = _content(spec, vpkgs, lock_path, packages, old, platforms, options)
    diffs = tuple(diff_locks(old.packages if old else (), content.packages, spec.platforms))
    counts = {
        p: {m: sum(1 for x in content.packages if x.platform == p and x.manager == m) for m in ("conda", "pip")}
        for p in spec.platforms
    }
    return _Plan(
        content,
        LockResult(
            env=env,
            variant=spec.variant.name if spec.variant else "",
            path=lock_path,
            written=not options.dry_run,
            new=old is None,
            platforms=platforms,
            counts=counts,
            diffs=diffs,
            seconds=seconds,
        ),
    )


def _write_plans(plans: Sequence[_Plan], options: LockOptions) -> tuple[LockResult, ...]:
    """Write every variant's solved lock, or none (nothing with `dry_run`): each is rendered before
    the first is replaced, so one that cannot be written leaves every lock as it was."""
    started = time.perf_counter()
    if not options.dry_run and plans:
        try:
            write_locks([(plan.result.path, plan.content) for plan in plans])
        except OSError as exc:
            if not out_of_space(exc):
                raise
            names = ", ".join(plan.result.path.name for plan in plans)
            outcome = "the lock is unchanged" if len(plans) == 1 else "every lock is unchanged"
            raise disk_full(
                f"writing {names}",
                {"lock": plans[0].result.path.parent},
                outcome,
                "free space and lock again",
                cause=exc,
            ) from None
    seconds = time.perf_counter() - started
    return tuple(replace(plan.result, seconds={**plan.result.seconds, "write": seconds}) for plan in plans)


def check_update(project: Project, envs: Sequence[str], options: LockOptions) -> None:
    """Each `--update` name must be locked in some lock of each env (of the variants being
    locked): a name in none would move nothing, most likely a typo. Checked for every env before
    any is locked, so bad input writes nothing."""
    if options.update and options.upgrade:
        raise InputError(
            "--update",
            "--upgrade already moves every package",
            "give --update PKG to move some, or --upgrade to move all",
        )
    for env in envs if options.update else ():
        spec = read_spec(project.spec_path(env))
        locks = [_read_old_lock(path, project.root) for _, path in variant_locks(project, env, spec, options.variants)]
        locked = [p for lock in locks if lock is not None for p in lock.packages]
        for name in options.update:
            if not any(_named(p, (name,)) for p in locked):
                raise InputError(
                    "--update",
                    f"'{name}' is in no lock of {env}",
                    "name a conda or pip package its lock holds, or lock it first without --update",
                )


def _preferred(old: Optional[Lock], platform: str, manager: str, options: LockOptions) -> list[LockedPackage]:
    """The old lock's entries of `platform` that its solve keeps where the spec still allows them:
    all but those `--update` names; none with `--upgrade` or without an old lock."""
    if old is None or options.upgrade:
        return []
    return [p for p in old.for_platform(platform, manager) if not _named(p, options.update)]


def _named(entry: LockedPackage, names: Sequence[str]) -> bool:
    """Whether `names` name the entry: conda names compare case-blind, pip names PEP 503-normalised
    (`PyYAML`, `typing_extensions`), since conda tells `_` from `-` and pip does not."""
    from packaging.utils import canonicalize_name

    if entry.manager == "pip":
        return canonicalize_name(entry.name) in {canonicalize_name(n) for n in names}
    return entry.name.lower() in {n.lower() for n in names}


def _read_old_lock(lock_path: Path, root: Path) -> Optional[Lock]:
    """The lock being replaced (for the diff and `--platform`), or None. A broken one is left as it
    is, and the message says how to relock instead of "regenerate it with `make lock`", which is
    this very command."""
    if not lock_path.exists():
        return None
    try:
        return read_lock(lock_path)
    except InputError as exc:
        fix = (
            f"left as it is: restore it (e.g. `git checkout {os.path.relpath(lock_path, root)}`) "
            "or remove it, then lock again"
        )
        raise InputError(exc.where, exc.problem, fix) from None


def _check_writable(lock_path: Path) -> None:
    directory = write_target(lock_path).parent
    if not os.access(directory, os.W_OK):  # access(2) answers EROFS even to root
        raise InputError(
            lock_path,
            f"cannot write in {directory} (no permission, or a read-only file system)",
            "lock in a checkout you can write, or pass --root for a copy of the project",
        )


def _check_platforms(spec: EnvSpec, requested: tuple[str, ...]) -> None:
    for platform in requested:
        if platform not in spec.platforms:
            raise InputError(
                "--platform",
                f"'{platform}' is not among {spec.path}'s platforms ({', '.join(spec.platforms)})",
                f"add it to `platforms:` in {spec.path.name} first",
            )


def _python_version(spec: EnvSpec, platform: str, records: list[RepoDataRecord]) -> str:
    for record in records:
        if record.name.normalized == "python":
            return str(record.version)
    raise SolveError(f"{spec.path}: the conda solve for {platform} has no python, which the pip: section needs")


def _kept_from(old: Optional[Lock], spec: EnvSpec, solved: tuple[str, ...]) -> list[LockedPackage]:
    """Entries of platforms not relocked this time (`--platform`), if the spec still lists them."""
    if old is None:
        return []
    keep = set(spec.platforms) - set(solved)
    return [p for p in old.packages if p.platform in keep]


def _content(
    spec: EnvSpec,
    vpkgs: VirtualPackages,
    lock_path: Path,
    packages: list[LockedPackage],
    old: Optional[Lock],
    solved: tuple[str, ...],
    options: LockOptions,
) -> LockContent:
    """The lock's metadata. A platform kept from the old lock (`--platform`) keeps its old
    content_hash, so `lock --check` still sees it stale if the inputs moved since, and its old
    inputs digest, which vouches for that hash (a platform solved now gets a new one)."""
    computed = {p: value for p, value in conda_lock_content_hashes(spec, vpkgs).items() if p in spec.platforms}
    kept = {p: old.content_hash.get(p, "") for p in spec.platforms if p not in solved and old and p in old.platforms}
    content_hash = {p: computed[p] if p in solved else kept[p] for p in spec.platforms if p in solved or p in kept}
    custom = {META_VERSION: __version__}
    variant = spec.variant.name if spec.variant else ""
    fresh = inputs_digests(spec.path, vpkgs.path, {p: computed[p] for p in solved}, variant)
    recorded = recorded_digests(old) if old else {}
    for platform in content_hash:
        digest = fresh.get(platform) or recorded.get(platform)
        if digest:
            custom[inputs_key(platform)] = digest
    if variant:
        custom[META_VARIANT] = variant
    if spec.torch_index:
        custom[META_TORCH_INDEX] = spec.torch_index
    if options.mirrors:
        custom[META_MIRRORS] = lock_record(options.mirrors)
    return LockContent(
        channels=spec.channels,
        platforms=tuple(content_hash),
        sources=(os.path.relpath(spec.path, lock_path.parent),),
        content_hash=content_hash,
        custom=custom,
        packages=tuple(packages),
    )
