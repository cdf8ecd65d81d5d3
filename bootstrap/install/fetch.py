"""Fetch the conda archives and wheels an install needs into the package cache, hash-checked against
the lock, and refuse conda archives whose paths escape the prefix (py-rattler would link them).
Docs: docs/env.md, "Downloads" and "The package cache and its seals".
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import queue
import tarfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Optional, Protocol, Sequence
from urllib.parse import urlsplit

from bootstrap.errors import InputError, IntegrityError, excerpt
from bootstrap.fsutil import atomic_write_text, out_of_space, sha256_file
from bootstrap.install import download
from bootstrap.install.cache import unwritable
from bootstrap.install.download import Download, Source, Watch, partial
from bootstrap.lock.lockfile import Lock, LockedPackage
from bootstrap.lock.mirrors import Mirror
from bootstrap.urls import scrub_credentials

Progress = Callable[[LockedPackage], None]
SIZE_WORKERS = 16  # HEAD requests at once when sizing a fetch: each waits mostly on a round trip
# All of a fetch's sizing: a network that drops packets makes each HEAD wait out its own timeout, which
# over a few hundred files would hold a plan for minutes; what is not known by then is of unknown size.
SIZE_DEADLINE_S = 20.0


class BundleReader(Protocol):
    """What a fetch reads from a bundle (`install.bundle.Bundle`, which itself fetches through this
    module): where it holds an entry's bytes, and what to add when it lacks them."""

    def source(self, entry: LockedPackage) -> Optional[Source]: ...

    def lacks(self) -> str: ...


def mirror_of(url: str, mirrors: Sequence[Mirror]) -> Optional[Mirror]:
    """The `--mirror` that serves a canonical URL, if any."""
    return next((m for m in mirrors if url.startswith(m.canonical + "/")), None)


def source_url(url: str, mirrors: Sequence[Mirror]) -> str:
    """Where to fetch a canonical URL from, after `--mirror` rewriting."""
    mirror = mirror_of(url, mirrors)
    if mirror is None:
        return url
    rest = url[len(mirror.canonical) + 1 :]
    return (mirror.local_dir / rest).as_uri() if mirror.local_dir is not None else f"{mirror.target}/{rest}"


def fetch_archives(  # noqa: PLR0913 (what to fetch, from where, and who hears of it)
    entries: Sequence[LockedPackage],
    cache_dir: Path,
    mirrors: Sequence[Mirror] = (),
    progress: Optional[Progress] = None,
    workers: int = 4,
    bundle: Optional[BundleReader] = None,
    watch: Optional[Watch] = None,
    size: Optional[FetchSize] = None,
) -> dict[str, Path]:
    """Verified local archives (conda) or wheels (pip) for `entries`, keyed by package name.

    What the store lacks is read from `bundle` where it holds it (`bootstrap bundle`), else
    fetched from its URL after `mirrors`, `workers` at a time.

    The first failure, or Ctrl-C, ends the run at once: the downloads under way stop at their
    next block and the queued ones never start. One stuck in connect() or in a read of a
    silent server would hold the run for the socket's 60 s timeout, so the workers are daemon
    threads, waited for `_GRACE_S` and then left to end on their own (its `.part-<fn>` is kept
    for the next run to resume; `cache --prune` removes partials)."""
    if not entries:
        return {}
    watch = watch or Watch()
    if watch.sized is not None:
        _announce_size(size or measure(entries, cache_dir, mirrors, bundle), watch.sized)
    stop = threading.Event()
    todo: queue.SimpleQueue[LockedPackage] = queue.SimpleQueue()
    for entry in entries:
        todo.put(entry)
    done: queue.SimpleQueue[_Outcome] = queue.SimpleQueue()
    work = _Worker(
        todo, done, stop, lambda entry: fetch_archive(entry, cache_dir, mirrors, bundle, stop, watch), progress
    )
    threads: list[threading.Thread] = []
    fetched: dict[str, Path] = {}
    try:
        for i in range(max(1, min(workers, len(entries)))):  # a Ctrl-C in start() stops those already started
            threads.append(threading.Thread(target=work, name=f"fetch-{i}", daemon=True))
            threads[-1].start()
        for _ in entries:
            entry, path, failure = done.get()  # interruptible by Ctrl-C
            if failure is not None:
                raise failure
            assert path is not None
            fetched[entry.name] = path
    except BaseException:
        stop.set()
        deadline = time.monotonic() + _GRACE_S
        for thread in threads:
            if thread.is_alive():  # started (join() refuses one a Ctrl-C kept from starting)
                thread.join(max(0.0, deadline - time.monotonic()))
        raise
    return {entry.name: fetched[entry.name] for entry in entries}


_GRACE_S = 2.0  # how long a failed or interrupted fetch waits for its downloads to stop
_Outcome = tuple[LockedPackage, Optional[Path], Optional[BaseException]]  # (entry, its archive, or why not)


@dataclass(frozen=True)
class _Worker:
    """One fetching thread's loop: the entries of `todo`, one by one, each outcome into `done`, until
    `todo` is empty, a fetch fails or `stop` is set."""

    todo: queue.SimpleQueue[LockedPackage]
    done: queue.SimpleQueue[_Outcome]
    stop: threading.Event
    fetch: Callable[[LockedPackage], Path]
    progress: Optional[Progress]

    def __call__(self) -> None:
        while not self.stop.is_set():
            try:
                entry = self.todo.get_nowait()
            except queue.Empty:
                return
            try:
                path = self.fetch(entry)
                if self.progress is not None and not self.stop.is_set():  # no progress line after the run's error
                    self.progress(entry)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                self.done.put((entry, None, exc))
                return
            self.done.put((entry, path, None))


@dataclass(frozen=True)
class FetchSize:
    """What the archives and wheels of a plan weigh: all of them (what is installed from), and those
    the package cache lacks (what is downloaded). `unknown`: how many of those to download have no
    known size (a lock records none, and the server did not say)."""

    files: int = 0
    nbytes: int = 0
    download_files: int = 0
    download_bytes: int = 0
    unknown: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "files": self.files,
            "bytes": self.nbytes,
            "download_files": self.download_files,
            "download_bytes": self.download_bytes,
            "unknown": self.unknown,
        }


def measure(
    entries: Sequence[LockedPackage],
    cache_dir: Path,
    mirrors: Sequence[Mirror] = (),
    bundle: Optional[BundleReader] = None,
    cached: Collection[str] = (),
) -> FetchSize:
    """The size of `entries`: a stored artifact's from its file; one not in the store (nor named in
    `cached`, those whose extracted copy the cache holds) by a HEAD request each (a lock records no
    sizes), `SIZE_WORKERS` at a time, or from the bundle or local mirror that holds it."""
    stored, sources = 0, []
    for entry in entries:
        path = archive_path(cache_dir, entry)
        if path.is_file():
            stored += path.stat().st_size
        elif entry.name not in cached:
            sources.append((bundle.source(entry) if bundle is not None else None) or url_source(entry, mirrors))
    sizes = _sizes(sources, SIZE_DEADLINE_S)
    known = sum(size for size in sizes if size is not None)
    return FetchSize(len(entries), stored + known, len(sizes), known, sum(size is None for size in sizes))


def _sizes(sources: Sequence[Source], deadline_s: float) -> list[Optional[int]]:
    """Each source's size, `SIZE_WORKERS` at a time; None where it failed or was not known `deadline_s`
    after the start. Daemon threads: a request still waiting on a silent network is left behind, and
    the process does not wait for it at exit."""
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in sorted(range(len(sources)), key=lambda i: sources[i].ranged is not None):
        todo.put(i)  # a stat each (a mirror directory, a bundle) before any request waits on the network
    done: queue.SimpleQueue[tuple[int, Optional[int]]] = queue.SimpleQueue()
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            done.put((i, sources[i].size()))

    for n in range(min(SIZE_WORKERS, len(sources))):
        threading.Thread(target=work, name=f"size-{n}", daemon=True).start()
    sizes: list[Optional[int]] = [None] * len(sources)
    end = time.monotonic() + deadline_s
    try:
        for _ in sources:
            i, size = done.get(timeout=max(0.0, end - time.monotonic()))
            sizes[i] = size
    except queue.Empty:
        pass
    finally:
        stop.set()
    return sizes


def _announce_size(size: FetchSize, sized: Callable[[int, int, int], None]) -> None:
    """Tell `sized` what the fetch will download (those not in the store); a stored artifact that no
    longer hashes right is fetched again unannounced."""
    if size.download_files:
        sized(size.download_bytes, size.download_files, size.unknown)


def archive_path(cache_dir: Path, entry: LockedPackage) -> Path:
    """Where the archive store keeps `entry`'s archive: `<cache>/archives/<sha256>/<fn>`."""
    return cache_dir / "archives" / entry.sha256 / entry.filename


def url_source(entry: LockedPackage, mirrors: Sequence[Mirror], also: str = "") -> Source:
    url = source_url(entry.url, mirrors)
    mirror = mirror_of(entry.url, mirrors)
    if mirror is None:
        remedy = f"offline? serve it from a mirror: --mirror {mirror_prefix(entry)}=URL_OR_DIR"
    else:  # the mirror given is what failed: offering a mirror would send the user round in a circle
        remedy = f"the mirror lacks it or is down: sync it from {mirror.canonical}, or fix --mirror {mirror.public()}"
    network = urlsplit(url).scheme in ("http", "https")
    return Source(
        url,
        lambda: download.open_url(url),
        scrub_credentials(remedy) + also,
        ranged=(lambda start: download.open_url(url, start)) if network else None,
        size=lambda: download.size_of(url),
    )


def fetch_archive(
    entry: LockedPackage,
    cache_dir: Path,
    mirrors: Sequence[Mirror] = (),
    bundle: Optional[BundleReader] = None,
    stop: Optional[threading.Event] = None,
    watch: Optional[Watch] = None,
) -> Path:
    target = archive_path(cache_dir, entry)
    if target.is_file() and _still_verified(target, entry):
        return target
    source = bundle.source(entry) if bundle is not None else None
    if source is None:
        source = url_source(entry, mirrors, also=bundle.lacks() if bundle is not None else "")
    with contextlib.ExitStack() as stack:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            part = stack.enter_context(partial(target))
        except OSError as exc:
            if out_of_space(exc):  # the caller says how full, and of what
                raise
            raise unwritable(cache_dir, target.parent, exc) from None
        getting = Download(source, part, entry, stop, watch or Watch())
        sha256, md5 = getting.run(whole=False)
        if getting.resumed and (sha256 != entry.sha256 or (entry.md5 and md5 != entry.md5)):
            # A partial from an earlier run may hold other bytes (a mirror that changed, a disk error):
            # one fetch from the first byte tells that apart from a wrong artifact.
            getting.watch.retrying(
                f"{entry.filename}: the resumed download does not match the lock's sha256; fetching it whole again"
            )
            sha256, md5 = getting.run(whole=True)
        if sha256 != entry.sha256:
            part.keep = False
            raise IntegrityError(
                f"{entry.filename}: sha256 {sha256} does not match the lock's {entry.sha256} "
                f"(fetched from {scrub_credentials(source.label)}); nothing was installed. {source.mismatch}"
            )
        if entry.md5 and md5 != entry.md5:
            part.keep = False
            raise IntegrityError(
                f"{entry.filename}: md5 {md5} does not match the lock's {entry.md5}; nothing was installed"
            )
        if entry.manager == "conda":  # a wheel is uv's to unpack, as when uv fetched it
            part.keep = False  # refused, it is no partial to resume
            check_archive_paths(part.path, entry.filename)
        os.replace(part.path, target)
    if entry.manager == "pip":
        _stamp(target)
    return target


def _still_verified(target: Path, entry: LockedPackage) -> bool:
    """Whether a stored archive or wheel is still the one verified (see the module's docstring)."""
    if entry.manager == "pip" and _stamp_holds(target):
        return True
    if sha256_file(target) != entry.sha256:
        return False
    if entry.manager == "pip":
        _stamp(target)
    return True


def _stamp_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.verified")


def _stamp(target: Path) -> None:
    info = target.stat()
    atomic_write_text(_stamp_path(target), f"{info.st_size} {info.st_mtime_ns}\n", fsync=False)


def _stamp_holds(target: Path) -> bool:
    try:
        info = target.stat()
        return _stamp_path(target).read_text(encoding="utf-8").split() == [str(info.st_size), str(info.st_mtime_ns)]
    except OSError:
        return False


def forget_verified(targets: Sequence[Path]) -> None:
    """Have the next use hash these stored wheels again (uv failed on one: it may have changed unseen)."""
    for target in targets:
        _stamp_path(target).unlink(missing_ok=True)


def check_mirrors(mirrors: Sequence[Mirror], *locks: Lock) -> None:
    """Refuse a `--mirror` that serves no URL of the locks (a typo, `conda-froge=...`): ignored, it would
    leave the run fetching from the channel the user meant to avoid."""
    packages = [entry for lock in locks for entry in lock.packages]
    served = {mirror_prefix(entry) for entry in packages}
    names = " or ".join(dict.fromkeys(lock.path.name for lock in locks))
    for mirror in mirrors:
        if not any(mirror_of(entry.url, (mirror,)) for entry in packages):
            raise InputError(
                f"--mirror {mirror.public()}",
                f"no URL of {names} is under {mirror.canonical}",
                f"CANONICAL is one of the lock's channels or wheel hosts: {', '.join(sorted(served))}",
            )


def mirror_prefix(entry: LockedPackage) -> str:
    """What `--mirror` would map for `entry`: its conda channel, or its wheel's host."""
    if entry.manager == "conda":
        return entry.url.rsplit("/", 2)[0]
    parts = urlsplit(entry.url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else entry.url.rsplit("/", 1)[0]


# --------------------------------------------------------------------------- archive safety


def check_archive_paths(archive: Path, filename: Optional[str] = None) -> None:
    """Refuse an archive whose members or paths.json entries would land outside the prefix.

    Checks every tar member (both components of a `.conda`) and every `_path`
    of info/paths.json: no absolute paths, no `..` escaping the root, no
    symlink or hard link whose target resolves outside it. And it must be the
    package its file name says: info/index.json's name, version and build (a
    mirror can serve another package's bytes under the right hash if the lock
    was written from it).
    """
    from conda_package_streaming.package_streaming import stream_conda_component

    filename = filename or archive.name
    components = ("info", "pkg") if filename.endswith(".conda") else ("pkg",)  # a .tar.bz2 is one tar
    described = False
    for component in components:
        with open(archive, "rb") as handle:
            try:
                for tar, member in stream_conda_component(filename, handle, component=component):
                    _check_member(filename, member)
                    if member.name == "info/paths.json":
                        _check_paths_json(filename, _member_bytes(filename, tar, member))
                    elif member.name == "info/index.json":
                        _check_index_json(filename, _member_bytes(filename, tar, member))
                        described = True
            except LookupError:  # a .conda whose components are named for another package
                raise IntegrityError(
                    f"{filename}: holds no '{component}' part for that package: it is another "
                    "package's archive; nothing was installed"
                ) from None
            except (tarfile.TarError, zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
                raise IntegrityError(f"{filename}: not a readable conda archive ({exc})") from None
    if not described:
        raise IntegrityError(f"{filename}: has no info/index.json: not a conda package; nothing was installed")


def _member_bytes(filename: str, tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = tar.extractfile(member)  # None for a directory or a device
    if handle is None:
        raise IntegrityError(f"{filename}: not a readable conda archive ({member.name} is not a file)")
    return handle.read()


def _check_index_json(filename: str, data: bytes) -> None:
    """info/index.json must name the package, version and build of `filename` (name-version-build.ext)."""
    stem = filename[: -len(".tar.bz2")] if filename.endswith(".tar.bz2") else filename.rsplit(".", 1)[0]
    try:
        index = json.loads(data)
        found = "-".join(str(index[key]) for key in ("name", "version", "build"))
    except (ValueError, KeyError, TypeError):
        raise IntegrityError(f"{filename}: info/index.json does not name the package") from None
    if found != stem:
        raise IntegrityError(
            f"{filename}: refused: its info/index.json says {excerpt(found)}, another package; "
            "nothing was installed (is the mirror serving the right files?)"
        )


def _escapes(path: str) -> bool:
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return True
    normal = posixpath.normpath(path)
    return normal == ".." or normal.startswith("../")


def _check_member(filename: str, member: tarfile.TarInfo) -> None:
    if _escapes(member.name):
        raise IntegrityError(f"{filename}: refused: member '{member.name}' would be written outside the prefix")
    if member.issym() or member.islnk():
        # Hard-link targets are archive paths; symlink targets are relative to the link.
        base = "" if member.islnk() else posixpath.dirname(member.name)
        target = member.linkname if member.linkname.startswith("/") else posixpath.join(base, member.linkname)
        if _escapes(target):
            raise IntegrityError(
                f"{filename}: refused: link '{member.name}' -> '{member.linkname}' points outside the prefix"
            )


def _check_paths_json(label: str, data: bytes) -> None:
    try:
        paths = json.loads(data).get("paths", [])
    except ValueError:
        raise IntegrityError(f"{label}: info/paths.json is not valid JSON") from None
    for entry in paths:
        path = str(entry.get("_path", ""))
        if not path or _escapes(path):
            raise IntegrityError(f"{label}: refused: info/paths.json lists '{path}', outside the prefix")
