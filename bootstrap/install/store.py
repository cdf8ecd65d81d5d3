"""rattler's extracted packages in the package cache, and the seals that vouch for them.

A copy is sealed once rattler extracted it from a checked archive, and a run links from it only after
`sealed_copies` found it as sealed. Docs: docs/env.md, "The package cache and its seals".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

from bootstrap.fsutil import atomic_write_text, flock_held, remove_tree, sha256_file
from bootstrap.lock.lockfile import LockedPackage

# A seal's first line, then the JSON of `write_seal`; the seal file's mtime is the time it seals the
# files until. A seal of another header (an older bootstrap's) counts as none: the package is
# extracted again from its checked archive and sealed anew.
SEAL_HEADER = "bootstrap-seal 6\n"
_CONTENT = ("files", "content")  # what an edit changes; a link made or removed changes ctimes only
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
        if read_seal(seal_path(cache_dir, entry), SEAL_HEADER) is not None and extracted_dir(cache_dir, entry).is_dir():
            edited.append(entry.describe())
        if drop:
            drop_extracted(cache_dir, entry)
    return sealed, edited


def seal_holds(cache_dir: Path, entry: LockedPackage) -> bool:
    """Whether the extracted copy is as sealed. A copy whose files kept the sizes and mtimes they
    were sealed with but whose inodes changed since (a hard link made or removed by an env, or an
    edit that put the mtime back) is hashed against its own `info/paths.json`, and sealed anew if
    it matches."""
    directory, path = extracted_dir(cache_dir, entry), seal_path(cache_dir, entry)
    sealed = read_seal(path, SEAL_HEADER)
    try:
        now = fingerprint(directory)
    except OSError:
        return False  # gone
    state = "edited" if sealed is None else compare(sealed, now)
    if state == "touched":
        at = seal_time(cache_dir)  # before hashing: a change made while it hashes is one after the new seal
        if _matches_paths_json(directory):
            write_seal(path, SEAL_HEADER, now, at)
            return True
    return state == "sealed"


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


def seal(cache_dir: Path, extracted: Sequence[LockedPackage], linked: Sequence[LockedPackage] = ()) -> None:
    """Seal the copies rattler just `extracted` from checked archives, and again those it just
    hard-`linked` from, which were found as sealed before: the links changed their inodes' ctimes,
    not their files, and any later change shows in a ctime past this seal's time."""
    prints = {}
    for entry in extracted:
        with contextlib.suppress(FileNotFoundError):  # not extracted after all: nothing to seal
            prints[seal_path(cache_dir, entry)] = fingerprint(extracted_dir(cache_dir, entry))
    resealed = [seal_path(cache_dir, entry) for entry in linked]
    if prints or resealed:
        at = seal_time(cache_dir)
        for path, print_ in prints.items():
            write_seal(path, SEAL_HEADER, print_, at)
        for path in resealed:
            reseal(path, SEAL_HEADER, at)


def compare(sealed: Mapping[str, object], now: Mapping[str, object]) -> str:
    """How the files `now` describes (`fingerprint`) stand against their seal: "sealed" (as they
    were), "edited" (a file added, removed, or changed in size or mtime) or "touched" (an inode
    changed since, size and mtime kept: a link made or removed, or an edit that put them back)."""
    if any(sealed.get(key) != now[key] for key in _CONTENT):
        return "edited"
    at, changed = sealed.get("sealed_at"), now["changed"]
    return "sealed" if isinstance(at, int) and isinstance(changed, int) and changed < at else "touched"


def read_seal(path: Path, header: str) -> Optional[dict[str, object]]:
    """The seal at `path` with its time as `sealed_at`, or None: none there, a broken one, or another
    header's (an older bootstrap's)."""
    try:
        with open(path, encoding="utf-8") as handle:
            first, _, body = handle.read().partition("\n")
            at = os.fstat(handle.fileno()).st_mtime_ns
        value = json.loads(body)
    except (OSError, ValueError):
        return None
    return {**value, "sealed_at": at} if first + "\n" == header and isinstance(value, dict) else None


def write_seal(path: Path, header: str, print_: Mapping[str, object], at: int) -> None:
    """Seal the files `print_` describes as they are until `at` (`seal_time`), which the seal file
    carries as its mtime. Not fsynced: a seal that a crash tore or lost counts as none, and the files
    are checked again."""
    body = {key: print_[key] for key in _CONTENT}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, header + json.dumps(body, sort_keys=True) + "\n", fsync=False, mtime_ns=at)


def reseal(path: Path, header: str, at: int) -> None:
    """Move the seal at `path`, if there is one, on to `at`: for files found as sealed before this run
    hard-linked from them, which changed their inodes' ctimes, not the files. One utime, so that
    linking from many copies rewrites none of their seals; another user's seal in a shared cache,
    whose times only its owner may set, is written anew instead."""
    try:
        os.utime(path, ns=(at, at))
    except FileNotFoundError:
        pass
    except PermissionError:
        sealed = read_seal(path, header)
        if sealed is not None:
            write_seal(path, header, sealed, at)


def seal_time(cache_dir: Path) -> int:
    """A time of the cache's file-system clock later than the ctime of every change made before
    this call, and no later than that of any change made after it returns: the seals directory's
    own ctime, stamped until the clock has moved past the first stamp. Inode times come from a
    coarse clock (a scheduler tick) where the file system has no finer one, so a change made in the
    same tick as this call could otherwise carry the same time as changes made before it."""
    directory = cache_dir / "seals"
    directory.mkdir(parents=True, exist_ok=True)
    os.utime(directory)  # an inode change: its ctime is the clock now
    first = os.stat(directory).st_ctime_ns
    while True:
        os.utime(directory)
        now = os.stat(directory).st_ctime_ns
        if now > first:
            return now
        time.sleep(0.0005)


def drop_extracted(cache_dir: Path, entry: LockedPackage) -> None:
    remove_tree(extracted_dir(cache_dir, entry))
    seal_path(cache_dir, entry).unlink(missing_ok=True)


def fingerprint(directory: Path) -> dict[str, object]:
    """How many files and links are under `directory`, a sha256 over a line of each, in path order,
    with its relative path, size and mtime_ns (`content`), and the latest of their ctimes (`changed`).

    The inode change time is set to now by any write, chmod, utime() or link made or removed, and
    no call a user can make sets it back: an edit that keeps the size and restores the mtime
    (`cp -p`, `rsync -t`, `touch -d`) still shows as a ctime past the seal's time. So does a hard
    link made or removed (an env linked from the copy, or deleted), which is why a ctime alone past
    the seal is settled by hashing (`compare`'s "touched"). Each entry is lstat'ed relative to an
    open directory, so the kernel looks up one name per file rather than a path from the root."""
    content, changed, count = hashlib.sha256(), 0, 0

    def walk(fd: int, relative: str) -> None:
        nonlocal changed, count
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
                    line = f"{relative}{entry.name}\0{info.st_size}\0{info.st_mtime_ns}\n"
                    content.update(line.encode("utf-8", "surrogateescape"))
                    changed = max(changed, info.st_ctime_ns)
                    count += 1

    root = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walk(root, "")
    finally:
        os.close(root)
    return {"files": count, "content": content.hexdigest(), "changed": changed}


@contextlib.contextmanager
def extracting(cache_dir: Path) -> Iterator[None]:
    """Say, while held, that this run may extract packages into the cache and link from them before
    it seals them: an flock on a file of its own, `<cache>/.extracting-*`, that `others_extracting` sees."""
    import tempfile

    cache_dir.mkdir(parents=True, exist_ok=True)
    while True:
        fd, path = tempfile.mkstemp(prefix=_EXTRACTING, dir=cache_dir)
        os.fchmod(fd, 0o644)  # not mkstemp's 0600: another user's run on a shared cache opens it to test the flock
        _HELD.add(os.path.basename(path))
        flock_held(fd)  # without locks on this file system, others take the file for a live run's
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
