"""uv's unpacked wheels in the package cache (`<cache>/uv`), and the seals that vouch for them.

uv hard-links an env's pip files from its unpacked wheels (`archive-v0/<id>/`) and trusts them: an
edit made through one env's link would reach every env installed after it. So with hard links, each
unpacked wheel is checked against its seal before uv links from it, and one edited since is dropped
with `uv cache clean NAME`, which makes uv unpack it again from the checked wheel. Docs: docs/env.md,
"The package cache and its seals".
"""

from __future__ import annotations

import base64
import csv
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

from bootstrap.errors import ToolError
from bootstrap.fsutil import sha256_file
from bootstrap.install.store import compare, fingerprint, read_seal, reseal, seal_time, write_seal
from bootstrap.lock.lockfile import LockedPackage, loose_version
from bootstrap.lock.pip import PipOptions, uv_binary
from bootstrap.prefix import normalise
from bootstrap.runner import run

SEAL_HEADER = "bootstrap-wheel-seal 3\n"
UV_DIR = "uv"  # uv's cache inside the package cache: one file system pair to probe, one `--cache-dir`


def uv_cache(cache_dir: Path) -> Path:
    return cache_dir / UV_DIR


def archives(cache_dir: Path) -> list[Path]:
    root = uv_cache(cache_dir) / "archive-v0"
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()) if root.is_dir() else []


def _seal_path(cache_dir: Path, archive: Path) -> Path:
    return cache_dir / "seals" / f"uv-{archive.name}.json"


def of(cache_dir: Path, entries: Sequence[LockedPackage]) -> list[Path]:
    """The unpacked wheels an install of `entries` may link from: every version of those names (a
    version written otherwise than the lock's must not pass unchecked), and any whose RECORD is gone.
    A cache that also holds other projects' wheels need not be walked whole."""
    names = {"", *(normalise(e.name) for e in entries)}
    return [archive for archive in archives(cache_dir) if distribution(archive)[0] in names]


def edited(cache_dir: Path, entries: Sequence[LockedPackage]) -> list[tuple[Path, str]]:
    """(unpacked wheel, distribution name) of each one `of` `entries` whose files changed since it was
    sealed, or, unsealed or with changed inodes, no longer match its RECORD. The others are sealed as
    they are."""
    found, at = [], None
    for archive in of(cache_dir, entries):
        now = fingerprint(archive)
        sealed = read_seal(_seal_path(cache_dir, archive), SEAL_HEADER)
        state = "touched" if sealed is None else compare(sealed, now)
        if state == "sealed":
            continue
        if state == "touched":
            at = at or seal_time(cache_dir)  # before hashing: a change made while it hashes is one after the seal
            if _matches_record(archive):
                write_seal(_seal_path(cache_dir, archive), SEAL_HEADER, now, at)
                continue
        found.append((archive, distribution(archive)[0]))
    return found


def clean(cache_dir: Path, names: Sequence[str], held: Sequence[int] = ()) -> None:
    """`uv cache clean NAME...`: uv forgets every unpacked wheel of those distributions, and unpacks
    the ones a later install needs again from their checked wheels. uv inherits `held` (see `pip.install`)."""
    _uv_cache(cache_dir, ["clean", *names], f"clean of the unpacked wheels {', '.join(names)}", held)


def prune_unreachable(cache_dir: Path) -> None:
    """`uv cache prune`: what no entry of uv's cache points to, such as an unpacked wheel whose
    pointer is gone (`clean` finds those by no name)."""
    _uv_cache(cache_dir, ["prune"], "prune", ())


def _uv_cache(cache_dir: Path, args: Sequence[str], what: str, held: Sequence[int]) -> None:
    # From /: uv reads no uv.toml of whatever project we are in.
    argv = [uv_binary(PipOptions()), "cache", *args[:1], "--cache-dir", str(uv_cache(cache_dir)), *args[1:]]
    done = run(argv, timeout=600, cwd="/", pass_fds=held)
    if done.returncode != 0:
        raise ToolError(f"uv cache {what} failed: {done.stderr.strip()}")


@dataclass(frozen=True)
class Checking:
    """The package cache, and `edited` of its unpacked wheels under way in another thread."""

    cache_dir: Path
    edited: Future[list[tuple[Path, str]]]


def seal_all(cache_dir: Path, checked: Sequence[Path] = ()) -> None:
    """Seal what uv unpacked in this run (no seal yet), and again the unpacked wheels `checked` by
    `edited` before uv linked from them: new links changed their inodes' ctimes, not their files.
    Only those: moving on the seal of one not checked could hide an edit its ctime alone shows."""
    wanted = {p.name for p in checked}
    prints, resealed = {}, []
    for archive in archives(cache_dir):
        if read_seal(_seal_path(cache_dir, archive), SEAL_HEADER) is None:
            prints[archive] = fingerprint(archive)
        elif archive.name in wanted:
            resealed.append(_seal_path(cache_dir, archive))
    if prints or resealed:
        at = seal_time(cache_dir)
        for archive, print_ in prints.items():
            write_seal(_seal_path(cache_dir, archive), SEAL_HEADER, print_, at)
        for path in resealed:
            reseal(path, SEAL_HEADER, at)


def _record(archive: Path) -> Optional[Path]:
    return next(iter(sorted(archive.glob("*.dist-info/RECORD"))), None)


def pins(entries: Iterable[LockedPackage]) -> set[tuple[str, str]]:
    """(PEP 503 name, version) of each pip entry, as `pinned` holds an unpacked wheel against them."""
    return {(normalise(e.name), loose_version(e.version)) for e in entries if e.manager == "pip"}


def pinned(archive: Path, pins: set[tuple[str, str]]) -> bool:
    """Whether the wheel unpacked at `archive` is one of `pins`."""
    name, version = distribution(archive)
    return (name, loose_version(version)) in pins


def distribution(archive: Path) -> tuple[str, str]:
    """(PEP 503 name, version) of the wheel unpacked at `archive`, from its `.dist-info`'s name;
    ("", "") without one."""
    record = _record(archive)
    if record is None:
        return "", ""
    name, _, version = record.parent.name[: -len(".dist-info")].rpartition("-")
    return normalise(name), version


def _matches_record(archive: Path) -> bool:
    """Every file the wheel's RECORD lists with a sha256 still has it."""
    record = _record(archive)
    if record is None:
        return False
    try:
        rows = list(csv.reader(record.read_text(encoding="utf-8").splitlines()))
        for row in rows:
            if len(row) < 2 or not row[1].startswith("sha256="):
                continue
            value = row[1][len("sha256=") :]
            digest = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
            if sha256_file(archive / row[0]) != digest:
                return False
    except (OSError, ValueError):
        return False
    return True
