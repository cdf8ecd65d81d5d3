"""`bootstrap env`: create or update an environment from a lock, without conda.

    lock -> entries for this platform -> plan (envplan) against the current generation
         -> fetch + verify the conda archives (vetted) and pip wheels it installs
         -> new generation (generations.start: the retired one recycled, else the spare a no-op
            run cloned ahead, else a hard-linked clone)
         -> uv removes what leaves pip, rattler links the conda difference, uv installs
            the pip difference (hash-checked, no resolution), install record
         -> atomic switch of the stable symlink -> the generation before the previous GC'd

A failure or SIGKILL at any point leaves the previous generation in place and
active; the next run deletes the partial one and converges. A failure from
the recycling on (a link error, a full disk) uses up the retired generation;
one while fetching (an unreachable channel or index) does not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence
from urllib.parse import urlsplit

from bootstrap import __version__
from bootstrap.install import generations as gens
from bootstrap.install.cache import cache_lock, check_cache_dir
from bootstrap.install.plan import Plan, make_plan
from bootstrap.errors import DiskFullError, InputError, IntegrityError, ToolError
from bootstrap.install.fetch import archive_path, fetch_archives, forget_verified, mirror_of, mirror_prefix
from bootstrap.fsutil import atomic_write_bytes, atomic_write_text, disk_full, out_of_space, remove_tree
from bootstrap.install.history import COMMAND as HISTORY_COMMAND, append_request
from bootstrap.lock.lockfile import Lock, LockedPackage, read_lock
from bootstrap.lock.mirrors import Mirror
from bootstrap.lock.pip import uv_binary, PipOptions
from bootstrap.install.prefix import (
    INSTALL_RECORD,
    InstallRecord,
    InstalledPip,
    conda_meta_fingerprint,
    conda_owned_metadata,
    conda_packages,
    conda_records,
    normalise,
    pip_distributions,
    python_executable,
    python_version,
    read_install_record,
    site_packages,
    write_install_record,
)
from bootstrap.runner import Completed, run
from bootstrap.lock.spec import read_spec
from bootstrap.urls import scrub_credentials

if TYPE_CHECKING:
    import rattler

    from bootstrap.install.bundle import Bundle

Notify = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Feedback:
    """How a run reports progress; the CLI fills it for a TTY, tests leave it quiet."""

    notify: Notify = _quiet  # one line per stage
    waiting: Notify = _quiet  # another run holds the env and we wait for it
    fetch_started: Callable[[int], None] = lambda total: None
    fetched: Callable[[LockedPackage], None] = lambda entry: None


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


@dataclass(frozen=True)
class EnvResult:
    prefix: Path
    platform: str
    plan: Plan
    generation: Optional[int]
    changed: bool
    dry_run: bool
    seconds: dict = field(default_factory=dict)
    removed_partials: tuple[str, ...] = ()
    base: Optional[int] = None  # the generation the new one was built from
    made: str = ""  # how its directory was had: generations.Start.made ("recycled", "spare", "clone", "empty")
    notes: tuple[str, ...] = ()  # what the user should know about how the change was made
    spare: Optional[int] = None  # a run that changed nothing: it made a spare of this generation

    @property
    def recycled(self) -> bool:
        return self.made == "recycled"


def default_cache_dir() -> Path:
    root = os.environ.get("BOOTSTRAP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "bootstrap"
    )
    return Path(root)


def locked_entries(lock: Lock, platform: str) -> list[LockedPackage]:
    if platform not in lock.platforms:
        raise InputError(
            lock.path, f"platform {platform} is not locked (locked: {', '.join(lock.platforms)})",
            "add it to `platforms:` in the env spec and run `make lock`, or pass --platform",
        )
    return lock.for_platform(platform)


def check_mirrors(mirrors: Sequence[Mirror], *locks: Lock) -> None:
    """Refuse a `--mirror` that serves no URL of the locks (a typo, `conda-froge=...`): ignored, it would
    leave the env fetching from the channel the user meant to avoid."""
    packages = [entry for lock in locks for entry in lock.packages]
    served = {mirror_prefix(entry) for entry in packages}
    names = " or ".join(dict.fromkeys(lock.path.name for lock in locks))
    for mirror in mirrors:
        if not any(mirror_of(entry.url, (mirror,)) for entry in packages):
            raise InputError(f"--mirror {mirror.public()}", f"no URL of {names} is under {mirror.canonical}",
                             f"CANONICAL is one of the lock's channels or wheel hosts: {', '.join(sorted(served))}")


def plan_for(options: EnvOptions, lock: Lock) -> Plan:
    return plan_against(locked_entries(lock, options.platform), options.prefix)


def plan_against(entries: Sequence[LockedPackage], prefix: Path) -> Plan:
    """`make_plan` for what `prefix` holds. A distribution it would pip-remove may be a conda package's
    metadata under another name (pytables' `tables-*.egg-info`): only then are all conda records read
    for the files they own."""
    moves = _python_moves(entries, prefix)
    plan = make_plan(entries, conda_packages(prefix), [] if moves else pip_distributions(prefix))
    if moves:  # rattler relinks each noarch: python package into the new site-packages: from a verified archive
        planned = {e.name for e in plan.link}
        relinked = {c.name: c for c in conda_records(prefix) if c.noarch == "python" and c.name not in planned}
        again = [e for e in entries if e.manager == "conda" and e.name in relinked]
        plan = dataclasses.replace(plan, link=tuple(sorted((*plan.link, *again), key=lambda e: e.name)),
                                   unlink=tuple(sorted((*plan.unlink, *(relinked[e.name] for e in again)), key=lambda c: c.name)))
    if plan.pip_remove:
        owned = conda_owned_metadata(prefix)
        plan = dataclasses.replace(plan, pip_remove=tuple(d for d in plan.pip_remove if d.dist_info.name not in owned))
    return plan


def _python_moves(entries: Sequence[LockedPackage], prefix: Path) -> bool:
    """Whether the lock's python is another minor version than the one whose site-packages `prefix` has:
    its own site-packages holds no pip distribution yet, so every locked one is installed again
    (those of the old version stay behind with it, out of the new python's sight, as conda leaves them)."""
    site = site_packages(prefix)
    locked = [e.version for e in entries if e.manager == "conda" and e.name == "python"]
    return site is not None and site.parent.name.startswith("python") and bool(locked) and \
        python_version(site.parent.name) != python_version(locked[0])


def create_or_update(options: EnvOptions, feedback: Feedback = Feedback()) -> EnvResult:
    """Make `options.prefix` exactly the lock's env for `options.platform`."""
    started = time.perf_counter()
    if os.name == "nt":
        raise InputError("bootstrap env", "generations need POSIX symlinks and flock; Windows is not supported yet",
                         f"install the lock with `micromamba create -f {options.lock_path.name}` or `conda-lock install`")
    check_cache_dir(options.cache_dir)
    # A dry run writes nothing, not even the parsed lock to the cache (its YAML costs 3-12 ms more).
    lock = read_lock(options.lock_path, cache_dir=None if options.dry_run else options.cache_dir)
    check_mirrors(options.mirrors, lock)
    layout = gens.Layout(options.prefix)
    layout.check_managed()
    planned_on = _env_state(layout)
    plan, up_to_date = _plan(options, lock)
    if options.dry_run or up_to_date:
        t = time.perf_counter()
        removed, spare = ([], None) if options.dry_run else gens.tidy_if_idle(layout)
        seconds = {"total": time.perf_counter() - started, **({"spare": time.perf_counter() - t} if spare is not None else {})}
        return EnvResult(options.prefix, options.platform, plan, layout.current(), False, options.dry_run,
                         seconds, tuple(str(p) for p in removed), spare=spare)
    check_runs_here(options.platform)
    layout.check_writable()

    with gens.exclusive(layout, feedback.waiting) as env_lock:
        removed = tuple(str(p) for p in gens.remove_partials(layout))
        if _env_state(layout) != planned_on:  # another run changed the env before we got the lock
            plan, up_to_date = _plan(options, lock)
        current = layout.current()
        if not up_to_date and plan.empty and current is not None:
            # Same packages, another lock (e.g. a loosened spec that resolved the
            # same): refresh the record in place rather than build a generation.
            _write_record(options, lock, layout.path(current), current)
            up_to_date = True
        if up_to_date:
            return EnvResult(options.prefix, options.platform, plan, current, False, False,
                             {"total": time.perf_counter() - started}, removed)
        with cache_lock(options.cache_dir, feedback.waiting, shared=True), _extracting(options.cache_dir):  # no prune meanwhile
            new, seconds, notes = _build(layout, options, lock, current, plan, feedback, env_lock)
        gens.collect_garbage(layout, keep=(new.number, current))
    seconds["total"] = time.perf_counter() - started
    return EnvResult(options.prefix, options.platform, plan, new.number, True, False, seconds, removed,
                     new.base, new.made, tuple(notes))


def check_runs_here(platform: str) -> None:
    """Refuse an env for another OS before anything is fetched: its python cannot run here to install
    the pip part, and nothing in it would. Another architecture of this OS may run (Rosetta, qemu)."""
    from bootstrap.platforms import host_platform

    host = host_platform()
    if platform.split("-")[0] != host.split("-")[0]:
        raise InputError(f"--platform {platform}", f"an env for {platform} cannot be built on this {host} machine, "
                         "whose system cannot run its programs",
                         f"run it on a machine of that platform, from a bundle where it has no channel: `bootstrap "
                         f"bundle --platform {platform}`; --dry-run shows the plan here")


class _EditedCache(Exception):
    """Extracted packages that rattler linked from turned out not to match their seals."""


def _build(layout: gens.Layout, options: EnvOptions, lock: Lock, current: Optional[int], plan: Plan,
           feedback: Feedback, env_lock: int) -> tuple[gens.Start, dict, list]:
    """Build the next generation and switch to it; start over once if a cached package was edited.
    `env_lock` is the descriptor of the env's lock, which this run holds.

    What `plan` (against the current generation) installs is fetched first: an unreachable
    channel or index, or a bad archive or wheel, then fails before `gens.start` recycles the
    retired generation, so `--rollback` still has it."""
    t = time.perf_counter()
    try:
        fetched, wheels = _prefetch(plan, options, feedback)
    except Exception as exc:
        if out_of_space(exc):  # the package cache's file system
            raise _disk_full(layout, options, created=current is None, started=False) from exc
        raise
    fetch_seconds = time.perf_counter() - t
    for attempt in (1, 2):
        t = time.perf_counter()
        new = gens.start(layout)
        try:
            if current is not None:
                carry_env_state(layout.path(current), new.partial)
            seconds = {"start": time.perf_counter() - t, "fetch": fetch_seconds}
            applied, notes = _apply(options, lock, new, fetched, wheels, feedback, env_lock)
            gens.commit(layout, new.number, new.partial)
            return new, {**seconds, **applied}, notes
        except _EditedCache as exc:
            _discard(layout, new.partial, first=current is None)
            if attempt == 2:
                raise ToolError(f"{exc} again: is something writing into {options.cache_dir}?") from None
            feedback.notify(f"{exc}: starting over, extracting them again from their archives")
        except BaseException as exc:
            _discard(layout, new.partial, first=current is None)
            if isinstance(exc, Exception) and out_of_space(exc):
                raise _disk_full(layout, options, created=current is None, started=True) from exc
            raise
    raise AssertionError("unreachable")


def _discard(layout: gens.Layout, partial: Path, first: bool) -> None:
    """Remove a half-built generation; after a failed first create, the gens dir it was alone in too."""
    remove_tree(partial)
    if first:
        with contextlib.suppress(OSError):  # not empty: another run's, or generations of an earlier env
            layout.gens_dir.rmdir()


def _disk_full(layout: gens.Layout, options: EnvOptions, created: bool, started: bool) -> DiskFullError:
    """ENOSPC wherever it struck (our fetch, rattler, uv, our writes): which file systems, how much
    is free now that any partial generation is gone, and that the env is as it was."""
    outcome = ("nothing was created" if created else
               "the env is unchanged and the half-built generation removed" if started else "the env is unchanged")
    return disk_full(f"building {options.prefix}", {"env": layout.gens_dir, "package cache": options.cache_dir}, outcome,
                     "free space, or move the env with --prefix or the package cache with --cache-dir")


def _env_state(layout: gens.Layout) -> tuple:
    """What every `bootstrap env` run that changes the env changes: the current generation and its record."""
    try:
        info = os.stat(layout.stable / "conda-meta" / INSTALL_RECORD)
    except OSError:
        return layout.current(), None
    return layout.current(), info.st_ino, info.st_mtime_ns, info.st_size


def _plan(options: EnvOptions, lock: Lock) -> tuple[Plan, bool]:
    """The plan against the current generation, and whether there is nothing to do."""
    plan = plan_for(options, lock)
    record = read_install_record(options.prefix) if options.prefix.exists() else None
    return plan, plan.empty and record is not None and record.content_hash == _lock_hash(lock, options.platform)


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


def _lock_hash(lock: Lock, platform: str) -> str:
    return lock.content_hash.get(platform, "")


# conda's per-env state that is not a package: requests (`--from-history`), `conda env
# config vars`, the env's own .condarc. Copied into the new generation from the current
# one, so that it reads as if the current one had been updated; a copy of its own,
# since conda (and bootstrap, for the history) append to these files in place.
ENV_STATE = ("conda-meta/history", "conda-meta/state", ".condarc")


def carry_env_state(current: Path, partial: Path) -> None:
    for relative in ENV_STATE:
        source, target = current / relative, partial / relative
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            gens.copy_over(source, target)
        elif target.is_file():
            target.unlink()


def _apply(options: EnvOptions, lock: Lock, new: gens.Start, fetched: dict, wheels: dict, feedback: Feedback,
           env_lock: int) -> tuple[dict, list]:
    """Bring `new.partial` to the lock, linking the verified archives `fetched` or sealed copies and
    installing the verified `wheels`.
    Its plan can differ from the one shown, made against the current generation: a recycled
    generation is one change further behind."""
    seconds, notes, partial = {}, [], new.partial
    entries = locked_entries(lock, options.platform)
    plan = plan_against(entries, partial)
    conda = [e for e in entries if e.manager == "conda"]
    if plan.pip_remove:  # first: a distribution moving to conda would take the files its conda package links
        t = time.perf_counter()
        feedback.notify(f"pip: removing {len(plan.pip_remove)} distributions")
        notes += sync_pip(dataclasses.replace(plan, pip_install=()), partial, options, wheels, held=(env_lock,))
        seconds["pip"] = time.perf_counter() - t
    if plan.link or plan.unlink:
        t = time.perf_counter()
        drop = not _others_extracting(options.cache_dir)
        sealed = {e.name for e in plan.link if _has_seal(options.cache_dir, e, drop)}
        archives = _archives(plan.link, sealed, fetched, options, feedback)
        feedback.notify(f"linking {len(plan.link)}, unlinking {len(plan.unlink)} conda packages")
        link_conda(conda, archives, sealed, partial, options, check_unsealed=not drop)
        requested = _requested_conda_specs(lock)
        if requested:
            append_request(partial / "conda-meta" / "history", requested, f"{HISTORY_COMMAND} {options.env} ({options.lock_path.name})")
        seconds["link"] = time.perf_counter() - t
    if plan.pip_install:
        t = time.perf_counter()
        feedback.notify(f"pip: installing {len(plan.pip_install)} distributions")
        notes += sync_pip(dataclasses.replace(plan, pip_remove=()), partial, options, wheels, held=(env_lock,))
        seconds["pip"] = seconds.get("pip", 0.0) + time.perf_counter() - t
    _write_record(options, lock, partial, new.number, fsync=False)  # committed by the generation's rename
    return seconds, notes


def _write_record(options: EnvOptions, lock: Lock, prefix: Path, number: int, fsync: bool = True) -> None:
    entries = locked_entries(lock, options.platform)
    write_install_record(prefix, fsync=fsync, record=InstallRecord(
        lock_path=str(options.lock_path),
        env=options.env,
        platform=options.platform,
        content_hash=_lock_hash(lock, options.platform),
        generation=str(number),
        bootstrap_version=__version__,
        installed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        conda={e.name: e.sha256 for e in entries if e.manager == "conda"},
        pip={normalise(e.name): {"version": e.version, "sha256": e.sha256} for e in entries if e.manager == "pip"},
        conda_meta=conda_meta_fingerprint(prefix),
    ))


# --------------------------------------------------------------------------- conda part

def link_config(conda_urls: Iterable[str]) -> "rattler.Config":
    """rattler's config for linking the packages at `conda_urls`.

    Copies (or copy-on-write clones), never hard links into the package cache: an edit
    inside one env must not reach the cache or any other env.

    And a client that never goes online. What rattler links was fetched and checked by
    bootstrap (through its mirrors, with its speed floor) or is a sealed copy in the cache;
    rattler downloads only a package missing from there, which in the link step means a
    sealed copy another run dropped under us, and `_link` fetches that itself. So every
    host of the lock is sent to a `file://` URL, which rattler's client refuses before any
    request. A client that never connects needs no TLS set up: building one with
    verification costs ~5 ms (10 % of a one-package change), without it 10 us. Where
    rattler's config cannot name a host, it gets the usual client, verification on."""
    import rattler

    copies = "allow-hard-links = false\n"
    origins = sorted({origin for origin in map(_origin, conda_urls) if origin is not None})
    offline = "".join(f'{_toml_string(origin)} = ["file:///dev/null/bootstrap-links-offline"]\n' for origin in origins)
    try:
        return rattler.Config.from_toml(f"{copies}tls-no-verify = true\n[mirrors]\n{offline}")
    except ValueError:  # a host its URL parser refuses (so it could not download from there either)
        return rattler.Config.from_toml(copies)


def _origin(url: str) -> Optional[str]:
    """`https://user:token@Host:8443/conda-forge/linux-64/x.conda` -> `https://Host:8443`; None for a
    `file:` URL (rattler reads those itself) or one without a host. Credentials are left out: the
    HTTP client moves them into a header before rattler's mirror table sees the URL."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}" if parts.scheme != "file" and host else None


def _toml_string(text: str) -> str:
    """`text` as a TOML basic string: `"`, `\\` and control characters escaped, the rest as it is."""
    return '"' + "".join(f"\\u{ord(c):04x}" if c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7F else c
                         for c in text) + '"'


def _prefetch(plan: Plan, options: EnvOptions, feedback: Feedback) -> tuple[dict, dict]:
    """name -> verified local file of each conda archive `plan` links that has no sealed extracted
    copy, and of each pip wheel it installs (left to uv, those were downloaded mid-install)."""
    drop = not _others_extracting(options.cache_dir)
    conda = [e for e in plan.link if not _has_seal(options.cache_dir, e, drop)]
    if conda or plan.pip_install:
        feedback.fetch_started(len(conda) + len(plan.pip_install))
    return _fetch_quietly(conda, options, feedback.fetched), _fetch_quietly(plan.pip_install, options, feedback.fetched)


def _archives(to_link: Sequence[LockedPackage], sealed: set, fetched: dict, options: EnvOptions,
              feedback: Feedback) -> dict:
    """name -> local archive of each package to link: fetched and hash-checked (`fetched`, or
    now), except where rattler will link the sealed extracted copy and never read the archive
    (a CUDA package's archive is hundreds of MB to hash); there the stored one stands in, unread."""
    names = {e.name for e in to_link}
    verified = {name: path for name, path in fetched.items() if name in names}
    candidates = ((e.name, archive_path(options.cache_dir, e)) for e in to_link if e.name in sealed and e.name not in verified)
    stored = {name: path for name, path in candidates if path.is_file()}
    missing = [e for e in to_link if e.name not in verified and e.name not in stored]
    return {**verified, **stored, **_fetch(missing, options, feedback)}


def _fetch(entries: Sequence[LockedPackage], options: EnvOptions, feedback: Feedback) -> dict:
    if entries:
        feedback.fetch_started(len(entries))
    return _fetch_quietly(entries, options, feedback.fetched)


def _fetch_quietly(entries: Sequence[LockedPackage], options: EnvOptions,
                   progress: Optional[Callable[[LockedPackage], None]] = None) -> dict:
    """`fetch_archives` from the run's sources: the store, then the bundle, then the URL after mirrors."""
    return fetch_archives(entries, options.cache_dir, options.mirrors, progress=progress, bundle=options.bundle)


def link_conda(conda: Sequence[LockedPackage], archives: dict, sealed: set, partial: Path, options: EnvOptions,
               check_unsealed: bool = False) -> None:
    """Make `partial` hold exactly `conda`, linking `archives`; rattler computes
    and applies the difference.

    rattler links from its extracted package cache, which it trusts ("fast"
    validation let a copy through whose file had changed size, py-rattler
    0.28; "full" re-hashes everything and doubled the link time). So every
    extracted package is sealed after extraction (size, mtime and ctime of
    each file, `_seal`), and rattler is told to skip its own check. A sealed copy
    (`sealed`) is linked by a record that points at the lock's URL: rattler
    takes the cached copy (matched by sha256) and records that URL, so
    conda-meta needs no rewrite. Other records point at the verified archive,
    which rattler extracts. With `check_unsealed` (another run is extracting, so
    unsealed copies were left for it rather than dropped: one may be a killed
    run's half-extracted or a hand-edited copy), rattler re-hashes the copies
    it links from ("full") and extracts again what does not match.

    Checking the seals costs ~3 us a file, so it runs in a thread while
    rattler links from the copies (hidden where cores are spare; on 2 cores,
    which rattler keeps 1.8 of busy, about half of it shows: 8 % of a fresh
    create on a tmpfs), and only then: started earlier, it fought the main
    thread for the GIL while that built the records. If a seal fails,
    `_EditedCache` is raised once rattler is done, the copy dropped, and the
    caller throws `partial` away.
    """
    edited = functools.cache(lambda: [e for e in conda if e.name in sealed and not _seal_holds(options.cache_dir, e)])
    try:
        _link(conda, archives, sealed, partial, options, alongside=edited, check_unsealed=check_unsealed)
        failure = None
    except Exception as exc:  # an edited copy may be the cause: look first
        failure = exc
    if edited():  # checked alongside rattler, or now if no install got that far
        for entry in edited():
            _drop_extracted(options.cache_dir, entry)
        raise _EditedCache(f"cached copies of {', '.join(e.describe() for e in edited())} were edited")
    if failure is not None:
        raise failure


def _link(conda: Sequence[LockedPackage], archives: dict, sealed: set, partial: Path, options: EnvOptions,
          alongside: Callable[[], object], check_unsealed: bool = False) -> None:
    to_link = [e for e in conda if e.name in archives]
    attempts = [sealed, set()] if sealed else [sealed]
    for canonical in attempts:
        if canonical is not sealed:
            # A sealed copy vanished under us (another env's run dropped it): link again from
            # the archives alone, after checking the ones that stood in unread.
            checked = _fetch_quietly([e for e in to_link if e.name in sealed], options)
            archives = {**archives, **checked}
        try:
            _rattler_install(conda, archives, partial, options, canonical=canonical, alongside=alongside,
                             check_unsealed=check_unsealed)
            break
        except Exception as exc:
            if canonical is attempts[-1]:
                message = " ".join(_in_env(str(exc), partial, options.prefix).split())  # rattler's causes, one line
                if "cannot be longer than the placeholder prefix" in message:  # rattler's words
                    raise InputError(f"--prefix {options.prefix}", f"is {len(str(options.prefix).encode())} bytes long, "
                                     f"longer than a package's binary files leave room for: {message}",
                                     "choose a shorter --prefix; conda-forge's packages have room for 255 bytes") from None
                raise ToolError(f"linking into {options.prefix} failed: {message}") from None
    for entry in to_link:
        if entry.name not in canonical:  # extracted by this run
            _seal(options.cache_dir, entry)
    _restore_canonical_urls(partial, [e for e in to_link if e.name not in canonical])


def _rattler_install(conda: Sequence[LockedPackage], archives: dict, partial: Path, options: EnvOptions,
                     canonical: set, alongside: Callable[[], object], check_unsealed: bool = False) -> None:
    """rattler.install of `conda` into `partial`, with `alongside()` in a thread meanwhile. rattler
    reads what `partial` holds from its conda-meta itself (in Rust, ~6x faster than parsing the
    records in Python to hand them over).

    rattler is given a record of each package to link (`archives`) and of python (for the
    site-packages of noarch: python ones), and told to leave the others alone: `partial` holds
    them as locked already (`plan_against`), and a record each cost 70 us, 8 ms of a one-package
    change in a 114-package env. When python itself is linked, it is given every package:
    rattler relinks the noarch: python ones if python moved to another minor version, as seen
    from python's own record, which a stray `lib/python3.X` left by hand cannot hide from it
    as it can from `_python_moves`. A record is read from the archive of a package to extract; a
    sealed copy linked now (`canonical`), or python already there, is described by its extracted
    copy's index.json (10x cheaper than the archive, 20x than the conda-meta record, whose file
    list a CUDA package makes long). rattler compares by sha256, the lock's, so a package
    already there is left alone."""
    import asyncio  # here, like rattler: a no-op run never links, and would spend ~20 ms importing it

    import rattler

    pkgs = options.cache_dir / "pkgs"

    def from_copy(entry: LockedPackage):
        index = _extracted_dir(options.cache_dir, entry) / "info" / "index.json"
        if not entry.md5 or not index.is_file():
            return None
        archive = archives.get(entry.name) or archive_path(options.cache_dir, entry)
        package = rattler.PackageRecord.from_index_json(
            index, size=archive.stat().st_size if archive.is_file() else None, sha256=entry.sha256, md5=entry.md5)
        return rattler.RepoDataRecord(package, entry.filename, entry.url, _channel_of(entry.url))

    async def record(entry: LockedPackage):
        if entry.name not in archives or entry.name in canonical:
            found = from_copy(entry)
            if found is not None:
                return found
        if entry.name not in archives:  # no extracted copy at hand: the record `partial` holds
            return rattler.PrefixRecord.from_path(partial / "conda-meta" / f"{_extracted_dir(options.cache_dir, entry).name}.json")
        found = await rattler.RepoDataRecord.from_package_archive(archives[entry.name])
        if entry.name in canonical:
            found.url, found.channel = entry.url, _channel_of(entry.url)
        return found

    async def install() -> None:
        wanted = conda if "python" in archives else [e for e in conda if e.name in archives or e.name == "python"]
        records = [await record(e) for e in wanted]
        linking = rattler.install(
            records,
            partial,
            ignored_packages={e.name for e in conda} - {e.name for e in wanted},
            cache_dir=pkgs,
            platform=rattler.Subdir(options.platform),
            execute_link_scripts=False,
            show_progress=options.show_progress,
            alternative_target_prefix=options.prefix,
            config=link_config(e.url for e in conda),
            package_cache=rattler.PackageCache.new_layered(
                [pkgs], validation_mode=rattler.ValidationMode.full() if check_unsealed else rattler.ValidationMode.skip()),
        )
        # Both to the end: the caller wants `alongside`'s answer even if linking failed.
        linked, _ = await asyncio.gather(linking, asyncio.to_thread(alongside), return_exceptions=True)
        if isinstance(linked, BaseException):
            raise linked

    asyncio.run(install())


def _channel_of(url: str) -> str:
    """`https://host/conda-forge/linux-64/x.conda` -> `https://host/conda-forge`."""
    return url.rsplit("/", 2)[0]


def _extracted_dir(cache_dir: Path, entry: LockedPackage) -> Path:
    """Where rattler extracts `name-version-build.conda` (or `.tar.bz2`) in its cache."""
    return cache_dir / "pkgs" / entry.stem


def _seal_path(cache_dir: Path, entry: LockedPackage) -> Path:
    return cache_dir / "seals" / f"{entry.sha256}.json"


# A seal's first line, then the JSON of `_fingerprint`. A seal of an older format (without the
# ctime, or version 2's table of every file, slower to check) counts as none: the package is
# extracted from its checked archive and sealed again.
_SEAL_HEADER = "bootstrap-seal 3\n"


def _fingerprint(directory: Path) -> dict:
    """How many files and links are under `directory`, and one sha256 over a line of each: its
    relative path, size, mtime_ns and ctime_ns, in path order.

    The inode change time is set to now by any write, chmod or utime(), and no call a user
    can make sets it back: an edit that keeps the size and restores the mtime (`cp -p`,
    `rsync -t`, `touch -d`) still shows. rattler copies out of the cache (no hard links,
    which would change it), so linking leaves it alone.

    One lstat per file, relative to an open directory (no path walk from /): a
    fresh create checks ~5,000 of them, and on 2 cores every microsecond of it
    comes out of rattler's time. The walk is as fast as `find` (C) doing the same;
    hashing the lines as they come costs less than building (and later parsing and
    comparing) a table of them."""
    digest, count = hashlib.sha256(), 0

    def walk(fd: int, relative: str) -> None:
        nonlocal count
        with os.scandir(fd) as entries:  # lstat(2) relative to `fd`: the kernel looks up one name
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                    try:
                        walk(child, f"{relative}{entry.name}/")
                    finally:
                        os.close(child)
                else:
                    info = entry.stat(follow_symlinks=False)
                    digest.update(f"{relative}{entry.name}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ctime_ns}\n"
                                  .encode("utf-8", "surrogateescape"))
                    count += 1

    root = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walk(root, "")
    finally:
        os.close(root)
    return {"files": count, "sha256": digest.hexdigest()}


def _has_seal(cache_dir: Path, entry: LockedPackage, drop: bool = True) -> bool:
    """True if rattler's extracted copy and its seal are both there (`_seal_holds` says whether
    the copy is as sealed); otherwise drop whichever is (an unsealed copy: another artifact,
    an older bootstrap's seal, or an extraction killed halfway) if `drop`: not while another
    run is `_extracting`, whose copies are unsealed until it has linked from them."""
    if _extracted_dir(cache_dir, entry).is_dir() and _is_current_seal(_seal_path(cache_dir, entry)):
        return True
    if drop:
        _drop_extracted(cache_dir, entry)
    return False


_EXTRACTING = ".extracting-"
_HELD: set = set()  # this process's own `_extracting` files


@contextlib.contextmanager
def _extracting(cache_dir: Path):
    """Say, while held, that this run may extract packages into the cache and link from them before
    it seals them: an flock on a file of its own, `<cache>/.extracting-*`, that `_others_extracting` sees."""
    import fcntl
    import tempfile

    cache_dir.mkdir(parents=True, exist_ok=True)
    while True:
        fd, path = tempfile.mkstemp(prefix=_EXTRACTING, dir=cache_dir)
        os.fchmod(fd, 0o644)  # not mkstemp's 0600: another user's run on a shared cache opens it to test the flock
        _HELD.add(os.path.basename(path))
        fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        # Another run found it not yet locked, took it for a killed run's and removed it: again.
        _HELD.discard(os.path.basename(path))
        os.close(fd)
    try:
        yield
    finally:
        os.unlink(path)
        os.close(fd)
        _HELD.discard(os.path.basename(path))


def _others_extracting(cache_dir: Path) -> bool:
    """Whether another live run holds its `_extracting` file (a killed run's is removed)."""
    import fcntl

    names = set()
    with contextlib.suppress(OSError):
        names = {entry.name for entry in os.scandir(cache_dir) if entry.name.startswith(_EXTRACTING)} - _HELD
    for name in names:
        try:
            fd = os.open(cache_dir / name, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True  # held by a live run
        else:
            with contextlib.suppress(OSError):
                os.unlink(cache_dir / name)
        finally:
            os.close(fd)
    return False


def _is_current_seal(path: Path) -> bool:
    """Whether `path` starts with `_SEAL_HEADER` (os.read: a fifth of what opening a Python file object costs)."""
    header = _SEAL_HEADER.encode()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.read(fd, len(header)) == header
    finally:
        os.close(fd)


def _seal_holds(cache_dir: Path, entry: LockedPackage) -> bool:
    try:
        header, _, body = _seal_path(cache_dir, entry).read_text(encoding="utf-8").partition("\n")
        return header + "\n" == _SEAL_HEADER and json.loads(body) == _fingerprint(_extracted_dir(cache_dir, entry))
    except (OSError, ValueError):
        return False  # gone, or a broken seal


def _drop_extracted(cache_dir: Path, entry: LockedPackage) -> None:
    remove_tree(_extracted_dir(cache_dir, entry))
    _seal_path(cache_dir, entry).unlink(missing_ok=True)


def _seal(cache_dir: Path, entry: LockedPackage) -> None:
    directory, seal = _extracted_dir(cache_dir, entry), _seal_path(cache_dir, entry)
    if directory.is_dir():
        seal.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(seal, _SEAL_HEADER + json.dumps(_fingerprint(directory), sort_keys=True) + "\n")


def _restore_canonical_urls(prefix: Path, linked: Sequence[LockedPackage]) -> None:
    """rattler recorded our verified local archive as the source; record the lock's URL instead."""
    for entry in linked:
        path = prefix / "conda-meta" / f"{entry.name}-{entry.version}-{entry.build}.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        data["url"], data["channel"], data["fn"] = entry.url, _channel_of(entry.url), entry.filename
        # Compact: with `indent` json falls back to its pure-Python encoder (0.25 s for 30 records).
        atomic_write_text(path, json.dumps(data) + "\n", fsync=False)


# --------------------------------------------------------------------------- pip part

def sync_pip(plan: Plan, partial: Path, options: EnvOptions, wheels: dict, held: Sequence[int] = ()) -> list[str]:
    """uv removes and installs exactly the planned wheels: hash-checked, no resolution, no network.

    uv installs the verified local `wheels` (name -> file; fetched here any that a recycled
    generation, one change further behind, needs besides), so it never downloads mid-install;
    then each new distribution gets the lock's URL and the stable path (`_finish_wheel`).
    Returns notes on the distributions whose metadata alone could be removed (`_drop_unlisted`).

    uv inherits `held`, the descriptor of the env's lock. uv runs in a session of its own, so
    a SIGKILL of bootstrap, or of its process group (a CI job cancelled, `timeout -s KILL`),
    leaves it writing into `partial`; holding the lock, it keeps the next run waiting until it
    is done, rather than have that run build a generation of the same number for it to write into."""
    uv = uv_binary(PipOptions())
    python = str(python_executable(partial))
    notes = _drop_unlisted(plan.pip_remove, partial)
    names = sorted({d.name for d in plan.pip_remove if os.path.lexists(d.dist_info)})
    if names:
        done = _run_uv([uv, "pip", "uninstall", "--python", python, *names], timeout=600, held=held)
        if done.returncode != 0:
            message = _uv_message(done, partial, options.prefix)
            raise ToolError(f"uv pip uninstall failed in {options.prefix}: {message}")
    if plan.pip_install:
        missing = [e for e in plan.pip_install if e.name not in wheels]
        wheels = {**wheels, **_fetch_quietly(missing, options)}
        local = {wheels[e.name].as_uri(): e for e in plan.pip_install}
        requirements = partial / ".bootstrap-requirements.txt"
        requirements.write_text("".join(f"{e.name} @ {uri} --hash=sha256:{e.sha256}\n" for uri, e in local.items()),
                                encoding="utf-8")
        try:
            done = _run_uv([uv, "pip", "install", "--python", python, "--no-deps", "--require-hashes",
                            "--link-mode", "copy", "--no-index", "-r", str(requirements)], timeout=3600, held=held)
        finally:
            requirements.unlink()
        if done.returncode != 0:
            forget_verified(list(wheels.values()))  # if a stored wheel changed unseen, the next run's hashing finds it
            raise _pip_failure(_uv_message(done, partial, options.prefix), options.prefix)
        for dist_info, entry in _installed_from(partial, local):
            _finish_wheel(dist_info, entry, partial, options.prefix)
    return notes


def _drop_unlisted(dists: Sequence[InstalledPip], partial: Path) -> list[str]:
    """Remove the metadata of each distribution in `dists` that lists no files to uninstall (a
    .dist-info without RECORD, an .egg-info without top_level.txt, a distutils .egg-info file, as
    hand or legacy installs leave them): uv refuses to uninstall those, which would block every
    later change of the env. Files such a distribution installed, listed nowhere, stay."""
    notes = []
    for dist in dists:
        metadata = dist.dist_info
        if (metadata / ("RECORD" if metadata.name.endswith(".dist-info") else "top_level.txt")).is_file():
            continue  # uv's to uninstall
        if metadata.is_dir():
            remove_tree(metadata)
        else:
            metadata.unlink()
        notes.append(f"{dist.name} {dist.version}: only its metadata was removed ({metadata.relative_to(partial)}), "
                     "which lists no files to uninstall; any files it installed are still there")
    return notes


def _run_uv(argv: Sequence[str], timeout: float, held: Sequence[int]) -> Completed:
    # From /: uv names paths in full, not relative to our working directory (so `_uv_message` can
    # put the stable path in place of the generation's), and reads no uv.toml of whatever project we are in.
    return run(argv, timeout=timeout, cwd="/", pass_fds=held)


_UV_PROGRESS = ("Using Python ", "Resolved ", "Prepared ", "Installed ", "Uninstalled ", "Audited ", "+ ", "- ", "~ ")


def _uv_message(done: Completed, partial: Path, stable: Path) -> str:
    """uv's stderr on one line: its errors and what caused them, without progress lines, naming the
    env's stable path rather than the generation being built (which is gone once the run failed)."""
    lines = [line.strip() for line in _in_env(scrub_credentials(done.stderr), partial, stable).splitlines()]
    kept = [line[len("error: "):] if line.startswith("error: ") else line
            for line in lines if line and not line.startswith(_UV_PROGRESS)]
    return " ".join(kept) or f"exit status {done.returncode}, no message"


def _in_env(text: str, partial: Path, stable: Path) -> str:
    """`text` naming the stable path where it names the generation being built."""
    return text.replace(str(partial), str(stable))


def _pip_failure(message: str, stable: Path):
    if "hash" in message.lower() and "mismatch" in message.lower():
        return IntegrityError("a wheel does not match the lock's sha256 (its copy in the package cache damaged on disk?); "
                              f"nothing was installed, and the next run hashes the cached wheels again: {message}")
    return ToolError(f"uv pip install failed in {stable}: {message}")


def _installed_from(partial: Path, local: dict) -> list:
    """(dist-info, lock entry) of each distribution uv just installed: its direct_url.json names
    one of the store's `file://` URLs in `local`. Older ones were finished when they came in."""
    site = site_packages(partial)
    found = []
    for direct_url in site.glob("*.dist-info/direct_url.json") if site is not None else ():
        try:
            entry = local.get(json.loads(direct_url.read_text(encoding="utf-8")).get("url"))
        except ValueError:
            continue
        if entry is not None:
            found.append((direct_url.parent, entry))
    return found


def _finish_wheel(dist_info: Path, entry: LockedPackage, partial: Path, stable: Path) -> None:
    """Rewrite what uv wrote for the generation and the store, for the stable path and the lock.

    * direct_url.json (PEP 610) names the store's `file://` URL: the lock's URL instead, byte
      for byte what uv writes when it fetches that URL itself, so that `export` and `verify`
      see where the wheel comes from.
    * Entry-point shebangs name the generation (`#!<gen>/bin/python`, or for long paths uv's
      `#!/bin/sh` + `exec '<gen>/bin/python'` header): the stable path instead.

    RECORD follows the new bytes, as pip's does when it writes the shebang at install time, so
    `verify --deep` agrees. Only RECORD paths that leave site-packages (`../`) can be scripts:
    resolving every path of every RECORD took 0.5 s per 10,000 files, on each pip change."""
    site = dist_info.parent
    bin_dir = partial.resolve() / "bin"
    old, new = f"{partial}/bin/".encode(), f"{stable}/bin/".encode()
    direct_url = f"{dist_info.name}/direct_url.json"
    record = dist_info / "RECORD"
    lines = record.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        path = line.partition(",")[0]
        target = site / path
        if path == direct_url:
            data = json.dumps({"url": entry.url, "archive_info": {}}, separators=(",", ":")).encode()
        elif path.startswith("../") and target.resolve().parent == bin_dir and target.is_file():
            data = target.read_bytes()
            head, body = data[:1024], data[1024:]
            if not data.startswith(b"#!") or old not in head:
                continue
            data = head.replace(old, new) + body
        else:
            continue
        atomic_write_bytes(target, data, fsync=False)
        lines[index] = _record_line(path, data)
    atomic_write_text(record, "\n".join(lines) + "\n", fsync=False)


def _record_line(relative: str, data: bytes) -> str:
    """A RECORD line: path, urlsafe-base64 sha256 without padding, size."""
    import base64
    import hashlib

    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{relative},sha256={digest},{len(data)}"


@dataclass(frozen=True)
class RollbackResult:
    prefix: Path
    generation: int  # what the stable path points at now (dry run: would point at)
    was: Optional[int]  # what it pointed at before
    dry_run: bool


def rollback(prefix: Path, dry_run: bool = False) -> RollbackResult:
    """Point `prefix` back at its previous generation (`--rollback`); with `dry_run`, only say which."""
    layout = gens.Layout(prefix)
    layout.check_managed()
    if not os.path.lexists(prefix) and not layout.generations():  # checked before the env's lock creates anything
        raise InputError("--rollback", f"no env at {prefix}",
                         "create it with `make env`, or pass the --prefix it lives at")
    if dry_run:
        return RollbackResult(prefix, gens.previous(layout), layout.current(), True)
    layout.check_writable()
    with gens.exclusive(layout, lambda _: None):
        was = layout.current()
        return RollbackResult(prefix, gens.rollback(layout), was, False)
