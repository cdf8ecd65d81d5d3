"""File-system helpers with the reliability rules of DESIGN.md."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]


def atomic_write_text(path: PathLike, text: str) -> None:
    """Write `text` to `path` so that readers see the old or the new file, never half.

    The temp file lives in the same directory so the final `os.replace` is a
    rename on one file system; it is fsynced first so a crash cannot leave an
    empty file behind the new name.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks (`sha256sum FILE`)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()
