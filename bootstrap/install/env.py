"""`bootstrap env`: create or update an environment from a lock, without conda.

Read the lock, hold the host against it (`floor`), plan once against where the change starts
(`generations.next_start`), fetch once, apply into `<n>.partial`, switch the stable symlink.
Docs: docs/env.md, "Plan, fetch, apply".
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from bootstrap import __version__
from bootstrap.errors import DiskFullError, InputError
from bootstrap.fsutil import disk_full, out_of_space
from bootstrap.install import generations as gens
from bootstrap.install import linkmode, pip, store, wheelstore
from bootstrap.install.cache import cache_lock, check_cache_dir
from bootstrap.install.download import Watch
from bootstrap.install.fetch import FetchSize, check_mirrors, fetch_archives, measure
from bootstrap.install.floor import HostSystem, check_host, probe_host_system
from bootstrap.install.history import COMMAND as HISTORY_COMMAND
from bootstrap.install.history import append_request
from bootstrap.install.link import LinkTarget, clobbered, link_conda
from bootstrap.install.plan import Change, Plan, locked_entries, plan_change
from bootstrap.lock.lockfile import Lock, LockedPackage, read_lock
from bootstrap.lock.mirrors import Mirror
from bootstrap.lock.spec import read_spec
from bootstrap.lock.variants import META_VARIANT
from bootstrap.prefix import (
    InstallRecord,
    conda_meta_fingerprint,
    normalise,
    read_install_record,
    write_install_record,
)
from bootstrap.report import result

if TYPE_CHECKING:
    from bootstrap.install.bundle import Bundle
    from bootstrap.install.variant import VariantChoice

Notify = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Feedback:
    """How a run reports progress; the CLI fills it for a TTY, tests leave it quiet."""

    notify: Notify = _quiet  # one line per stage
    waiting: Notify = _quiet  # another run holds the env and we wait for it
    fetch_started: Callable[[int], None] = lambda _total: None
    fetched: Callable[[LockedPackage], None] = lambda _entry: None
    watch: Watch = Watch()  # bytes to fetch, bytes as they arrive, retries


@dataclass(frozen=True)
class EnvOptions:
    env: str
    lock_path: Path
    prefix: Path
    platform: str
    cache_dir: Path
    mirrors: tuple[Mirror, ...] = ()
    bundle: Optional[Bundle] = None  # read artifacts the store lacks from this first (`bootstrap bundle`)
    dry_run: bool = False
    show_progress: bool = False
    variant: Optional[VariantChoice] = None  # the variant `lock_path` holds, and why it was chosen
    link: str = "auto"  # how files come from the caches: one of linkmode.MODES
    # A retired generation is recycled in place or deleted only this long after it was retired: a job
    # started from it, here or on another node sharing the file system, may still read its files.
    recycle_after_s: float = gens.RECYCLE_AFTER_S


@result
class EnvResult:
    prefix: Path
    platform: str
    plan: Plan  # what was applied (a dry run: what would be), against the generation it starts from
    generation: Optional[int]  # the current generation after the run (a dry run: now)
    changed: bool
    dry_run: bool
    base: Optional[int] = None  # the generation the change started from
    made: str = ""  # how: generations.Start.made ("recycled", "clone", "empty")
    seconds: dict[str, float] = field(default_factory=dict)
    removed: tuple[str, ...] = ()  # what killed runs had left, removed by this one
    notes: tuple[str, ...] = ()  # what the user should know about how the change was made
    variant: Optional[VariantChoice] = None  # None with --lock
    size: Optional[FetchSize] = None  # of what the plan installs, and of what of it was (would be) downloaded
    link: Optional[linkmode.LinkUse] = None  # how this run linked the files it installed; None: it linked none

    @property
    def recycled(self) -> bool:
        return self.made == "recycled"

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefix": str(self.prefix),
            "platform": self.platform,
            "generation": self.generation,
            "base": self.base,
            "recycled": self.recycled,
            "made": self.made or None,
            "changed": self.changed,
            "dry_run": self.dry_run,
            "plan": self.plan.to_dict(),
            "removed": list(self.removed),
            "notes": list(self.notes),
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            "variant": None if self.variant is None else self.variant.to_dict(),
            "size": None if self.size is None else self.size.to_dict(),
            "link": None if self.link is None else self.link.to_dict(),
        }


@dataclass(frozen=True)
class Run:
    """What one run works from: its options, the lock and its entries for the platform, how it reports."""

    options: EnvOptions
    lock: Lock
    entries: list[LockedPackage]
    feedback: Feedback


def create_or_update(
    options: EnvOptions, feedback: Feedback = Feedback(), host: Optional[HostSystem] = None
) -> EnvResult:
    """Make `options.prefix` exactly the lock's env for `options.platform`; `host` is this machine
    (probed when None) as held against the glibc or macOS the lock needs."""
    started = time.perf_counter()
    if os.name == "nt":
        raise InputError(
            "bootstrap env",
            "generations need POSIX symlinks and flock; Windows is not supported yet",
            f"install the lock with `micromamba create -f {options.lock_path.name}` or `conda-lock install`",
        )
    check_cache_dir(options.cache_dir)
    lock = read_lock(options.lock_path)
    check_mirrors(options.mirrors, lock)
    entries = locked_entries(lock, options.platform)
    # Before any download: an env whose programs cannot start here is not worth fetching.
    check_host(lock, options.platform, host or probe_host_system())
    layout = gens.Layout(options.prefix)
    layout.check_managed()
    if options.dry_run:
        change = _dry_run_change(layout, entries, feedback, options.recycle_after_s)
        size = None if change is None else _measure(change.plan, options)
        return dataclasses.replace(_result(options, started, change, dry_run=True), size=size)
    if _unchanged_unlocked(lock, options, layout, entries):  # the common case, without the env's lock
        return _result(options, started, removed=gens.tidy_if_idle(layout))
    check_runs_here(options.platform)
    layout.check_writable()
    with gens.exclusive(layout, feedback.waiting) as env_lock:
        removed = gens.remove_leftovers(layout)
        current = layout.current()
        # again: another run may have changed the env meanwhile
        change = plan_change(layout, entries, options.recycle_after_s)
        run = Run(options, lock, entries, feedback)
        if change is None:
            if current is not None and not _recorded(lock, options):
                # Same packages, another lock (e.g. a loosened spec that resolved the
                # same): refresh the record in place rather than build a generation.
                _write_record(run, layout.path(current), current)
            return _result(options, started, removed=removed)
        with cache_lock(options.cache_dir, feedback.waiting, shared=True), store.extracting(options.cache_dir):
            seconds, notes, size, link = _build(layout, change, run, env_lock)
        try:
            gens.collect_garbage(layout, keep=(change.start.number, current), grace_s=options.recycle_after_s)
        except KeyboardInterrupt:  # the env is switched: say so, rather than "interrupted" as if it were not
            notes = [
                *notes,
                "interrupted while removing older generations, after the switch: the env is "
                "the new one; a later `make env` removes what is left",
            ]
    done = _result(options, started, change, seconds=seconds, removed=removed, notes=notes)
    return dataclasses.replace(done, size=size, link=link)


def _result(
    options: EnvOptions,
    started: float,
    change: Optional[Change] = None,
    dry_run: bool = False,
    seconds: Optional[dict[str, float]] = None,
    removed: Sequence[Path] = (),
    notes: Sequence[str] = (),
) -> EnvResult:
    """What a run did (or, dry, would do): `change` applied, or nothing to do without one."""
    seconds = {**(seconds or {}), "total": time.perf_counter() - started}
    if change is None:
        return EnvResult(
            prefix=options.prefix,
            platform=options.platform,
            plan=Plan(),
            generation=gens.Layout(options.prefix).current(),
            changed=False,
            dry_run=dry_run,
            seconds=seconds,
            removed=tuple(map(str, removed)),
            variant=options.variant,
        )
    return EnvResult(
        prefix=options.prefix,
        platform=options.platform,
        plan=change.plan,
        generation=change.start.number,
        changed=not dry_run,
        dry_run=dry_run,
        base=change.start.base,
        made=change.start.made,
        seconds=seconds,
        removed=tuple(map(str, removed)),
        notes=tuple(notes),
        variant=options.variant,
    )


# What a read of the env without its lock may meet while another run switches it: the generation
# being read renamed (recycled) or deleted under it, so a listed file or the directory is gone.
_RACED = (OSError, ValueError)


def _unchanged_unlocked(lock: Lock, options: EnvOptions, layout: gens.Layout, entries: list[LockedPackage]) -> bool:
    """Whether the env is the lock's already, read without the env's lock so that runs with nothing
    to do never wait. A read that races another run's switch answers False, never raises: the caller
    then takes the lock and reads again, where nothing moves."""
    try:
        return _recorded(lock, options) and plan_change(layout, entries, options.recycle_after_s) is None
    except _RACED:
        return False


def _dry_run_change(
    layout: gens.Layout, entries: list[LockedPackage], feedback: Feedback, grace_s: float
) -> Optional[Change]:
    """`plan_change` for --dry-run, which takes no lock to read; if another run switches the env
    mid-read, read the new generation, and after a few such races wait for the lock instead."""
    for _ in range(3):
        with contextlib.suppress(*_RACED):
            return plan_change(layout, entries, grace_s)
    with gens.exclusive(layout, feedback.waiting):
        return plan_change(layout, entries, grace_s)


def _recorded(lock: Lock, options: EnvOptions) -> bool:
    """Whether the env's install record says it was made from this lock: its content hash, at this
    path (a relock may delete the lock a record names, leaving the same records in another)."""
    record = read_install_record(options.prefix) if options.prefix.exists() else None
    return (
        record is not None
        and record.content_hash == lock.content_hash.get(options.platform, "")
        and record.lock_path == str(options.lock_path)
    )


def check_runs_here(platform: str) -> None:
    """Refuse an env for another OS before anything is fetched: its python cannot run here to install
    the pip part, and nothing in it would. Another architecture of this OS may run (Rosetta, qemu)."""
    from bootstrap.platforms import host_platform

    host = host_platform()
    if platform.split("-")[0] != host.split("-")[0]:
        raise InputError(
            f"--platform {platform}",
            f"an env for {platform} cannot be built on this {host} machine, whose system cannot run its programs",
            f"run it on a machine of that platform, from a bundle where it has no channel: `bootstrap "
            f"bundle --platform {platform}`; --dry-run shows the plan here",
        )


def _measure(plan: Plan, options: EnvOptions, cached: Sequence[str] = ()) -> FetchSize:
    """What the plan installs weighs, and what of it the package cache lacks."""
    return measure([*plan.link, *plan.pip_install], options.cache_dir, options.mirrors, options.bundle, cached)


def _build(
    layout: gens.Layout, change: Change, run: Run, env_lock: int
) -> tuple[dict[str, float], list[str], FetchSize, linkmode.LinkUse]:
    """Fetch what `change` needs, then build the generation it describes and switch to it; the
    seconds each step took, notes for the user, what the plan weighs and how files were linked.
    `env_lock` is the descriptor of the env's lock, which this run holds.

    The fetch comes first: an unreachable channel or index, or a bad archive or wheel, fails before
    the retired generation is recycled, so `--rollback` still has it."""
    options, plan, current, seconds = run.options, change.plan, layout.current(), {}
    first = current is None
    t = time.perf_counter()
    full_validation = store.others_extracting(options.cache_dir)
    sealed, edited = store.sealed_copies(options.cache_dir, plan.link, drop=not full_validation)
    if edited:
        run.feedback.notify(
            f"cached copies of {', '.join(edited)} were edited: extracting them again from their archives"
        )
    fetching = [*(e for e in plan.link if e.name not in sealed), *plan.pip_install]
    size = _measure(plan, options, cached=sorted(sealed))
    try:
        fetched = _fetch(fetching, options, run.feedback, size)
    except Exception as exc:
        if out_of_space(exc):  # the package cache's file system
            raise _disk_full(layout, options, exc, created=first, started=False) from exc
        raise
    seconds["fetch"] = time.perf_counter() - t
    link = _link_use(layout, run)
    t = time.perf_counter()
    partial = gens.start(layout, change.start).partial
    try:
        if current is not None:
            gens.carry_env_state(layout.path(current), partial)
        seconds["start"] = time.perf_counter() - t
        notes = _apply(change, fetched, full_validation, run, seconds, held=(env_lock,), link=link)
        gens.commit(layout, change.start.number, partial)
    except BaseException as exc:
        _discard(layout, partial, first)
        if isinstance(exc, Exception) and out_of_space(exc):
            raise _disk_full(layout, options, exc, created=first, started=True) from exc
        raise
    return seconds, ([link.fallback] if link.fallback else []) + notes, size, link


def _link_use(layout: gens.Layout, run: Run) -> linkmode.LinkUse:
    """How this run links files into the env: `--link`, where the file systems of the caches and the
    env allow it (tried once per pair), else the next cheaper mode."""
    options = run.options
    return linkmode.choose(options.link, options.cache_dir, layout.gens_dir, layout.stable)


def _apply(
    change: Change,
    fetched: dict[str, Path],
    full_validation: bool,
    run: Run,
    seconds: dict[str, float],
    held: Sequence[int],
    link: linkmode.LinkUse,
) -> list[str]:
    """Bring the started generation to the lock by the change's plan, adding each step's time to
    `seconds`, linking files by `link`; returns notes for the user. uv inherits `held` (see `pip.install`)."""
    options, notify, partial, notes = run.options, run.feedback.notify, change.start.partial, []
    plan = change.plan_in_partial()
    with ThreadPoolExecutor(max_workers=1) as pool:
        # uv's unpacked wheels are checked against their seals while rattler links the conda part:
        # the check stats every file they hold, and rattler's links leave this interpreter idle.
        checking = pool.submit(wheelstore.edited, options.cache_dir, plan.pip_install) if plan.pip_install else None
        if plan.pip_remove:  # first: a distribution moving to conda would take the files its conda package links
            t = time.perf_counter()
            notify(f"pip: removing {len(plan.pip_remove)} distributions")
            notes += pip.remove(plan.pip_remove, partial, options.prefix, held=held)
            seconds["pip"] = time.perf_counter() - t
        if plan.link or plan.unlink:
            t = time.perf_counter()
            notify(f"linking {len(plan.link)}, unlinking {len(plan.unlink)} conda packages")
            target = LinkTarget(
                partial, options.prefix, options.platform, options.cache_dir, options.show_progress, link.used
            )
            link_conda(
                [e for e in run.entries if e.manager == "conda"],
                plan.link,
                {e.name: fetched[e.name] for e in plan.link if e.name in fetched},
                target,
                fetch=lambda more: _fetch(more, options),
                full_validation=full_validation,
            )
            notes += clobbered(target)
            requested = _requested_conda_specs(run.lock)
            if requested:
                append_request(
                    partial / "conda-meta" / "history",
                    requested,
                    f"{HISTORY_COMMAND} {options.env} ({options.lock_path.name})",
                )
            seconds["link"] = time.perf_counter() - t
        if checking is not None:  # the plan installs wheels
            t = time.perf_counter()
            notify(f"pip: installing {len(plan.pip_install)} distributions")
            notes += pip.install(
                plan.pip_install,
                partial,
                options.prefix,
                fetched,
                wheelstore.Checking(options.cache_dir, checking),
                held=held,
                link=link.used,
            )
            seconds["pip"] = seconds.get("pip", 0.0) + time.perf_counter() - t
    _write_record(run, partial, change.start.number, fsync=False, link=link)  # committed by the generation's rename
    return notes


def _fetch(
    entries: Sequence[LockedPackage],
    options: EnvOptions,
    feedback: Optional[Feedback] = None,
    size: Optional[FetchSize] = None,
) -> dict[str, Path]:
    """name -> checked local file of each entry: from the store, else the bundle, else its URL after mirrors.
    `size`: what the plan already measured of them, announced rather than asked of the servers again."""
    if entries and feedback is not None:
        feedback.fetch_started(len(entries))
    return fetch_archives(
        entries,
        options.cache_dir,
        options.mirrors,
        bundle=options.bundle,
        progress=feedback.fetched if feedback is not None else None,
        watch=feedback.watch if feedback is not None else None,
        size=size,
    )


def _discard(layout: gens.Layout, partial: Path, first: bool) -> None:
    """Remove a half-built generation, once its writers are done (`generations.discard`); after a
    failed first create, the gens dir it was alone in too."""
    gens.discard(partial)
    if first:
        with contextlib.suppress(OSError):  # not empty: another run's, or generations of an earlier env
            layout.gens_dir.rmdir()


def _disk_full(
    layout: gens.Layout, options: EnvOptions, cause: BaseException, created: bool, started: bool
) -> DiskFullError:
    """ENOSPC (or EFBIG) wherever it struck (our fetch, rattler, uv, our writes): which file systems, how
    much is free now that any partial generation is gone, and that the env is as it was."""
    outcome = (
        "nothing was created"
        if created
        else "the env is unchanged and the half-built generation removed"
        if started
        else "the env is unchanged"
    )
    return disk_full(
        f"building {options.prefix}",
        {"env": layout.gens_dir, "package cache": options.cache_dir},
        outcome,
        "free space, or move the env with --prefix or the package cache with --cache-dir",
        cause=cause,
    )


def _requested_conda_specs(lock: Lock) -> list[str]:
    """The conda specs of the env spec the lock was made from, if it is at hand (for conda-meta/history)."""
    for source in lock.sources:
        path = lock.path.parent / source
        if path.is_file():
            try:
                return list(read_spec(path).conda)
            except InputError:
                return []  # the lock, not the spec, decides what is installed
    return []


def _write_record(
    run: Run, prefix: Path, number: int, fsync: bool = True, link: Optional[linkmode.LinkUse] = None
) -> None:
    """The install record of generation `number` at `prefix`; without `link` (a refresh of the record
    alone), the link modes it had."""
    options, entries = run.options, run.entries
    before = read_install_record(prefix) if link is None else None
    modes = {"requested": link.requested, "used": link.used} if link is not None else {}
    write_install_record(
        prefix,
        fsync=fsync,
        record=InstallRecord(
            lock_path=str(options.lock_path),
            env=options.env,
            platform=options.platform,
            content_hash=run.lock.content_hash.get(options.platform, ""),
            generation=str(number),
            bootstrap_version=__version__,
            installed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            conda={e.name: e.sha256 for e in entries if e.manager == "conda"},
            pip={normalise(e.name): {"version": e.version, "sha256": e.sha256} for e in entries if e.manager == "pip"},
            conda_meta=conda_meta_fingerprint(prefix),
            variant=options.variant.name if options.variant is not None else run.lock.custom.get(META_VARIANT, ""),
            link=modes if link is not None else before.link if before is not None else {},
        ),
    )


@result
class RollbackResult:
    prefix: Path
    generation: int  # what the stable path points at now (dry run: would point at)
    was: Optional[int]  # what it pointed at before
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefix": str(self.prefix),
            "rollback": True,
            "dry_run": self.dry_run,
            "generation": self.generation,
            "was": self.was,
            "changed": not self.dry_run,
        }


def rollback(prefix: Path, dry_run: bool = False) -> RollbackResult:
    """Point `prefix` back at its previous generation (`--rollback`); with `dry_run`, only say which."""
    layout = gens.Layout(prefix)
    layout.check_managed()
    if not os.path.lexists(prefix) and not layout.generations():  # checked before the env's lock creates anything
        raise InputError(
            "--rollback", f"no env at {prefix}", "create it with `make env`, or pass the --prefix it lives at"
        )
    if dry_run:
        return RollbackResult(prefix=prefix, generation=gens.previous(layout), was=layout.current(), dry_run=True)
    layout.check_writable()
    with gens.exclusive(layout, lambda _: None):
        was = layout.current()
        return RollbackResult(prefix=prefix, generation=gens.rollback(layout), was=was, dry_run=False)
