"""One artifact's bytes into a partial file, hashed as they arrive, retried and resumed with Range: the
network half of `fetch`, which decides what to fetch and checks the result. Docs: docs/env.md, "Downloads".
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import netrc
import os
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterator, Optional, Protocol
from urllib.parse import unquote, urlsplit

from bootstrap.errors import FetchError
from bootstrap.fsutil import out_of_space
from bootstrap.lock.lockfile import LockedPackage
from bootstrap.urls import scrub_credentials

if TYPE_CHECKING:
    from hashlib import _Hash
    from types import TracebackType

_CHUNK = 1 << 20
# Waits between the attempts at one download (so len + 1 attempts): a reset, a timeout or a 5xx
# is often gone a moment later, and a download cut short resumes where it stopped.
RETRY_DELAYS_S = (1.0, 2.0, 4.0)


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


class Readable(Protocol):
    """What a download reads: a file, an HTTP response, or an artifact's bytes in a bundle."""

    def read(self, size: int, /) -> bytes: ...

    def __enter__(self) -> Readable: ...

    def __exit__(
        self, kind: Optional[type[BaseException]], value: Optional[BaseException], trace: Optional[TracebackType], /
    ) -> Optional[bool]: ...


@dataclass(frozen=True)
class Source:
    """Where an artifact's bytes are read from, and what to say if they cannot be."""

    label: str  # a URL or `bundle.tar:artifacts/<sha256>/<fn>`; credentials are scrubbed when shown
    open: Callable[[], Readable]
    remedy: str  # if it cannot be read
    mismatch: str = "A mirror serving other bytes, or a lock edited by hand: relock or fix the mirror"
    ranged: Optional[Callable[[int], Readable]] = None  # opens at a byte offset (HTTP Range); network: retried
    size: Callable[[], Optional[int]] = lambda: None  # the artifact's bytes, if cheaply known


class Part:
    """The file a download is written to before its hash is checked, and whether to keep it for the next run."""

    def __init__(self, path: Path, handle: BinaryIO, resumable: bool) -> None:
        self.path, self.file, self.keep = path, handle, resumable

    def size(self) -> int:
        return self.file.seek(0, os.SEEK_END)


@contextlib.contextmanager
def partial(target: Path) -> Iterator[Part]:
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
    part = Part(path, handle, resumable)
    try:
        yield part
    except BaseException:
        # Closed first, its buffer dropped: after a full disk or `ulimit -f` the flush that close (or a
        # seek) makes fails the same way again, and that second error would hide the first.
        with contextlib.suppress(OSError):
            handle.close()
        if not part.keep or _size(path) == 0:
            path.unlink(missing_ok=True)
        raise
    finally:
        handle.close()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


STALL_BYTES, STALL_SECONDS = 60 << 10, 60.0  # 1 kB/s; the socket's timeout is STALL_SECONDS too (`open_url`)


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


class Stopped(Exception):
    """Another download of the same run failed, or the run was interrupted: this one is abandoned."""


class _Transient(Exception):
    """What may be gone a moment later: a reset, a timeout, a 5xx, a body cut short."""


class Download:
    """One artifact's bytes into its partial file, hashed over the whole file: attempts with waits of
    `RETRY_DELAYS_S` between them on transient failures of a network source, each after the first
    resuming with a Range request where the server honours it (206 and the Content-Range asked for)."""

    def __init__(
        self, source: Source, part: Part, entry: LockedPackage, stop: Optional[threading.Event], watch: Watch
    ) -> None:
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
                raise Stopped(self.entry.filename)
            try:
                return self._attempt()
            except _Transient as exc:
                if attempt == attempts:
                    raise FetchError(
                        f"cannot fetch {self.entry.filename} from {self._label()}: {exc}, "
                        f"{attempts} attempts; nothing was installed ({self.source.remedy})"
                    ) from None
                self.watch.retrying(
                    f"{self.entry.filename}: {exc} from {self._label()}; retrying ({attempt + 1} of {attempts})"
                )
                if (self.stop or threading.Event()).wait(RETRY_DELAYS_S[attempt - 1]):  # a stop ends the wait
                    raise Stopped(self.entry.filename) from None
        raise AssertionError("unreachable")

    def _label(self) -> str:
        return scrub_credentials(self.source.label)

    def _attempt(self) -> tuple[str, str]:
        start = self.part.size() if self.source.ranged is not None else 0
        try:
            with self.source.ranged(start) if self.source.ranged is not None else self.source.open() as data:
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
            raise FetchError(
                f"cannot fetch {self.entry.filename} from {self._label()}: connection closed "
                f"after {copied} of {expected} bytes; nothing was installed (run again to retry)"
            )
        return sha256.hexdigest(), md5.hexdigest()

    def _failed(self, exc: BaseException) -> FetchError:
        return FetchError(f"cannot fetch {self.entry.filename} from {self._label()}: {exc} ({self.source.remedy})")

    def _hash_kept(self, start: int) -> tuple[_Hash, _Hash]:
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

    def _copy(self, data: Readable, sha256: _Hash, md5: _Hash, copied: int) -> int:
        out = self.part.file
        read = getattr(data, "read1", data.read)  # what has arrived: a stop is seen between two network reads
        floor = _SpeedFloor()
        for block in iter(lambda: read(_CHUNK), b""):
            if self.stop is not None and self.stop.is_set():
                raise Stopped(self.entry.filename)
            sha256.update(block)
            md5.update(block)
            out.write(block)
            copied += len(block)
            self._tell(copied)
            stalled = floor.stalled(len(block))
            if stalled:
                raise FetchError(
                    f"cannot fetch {self.entry.filename} from {self._label()}: "
                    f"{stalled}; nothing was installed ({self.source.remedy})"
                )
        out.flush()
        return copied


def _resumes(response: Readable, start: int) -> bool:
    """Whether an HTTP response to `Range: bytes=START-` holds the artifact from byte START on."""
    if not isinstance(response, http.client.HTTPResponse) or response.status != 206:
        return False
    return response.headers.get("Content-Range", "").startswith(f"bytes {start}-")


def _content_length(response: Readable) -> Optional[int]:
    """The Content-Length an HTTP response promised; None for a file, or a server that did not say."""
    value = response.headers.get("Content-Length") if isinstance(response, http.client.HTTPResponse) else None
    return int(value) if value and value.isdigit() else None


def open_url(url: str, start: int = 0) -> BinaryIO:
    """A file, or an HTTP(S) response from byte `start` on (a server may ignore the Range and send all)."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return open(unquote(parts.path), "rb")
    if parts.scheme in ("http", "https"):
        headers = {"Range": f"bytes={start}-"} if start else {}
        return _http(url, "GET", headers, STALL_SECONDS)
    raise FetchError(f"{scrub_credentials(url)}: unsupported URL scheme '{parts.scheme}'")


def size_of(url: str) -> Optional[int]:
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


def _http(url: str, method: str, headers: dict[str, str], timeout: float) -> http.client.HTTPResponse:
    """urlopen with the URL's own credentials, else those ~/.netrc (or $NETRC) holds for its host,
    as uv reads them at lock time."""
    parts = urlsplit(url)
    headers = {"User-Agent": "bootstrap", **headers}
    if parts.username:
        url = url.replace(f"{parts.username}:{parts.password}@" if parts.password else f"{parts.username}@", "")
        login: Optional[tuple[str, str]] = (unquote(parts.username), unquote(parts.password or ""))
    else:
        login = _netrc_login(parts.hostname or "")
    request = urllib.request.Request(url, headers=headers, method=method)
    if login is not None:
        # Sent at once (servers that answer 401 without a challenge are common), and not on
        # to wherever a redirect points: the login is this host's.
        token = base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode("ascii")
        request.add_unredirected_header("Authorization", f"Basic {token}")
    response: http.client.HTTPResponse = _OPENER.open(request, timeout=timeout)
    return response


# A TCP connect that takes this long is taken for a host that drops packets: given up on (and
# retried) sooner than a body that stalls, which a request's own timeout is for.
CONNECT_S = 15.0


class _ConnectsSooner(http.client.HTTPConnection):
    """An HTTP(S) connection whose connect (and TLS handshake) waits `CONNECT_S` at most; reads keep the
    request's timeout."""

    sock: socket.socket

    def connect(self) -> None:
        read_timeout = self.timeout
        self.timeout = CONNECT_S if read_timeout is None else min(CONNECT_S, read_timeout)
        try:
            super().connect()
        finally:
            self.timeout = read_timeout
        self.sock.settimeout(read_timeout)


class _HttpsConnection(_ConnectsSooner, http.client.HTTPSConnection):
    pass


class _HttpHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_ConnectsSooner, req)


class _HttpsHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HttpsConnection, req, context=self._context)  # type: ignore[attr-defined]


_OPENER = urllib.request.build_opener(_HttpHandler, _HttpsHandler)  # proxies from the environment, as urlopen


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
