"""The locked variants of an env as candidates for the pick (`env_candidates`, `compat.pick`): doctor
judges them all, `bootstrap env` installs the pick, verify compares the installed variant with it.
Stdlib and pyyaml only: verify runs this inside the env.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from bootstrap.compat.pick import Candidate
from bootstrap.compat.target import TorchTarget, torch_target_from_lock_entry
from bootstrap.errors import InputError
from bootstrap.lock.variants import META_VARIANT, variant_locks

if TYPE_CHECKING:
    from bootstrap.lock.lockfile import Lock
    from bootstrap.lock.spec import EnvSpec
    from bootstrap.project import Project


def env_candidates(
    project: Project, env: str, spec: EnvSpec, platform: str, read: Optional[Lock] = None
) -> list[Candidate]:
    """Each locked variant of `env` (`spec` read from its file) as the pick sees it on `platform`,
    default first; a spec without variants gives its one lock. `read`: a lock the caller has already
    read, used in place of its file."""
    out = []
    for variant, path in variant_locks(project, env, spec):
        if variant is not None and platform not in variant.platforms:
            out.append(
                Candidate(
                    variant.name,
                    path,
                    None,
                    f"not locked for {platform} (the variant's platforms: {', '.join(variant.platforms)})",
                    variant.default,
                    installs=False,
                )
            )
        else:
            out.append(
                lock_candidate(
                    path,
                    platform,
                    variant.name if variant else "",
                    default=variant is None or variant.default,
                    read=read,
                )
            )
    return out


def lock_candidate(
    path: Path, platform: str, name: Optional[str] = None, default: bool = True, read: Optional[Lock] = None
) -> Candidate:
    """One lock as a candidate: the torch it installs on `platform`, or why there is none. `name`
    None: the variant its metadata records; `read`: a lock already read, used when it is the one at `path`."""
    from bootstrap.lock.lockfile import read_lock

    if not os.path.lexists(path):  # a FIFO, a device or a dangling link in its place is read, and refused
        return Candidate(
            name or "", path, None, f"not locked yet: no {path.name} (`make lock`)", default, installs=False
        )
    try:
        lock = read if read is not None and read.path == path else read_lock(path)
    except InputError as exc:
        return Candidate(name or "", path, None, str(exc), default, installs=False)
    target, why = lock_torch_target(lock, platform)
    return Candidate(
        lock.custom.get(META_VARIANT, "") if name is None else name,
        path,
        target,
        why,
        default,
        installs=platform in lock.platforms,
        lock=lock,
    )


def lock_torch_target(lock: Lock, platform: str) -> tuple[Optional[TorchTarget], str]:
    """The torch build `lock` installs on conda subdir `platform`, from its torch pip entry; (None, why)
    without one."""
    if platform not in lock.platforms:
        return None, f"{lock.path.name} does not lock {platform} (locked: {', '.join(lock.platforms)})"
    for entry in lock.for_platform(platform, "pip"):
        if entry.name.lower() == "torch":
            return torch_target_from_lock_entry(
                entry.version, platform, url=entry.url, dependencies=entry.dependencies
            ), ""
    return None, f"{lock.path.name} has no torch pip entry for {platform}"
