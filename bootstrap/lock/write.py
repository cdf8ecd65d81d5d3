"""conda-lock v1 lock files, written with conda-lock's own models and writer, and compared.

Writing goes through conda-lock's pydantic models and `write_conda_lock_file`,
so the file is exactly what `conda-lock render`, `conda-lock install` and
`micromamba create -f` expect. conda-lock is imported only when a lock is
written; reading is `bootstrap.lock.lockfile`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from bootstrap.fsutil import write_target
from bootstrap.lock.lockfile import LockedPackage


@dataclass(frozen=True)
class LockContent:
    """Everything a lock file holds, independent of conda-lock's models."""

    channels: tuple[str, ...]
    platforms: tuple[str, ...]
    sources: tuple[str, ...]
    content_hash: Mapping[str, str]
    custom: Mapping[str, str]
    packages: tuple[LockedPackage, ...]


def write_lock(path: Path, content: LockContent) -> None:
    """Write `content` with conda-lock's writer, atomically (temp file + rename)."""
    from conda_lock.lockfile import write_conda_lock_file

    lockfile = _to_conda_lock_model(content)
    path = write_target(path)
    # conda-lock prints the file's own name into the help header, so the temp
    # file gets the real name inside a private temp directory beside the target.
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    tmp = tmp_dir / path.name
    try:
        write_conda_lock_file(lockfile, tmp, metadata_choices=set())
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        tmp_dir.rmdir()


def _to_conda_lock_model(content: LockContent):
    from conda_lock.lockfile.v1.models import HashModel, LockMeta
    from conda_lock.lockfile.v2prelim.models import LockedDependency, Lockfile

    packages = [
        LockedDependency(
            name=p.name,
            version=p.version,
            manager=p.manager,
            platform=p.platform,
            dependencies=dict(p.dependencies),
            url=p.url,
            hash=HashModel(md5=p.md5, sha256=p.sha256) if p.md5 else HashModel(sha256=p.sha256),
            build=p.build,
            categories={p.category},
        )
        for p in content.packages
    ]
    meta = LockMeta(
        content_hash=dict(content.content_hash),
        channels=list(content.channels),
        platforms=list(content.platforms),
        sources=list(content.sources),
        custom_metadata=dict(content.custom) or None,
    )
    return Lockfile(package=packages, metadata=meta)


@dataclass(frozen=True)
class PlatformDiff:
    platform: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def diff_locks(old: Sequence[LockedPackage], new: Sequence[LockedPackage],
               platforms: Iterable[str]) -> list[PlatformDiff]:
    """Per platform: which packages were added, removed or changed version/build."""
    out = []
    for platform in platforms:
        before = {(p.manager, p.name): p for p in old if p.platform == platform}
        after = {(p.manager, p.name): p for p in new if p.platform == platform}
        added = tuple(after[k].describe() for k in sorted(after.keys() - before.keys()))
        removed = tuple(before[k].describe() for k in sorted(before.keys() - after.keys()))
        changed = tuple(_change(k[1], before[k], after[k]) for k in sorted(before.keys() & after.keys())
                        if before[k].sha256 != after[k].sha256)
        out.append(PlatformDiff(platform, added, removed, changed))
    return out


def _change(name: str, before: LockedPackage, after: LockedPackage) -> str:
    """`numpy 2.2.5 -> 2.2.6`; for one version and build, the file that changed (another wheel of it)."""
    if (before.version, before.build) == (after.version, after.build):
        return f"{name} {after.version}: {before.filename} -> {after.filename}"
    return f"{name} {before.version}{_build(before)} -> {after.version}{_build(after)}"


def _build(p: LockedPackage) -> str:
    return f" ({p.build})" if p.build else ""
