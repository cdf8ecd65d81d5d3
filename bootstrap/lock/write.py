"""conda-lock v1 lock files, written with conda-lock's own models and writer (so `conda-lock render`,
`conda-lock install` and `micromamba create -f` accept them), and compared. conda-lock is imported
only when a lock is written; reading is `bootstrap.lock.lockfile`.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from bootstrap.fsutil import write_target, write_together
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


def render_lock(path: Path, content: LockContent) -> bytes:
    """The bytes conda-lock's writer makes of `content` for a lock at `path`; writes nothing there.
    conda-lock's models validate every field here, so a bad one fails before any lock is replaced."""
    from conda_lock.lockfile import write_conda_lock_file

    lockfile = _to_conda_lock_model(content)
    # conda-lock prints the file's own name into the help header, so it writes a file of that
    # name, in a private temp directory.
    with tempfile.TemporaryDirectory(prefix="bootstrap-lock-") as tmp:
        rendered = Path(tmp, write_target(path).name)
        write_conda_lock_file(lockfile, rendered, metadata_choices=set())
        return rendered.read_bytes()


def write_locks(contents: Sequence[tuple[Path, LockContent]]) -> None:
    """Write every lock or none: each is rendered (and so validated) before the first is replaced,
    and then all are replaced together (`fsutil.write_together`)."""
    write_together([(path, render_lock(path, content)) for path, content in contents])


def _to_conda_lock_model(content: LockContent) -> Any:  # conda-lock's Lockfile
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
            categories=set(p.categories),
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


def diff_locks(
    old: Sequence[LockedPackage], new: Sequence[LockedPackage], platforms: Iterable[str]
) -> list[PlatformDiff]:
    """Per platform: which packages were added, removed or changed version/build."""
    out = []
    for platform in platforms:
        before = {(p.manager, p.name): p for p in old if p.platform == platform}
        after = {(p.manager, p.name): p for p in new if p.platform == platform}
        added = tuple(after[k].describe() for k in sorted(after.keys() - before.keys()))
        removed = tuple(before[k].describe() for k in sorted(before.keys() - after.keys()))
        changed = tuple(
            _change(k[1], before[k], after[k])
            for k in sorted(before.keys() & after.keys())
            if before[k].sha256 != after[k].sha256
        )
        out.append(PlatformDiff(platform, added, removed, changed))
    return out


def _change(name: str, before: LockedPackage, after: LockedPackage) -> str:
    """`numpy 2.2.5 -> 2.2.6`; for one version and build, the file that changed (another wheel of it)."""
    if (before.version, before.build) == (after.version, after.build):
        return f"{name} {after.version}: {before.filename} -> {after.filename}"
    return f"{name} {before.version}{_build(before)} -> {after.version}{_build(after)}"


def _build(p: LockedPackage) -> str:
    return f" ({p.build})" if p.build else ""
