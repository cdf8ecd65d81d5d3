"""Fetch the archives an install links (conda) and the wheels it installs (pip), hash-check them,
and refuse unsafe conda archives.

py-rattler does not hash-check `file://` packages, trusts a warm cache, and
links whatever paths an archive lists (`../x`, absolute paths and escaping
symlinks included; tests/test_fixtures.py shows each). So every
archive to be linked passes through here first:

    lock URL --mirror rewrite--> download into <cache>/archives/<sha256>/<fn>
             --sha256 (and md5) against the lock--> paths checked --> file:// URL for rattler

(with `--bundle`, a bundle's member stands in for the URL where it holds the artifact)

A stored conda archive is re-hashed before each use and re-fetched if it no
longer matches, so a corrupted cache heals instead of being installed (rattler
does not check a local archive; one with a sealed extracted copy is not read
at all); its paths were vetted before it entered the store, so matching bytes
need no second look. A stored wheel is not re-hashed while its size and mtime
are those it was verified with (`.<name>.verified` beside it): uv checks every
wheel's sha256 itself as it installs, and CUDA wheels weigh gigabytes.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import posixpath
import queue
import tarfile
import tempfile
import threading
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Optional, Sequence
from urllib.parse import unquote, urlsplit

from bootstrap.errors import FetchError, InputError, IntegrityError
from bootstrap.fsutil import atomic_write_text, out_of_space, sha256_file
from bootstrap.lock.lockfile import Lock, LockedPackage
from bootstrap.lock.mirrors import Mirror
from bootstrap.urls import scrub_credentials

if TYPE_CHECKING:
    from bootstrap.install.bundle import Bundle

Progress = Callable[[LockedPackage], None]
_CHUNK = 1 << 20


def mirror_of(url: str, mirrors: Sequence[Mirror]) -> Optional[Mirror]:
    """The `--mirror` that serves a canonical URL, if any."""
    return next((m for m in mirrors if url.startswith(m.canonical + "/")), None)


def source_url(url: str, mirrors: Sequence[Mirror]) -> str:
    """Where to fetch a canonical URL from, after `--mirror` rewriting."""
    mirror = mirror_of(url, mirrors)
    if mirror is None:
        return url
    rest = url[len(mirror.canonical) + 1:]
    return (mirror.local_dir / rest).as_uri() if mirror.local_dir is not None else f"{mirror.target}/{rest}"


def fetch_archives(
    entries: Sequence[LockedPackage],
    cache_dir: Path,
    mirrors: Sequence[Mirror] = (),
    progress: Optional[Progress] = None,
    workers: int = 4,
    bundle: Optional["Bundle"] = None,
) -> dict[str, Path]:
    """Verified local archives (conda) or wheels (pip) for `entries`, keyed by package name.

    What the store lacks is read from `bundle` where it holds it (`bootstrap bundle`), else
    fetched from its URL after `mirrors`, `workers` at a time.

    The first failure, or Ctrl-C, ends the run at once: the downloads under way stop at their
    next block and the queued ones never start. One stuck in connect() or in a read of a
    silent server would hold the run for the socket's 60 s timeout, so the workers are daemon
    threads, waited for `_GRACE_S` and then left to end on their own (its `.part-*` file is
    removed then, or by `cache --prune` if the process exits first)."""
    if not entries:
        return {}
    stop = threading.Event()
    todo: "queue.SimpleQueue[LockedPackage]" = queue.SimpleQueue()
    for entry in entries:
        todo.put(entry)
    done: "queue.SimpleQueue[tuple[LockedPackage, Optional[Path], Optional[BaseException]]]" = queue.SimpleQueue()

    def work() -> None:
        while not stop.is_set():
            try:
                entry = todo.get_nowait()
            except queue.Empty:
                return
            try:
                path = fetch_archive(entry, cache_dir, mirrors, bundle, stop)
                if progress is not None and not stop.is_set():  # no progress line after the run's error
                    progress(entry)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                done.put((entry, None, exc))
                return
            done.put((entry, path, None))

    threads: list = []
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


def archive_path(cache_dir: Path, entry: LockedPackage) -> Path:
    """Where the archive store keeps `entry`'s archive: `<cache>/archives/<sha256>/<fn>`."""
    return cache_dir / "archives" / entry.sha256 / entry.filename


@dataclass(frozen=True)
class Source:
    """Where an artifact's bytes are read from, and what to say if they cannot be."""

    label: str  # a URL or `bundle.tar:artifacts/<sha256>/<fn>`; credentials are scrubbed when shown
    open: Callable[[], BinaryIO]
    remedy: str  # if it cannot be read
    mismatch: str = "A mirror serving other bytes, or a lock edited by hand: relock or fix the mirror"


def url_source(entry: LockedPackage, mirrors: Sequence[Mirror], also: str = "") -> Source:
    url = source_url(entry.url, mirrors)
    mirror = mirror_of(entry.url, mirrors)
    if mirror is None:
        remedy = f"offline? serve it from a mirror: --mirror {mirror_prefix(entry)}=URL_OR_DIR"
    else:  # the mirror given is what failed: offering a mirror would send the user round in a circle
        remedy = f"the mirror lacks it or is down: sync it from {mirror.canonical}, or fix --mirror {mirror.public()}"
    return Source(url, lambda: _open(url), remedy + also)


def fetch_archive(entry: LockedPackage, cache_dir: Path, mirrors: Sequence[Mirror] = (),
                  bundle: Optional["Bundle"] = None, stop: Optional[threading.Event] = None) -> Path:
    target = archive_path(cache_dir, entry)
    if target.is_file() and _still_verified(target, entry):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    source = bundle.source(entry) if bundle is not None else None
    if source is None:
        source = url_source(entry, mirrors, also=bundle.lacks() if bundle is not None else "")
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out:
            sha256, md5 = _copy_hashing(source, out, entry, stop)
        if sha256 != entry.sha256:
            raise IntegrityError(
                f"{entry.filename}: sha256 {sha256} does not match the lock's {entry.sha256} "
                f"(fetched from {scrub_credentials(source.label)}); nothing was installed. {source.mismatch}"
            )
        if entry.md5 and md5 != entry.md5:
            raise IntegrityError(f"{entry.filename}: md5 {md5} does not match the lock's {entry.md5}; "
                                 "nothing was installed")
        if entry.manager == "conda":  # a wheel is uv's to unpack, as when uv fetched it
            check_archive_paths(Path(tmp), entry.filename)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
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


STALL_BYTES, STALL_SECONDS = 60 << 10, 60.0  # 1 kB/s; the socket's timeout is STALL_SECONDS too (`_open`)


class _SpeedFloor:
    """Gives up a download slower than STALL_BYTES per STALL_SECONDS, as curl's --speed-limit and
    --speed-time do: the socket's timeout is per read, which a mirror sending a byte every few
    seconds never trips. Judged over windows of STALL_SECONDS, as blocks arrive."""

    def __init__(self) -> None:
        self.start = self.last = time.monotonic()
        self.bytes = 0
        self.resumed = False  # the window began at a gap taken for a pause

    def stalled(self, arrived: int) -> str:
        """What is wrong once the window that `arrived` bytes end is too slow; "" while it is not."""
        now = time.monotonic()
        if now - self.last >= STALL_SECONDS:
            # Most likely this process was stopped (Ctrl-Z, a frozen job): a new window from here.
            # But one read1() of a chunked response reads its framing with several socket reads,
            # each inside the timeout: a second such gap with little in between is the server.
            if self.resumed and self.bytes < STALL_BYTES:
                return f"stalled, {self.bytes + arrived} bytes in the last {now - self.start:.0f} s"
            self.start, self.bytes, self.resumed = now, 0, True
        self.last = now
        self.bytes += arrived
        if now - self.start < STALL_SECONDS:
            return ""
        if self.bytes < STALL_BYTES:
            return f"stalled, {self.bytes} bytes in the last {now - self.start:.0f} s"
        self.start, self.bytes, self.resumed = now, 0, False
        return ""


class _Stopped(Exception):
    """Another download of the same run failed, or the run was interrupted: this one is abandoned."""


def _copy_hashing(source: Source, out, entry: LockedPackage, stop: Optional[threading.Event] = None) -> tuple[str, str]:
    sha256, md5 = hashlib.sha256(), hashlib.md5()
    copied, expected = 0, None
    if stop is not None and stop.is_set():  # taken from the queue just before the run failed: no connect()
        raise _Stopped(entry.filename)
    try:
        with source.open() as data:
            expected = _content_length(data)
            read = getattr(data, "read1", data.read)  # what has arrived: a stop is seen between two network reads
            floor = _SpeedFloor()
            for block in iter(lambda: read(_CHUNK), b""):
                if stop is not None and stop.is_set():
                    raise _Stopped(entry.filename)
                sha256.update(block)
                md5.update(block)
                out.write(block)
                copied += len(block)
                stalled = floor.stalled(len(block))
                if stalled:
                    raise FetchError(f"cannot fetch {entry.filename} from {scrub_credentials(source.label)}: "
                                     f"{stalled}; nothing was installed ({source.remedy})")
    except (OSError, http.client.HTTPException) as exc:
        if out_of_space(exc):  # writing into the store, not reading the source
            raise
        raise FetchError(f"cannot fetch {entry.filename} from {scrub_credentials(source.label)}: "
                         f"{exc} ({source.remedy})") from None
    if expected is not None and copied < expected:
        # http.client ends a short body quietly; hashing it would blame the lock or the mirror's bytes.
        raise FetchError(f"cannot fetch {entry.filename} from {scrub_credentials(source.label)}: connection closed "
                         f"after {copied} of {expected} bytes; nothing was installed (run again to retry)")
    return sha256.hexdigest(), md5.hexdigest()


def _content_length(response) -> Optional[int]:
    """The Content-Length an HTTP response promised; None for a file, or a server that did not say."""
    value = getattr(response, "headers", None) and response.headers.get("Content-Length")
    return int(value) if value and value.isdigit() else None


def check_mirrors(mirrors: Sequence[Mirror], *locks: Lock) -> None:
    """Refuse a `--mirror` that serves no URL of the locks (a typo, `conda-froge=...`): ignored, it would
    leave the run fetching from the channel the user meant to avoid."""
    packages = [entry for lock in locks for entry in lock.packages]
    served = {mirror_prefix(entry) for entry in packages}
    names = " or ".join(dict.fromkeys(lock.path.name for lock in locks))
    for mirror in mirrors:
        if not any(mirror_of(entry.url, (mirror,)) for entry in packages):
            raise InputError(f"--mirror {mirror.public()}", f"no URL of {names} is under {mirror.canonical}",
                             f"CANONICAL is one of the lock's channels or wheel hosts: {', '.join(sorted(served))}")


def mirror_prefix(entry: LockedPackage) -> str:
    """What `--mirror` would map for `entry`: its conda channel, or its wheel's host."""
    if entry.manager == "conda":
        return entry.url.rsplit("/", 2)[0]
    parts = urlsplit(entry.url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else entry.url.rsplit("/", 1)[0]


def _open(url: str):
    parts = urlsplit(url)
    if parts.scheme == "file":
        return open(unquote(parts.path), "rb")
    if parts.scheme in ("http", "https"):
        request = urllib.request.Request(url, headers={"User-Agent": "bootstrap"})
        if parts.username:
            clean = url.replace(f"{parts.username}:{parts.password}@" if parts.password else f"{parts.username}@", "")
            request = urllib.request.Request(clean, headers={"User-Agent": "bootstrap"})
            manager = urllib.request.HTTPPasswordMgrWithDefaultRealm()
            manager.add_password(None, clean, unquote(parts.username), unquote(parts.password or ""))
            opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(manager))
            return opener.open(request, timeout=STALL_SECONDS)
        return urllib.request.urlopen(request, timeout=STALL_SECONDS)
    raise FetchError(f"{scrub_credentials(url)}: unsupported URL scheme '{parts.scheme}'")


# --------------------------------------------------------------------------- archive safety

def check_archive_paths(archive: Path, filename: Optional[str] = None) -> None:
    """Refuse an archive whose members or paths.json entries would land outside the prefix.

    Checks every tar member (both components of a `.conda`) and every `_path`
    of info/paths.json: no absolute paths, no `..` escaping the root, no
    symlink or hard link whose target resolves outside it.
    """
    from conda_package_streaming.package_streaming import stream_conda_component

    filename = filename or archive.name
    components = ("info", "pkg") if filename.endswith(".conda") else ("pkg",)  # a .tar.bz2 is one tar
    for component in components:
        with open(archive, "rb") as handle:
            try:
                for tar, member in stream_conda_component(filename, handle, component=component):
                    _check_member(filename, member)
                    if member.name == "info/paths.json":
                        _check_paths_json(filename, tar.extractfile(member).read())
            except (tarfile.TarError, zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
                raise IntegrityError(f"{filename}: not a readable conda archive ({exc})") from None


def _escapes(path: str) -> bool:
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return True
    normal = posixpath.normpath(path)
    return normal == ".." or normal.startswith("../")


def _check_member(filename: str, member) -> None:
    if _escapes(member.name):
        raise IntegrityError(f"{filename}: refused: member '{member.name}' would be written outside the prefix")
    if member.issym() or member.islnk():
        # Hard-link targets are archive paths; symlink targets are relative to the link.
        base = "" if member.islnk() else posixpath.dirname(member.name)
        target = member.linkname if member.linkname.startswith("/") else posixpath.join(base, member.linkname)
        if _escapes(target):
            raise IntegrityError(f"{filename}: refused: link '{member.name}' -> '{member.linkname}' "
                                 "points outside the prefix")


def _check_paths_json(label: str, data: bytes) -> None:
    try:
        paths = json.loads(data).get("paths", [])
    except ValueError:
        raise IntegrityError(f"{label}: info/paths.json is not valid JSON") from None
    for entry in paths:
        path = str(entry.get("_path", ""))
        if not path or _escapes(path):
            raise IntegrityError(f"{label}: refused: info/paths.json lists '{path}', outside the prefix")
