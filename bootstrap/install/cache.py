"""The package cache (`~/.cache/bootstrap`, `--cache-dir`): what it holds, and pruning it.

`prune` holds the cache's flock exclusively, `env` and `bundle` hold it shared, so a prune never
takes a package from under an install. Docs: docs/env.md, "The package cache and its seals".
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from bootstrap.errors import InputError
from bootstrap.fsutil import flocked, remove_tree
from bootstrap.install import wheelstore
from bootstrap.lock.lockfile import LockedPackage, read_lock
from bootstrap.project import Project
from bootstrap.report import result

KINDS = ("archives", "pkgs", "wheels", "seals")  # "wheels": the wheels uv unpacked, envs link from them
_PARTS = {"wheels": wheelstore.UV_DIR + "/archive-v0"}  # where a kind's entries are, if not in `<cache>/<kind>`
_WRITABLE = "pass a --cache-dir you can write; the default is ~/.cache/bootstrap"


@dataclass(frozen=True)
class Usage:
    kind: str  # one of KINDS
    entries: int
    bytes: int


@result
class PruneResult:
    removed: tuple[Usage, ...]
    left: tuple[Usage, ...]  # entries it could not remove (another user's, in a shared cache)
    kept_for: tuple[str, ...]  # the locks whose packages were kept


@result
class CacheReport:
    """What `bootstrap cache` says: the cache's parts now, and what a prune did (None without one)."""

    cache_dir: Path
    usage: tuple[Usage, ...]
    pruned: Optional[PruneResult] = None

    def to_dict(self) -> dict[str, Any]:
        def by_kind(usages: tuple[Usage, ...]) -> dict[str, dict[str, int]]:
            return {u.kind: {"entries": u.entries, "bytes": u.bytes} for u in usages}

        pruned = self.pruned
        return {
            "cache_dir": str(self.cache_dir),
            "usage": by_kind(self.usage),
            "removed": None if pruned is None else by_kind(pruned.removed),
            "left": None if pruned is None else by_kind(pruned.left),
            "kept_for": None if pruned is None else list(pruned.kept_for),
        }


def default_cache_dir() -> Path:
    """`$BOOTSTRAP_CACHE_DIR`, else `$XDG_CACHE_HOME/bootstrap`, else `~/.cache/bootstrap`."""
    root = os.environ.get("BOOTSTRAP_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "bootstrap"
    )
    return Path(root)


def usage(cache_dir: Path) -> list[Usage]:
    """Entries and bytes (as allocated on disk, `du`) of each part of the cache."""
    check_cache_dir(cache_dir)
    return [
        Usage(kind, len(entries), sum(_disk_bytes(p) for p in entries))
        for kind, entries in ((kind, _entries(cache_dir, kind)) for kind in KINDS)
    ]


@contextlib.contextmanager
def cache_lock(cache_dir: Path, notify: Callable[[str], None], shared: bool) -> Iterator[None]:
    """Runs that use the cache (`env`, `bundle`) hold it shared; `prune` exclusive, so it never takes
    a package from under an install, of whichever project or prefix."""
    check_cache_dir(cache_dir)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # not ours to create in, or a read-only mount: `_check_writable` sees only what exists
        raise _unusable(cache_dir, exc) from None
    _check_writable(cache_dir)
    waiting = (
        f"waiting for `bootstrap cache --prune` on {cache_dir} to finish ..."
        if shared
        else f"waiting for the runs of `bootstrap env` or `bundle` using {cache_dir} to finish ..."
    )
    with flocked(cache_dir / ".lock", notify, waiting, shared=shared):
        yield


def prune(cache_dir: Path, keep: Iterable[LockedPackage]) -> tuple[list[Usage], list[Usage]]:
    """Remove every entry not needed by `keep` (locked packages):
    (removed, left: entries it could not remove, e.g. another user's), per kind."""
    keep = list(keep)
    hashes = {e.sha256 for e in keep}
    stems = {e.stem for e in keep if e.manager == "conda"}
    pins = wheelstore.pins(keep)
    wanted = {
        "archives": lambda p: p.name in hashes,
        "pkgs": lambda p: (p.name[: -len(".lock")] if p.name.endswith(".lock") else p.name) in stems,
        "wheels": lambda p: not wheelstore.distribution(p)[0] or wheelstore.pinned(p, pins),  # nameless: not ours
        "seals": lambda p: p.name[: -len(".json")] in hashes or _unpacked_there(cache_dir, p),
    }
    removed, left = [], []
    # uv's part first: the one step another tool does, so a uv that fails leaves the cache as it was
    for kind in sorted(KINDS, key=lambda kind: kind != "wheels"):
        doomed = [p for p in _entries(cache_dir, kind) if not wanted[kind](p)]
        if kind == "wheels":
            removed_wheels, left_wheels = _prune_unpacked(cache_dir, doomed)
            removed.append(removed_wheels)
            left.append(left_wheels)
            continue
        if kind == "archives":  # downloads killed runs left in kept entries: nobody fetches while prune holds the flock
            doomed += [
                part
                for p in _entries(cache_dir, kind)
                if wanted[kind](p) and p.is_dir() and not p.is_symlink()
                for part in sorted(p.glob(".part-*"))
            ]
        sizes = {p: _disk_bytes(p) for p in doomed}
        for path in doomed:
            if path.is_dir() and not path.is_symlink():
                remove_tree(path)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
        stayed = [p for p in doomed if os.path.lexists(p)]
        removed.append(Usage(kind, len(doomed) - len(stayed), sum(sizes[p] for p in doomed if p not in stayed)))
        left.append(Usage(kind, len(stayed), sum(sizes[p] for p in stayed)))
    return removed, left


def _unpacked_there(cache_dir: Path, seal: Path) -> bool:
    """Whether `seal` is the seal of an unpacked wheel still in uv's cache."""
    name = seal.name[: -len(".json")]
    return name.startswith("uv-") and (cache_dir / _PARTS["wheels"] / name[len("uv-") :]).is_dir()


def _prune_unpacked(cache_dir: Path, doomed: list[Path]) -> tuple[Usage, Usage]:
    """Remove the unpacked wheels `doomed` by `uv cache clean` of their names (uv keeps pointers to
    them elsewhere in its cache, which a bare removal would leave dangling), then what no pointer
    reaches (`uv cache prune`). That also drops the kept versions of those names: the next install
    unpacks them again from their checked wheels."""
    names = sorted({wheelstore.distribution(p)[0] for p in doomed})
    going = [p for p in _entries(cache_dir, "wheels") if wheelstore.distribution(p)[0] in names]
    sizes = {p: _disk_bytes(p) for p in going}
    if names:
        wheelstore.clean(cache_dir, names)
        wheelstore.prune_unreachable(cache_dir)
    stayed = [p for p in going if p.exists()]
    gone = [p for p in going if p not in stayed]
    return Usage("wheels", len(gone), sum(sizes[p] for p in gone)), Usage(
        "wheels", len(stayed), sum(sizes[p] for p in stayed)
    )


def _lock_paths(project: Project, env: str) -> list[Path]:
    """Every lock of `env`: one per torch variant its spec declares."""
    from bootstrap.lock.spec import read_spec
    from bootstrap.lock.variants import variant_locks

    return [path for _, path in variant_locks(project, env, read_spec(project.spec_path(env)))]


def prune_for_project(project: Project, cache_dir: Path, waiting: Callable[[str], None]) -> PruneResult:
    """`prune` keeping every package of every lock of `project`, on every platform. Refused while an
    env of the project has no lock: pruning would drop all it installs."""
    envs = project.resolve_envs([])  # InputError without env specs: not a project
    paths = [(env, path) for env in envs for path in _lock_paths(project, env)]
    missing = [(env, path) for env, path in paths if not path.is_file()]
    if missing:
        env, path = missing[0]
        raise InputError(
            path,
            f"missing: pruning now would drop every package of {env} it installs",
            "run `make lock` first, or pass --root for the project whose cache this is",
        )
    locks = [read_lock(path) for _, path in paths]
    check_cache_dir(cache_dir)
    if (cache_dir / "conda-meta").is_dir() or (cache_dir / "pkgs" / "urls.txt").is_file():
        # conda's own pkgs/ (a Miniconda root given by mistake): pruning it would empty conda's cache
        raise InputError(
            f"--cache-dir {cache_dir}",
            "is a conda installation, not bootstrap's package cache",
            "pass the --cache-dir that `make env` uses (default ~/.cache/bootstrap)",
        )
    if not cache_dir.exists():
        return PruneResult(removed=(), left=(), kept_for=tuple(str(lock.path) for lock in locks))
    with cache_lock(cache_dir, waiting, shared=False):
        removed, left = prune(cache_dir, [p for lock in locks for p in lock.packages])
    return PruneResult(removed=tuple(removed), left=tuple(left), kept_for=tuple(str(lock.path) for lock in locks))


def check_cache_dir(cache_dir: Path) -> None:
    """InputError, before anything is created, if `cache_dir` is a file or lies under one."""
    try:
        dangling = next((p for p in (cache_dir, *cache_dir.parents) if p.is_symlink() and not p.exists()), None)
        if dangling is not None:  # e.g. to a scratch directory purged since: mkdir would fail on it
            raise InputError(
                f"--cache-dir {cache_dir}",
                f"{dangling} is a symlink to {os.readlink(dangling)}, which does not exist",
                "create what it points to, or pass another --cache-dir",
            )
        existing = next(p for p in (cache_dir, *cache_dir.parents) if p.exists())
        if not existing.is_dir():
            problem = "not a directory" if existing == cache_dir else f"{existing} is not a directory"
            raise InputError(
                f"--cache-dir {cache_dir}",
                problem,
                "pass a directory as --cache-dir; the default is ~/.cache/bootstrap",
            )
    except PermissionError as exc:  # a directory on the way we may not look into
        raise _unusable(cache_dir, exc) from None


def _check_writable(cache_dir: Path) -> None:
    """Refuse a cache or part of it that cannot be written (read-only mount, another user's): rattler
    would fail halfway through a generation, with a message naming neither the cache nor the flag.
    Refuse a `.lock` that is not a file as well: the cache's flock cannot be taken on it."""
    for path in (cache_dir, *(cache_dir / kind for kind in KINDS)):
        if os.path.lexists(path) and not path.is_dir():  # a stray file, a dangling link: a fetch would fail on it
            raise InputError(
                f"--cache-dir {cache_dir}",
                f"{path} is not a directory",
                "remove it: what the cache holds is fetched again; or pass another --cache-dir",
            )
        if path.is_dir() and not os.access(path, os.W_OK):  # access(2) answers EROFS even to root
            raise InputError(
                f"--cache-dir {cache_dir}",
                f"{path} cannot be written (a read-only file system, or not yours)",
                _WRITABLE,
            )
    flock = cache_dir / ".lock"
    if os.path.lexists(flock) and not flock.is_file():  # open(2) fails on a directory, waits on a FIFO
        raise InputError(
            f"--cache-dir {cache_dir}",
            f"{flock} is not a file",
            "remove it: it only holds the cache's flock; or pass another --cache-dir",
        )


def _unusable(cache_dir: Path, exc: OSError) -> InputError:
    return InputError(f"--cache-dir {cache_dir}", f"cannot be used: {exc.strerror}", _WRITABLE)


def unwritable(cache_dir: Path, folder: Path, exc: OSError) -> InputError:
    """The one line for a folder inside the cache (`archives/<sha256>/`) that a fetch cannot write in:
    another user's, on a read-only mount, or a file in its place."""
    if os.path.lexists(folder) and not folder.is_dir():
        return InputError(
            f"--cache-dir {cache_dir}",
            f"{folder} is not a directory",
            "remove it: what the cache holds is fetched again; or pass another --cache-dir",
        )
    return InputError(f"--cache-dir {cache_dir}", f"{folder} cannot be written ({exc.strerror})", _WRITABLE)


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _entries(cache_dir: Path, kind: str) -> list[Path]:
    """The entries of one part that are bootstrap's or rattler's to manage, by their names: anything
    else (a stray file, a tool's dot-file such as `pkgs/.cache.lock`) is left alone, and a part that
    is a symlink is never followed."""
    parts = Path(_PARTS.get(kind, kind)).parts
    directory = cache_dir.joinpath(*parts)
    if any(cache_dir.joinpath(*parts[: i + 1]).is_symlink() for i in range(len(parts))) or not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _ours(kind, p))


def _ours(kind: str, path: Path) -> bool:
    if kind == "pkgs" and path.name.startswith("."):
        # rattler extracts into `.<name-version-build><random>/` and renames it into place: one still there
        # is an extraction a killed run left (prune holds the cache's flock, so nobody is extracting)
        return path.is_dir() and not path.is_symlink() and len(path.name) > 7
    if kind == "pkgs":  # an extracted package, or rattler's lock file beside it
        return path.name.endswith(".lock") or (path / "info").is_dir()
    if kind == "wheels":
        return path.is_dir() and not path.is_symlink()
    name = path.name if kind == "archives" else path.name[: -len(".json")] if path.name.endswith(".json") else ""
    return bool(_HEX64.fullmatch(name)) or (kind == "seals" and name.startswith("uv-") and len(name) > 3)


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
