"""How an env's files come from the package caches: reflinks, hard links or copies (`env --link`).

`auto` takes the cheapest the file systems allow, found by trying it once per (cache, env) pair on a
small file of our own: a reflink (FICLONE) shares no writes and costs no data, a hard link costs no
data but shares the inode, a copy costs the whole file. Docs: docs/env.md, "Linking from the cache".
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES = ("auto", "reflink", "hardlink", "copy")
# Cheapest first: what `auto` tries, and what a refused mode falls back to.
_ORDER = ("reflink", "hardlink", "copy")
_NOUNS = {"reflink": "reflinks", "hardlink": "hard links", "copy": "copies"}
_FICLONE = 0x40049409  # _IOW(0x94, 9, int) from linux/fs.h
_probed: dict[tuple[int, int], str] = {}  # (cache st_dev, env st_dev) -> the cheapest mode that worked


@dataclass(frozen=True)
class LinkUse:
    """The mode asked for, the one rattler and uv were given, and why they differ (or "")."""

    requested: str
    used: str
    fallback: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"requested": self.requested, "used": self.used, "fallback": self.fallback or None}


def choose(requested: str, cache_dir: Path, env_dir: Path, env: Path) -> LinkUse:
    """The mode for linking from the package cache `cache_dir` (rattler's extracted packages, uv's
    unpacked wheels) into `env_dir`, where the env `env` is built: `requested`, or the next cheaper
    one where the file systems refuse it (a cache on another device: no hard link; ext4: no reflink)."""
    if requested == "copy":
        return LinkUse(requested, "copy")
    possible = supported(cache_dir, env_dir)
    if requested == "auto":
        return LinkUse(requested, possible)
    used = _ORDER[max(_ORDER.index(requested), _ORDER.index(possible))]
    if used == requested:
        return LinkUse(requested, used)
    return LinkUse(
        requested,
        used,
        f"--link {requested}: the file systems refuse {_NOUNS[requested]} from the package cache {cache_dir} "
        f"into {env} (another device, or none of those there), so its files are {_NOUNS[used]}",
    )


def supported(cache_dir: Path, env_dir: Path) -> str:
    """The cheapest mode that works from `cache_dir` into `env_dir` (the nearest of each that exists),
    tried once per pair of devices in this process."""
    source, target = _existing(cache_dir), _existing(env_dir)
    key = (os.stat(source).st_dev, os.stat(target).st_dev)
    if key not in _probed:
        _probed[key] = _probe(source, target)
    return _probed[key]


def _existing(path: Path) -> Path:
    return next(p for p in (path, *path.parents) if p.is_dir())


def _probe(source_dir: Path, target_dir: Path) -> str:
    """Try a reflink, then a hard link, of a small file made in `source_dir` into `target_dir`."""
    try:
        fd, source = tempfile.mkstemp(prefix=".link-probe-", dir=source_dir)
    except OSError:  # a cache we cannot write yet: the run fails on it with its own message
        return "copy"
    target = os.path.join(target_dir, f".link-probe-{os.getpid()}-{os.path.basename(source)}")
    try:
        os.write(fd, b"probe")
        if _reflink(source, fd, target):
            return "reflink"
        try:
            os.link(source, target)
            return "hardlink"
        except OSError:  # EXDEV, a file system without hard links, fs.protected_hardlinks
            return "copy"
    finally:
        os.close(fd)
        for path in (source, target):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _reflink(source: str, source_fd: int, target: str) -> bool:
    import fcntl
    import sys

    if sys.platform == "darwin":  # clonefile(2), which Python does not expose: `cp -c` makes one
        from bootstrap.runner import run

        return run(["cp", "-c", source, target], timeout=30).returncode == 0
    if not sys.platform.startswith("linux"):
        return False
    try:
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return False
    try:
        fcntl.ioctl(out, _FICLONE, source_fd)
        return True
    except OSError:  # EOPNOTSUPP, EXDEV, EINVAL: no reflinks here
        os.unlink(target)  # the name the hard link is tried at next
        return False
    finally:
        os.close(out)
