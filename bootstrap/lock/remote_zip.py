"""A wheel on an HTTP server read as a seekable file through Range requests, so `zipfile` can take
one member (the METADATA) out of a 900 MB torch wheel by fetching its tail, its central directory
and that member only. This is how pip and uv read a wheel's metadata where the index serves no
PEP 658 `.metadata` file.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_CHUNK = 256 << 10  # each request fetches at least this much: zipfile reads in small pieces
_MAX_FETCHED = 16 << 20  # a central directory beyond this is not a wheel worth reading remotely


class RangeError(OSError):
    """The server does not answer Range requests (or the file is not what it said)."""


class RemoteFile(io.RawIOBase):
    """Read-only, seekable view of `url`; every read is one `Range: bytes=a-b` GET (206 expected)."""

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__()
        self.url, self.timeout = url, timeout
        self.position, self.fetched = 0, 0
        self._cache: dict[int, bytes] = {}  # start offset -> bytes fetched from there
        tail_start, tail = self._get(f"bytes=-{_CHUNK}")
        self.size = self._total
        self._cache[tail_start] = tail

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        wanted = min(len(view), self.size - self.position)
        if wanted <= 0:
            return 0
        data = self._cached(self.position, wanted)
        if data is None:
            start, data = self._get(f"bytes={self.position}-{min(self.size, self.position + max(wanted, _CHUNK)) - 1}")
            self._cache[start] = data
            data = data[:wanted]
        view[: len(data)] = data
        self.position += len(data)
        return len(data)

    def _cached(self, position: int, wanted: int) -> Optional[bytes]:
        for start, data in self._cache.items():
            if start <= position and position + wanted <= start + len(data):
                return data[position - start : position - start + wanted]
        return None

    def _get(self, byte_range: str) -> tuple[int, bytes]:
        import http.client
        from urllib.request import Request, urlopen

        try:
            with urlopen(Request(self.url, headers={"Range": byte_range}), timeout=self.timeout) as response:
                match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", response.headers.get("Content-Range", ""))
                if response.status != 206 or match is None:  # a 200 would be the whole wheel: not read
                    raise RangeError(f"{self.url}: no Range support (HTTP {response.status})")
                data = response.read(int(match[2]) - int(match[1]) + 1)
        except http.client.HTTPException as exc:
            raise RangeError(f"{self.url}: {exc}") from None
        self._total = int(match[3])
        self.fetched += len(data)
        if self.fetched > _MAX_FETCHED:
            raise RangeError(f"{self.url}: more than {_MAX_FETCHED} bytes read for its metadata")
        return int(match[1]), data
