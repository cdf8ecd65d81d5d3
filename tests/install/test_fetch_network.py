"""Downloads over a network that misbehaves, against real loopback HTTP servers: a connection cut
mid-file, 503s, servers that honour Range and one that ignores it, a partial holding other bytes,
a server that keeps failing, one behind Basic auth (`.netrc`), and the progress a log gets."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import os
import sys
import threading
from pathlib import Path
from typing import Iterator, Optional

import pytest

from bootstrap.errors import FetchError, IntegrityError
from bootstrap.install import download, fetch
from bootstrap.lock.lockfile import LockedPackage
from tests.fixtures.conda_channel import running

DATA = os.urandom(3 << 20)  # several of fetch's blocks, so a cut and a resume land mid-file
NAME = "p-1.0-py3-none-any.whl"  # a wheel: no conda archive check, only the hash


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Serves `server.files`; answers the statuses queued in `server.fail` first, cuts the next
    `server.drops` bodies at half, honours `Range: bytes=N-` only with `server.ranges`, and wants
    Basic `server.login` where set. Every request is logged as (method, path, Range header)."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib name
        self._serve(body=False)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        server = self.server
        with server.lock:  # type: ignore[attr-defined]
            server.log.append((self.command, self.path, self.headers.get("Range")))  # type: ignore[attr-defined]
            status = server.fail.pop(0) if body and server.fail else None  # type: ignore[attr-defined]
            cut = body and server.drops > 0  # type: ignore[attr-defined]
            server.drops -= int(cut)  # type: ignore[attr-defined]
        login = server.login  # type: ignore[attr-defined]
        if login and self.headers.get("Authorization") != "Basic " + base64.b64encode(login.encode()).decode():
            status = 401
        if status is not None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = server.files[self.path]  # type: ignore[attr-defined]
        asked = self.headers.get("Range", "")
        start = int(asked[len("bytes=") : -1]) if server.ranges and asked.startswith("bytes=") else 0  # type: ignore[attr-defined]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if body:
            rest = data[start:]
            self.wfile.write(rest[: len(rest) // 2] if cut else rest)
            self.wfile.flush()
        self.close_connection = True


@contextlib.contextmanager
def flaky_server(
    files: dict, ranges: bool = True, drops: int = 0, fail: tuple = (), login: Optional[str] = None
) -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    server.daemon_threads = True
    server.files, server.ranges, server.drops = files, ranges, drops  # type: ignore[attr-defined]
    server.fail, server.login = list(fail), login  # type: ignore[attr-defined]
    server.log, server.lock = [], threading.Lock()  # type: ignore[attr-defined]
    with running(server) as url:
        server.url = url  # type: ignore[attr-defined]
        yield server


def entry_for(url: str, data: bytes = DATA) -> LockedPackage:
    return LockedPackage("p", "1.0", "pip", "linux-64", f"{url}/{NAME}", hashlib.sha256(data).hexdigest())


def gets(server) -> list:
    return [asked for method, _, asked in server.log if method == "GET"]


def test_a_connection_cut_mid_file_is_resumed_with_a_range_request(tmp_path: Path) -> None:
    said: list = []
    with flaky_server({f"/{NAME}": DATA}, drops=1) as server:
        entry = entry_for(server.url)
        path = fetch.fetch_archive(entry, tmp_path, watch=download.Watch(retrying=said.append))
    assert path.read_bytes() == DATA
    assert gets(server) == [None, f"bytes={len(DATA) // 2}-"]
    assert said == [
        f"{NAME}: connection closed after {len(DATA) // 2} of {len(DATA)} bytes from "
        f"{server.url}/{NAME}; retrying (2 of 4)"
    ]
    assert sorted(p.name for p in path.parent.iterdir()) == [f".{NAME}.verified", NAME]  # no partial left


def test_a_download_given_up_is_resumed_by_the_next_run(tmp_path: Path) -> None:
    with flaky_server({f"/{NAME}": DATA}, drops=4) as server:  # every attempt of the first run is cut
        entry = entry_for(server.url)
        with pytest.raises(FetchError, match="connection closed after .*, 4 attempts"):
            fetch.fetch_archive(entry, tmp_path)
        part = fetch.archive_path(tmp_path, entry).with_name(f".part-{NAME}")
        kept = part.stat().st_size
        assert 0 < kept < len(DATA) and not fetch.archive_path(tmp_path, entry).exists()
        server.log.clear()
        assert fetch.fetch_archive(entry, tmp_path).read_bytes() == DATA
    assert gets(server) == [f"bytes={kept}-"]
    assert not part.exists()


def test_503_twice_then_served(tmp_path: Path) -> None:
    said: list = []
    with flaky_server({f"/{NAME}": DATA}, fail=(503, 503)) as server:
        path = fetch.fetch_archive(entry_for(server.url), tmp_path, watch=download.Watch(retrying=said.append))
    assert path.read_bytes() == DATA
    assert said == [
        f"{NAME}: HTTP Error 503: Service Unavailable from {server.url}/{NAME}; retrying ({n} of 4)" for n in (2, 3)
    ]


def test_a_server_that_ignores_range_starts_the_file_over(tmp_path: Path) -> None:
    """Its 200 to the resume holds the whole file: appended to the half already written, the
    result would be half again too long and fail the hash."""
    with flaky_server({f"/{NAME}": DATA}, ranges=False, drops=1) as server:
        path = fetch.fetch_archive(entry_for(server.url), tmp_path)
    assert gets(server) == [None, f"bytes={len(DATA) // 2}-"]
    assert path.read_bytes() == DATA


def test_a_resumed_file_that_does_not_hash_is_fetched_whole_once(tmp_path: Path) -> None:
    """An earlier run's partial holds other bytes: the resume completes a wrong file, which is
    dropped and fetched from its first byte."""
    said: list = []
    with flaky_server({f"/{NAME}": DATA}) as server:
        entry = entry_for(server.url)
        part = fetch.archive_path(tmp_path, entry).with_name(f".part-{NAME}")
        part.parent.mkdir(parents=True)
        part.write_bytes(b"\0" * 1000)
        path = fetch.fetch_archive(entry, tmp_path, watch=download.Watch(retrying=said.append))
    assert path.read_bytes() == DATA
    assert gets(server) == ["bytes=1000-", None]
    assert said == [f"{NAME}: the resumed download does not match the lock's sha256; fetching it whole again"]


def test_a_resumed_file_still_wrong_when_fetched_whole_is_refused(tmp_path: Path) -> None:
    wrong = os.urandom(len(DATA))
    with flaky_server({f"/{NAME}": wrong}) as server:
        entry = entry_for(server.url)  # the lock's hash is DATA's
        part = fetch.archive_path(tmp_path, entry).with_name(f".part-{NAME}")
        part.parent.mkdir(parents=True)
        part.write_bytes(wrong[:1000])
        with pytest.raises(IntegrityError) as refused:
            fetch.fetch_archive(entry, tmp_path)
    assert gets(server) == ["bytes=1000-", None]
    assert str(refused.value).startswith(
        f"{NAME}: sha256 {hashlib.sha256(wrong).hexdigest()} does not match the "
        f"lock's {entry.sha256} (fetched from {server.url}/{NAME})"
    )
    assert "\n" not in str(refused.value)
    assert list(part.parent.iterdir()) == []  # no partial of the wrong bytes to resume


def test_a_server_that_keeps_failing_is_named_once_without_credentials(tmp_path: Path) -> None:
    said: list = []
    with flaky_server({f"/{NAME}": DATA}, fail=(500,) * 10) as server:
        entry = entry_for(server.url.replace("http://", "http://bob:s3cret@"))
        with pytest.raises(FetchError) as failed:
            fetch.fetch_archive(entry, tmp_path, watch=download.Watch(retrying=said.append))
    assert len(gets(server)) == 4
    message = str(failed.value)
    assert message == (
        f"cannot fetch {NAME} from {server.url}/{NAME}: HTTP Error 500: Internal Server Error, 4 "
        f"attempts; nothing was installed (offline? serve it from a mirror: --mirror {server.url}"
        "=URL_OR_DIR)"
    )
    assert "s3cret" not in message + "".join(said) and len(said) == 3


def test_a_4xx_is_not_retried_and_netrc_is_honoured(tmp_path: Path, monkeypatch) -> None:
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))
    with flaky_server({f"/{NAME}": DATA}, login="bob:s3cret") as server:
        entry = entry_for(server.url)
        with pytest.raises(FetchError, match="HTTP Error 401") as refused:
            fetch.fetch_archive(entry, tmp_path / "a")
        assert len(gets(server)) == 1 and "s3cret" not in str(refused.value)
        netrc.write_text("machine 127.0.0.1 login bob password s3cret\n")
        netrc.chmod(0o600)
        assert fetch.fetch_archive(entry, tmp_path / "b").read_bytes() == DATA


def test_a_url_s_own_login_is_sent_at_once_and_not_shown(tmp_path: Path, monkeypatch) -> None:
    """A mirror that answers 401 without a challenge (no WWW-Authenticate) still gets the URL's login:
    it is sent with the first request, as a .netrc login is."""
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with flaky_server({f"/{NAME}": DATA}, login="bob:s3cret") as server:
        entry = entry_for(server.url.replace("http://", "http://bob:s3cret@"))
        assert fetch.fetch_archive(entry, tmp_path / "a").read_bytes() == DATA
        assert len(gets(server)) == 1
        wrong = entry_for(server.url.replace("http://", "http://bob:wrong@"))
        with pytest.raises(FetchError, match="HTTP Error 401") as refused:
            fetch.fetch_archive(wrong, tmp_path / "b")
        assert "bob:wrong" not in str(refused.value)


def test_a_log_ends_on_a_done_line_even_between_progress_lines(tmp_path: Path, capsys) -> None:
    from bootstrap.commands import env as env_command

    with flaky_server({f"/{NAME}": DATA}) as server:
        with env_command.progress_feedback(tty=False) as feedback:
            fetch.fetch_archives([entry_for(server.url)], tmp_path, progress=feedback.fetched, watch=feedback.watch)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("fetching 1 file, ") and lines[-1].endswith(", 1 of 1 files (done)"), lines
    assert len(lines) == 2  # PLAIN_EVERY_S had not passed: the total, then the done line only


def test_a_log_gets_the_total_then_a_line_every_few_seconds(tmp_path: Path, monkeypatch, capsys) -> None:
    from bootstrap.commands import env as env_command

    monkeypatch.setattr(env_command, "PLAIN_EVERY_S", 0.0)
    files = {f"/{NAME}": DATA, "/q-1.0-py3-none-any.whl": DATA[:1000]}
    with flaky_server(files) as server:
        entries = [
            entry_for(server.url),
            LockedPackage(
                "q",
                "1.0",
                "pip",
                "linux-64",
                f"{server.url}/q-1.0-py3-none-any.whl",
                hashlib.sha256(DATA[:1000]).hexdigest(),
            ),
        ]
        with env_command.progress_feedback(tty=False) as feedback:
            fetch.fetch_archives(entries, tmp_path, progress=feedback.fetched, watch=feedback.watch)
        lines = capsys.readouterr().err.splitlines()
        with env_command.progress_feedback(tty=False, quiet=True) as feedback:  # --json
            fetch.fetch_archives(entries, tmp_path / "again", progress=feedback.fetched, watch=feedback.watch)
    assert lines[0] == f"fetching 2 files, {(len(DATA) + 1000) / 2**20:.1f} MiB"
    assert len(lines) > 2 and all(
        line.startswith("fetched ") and " of 3.0 MiB, " in line and "/s" in line for line in lines[1:]
    )
    # the last line says where the bytes ended, however long since the one before
    assert lines[-1].startswith("fetched 3.0 MiB of 3.0 MiB, ") and lines[-1].endswith(", 2 of 2 files (done)")
    assert capsys.readouterr().err == ""


def test_retry_lines_from_fetching_threads_never_run_together(capfd) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from bootstrap.commands import env as env_command

    lines = [f"pkg{i}-1.0.conda: connection reset from the server; retrying (1 of 4)" for i in range(2000)]
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can: where a line could split, it does
    try:
        with env_command.progress_feedback(tty=False, quiet=True) as feedback:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(feedback.watch.retrying, lines))
    finally:
        sys.setswitchinterval(before)
    assert sorted(capfd.readouterr().err.splitlines()) == sorted(lines)
