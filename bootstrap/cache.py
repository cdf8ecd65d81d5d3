"""The package cache (`~/.cache/bootstrap`, `--cache-dir`): what it holds, and pruning it.

    archives/<sha256>/<file>     verified conda archives and wheels (fetch.py), with wheels' stamps
    pkgs/<name-version-build>/   rattler's extracted packages, which envs copy from (and `.lock`s)
    seals/<sha256>.json          what each extracted package looked like when sealed (env.py)
    locks/<sha256>.json          parsed locks (lockfile.py)

Envs hold copies, never links into it, so whatever goes costs a download or
an extraction later, never an env. `prune` keeps what the project's locks
install, on every platform, and removes the rest: what older locks and other
projects left behind (the other projects fetch theirs again).
Shell equivalent of the report: `du -sh ~/.cache/bootstrap/*`.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from bootstrap import generations as gens
from bootstrap.fsutil import remove_tree
from bootstrap.lockfile import LockedPackage, parsed_lock_path, read_lock
from bootstrap.project import Project

KINDS = ("archives", "pkgs", "seals", "locks")


@dataclass(frozen=True)
class Usage:
    kind: str  # one of KINDS
    entries: int
    bytes: int


@dataclass(frozen=True)
class PruneResult:
    removed: tuple[Usage, ...]
    kept_for: tuple[str, ...]  # the locks whose packages were kept


def usage(cache_dir: Path) -> list[Usage]:
    """Entries and bytes (as allocated on disk, `du`) of each part of the cache."""
    return [Usage(kind, len(_entries(cache_dir / kind)), sum(_disk_bytes(p) for p in _entries(cache_dir / kind)))
            for kind in KINDS]


def prune(cache_dir: Path, keep: Iterable[LockedPackage], lock_texts: Sequence[str]) -> list[Usage]:
    """Remove every entry not needed by `keep` (locked packages) or the parsed form of `lock_texts`;
    what was removed, per kind."""
    keep = list(keep)
    hashes = {e.sha256 for e in keep}
    stems = {e.stem for e in keep if e.manager == "conda"}
    wanted = {
        "archives": lambda p: p.name in hashes,
        "pkgs": lambda p: (p.name[:-len(".lock")] if p.name.endswith(".lock") else p.name) in stems,
        "seals": lambda p: p.name[:-len(".json")] in hashes,
        "locks": lambda p: p in {parsed_lock_path(cache_dir, text) for text in lock_texts},
    }
    removed = []
    for kind in KINDS:
        # Dot-files are the tools' own (rattler's `pkgs/.cache.lock`): never ours to remove.
        doomed = [p for p in _entries(cache_dir / kind) if not p.name.startswith(".") and not wanted[kind](p)]
        size = sum(_disk_bytes(p) for p in doomed)
        for path in doomed:
            if path.is_dir() and not path.is_symlink():
                remove_tree(path)
            else:
                path.unlink(missing_ok=True)
        removed.append(Usage(kind, len(doomed), size))
    return removed


def prune_for_project(project: Project, cache_dir: Path, waiting: Callable[[str], None]) -> PruneResult:
    """`prune` keeping every package of every lock of `project`, on every platform, while holding each
    of its envs' locks: a `make env` of the project waits rather than lose a package mid-install."""
    locks = [read_lock(path) for path in (project.lock_path(env) for env in project.env_names()) if path.is_file()]
    with contextlib.ExitStack() as held:
        for env in project.env_names():
            held.enter_context(gens.exclusive(gens.Layout(project.root / ".envs" / env), waiting))
        removed = prune(cache_dir, [p for lock in locks for p in lock.packages],
                        [lock.path.read_text(encoding="utf-8") for lock in locks])
    return PruneResult(tuple(removed), tuple(str(lock.path) for lock in locks))


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except FileNotFoundError:
        return []


def _disk_bytes(path: Path) -> int:
    """Bytes allocated to `path` and everything under it (`du -s`), each inode once."""
    if not path.is_dir() or path.is_symlink():
        return os.lstat(path).st_blocks * 512
    blocks = {}
    for root, dirs, files in os.walk(path):  # symlinked directories are not followed
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            info = os.lstat(name)
            blocks[(info.st_dev, info.st_ino)] = info.st_blocks * 512
    return sum(blocks.values())
