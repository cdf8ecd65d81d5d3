"""A wheel's METADATA read over HTTP Range requests, where the index serves no `.metadata` file."""

from __future__ import annotations

import contextlib
import http.server
import re
from pathlib import Path
from typing import Iterator

import pytest

from bootstrap.lock.pip_wheels import read_metadata
from bootstrap.lock.remote_zip import RangeError, RemoteFile
from tests.fixtures.conda_channel import running
from tests.fixtures.wheels import build_wheel


class _Handler(http.server.BaseHTTPRequestHandler):
    ranges = True  # False: a server that ignores Range and sends the whole file
    root: Path
    sent = 0  # body bytes sent, over every request

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.root / self.path.lstrip("/")
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if self.ranges and match:
            start, end = match.groups()
            first = len(data) - int(end) if not start else int(start)
            last = len(data) - 1 if not start or not end else min(int(end), len(data) - 1)
            body = data[max(first, 0) : last + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {max(first, 0)}-{last}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        type(self).sent += len(body)
        with contextlib.suppress(OSError):  # the client may stop reading a whole-file answer
            self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def serve(root: Path, ranges: bool) -> Iterator[tuple[str, type]]:
    handler = type("Handler", (_Handler,), {"root": root, "ranges": ranges, "sent": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    with running(server) as url:
        yield url, handler


@pytest.fixture(scope="module")
def big_wheel(tmp_path_factory) -> Path:
    """A wheel with a central directory larger than one Range request and a large incompressible member."""
    import os

    files = {f"bigpkg/module_{i:05d}.py": f"X = {i}\n" for i in range(6000)}
    files["bigpkg/blob.bin"] = os.urandom(3 << 20)
    return build_wheel(
        tmp_path_factory.mktemp("wheels"),
        "bigpkg",
        "1.0",
        requires=("numpy>=1.26", "nvidia-cublas-cu12==12.8.4.1; platform_system == 'Linux'"),
        files=files,
    )


def test_metadata_comes_from_a_few_ranges_of_the_wheel(big_wheel: Path) -> None:
    with serve(big_wheel.parent, ranges=True) as (url, handler):
        metadata = read_metadata(f"{url}/{big_wheel.name}", offline=False)  # no .metadata beside it: 404
        remote = RemoteFile(f"{url}/{big_wheel.name}", timeout=10)
    assert metadata is not None and "Requires-Dist: nvidia-cublas-cu12==12.8.4.1" in metadata
    assert remote.size == big_wheel.stat().st_size
    assert handler.sent < big_wheel.stat().st_size / 2  # the blob was never fetched


def test_a_server_without_range_support_is_not_read_whole(big_wheel: Path) -> None:
    with serve(big_wheel.parent, ranges=False) as (url, _):
        assert read_metadata(f"{url}/{big_wheel.name}", offline=False) is None
        with pytest.raises(RangeError, match="no Range support"):
            RemoteFile(f"{url}/{big_wheel.name}", timeout=10)


def test_offline_reads_no_remote_wheel(big_wheel: Path) -> None:
    with serve(big_wheel.parent, ranges=True) as (url, handler):
        assert read_metadata(f"{url}/{big_wheel.name}", offline=True) is None
    assert handler.sent == 0
