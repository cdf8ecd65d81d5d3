"""`make bench-fetch`: fetching archives from a server that drops connections, against a clean one.

A set of incompressible archives is served from a loopback HTTP server that
sends each connection at a fixed rate (a network link, not a memory copy),
and `fetch_archives` downloads them into an empty store, as `bootstrap env`
does, with the real waits between retries (RETRY_DELAYS_S). The flaky server
cuts every fifth GET at half its body; a cut download is retried and resumed
with a Range request. Runs alternate clean and flaky; medians, and their ratio.

    python scripts/bench_fetch.py                       20 archives of 8 MB at 10 MB/s a connection
    python scripts/bench_fetch.py --archives 10 --runs 1   a shorter run

Target (issue 23): flaky / clean <= 1.5.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bootstrap.install import download, fetch  # noqa: E402
from bootstrap.lock.lockfile import LockedPackage  # noqa: E402

DROP_EVERY = 5
TARGET = 1.5
_BLOCK = 64 << 10


class _Link(http.server.BaseHTTPRequestHandler):
    """`server.files` at `server.rate` bytes/s a connection, Range honoured; with `server.flaky`
    every DROP_EVERY-th GET is cut at half its body."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib name
        self._serve(body=False)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        server = self.server
        data = server.files[self.path]  # type: ignore[attr-defined]
        asked = self.headers.get("Range", "")
        start = int(asked[len("bytes=") : -1]) if asked.startswith("bytes=") else 0
        with server.lock:  # type: ignore[attr-defined]
            server.gets += int(body)  # type: ignore[attr-defined]
            cut = body and server.flaky and server.gets % DROP_EVERY == 0  # type: ignore[attr-defined]
            server.cuts += int(cut)  # type: ignore[attr-defined]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if not body:
            return
        rest = data[start:]
        rest = rest[: len(rest) // 2] if cut else rest
        began = time.monotonic()
        try:
            for offset in range(0, len(rest), _BLOCK):
                self.wfile.write(rest[offset : offset + _BLOCK])
                ahead = began + (offset + _BLOCK) / server.rate - time.monotonic()  # type: ignore[attr-defined]
                if ahead > 0:
                    time.sleep(ahead)
            self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True


def serve(files: dict, rate: float):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Link)
    server.daemon_threads = True
    server.files, server.rate, server.flaky = files, rate, False  # type: ignore[attr-defined]
    server.lock, server.gets, server.cuts = threading.Lock(), 0, 0  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def fetched_in(entries: list, scratch: Path, retries: list) -> float:
    store = Path(tempfile.mkdtemp(dir=scratch))
    started = time.perf_counter()
    fetch.fetch_archives(entries, store, watch=download.Watch(retrying=retries.append))
    return time.perf_counter() - started


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archives", type=int, default=20)
    parser.add_argument("--mb", type=int, default=8, help="size of each archive")
    parser.add_argument("--rate-mb", type=float, default=10.0, help="MB/s each connection is sent at")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    files = {f"/a{i}-1.0-py3-none-any.whl": os.urandom(args.mb << 20) for i in range(args.archives)}
    server = serve(files, args.rate_mb * (1 << 20))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    entries = [
        LockedPackage(path[1:].split("-")[0], "1.0", "pip", "linux-64", url + path, hashlib.sha256(data).hexdigest())
        for path, data in files.items()
    ]
    clean, flaky, retries = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as scratch:
        for _ in range(args.runs):
            server.flaky = False
            clean.append(fetched_in(entries, Path(scratch), []))
            server.flaky, server.gets = True, 0
            flaky.append(fetched_in(entries, Path(scratch), retries))
    server.shutdown()
    ratio = statistics.median(flaky) / statistics.median(clean)
    print(
        f"bench-fetch: {args.archives} archives of {args.mb} MB from a loopback server at {args.rate_mb:g} MB/s "
        f"a connection, 4 downloads at once, retry waits {download.RETRY_DELAYS_S} s, median of {args.runs} runs"
    )
    print(
        f"clean server                     {statistics.median(clean):6.2f} s   "
        f"(min {min(clean):.2f}, max {max(clean):.2f})"
    )
    print(
        f"drops 1 in {DROP_EVERY} GETs mid-file         {statistics.median(flaky):6.2f} s   "
        f"(min {min(flaky):.2f}, max {max(flaky):.2f}; {server.cuts} cuts and {len(retries)} retries "
        "over the runs, each resumed with Range)"
    )
    print(f"flaky / clean = {ratio:.2f} (target <= {TARGET:g}: {'met' if ratio <= TARGET else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
