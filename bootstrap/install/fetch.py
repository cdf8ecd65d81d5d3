"""Fetch the archives an install links (conda) and the wheels it installs (pip), hash-check them,
and refuse unsafe conda archives.

py-rattler does not hash-check `file://` packages, trusts a warm cache, and
links whatever paths an archive lists (`../x`, absolute paths and escaping
symlinks included; tests/test_fixtures.py shows each). So every
archive to be linked passes through here first:

    lock URL --mirror rewrite--> download into <cache>/archives/<sha256>/.part-<fn>
             (retried, resumed with Range) --sha256 (and md5) against the lock-->
             paths checked --> renamed to <fn> --> file:// URL for rattler

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

import base64
import contextlib
import hashlib
import http.client
import json
import netrc
import os
import posixpath
import queue
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterator, Optional, Sequence
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
# Waits between the attempts at one download (so len + 1 attempts): a reset, a timeout or a 5xx
# is often gone a moment later, and a download cut short resumes where it stopped.
RETRY_DELAYS_S = (1.0, 2.0, 4.0)
SIZE_WORKERS = 16  # HEAD requests at once when sizing a fetch: each waits mostly on a round trip


def _ignore(_: object) -> None:
    pass


@dataclass(frozen=True)
class Watch:
    """What a fetch tells as it goes; the CLI renders it, and with none the fetch is silent.

    `sized(bytes, files, unknown)` comes once, before the first download, when given: the bytes to
    fetch of the `files` that will be fetched, `unknown` of them of no known size (it costs a HEAD
    request per URL). `moved(n)` as bytes arrive (negative when a download starts over), from the
    fetching threads. `retrying(line)` once per retry."""

    sized: Optional[Callable[[int, int, int], None]] = None
    moved: Callable[[int], None] = _ignore
    retrying: Callable[[str], None] = _ignore


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
    watch: Optional[Watch] = None,
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
        _announce_size(entries, cache_dir, mirrors, bundle, watch.sized)
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
                path = fetch_archive(entry, cache_dir, mirrors, bundle, stop, watch)
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


def _announce_size(entries: Sequence[LockedPackage], cache_dir: Path, mirrors: Sequence[Mirror],
                   bundle: Optional["Bundle"], sized: Callable[[int, int, int], None]) -> None:
    """Tell `sized` what the fetch will download: those not in the store, sized by a HEAD request each
    (a lock records no sizes), `SIZE_WORKERS` at a time; a stored artifact that no longer hashes right
    is fetched again unannounced."""
    pending = [entry for entry in entries if not archive_path(cache_dir, entry).is_file()]
    sources = [(bundle.source(entry) if bundle is not None else None) or url_source(entry, mirrors)
               for entry in pending]
    if not sources:
        return
    with ThreadPoolExecutor(max_workers=min(SIZE_WORKERS, len(sources))) as pool:
        sizes = list(pool.map(lambda source: source.size(), sources))
    sized(sum(size for size in sizes if size is not None), len(sizes), sum(size is None for size in sizes))


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
    ranged: Optional[Callable[[int], BinaryIO]] = None  # opens at a byte offset (HTTP Range); network: retried
    size: Callable[[], Optional[int]] = lambda: None  # the artifact's bytes, if cheaply known


def url_source(entry: LockedPackage, mirrors: Sequence[Mirror], also: str = "") -> Source:
    url = source_url(entry.url, mirrors)
    mirror = mirror_of(entry.url, mirrors)
    if mirror is None:
        remedy = f"offline? serve it from a mirror: --mirror {mirror_prefix(entry)}=URL_OR_DIR"
    else:  # the mirror given is what failed: offering a mirror would send the user round in a circle
        remedy = f"the mirror lacks it or is down: sync it from {mirror.canonical}, or fix --mirror {mirror.public()}"
    return Source(url, lambda: _open(url), scrub_credentials(remedy) + also,
                  ranged=(lambda start: _open(url, start)) if urlsplit(url).scheme in ("http", "https") else None,
                  size=lambda: _size(url))


def fetch_archive(entry: LockedPackage, cache_dir: Path, mirrors: Sequence[Mirror] = (),
                  bundle: Optional["Bundle"] = None, stop: Optional[threading.Event] = None,
                  watch: Optional[Watch] = None) -> Path:
    target = archive_path(cache_dir, entry)
    if target.is_file() and _still_verified(target, entry):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    source = bundle.source(entry) if bundle is not None else None
    if source is None:
        source = url_source(entry, mirrors, also=bundle.lacks() if bundle is not None else "")
    with _partial(target) as part:
        download = _Download(source, part, entry, stop, watch or Watch())
        sha256, md5 = download.run(whole=False)
        if download.resumed and (sha256 != entry.sha256 or (entry.md5 and md5 != entry.md5)):
            # A partial from an earlier run may hold other bytes (a mirror that changed, a disk error):
            # one fetch from the first byte tells that apart from a wrong artifact.
            download.watch.retrying(f"{entry.filename}: the resumed download does not match the lock's sha256; "
                                    "fetching it whole again")
            sha256, md5 = download.run(whole=True)
        if sha256 != entry.sha256:
            part.keep = False
            raise IntegrityError(
                f"{entry.filename}: sha256 {sha256} does not match the lock's {entry.sha256} "
                f"(fetched from {scrub_credentials(source.label)}); nothing was installed. {source.mismatch}"
            )
        if entry.md5 and md5 != entry.md5:
            part.keep = False
            raise IntegrityError(f"{entry.filename}: md5 {md5} does not match the lock's {entry.md5}; "
                                 "nothing was installed")
        if entry.manager == "conda":  # a wheel is uv's to unpack, as when uv fetched it
            part.keep = False  # refused, it is no partial to resume
            check_archive_paths(part.path, entry.filename)
        os.replace(part.path, target)
    if entry.manager == "pip":
        _stamp(target)
    return target


class _Part:
    """The file a download is written to before its hash is checked, and whether to keep it for the next run."""

    def __init__(self, path: Path, handle: BinaryIO, resumable: bool) -> None:
        self.path, self.file, self.keep = path, handle, resumable

    def size(self) -> int:
        return self.file.seek(0, os.SEEK_END)


@contextlib.contextmanager
def _partial(target: Path) -> Iterator[_Part]:
    """`.part-<name>` beside `target`, which the next run resumes; a uniquely named one, dropped at the
    end, while another run writes that one (the cache is shared). Never under the target's name:
    only a checked artifact is renamed to it."""
    import fcntl

    path = target.with_name(f".part-{target.name}")
    handle = open(path, "a+b")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        resumable = True
    except OSError:
        handle.close()
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=".part-")
        path, handle, resumable = Path(name), os.fdopen(fd, "w+b"), False
    part = _Part(path, handle, resumable)
    try:
        yield part
    except BaseException:
        if not part.keep or part.size() == 0:
            path.unlink(missing_ok=True)
        raise
    finally:
        handle.close()


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


class _Transient(Exception):
    """What may be gone a moment later: a reset, a timeout, a 5xx, a body cut short."""


class _Download:
    """One artifact's bytes into its partial file, hashed over the whole file: attempts with waits of
    `RETRY_DELAYS_S` between them on transient failures of a network source, each after the first
    resuming with a Range request where the server honours it (206 and the Content-Range asked for)."""

    def __init__(self, source: Source, part: _Part, entry: LockedPackage, stop: Optional[threading.Event],
                 watch: Watch) -> None:
        self.source, self.part, self.entry, self.stop, self.watch = source, part, entry, stop, watch
        self.told = 0  # bytes of this artifact `watch.moved` was told of
        self.resumed = False  # some bytes were written by an earlier connection or run

    def _tell(self, done: int) -> None:
        if done != self.told:
            self.watch.moved(done - self.told)
            self.told = done

    def run(self, whole: bool) -> tuple[str, str]:
        if whole:
            self.part.file.truncate(0)
            self.resumed = False
        attempts = len(RETRY_DELAYS_S) + 1 if self.source.ranged is not None else 1
        for attempt in range(1, attempts + 1):
            if self.stop is not None and self.stop.is_set():  # taken from the queue as the run failed: no connect()
                raise _Stopped(self.entry.filename)
            try:
                return self._attempt()
            except _Transient as exc:
                if attempt == attempts:
                    raise FetchError(f"cannot fetch {self.entry.filename} from {self._label()}: {exc}, "
                                     f"{attempts} attempts; nothing was installed ({self.source.remedy})") from None
                self.watch.retrying(f"{self.entry.filename}: {exc} from {self._label()}; "
                                    f"retrying ({attempt + 1} of {attempts})")
                if (self.stop or threading.Event()).wait(RETRY_DELAYS_S[attempt - 1]):  # a stop ends the wait
                    raise _Stopped(self.entry.filename) from None
        raise AssertionError("unreachable")

    def _label(self) -> str:
        return scrub_credentials(self.source.label)

    def _attempt(self) -> tuple[str, str]:
        start = self.part.size() if self.source.ranged is not None else 0
        try:
            with (self.source.ranged(start) if self.source.ranged is not None else self.source.open()) as data:
                if start and not _resumes(data, start):  # a 200: the whole artifact again, from its first byte
                    start = 0
                sha256, md5 = self._hash_kept(start)
                self.resumed = self.resumed or start > 0
                length = _content_length(data)
                expected = start + length if length is not None else None
                copied = self._copy(data, sha256, md5, start)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and start:  # the partial is as long as the artifact or longer: not ours to trust
                self.part.file.truncate(0)
                raise _Transient(f"HTTP {exc.code} for a resume") from None
            if self.source.ranged is not None and (exc.code >= 500 or exc.code == 429):
                raise _Transient(f"HTTP Error {exc.code}: {exc.reason}") from None
            raise self._failed(exc) from None
        except (OSError, http.client.HTTPException) as exc:
            if out_of_space(exc):  # writing into the store, not reading the source
                raise
            if self.source.ranged is not None:
                raise _Transient(str(exc) or type(exc).__name__) from None
            raise self._failed(exc) from None
        if expected is not None and copied < expected:
            # http.client ends a short body quietly; hashing it would blame the lock or the mirror's bytes.
            if self.source.ranged is not None:
                raise _Transient(f"connection closed after {copied} of {expected} bytes")
            raise FetchError(f"cannot fetch {self.entry.filename} from {self._label()}: connection closed "
                             f"after {copied} of {expected} bytes; nothing was installed (run again to retry)")
        return sha256.hexdigest(), md5.hexdigest()

    def _failed(self, exc: BaseException) -> FetchError:
        return FetchError(f"cannot fetch {self.entry.filename} from {self._label()}: {exc} ({self.source.remedy})")

    def _hash_kept(self, start: int):
        """Hashers over the partial's first `start` bytes, the rest of it dropped."""
        sha256, md5 = hashlib.sha256(), hashlib.md5()
        out = self.part.file
        out.truncate(start)
        out.seek(0)
        for block in iter(lambda: out.read(min(_CHUNK, start - out.tell())), b""):
            sha256.update(block)
            md5.update(block)
        self._tell(start)
        return sha256, md5

    def _copy(self, data, sha256, md5, copied: int) -> int:
        out = self.part.file
        read = getattr(data, "read1", data.read)  # what has arrived: a stop is seen between two network reads
        floor = _SpeedFloor()
        for block in iter(lambda: read(_CHUNK), b""):
            if self.stop is not None and self.stop.is_set():
                raise _Stopped(self.entry.filename)
            sha256.update(block)
            md5.update(block)
            out.write(block)
            copied += len(block)
            self._tell(copied)
            stalled = floor.stalled(len(block))
            if stalled:
                raise FetchError(f"cannot fetch {self.entry.filename} from {self._label()}: "
                                 f"{stalled}; nothing was installed ({self.source.remedy})")
        out.flush()
        return copied


def _resumes(response, start: int) -> bool:
    """Whether an HTTP response to `Range: bytes=START-` holds the artifact from byte START on."""
    if getattr(response, "status", None) != 206:
        return False
    content_range = response.headers.get("Content-Range", "")
    return content_range.startswith(f"bytes {start}-")


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


def _open(url: str, start: int = 0):
    """A file, or an HTTP(S) response from byte `start` on (a server may ignore the Range and send all)."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return open(unquote(parts.path), "rb")
    if parts.scheme in ("http", "https"):
        headers = {"Range": f"bytes={start}-"} if start else {}
        return _http(url, "GET", headers, STALL_SECONDS)
    raise FetchError(f"{scrub_credentials(url)}: unsupported URL scheme '{parts.scheme}'")


def _size(url: str) -> Optional[int]:
    """An artifact's size: a file's, or the Content-Length of a HEAD request; None if either fails."""
    parts = urlsplit(url)
    try:
        if parts.scheme == "file":
            return os.stat(unquote(parts.path)).st_size
        if parts.scheme in ("http", "https"):
            with _http(url, "HEAD", {}, 10.0) as response:
                return _content_length(response)
    except (OSError, http.client.HTTPException, ValueError):
        pass
    return None


def _http(url: str, method: str, headers: dict, timeout: float):
    """urlopen with the URL's own credentials, else those ~/.netrc (or $NETRC) holds for its host,
    as uv reads them at lock time."""
    parts = urlsplit(url)
    headers = {"User-Agent": "bootstrap", **headers}
    if parts.username:
        clean = url.replace(f"{parts.username}:{parts.password}@" if parts.password else f"{parts.username}@", "")
        request = urllib.request.Request(clean, headers=headers, method=method)
        manager = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        manager.add_password(None, clean, unquote(parts.username), unquote(parts.password or ""))
        opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(manager))
        return opener.open(request, timeout=timeout)
    request = urllib.request.Request(url, headers=headers, method=method)
    login = _netrc_login(parts.hostname or "")
    if login is not None:
        # Sent at once (servers that answer 401 without a challenge are common), and not on
        # to wherever a redirect points: the login is this host's.
        token = base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode("ascii")
        request.add_unredirected_header("Authorization", f"Basic {token}")
    return urllib.request.urlopen(request, timeout=timeout)


def _netrc_login(host: str) -> Optional[tuple[str, str]]:
    """(login, password) of `host` in $NETRC or ~/.netrc; None without a file, an entry, or with an unreadable file."""
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    if not host or not os.path.isfile(path):
        return None
    try:
        found = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    if found is None:
        return None
    login, _account, password = found
    return login or "", password or ""


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
