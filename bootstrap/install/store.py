"""rattler's extracted packages in the package cache, and the seals that vouch for them.

A copy is sealed once rattler extracted it from a checked archive, and a run links from it only after
`sealed_copies` found it as sealed. Docs: docs/env.md, "The package cache and its seals".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Iterator, Sequence

from bootstrap.fsutil import atomic_write_text, remove_tree, sha256_file
from bootstrap.lock.lockfile import LockedPackage

# A seal's first line, then the JSON of `fingerprint`. A seal of another header (an older bootstrap's)
# counts as none: the package is extracted again from its checked archive and sealed anew.
SEAL_HEADER = "bootstrap-seal 4\n"
_CONTENT = ("files", "content")  # what an edit changes; a link made or removed changes `inodes` only
_EXTRACTING = ".extracting-"
_HELD: set[str] = set()  # this process's own `extracting` files


def extracted_dir(cache_dir: Path, entry: LockedPackage) -> Path:
    """Where rattler extracts `name-version-build.conda` (or `.tar.bz2`) in its cache."""
    return cache_dir / "pkgs" / entry.stem


def seal_path(cache_dir: Path, entry: LockedPackage) -> Path:
    return cache_dir / "seals" / f"{entry.sha256}.json"


def sealed_copies(cache_dir: Path, entries: Sequence[LockedPackage], drop: bool) -> tuple[set[str], list[str]]:
    """The names among `entries` whose extracted copy is there and as it was sealed, and the
    packages whose copy was edited since. A copy that is not as sealed (edited, half-extracted by
    a killed run, sealed by an older bootstrap) is removed if `drop`: not while another run is
    `extracting`, whose copies are unsealed until it has linked from them."""
    sealed, edited = set(), []
    for entry in entries:
        if seal_holds(cache_dir, entry):
            sealed.add(entry.name)
            continue
        if _has_current_seal(cache_dir, entry) and extracted_dir(cache_dir, entry).is_dir():
            edited.append(entry.describe())
        if drop:
            drop_extracted(cache_dir, entry)
    return sealed, edited


def seal_holds(cache_dir: Path, entry: LockedPackage) -> bool:
    """Whether the extracted copy is as sealed. A copy whose inodes changed (a hard link made or
    removed by an env, or an edit that kept each file's size and mtime) but whose files kept their
    sizes and mtimes is hashed against its own `info/paths.json`, and sealed anew if it matches."""
    directory = extracted_dir(cache_dir, entry)
    try:
        header, _, body = seal_path(cache_dir, entry).read_text(encoding="utf-8").partition("\n")
        if header + "\n" != SEAL_HEADER:
            return False
        sealed, now = json.loads(body), fingerprint(directory)
    except (OSError, ValueError):
        return False  # gone, or a broken seal
    if sealed == now:
        return True
    if not isinstance(sealed, dict) or {k: sealed.get(k) for k in _CONTENT} != {k: now[k] for k in _CONTENT}:
        return False
    if not _matches_paths_json(directory):
        return False
    _write_seal(seal_path(cache_dir, entry), now)
    return True


def _matches_paths_json(directory: Path) -> bool:
    """Every file `info/paths.json` lists with a sha256 still has it (rattler's own full validation)."""
    try:
        paths = json.loads((directory / "info" / "paths.json").read_text(encoding="utf-8"))["paths"]
        return all(
            sha256_file(directory / item["_path"]) == item["sha256"]
            for item in paths
            if item.get("sha256") and item.get("path_type", "hardlink") == "hardlink"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _has_current_seal(cache_dir: Path, entry: LockedPackage) -> bool:
    try:
        with open(seal_path(cache_dir, entry), encoding="utf-8") as handle:
            return handle.readline() == SEAL_HEADER
    except (OSError, ValueError):
        return False


def seal(cache_dir: Path, entry: LockedPackage) -> None:
    directory, path = extracted_dir(cache_dir, entry), seal_path(cache_dir, entry)
    if directory.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_seal(path, fingerprint(directory))


def reseal(cache_dir: Path, entry: LockedPackage) -> None:
    """Seal again a copy just hard-linked into an env, which changed its inodes' ctime and link
    count, if its files kept the sizes and mtimes it was sealed with."""
    try:
        header, _, body = seal_path(cache_dir, entry).read_text(encoding="utf-8").partition("\n")
        sealed, now = json.loads(body), fingerprint(extracted_dir(cache_dir, entry))
    except (OSError, ValueError):
        return
    if header + "\n" == SEAL_HEADER and isinstance(sealed, dict) and all(sealed.get(k) == now[k] for k in _CONTENT):
        _write_seal(seal_path(cache_dir, entry), now)


def _write_seal(path: Path, print_: dict[str, object]) -> None:
    atomic_write_text(path, SEAL_HEADER + json.dumps(print_, sort_keys=True) + "\n")


def drop_extracted(cache_dir: Path, entry: LockedPackage) -> None:
    remove_tree(extracted_dir(cache_dir, entry))
    seal_path(cache_dir, entry).unlink(missing_ok=True)


def fingerprint(directory: Path) -> dict[str, object]:
    """How many files and links are under `directory`, and two sha256 over a line of each, in path
    order: `content` over its relative path, size and mtime_ns; `inodes` over those and its ctime_ns.

    The inode change time is set to now by any write, chmod or utime(), and no call a user can
    make sets it back: an edit that keeps the size and restores the mtime (`cp -p`, `rsync -t`,
    `touch -d`) still shows in `inodes`. So does a hard link made or removed (an env linked from
    the copy, or deleted), which is why a change of `inodes` alone is settled by hashing
    (`seal_holds`). Each entry is lstat'ed relative to an open directory, so the kernel looks up
    one name per file rather than a path from the root."""
    content, inodes, count = hashlib.sha256(), hashlib.sha256(), 0

    def walk(fd: int, relative: str) -> None:
        nonlocal count
        with os.scandir(fd) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                    try:
                        walk(child, f"{relative}{entry.name}/")
                    finally:
                        os.close(child)
                else:
                    info = entry.stat(follow_symlinks=False)
                    line = f"{relative}{entry.name}\0{info.st_size}\0{info.st_mtime_ns}".encode(
                        "utf-8", "surrogateescape"
                    )
                    content.update(line + b"\n")
                    inodes.update(line + f"\0{info.st_ctime_ns}\n".encode())
                    count += 1

    root = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walk(root, "")
    finally:
        os.close(root)
    return {"files": count, "content": content.hexdigest(), "inodes": inodes.hexdigest()}


@contextlib.contextmanager
def extracting(cache_dir: Path) -> Iterator[None]:
    """Say, while held, that this run may extract packages into the cache and link from them before
    it seals them: an flock on a file of its own, `<cache>/.extracting-*`, that `others_extracting` sees."""
    import fcntl
    import tempfile

    cache_dir.mkdir(parents=True, exist_ok=True)
    while True:
        fd, path = tempfile.mkstemp(prefix=_EXTRACTING, dir=cache_dir)
        os.fchmod(fd, 0o644)  # not mkstemp's 0600: another user's run on a shared cache opens it to test the flock
        _HELD.add(os.path.basename(path))
        fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        # Another run found it not yet locked, took it for a killed run's and removed it: again.
        _HELD.discard(os.path.basename(path))
        os.close(fd)
    try:
        yield
    finally:
        os.unlink(path)
        os.close(fd)
        _HELD.discard(os.path.basename(path))


def others_extracting(cache_dir: Path) -> bool:
    """Whether another live run holds its `extracting` file (a killed run's is removed)."""
    import fcntl

    names = set()
    with contextlib.suppress(OSError):
        names = {entry.name for entry in os.scandir(cache_dir) if entry.name.startswith(_EXTRACTING)} - _HELD
    for name in names:
        try:
            fd = os.open(cache_dir / name, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True  # held by a live run
        else:
            with contextlib.suppress(OSError):
                os.unlink(cache_dir / name)
        finally:
            os.close(fd)
    return False
