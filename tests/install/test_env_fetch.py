"""`bootstrap env` when a source misbehaves: a download cut short, a mirror lacking a file or down,
a `--mirror` for no channel of the lock. One line naming the URL or the flag and the fix; the env
as it was."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from bootstrap.cli import main
from bootstrap.errors import FetchError
from bootstrap.install import download, fetch
from bootstrap.lock.lockfile import LockedPackage, read_lock
from bootstrap.lock.mirrors import Mirror
from bootstrap.project import Project
from tests.fixtures.conda_channel import running
from tests.fixtures.env_project import CONDA, change_lock, env_args, prefix_of, without_progress

CHANNEL = "https://conda.anaconda.org/conda-forge"


class _CutShort(http.server.SimpleHTTPRequestHandler):
    """Promises a conda archive's full Content-Length, sends half of it, hangs up."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if not self.path.endswith(".tar.bz2"):
            return super().do_GET()
        data = Path(self.directory, self.path.lstrip("/")).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True


@contextlib.contextmanager
def cutting_server(root: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_CutShort, directory=str(root)))
    server.daemon_threads = True
    with running(server) as url:
        yield url


class _Trickle(http.server.SimpleHTTPRequestHandler):
    """torchlike is missing (404); any other archive comes 32 bytes at a time, 10 a second (a slow link)."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if "/torchlike-" in self.path:
            return self.send_error(404)
        if not self.path.endswith((".conda", ".tar.bz2")):
            return super().do_GET()
        data = Path(self.directory, self.path.lstrip("/")).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        for start in range(0, len(data), 32):
            if self.server.closing.wait(0.1):  # type: ignore[attr-defined]
                return
            try:
                self.wfile.write(data[start : start + 32])
                self.wfile.flush()
            except OSError:  # the client gave up
                return


def test_a_failed_download_stops_the_others_at_once(project: Project, channel: Path, tmp_path: Path, capsys) -> None:
    """As a Ctrl-C does: the downloads under way stop and the queued are cancelled. Waited for, the
    error (or the interrupt) came only once every slow download had ended. The 404 is among the
    first four (`fetch_archives` runs four at once): queued behind a slow one, it came late."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Trickle, directory=str(channel)))
    server.daemon_threads, server.closing = True, threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    started = time.monotonic()
    try:
        capsys.readouterr()
        assert main(env_args(project, url)) == 2
        took = time.monotonic() - started
    finally:
        server.closing.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
    assert "error: cannot fetch torchlike-1.0-cuda12_1.conda" in capsys.readouterr().err
    assert took < 3, f"{took:.1f} s: the other downloads were waited for"
    # none finished; what had arrived is kept for the next run to resume
    assert all(p.name.startswith(".part-") for p in (project.root / ".cache" / "archives").glob("*/*"))
    assert not os.path.lexists(prefix_of(project)) and not (prefix_of(project).parent / ".py310.gens").exists()


def test_a_download_cut_short_is_a_network_error_not_a_hash_mismatch(
    project: Project, channel: Path, wheels: Path, capsys
) -> None:
    without_zlib = tuple(c for c in CONDA if c != "zlibstub")
    change_lock(project, channel, wheels, conda=without_zlib)
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    before = os.readlink(prefix)
    change_lock(project, channel, wheels)  # zlibstub back: one archive to download
    capsys.readouterr()
    with cutting_server(channel) as url:
        assert main(env_args(project, url)) == 2
    archive = next(channel.glob("linux-64/zlibstub-*.tar.bz2"))
    size = archive.stat().st_size
    source = f"{url}/linux-64/{archive.name}"
    cut = f"connection closed after {size // 2} of {size} bytes"
    assert without_progress(capsys.readouterr().err) == "".join(
        f"{archive.name}: {cut} from {source}; retrying ({attempt} of 4)\n" for attempt in (2, 3, 4)
    ) + (
        f"error: cannot fetch {archive.name} from {source}: {cut}, 4 attempts; nothing was installed (the mirror "
        f"lacks it or is down: sync it from {CHANNEL}, or fix --mirror {CHANNEL}={url})\n"
    )
    assert os.readlink(prefix) == before
    # what arrived is kept for the next run to resume, under a name no reader takes for the archive
    assert [p.name for p in (project.root / ".cache" / "archives").glob("*/*") if "zlibstub" in p.name] == [
        f".part-{archive.name}"
    ]


def test_a_mirror_that_lacks_a_file_is_named_as_the_one_to_sync(
    project: Project, channel: Path, tmp_path: Path, capsys
) -> None:
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    capsys.readouterr()
    assert main(env_args(project, str(empty))) == 2
    err = without_progress(capsys.readouterr().err)
    assert f"from {empty.as_uri()}/" in err and "No such file" in err
    assert err.strip().endswith(
        "(the mirror lacks it or is down: sync it from https://conda.anaconda.org/conda-forge, "
        f"or fix --mirror https://conda.anaconda.org/conda-forge={empty})"
    )
    assert "serve it from a mirror" not in err and len(err.splitlines()) == 1


def test_a_mirror_for_no_channel_of_the_lock_is_refused(project: Project, channel: Path, capsys) -> None:
    assert main(env_args(project, str(channel))) == 0
    capsys.readouterr()
    for extra in ([], ["--dry-run"]):  # the no-op path too: the typo would bite on the next change
        assert main([*env_args(project, str(channel)), "--mirror", f"conda-froge={channel}", *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"error: --mirror https://conda.anaconda.org/conda-froge={channel}: no URL of "
            "conda-lock.yml is under https://conda.anaconda.org/conda-froge (CANONICAL is one of "
            "the lock's channels or wheel hosts: file://"
        )
        assert "https://conda.anaconda.org/conda-forge" in err and len(err.splitlines()) == 1


class _SlowBody:
    """A download that takes 10 s: a small block every 20 ms."""

    headers: dict = {}

    def __init__(self) -> None:
        self._left = 500

    def read(self, n: int) -> bytes:
        time.sleep(0.02)
        self._left -= 1
        return b"x" * 1024 if self._left > 0 else b""

    def __enter__(self) -> _SlowBody:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.mark.parametrize("failure", [OSError(111, "Connection refused"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_a_failed_or_interrupted_fetch_does_not_wait_for_the_downloads_under_way(
    tmp_path: Path, monkeypatch, failure: BaseException
) -> None:
    """Leaving the thread pool waits for its downloads: they stop at their next block, not at their end."""
    entries = [
        LockedPackage(
            f"p{i}",
            "1.0",
            "conda",
            "linux-64",
            f"https://conda.anaconda.org/conda-forge/linux-64/p{i}-1.0-0.conda",
            f"{i:064x}",
        )
        for i in range(4)
    ]

    def opened(url: str, start: int = 0):
        if url.endswith("/p0-1.0-0.conda"):
            time.sleep(0.2)  # the others are under way
            raise failure
        return _SlowBody()

    monkeypatch.setattr(download, "open_url", opened)
    started = time.monotonic()
    with pytest.raises((FetchError, KeyboardInterrupt)):
        fetch.fetch_archives(entries, tmp_path)
    assert time.monotonic() - started < 3
    assert not [p for p in tmp_path.glob("archives/*/*") if not p.name.startswith(".part-p")]  # kept to resume


class _Trickling(_SlowBody):
    """A mirror that keeps the connection alive with a byte every 20 ms, far under any useful speed."""

    def read(self, n: int) -> bytes:
        time.sleep(0.02)
        return b"x"


def test_a_stalled_download_is_given_up_with_one_line(tmp_path: Path, monkeypatch) -> None:
    """Each read returns well inside the socket's timeout, so only a speed floor ends it."""
    entry = LockedPackage(
        "p", "1.0", "conda", "linux-64", "https://conda.anaconda.org/conda-forge/linux-64/p-1.0-0.conda", f"{1:064x}"
    )
    monkeypatch.setattr(download, "STALL_SECONDS", 0.3)
    monkeypatch.setattr(download, "open_url", lambda url, start=0: _Trickling())
    started = time.monotonic()
    with pytest.raises(FetchError) as stalled:
        fetch.fetch_archive(entry, tmp_path)
    assert time.monotonic() - started < 3
    assert (
        "cannot fetch p-1.0-0.conda from https://conda.anaconda.org/conda-forge/linux-64/p-1.0-0.conda: stalled, "
        in str(stalled.value)
        and " bytes in the last 0 s; nothing was installed" in str(stalled.value)
        and "--mirror" in str(stalled.value)
    )
    assert not [p for p in tmp_path.glob("archives/*/*") if not p.name.startswith(".part-p")]  # kept to resume
    slow = _SlowBody()  # 50 kB/s for 0.6 s: slow, not stalled
    slow._left = 30
    monkeypatch.setattr(download, "open_url", lambda url, start=0: slow)
    monkeypatch.setattr(download, "STALL_BYTES", 4 << 10)
    with pytest.raises(Exception) as fetched:
        fetch.fetch_archive(entry, tmp_path)
    assert "does not match the lock" in str(fetched.value)  # read to its end, then hashed


@pytest.mark.parametrize("how", ["error", pytest.param("sigint", marks=pytest.mark.slow)])
def test_a_download_stuck_in_connect_does_not_hold_a_failed_or_interrupted_fetch(
    tmp_path: Path, monkeypatch, how: str
) -> None:
    """A server that never answers holds urlopen() for the socket's 60 s timeout, deaf to the stop
    flag: the fetch ends anyway, and that download's worker ends on its own later."""
    import signal

    entries = [
        LockedPackage(
            f"p{i}",
            "1.0",
            "conda",
            "linux-64",
            f"https://conda.anaconda.org/conda-forge/linux-64/p{i}-1.0-0.conda",
            f"{i:064x}",
        )
        for i in range(3)
    ]
    released = threading.Event()

    def opened(url: str, start: int = 0):
        if url.endswith("/p0-1.0-0.conda"):
            released.wait(30)  # connect() to a host that drops the SYN
            raise OSError(110, "Connection timed out")
        time.sleep(0.2)
        if how == "sigint":
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, delivered to the main thread as a real one is
            time.sleep(30)
        raise OSError(111, "Connection refused")

    monkeypatch.setattr(download, "open_url", opened)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt if how == "sigint" else FetchError):
            fetch.fetch_archives(entries, tmp_path, workers=2)
        assert time.monotonic() - started < 5, "waited for the stuck download"
    finally:
        released.set()


def test_a_download_paused_by_ctrl_z_is_not_taken_for_a_stalled_one(tmp_path: Path, monkeypatch) -> None:
    """Stopped (Ctrl-Z, a frozen job) just after a window began, the process sees one read that took
    minutes: the server did not stall (the socket's timeout ends any read that long). On a clock of
    its own: 16 kB every 0.5 s, a 2-minute pause after the first window, then the rest."""
    clock = [1000.0]
    steps = [0.5] * 121 + [120.0] + [0.5] * 20  # the pause comes 0.5 s into the window begun at 60 s

    class Body(_SlowBody):
        def read(self, n: int) -> bytes:
            if not steps:
                return b""
            clock[0] += steps.pop(0)
            return b"x" * (16 << 10)

    monkeypatch.setattr(download.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(download, "open_url", lambda url, start=0: Body())
    entry = LockedPackage(
        "p", "1.0", "conda", "linux-64", "https://conda.anaconda.org/conda-forge/linux-64/p-1.0-0.conda", f"{1:064x}"
    )
    with pytest.raises(Exception) as fetched:
        fetch.fetch_archive(entry, tmp_path)
    assert "does not match the lock" in str(fetched.value)  # read to its end, then hashed


class _ChunkTrickle(http.server.BaseHTTPRequestHandler):
    """A chunked response whose every byte, framing included, comes 50 ms after the last: each
    socket read returns well inside the timeout, but one read1() of a chunk spans several of them."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for _ in range(12):
                for byte in b"1\r\nx\r\n":
                    if self.server.closing.wait(0.05):  # type: ignore[attr-defined]
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client gave up
            pass


def test_a_chunked_download_trickling_its_framing_is_given_up_as_stalled(tmp_path: Path, monkeypatch) -> None:
    """Each read1() takes longer than STALL_SECONDS (http.client reads the chunk's size line and CRLF
    byte by byte inside it) without any socket read timing out: not a Ctrl-Z, a stalled server."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ChunkTrickle)
    server.daemon_threads, server.closing = True, threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setattr(download, "STALL_SECONDS", 0.2)  # the socket's timeout too: 4x each byte's wait
    url = f"http://127.0.0.1:{server.server_address[1]}"
    entry = LockedPackage(
        "p", "1.0", "conda", "linux-64", "https://conda.anaconda.org/conda-forge/linux-64/p-1.0-0.conda", f"{1:064x}"
    )
    try:
        with pytest.raises(FetchError, match="stalled"):
            fetch.fetch_archive(entry, tmp_path, [Mirror.parse(f"https://conda.anaconda.org/conda-forge={url}")])
    finally:
        server.closing.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


def test_a_ctrl_c_while_the_workers_start_stops_those_already_started(tmp_path: Path, monkeypatch) -> None:
    """Thread.start() waits on an Event, where a Ctrl-C lands: the workers started before it must be
    told to stop, not left downloading (and calling `progress`) behind the caller's back."""
    entries = [
        LockedPackage(
            f"p{i}",
            "1.0",
            "conda",
            "linux-64",
            f"https://conda.anaconda.org/conda-forge/linux-64/p{i}-1.0-0.conda",
            f"{i:064x}",
        )
        for i in range(4)
    ]
    saw_stop = threading.Event()

    def fetched(entry, cache_dir, mirrors, bundle, stop, watch):
        if stop.wait(2):
            saw_stop.set()
        raise download.Stopped(entry.filename)

    real_start, started = threading.Thread.start, []

    def start(self) -> None:
        if started:
            raise KeyboardInterrupt
        started.append(self)
        real_start(self)

    monkeypatch.setattr(fetch, "fetch_archive", fetched)
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(KeyboardInterrupt):
        fetch.fetch_archives(entries, tmp_path)
    monkeypatch.undo()
    assert saw_stop.wait(3), "the started worker never saw the stop flag"


@pytest.mark.parametrize("how", ["read-only", "a file"])
def test_a_cache_folder_that_cannot_be_written_is_named_with_the_flag(
    project: Project, channel: Path, wheels: Path, make_read_only, capsys, how: str
) -> None:
    """`archives/<sha256>/` read-only (another user's, a read-only mount) or a file: one line naming
    it and --cache-dir, exit 2, the env as it was."""
    change_lock(project, channel, wheels, conda=tuple(c for c in CONDA if c != "zlibstub"))
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    before = os.readlink(prefix)
    change_lock(project, channel, wheels)  # zlibstub back: one archive to fetch into the folder
    entry = next(p for p in read_lock(project.lock_path("py310")).packages if p.name == "zlibstub")
    folder = project.root / ".cache" / "archives" / entry.sha256
    if how == "a file":
        folder.write_text("")
    else:
        folder.mkdir()
        make_read_only(folder)
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 2
    err = without_progress(capsys.readouterr().err)
    problem, fix = (
        ("cannot be written", "pass a --cache-dir you can write")
        if how == "read-only"
        else ("is not a directory", "remove it: what the cache holds is fetched again")
    )
    assert err.startswith(f"error: --cache-dir {project.root / '.cache'}: {folder} {problem}"), err
    assert fix in err and len(err.splitlines()) == 1, err
    assert os.readlink(prefix) == before
    assert folder.is_file() if how == "a file" else list(folder.iterdir()) == []


def test_an_error_is_not_hidden_by_the_partial_it_leaves(tmp_path: Path, file_size_limit) -> None:
    """What is still buffered when a download fails cannot be flushed past a full disk or `ulimit -f`:
    the partial is closed without it, and the failure that ended the download is the one raised."""
    target = tmp_path / "pkg-1.0-0.conda"
    with pytest.raises(download.Stopped):
        with download.partial(target) as part:
            part.file.write(b"x" * 2000)  # buffered: 2000 bytes is less than the buffer holds
            file_size_limit(1000)
            raise download.Stopped(target.name)
    file_size_limit(None)
    assert (tmp_path / f".part-{target.name}").read_bytes() == b"x" * 1000  # kept for the next run to resume


@pytest.mark.parametrize("member", ["info/index.json", "info/paths.json"])
def test_an_archive_whose_metadata_is_no_file_is_refused_as_unreadable(tmp_path: Path, member: str) -> None:
    """A crafted archive with info/index.json or info/paths.json as a directory: one IntegrityError, no traceback."""
    import tarfile

    from bootstrap.errors import IntegrityError

    archive = tmp_path / "pkg-1.0-0.tar.bz2"
    with tarfile.open(archive, "w:bz2") as tar:
        entry = tarfile.TarInfo(member)
        entry.type = tarfile.DIRTYPE
        tar.addfile(entry)
    with pytest.raises(
        IntegrityError, match=f"^pkg-1.0-0.tar.bz2: not a readable conda archive \\({member} is not a file"
    ):
        fetch.check_archive_paths(archive)


def test_sizing_a_fetch_over_a_silent_network_gives_up_at_its_deadline(tmp_path: Path, monkeypatch) -> None:
    """A mirror whose host takes connections and never answers (a firewall that drops packets holds a
    connect as long): each HEAD would wait out its 10 s timeout, 16 at a time. The sizes known by the
    deadline are kept, the others are of unknown size, and the call returns at the deadline."""
    import socket

    local = tmp_path / "local.conda"
    local.write_bytes(b"x" * 1234)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # never accepted: each request's reply never comes
        host = f"127.0.0.1:{silent.getsockname()[1]}"
        entries = [
            LockedPackage(f"p{i}", "1.0", "conda", "linux-64", f"{CHANNEL}/linux-64/p{i}-1.0-0.conda", f"{i:064x}")
            for i in range(40)
        ]
        entries.append(LockedPackage("here", "1.0", "conda", "linux-64", local.as_uri(), "f" * 64))
        monkeypatch.setattr(fetch, "SIZE_DEADLINE_S", 1.0)
        started = time.monotonic()
        size = fetch.measure(entries, tmp_path / "cache", [Mirror.parse(f"conda-forge=http://{host}")])
        assert time.monotonic() - started < 5, "waited out the requests' own timeouts"
    assert (size.files, size.download_files, size.unknown) == (41, 41, 40)
    assert size.download_bytes == size.nbytes == 1234


def test_a_connect_that_never_completes_is_given_up_sooner_than_a_stalled_body(monkeypatch) -> None:
    """A host that drops packets (here: a listener whose accept queue is full, so the kernel drops each
    SYN) holds a connect as long as the socket's timeout: the connect waits CONNECT_S, and a server
    that is slow to answer once connected still has the request's whole timeout."""
    import socket

    monkeypatch.setattr(download, "CONNECT_S", 0.5)
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        queued = []
        with contextlib.suppress(TimeoutError):  # the kernel queues backlog + 1: fill it, whatever it is
            for _ in range(8):
                queued.append(socket.create_connection(("127.0.0.1", port), timeout=1.0))
        try:
            started = time.monotonic()
            with pytest.raises(OSError, match="timed out"):
                download.open_url(f"http://127.0.0.1:{port}/p-1.0-0.conda")
            assert time.monotonic() - started < 5
        finally:
            for client in queued:
                client.close()

    def answer_late(server: socket.socket) -> None:
        connection, _ = server.accept()
        with connection:
            connection.recv(65536)
            time.sleep(1.0)  # past CONNECT_S, inside the request's timeout
            connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")

    with socket.socket() as slow:
        slow.bind(("127.0.0.1", 0))
        slow.listen()
        answering = threading.Thread(target=answer_late, args=(slow,), daemon=True)
        answering.start()
        with download.open_url(f"http://127.0.0.1:{slow.getsockname()[1]}/p-1.0-0.conda") as response:
            assert response.read() == b"ok"
        answering.join(5)
