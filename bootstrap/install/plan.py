"""Plan, then apply: what `bootstrap env` must change to make a prefix match a lock.

`make_plan` is pure; the plan is made once, against the directory the change starts from, and is both
what `--dry-run` prints and what `bootstrap.install.env` applies.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from bootstrap.errors import InputError
from bootstrap.install import generations as gens
from bootstrap.lock.lockfile import Lock, LockedPackage
from bootstrap.prefix import (
    InstalledConda,
    InstalledPip,
    conda_owned_metadata,
    conda_packages,
    conda_records,
    normalise,
    pip_distributions,
    python_version,
    site_packages,
)


@dataclass(frozen=True)
class Plan:
    link: tuple[LockedPackage, ...] = ()  # conda packages to install (new or replacing)
    unlink: tuple[InstalledConda, ...] = ()  # conda packages to remove (gone or replaced)
    pip_install: tuple[LockedPackage, ...] = ()
    pip_remove: tuple[InstalledPip, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.link or self.unlink or self.pip_install or self.pip_remove)

    def lines(self) -> list[str]:
        """Human-readable plan, one change per line (`--dry-run`)."""
        out = [f"unlink  {p.name} {p.version} {p.build}" for p in self.unlink]
        out += [f"link    {p.describe()}" for p in self.link]
        out += [f"pip rm  {p.name} {p.version}" for p in self.pip_remove]
        out += [f"pip add {p.describe()}" for p in self.pip_install]
        return out

    def moved(self, old: Path, new: Path) -> Plan:
        """The plan for the same prefix renamed or cloned from `old` to `new`: what it removes, there."""

        def at_new(path: Path) -> Path:
            return new / path.relative_to(old)

        return dataclasses.replace(
            self,
            unlink=tuple(dataclasses.replace(c, record_path=at_new(c.record_path)) for c in self.unlink),
            pip_remove=tuple(dataclasses.replace(d, dist_info=at_new(d.dist_info)) for d in self.pip_remove),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "link": [{"name": p.name, "version": p.version, "build": p.build} for p in self.link],
            "unlink": [{"name": p.name, "version": p.version, "build": p.build} for p in self.unlink],
            "pip_install": [{"name": p.name, "version": p.version} for p in self.pip_install],
            "pip_remove": [{"name": p.name, "version": p.version} for p in self.pip_remove],
        }


def make_plan(
    locked: Sequence[LockedPackage],
    conda: Sequence[InstalledConda],
    pip: Sequence[InstalledPip],
) -> Plan:
    """Diff the locked entries of one platform against an installed prefix.

    A package is kept only if its exact artifact (sha256) is installed; a conda
    record without a sha256 is matched on version and build. Distributions
    that conda owns (pip installed as a conda package, or anything whose
    INSTALLER says conda) are never pip-removed; a wheel that the lock moves
    to conda is. A name installed twice (a leftover .egg-info beside a
    .dist-info, say) is removed in full and the locked one installed again.
    """
    installed = {c.name: c for c in conda}
    link, unlink = [], []
    wanted_conda = {p.name: p for p in locked if p.manager == "conda"}
    for name, entry in sorted(wanted_conda.items()):
        have = installed.get(name)
        if have is not None and _same_conda(entry, have):
            continue
        link.append(entry)
        if have is not None:
            unlink.append(have)
    unlink += [c for name, c in sorted(installed.items()) if name not in wanted_conda]

    conda_names = {normalise(n) for n in installed}  # a wanted one not linked yet: a pip install of that name is pip's
    dists: dict[str, list[InstalledPip]] = {}
    for dist in pip:
        if dist.name not in conda_names and dist.installer != "conda":
            dists.setdefault(dist.name, []).append(dist)
    wanted_pip = {normalise(p.name): p for p in locked if p.manager == "pip"}

    def kept(name: str) -> bool:
        have, want = dists.get(name, []), wanted_pip.get(name)
        return want is not None and len(have) == 1 and have[0].sha256 == want.sha256

    pip_install = [e for n, e in sorted(wanted_pip.items()) if not kept(n)]
    pip_remove = [d for n, same in sorted(dists.items()) if not kept(n) for d in same]
    return Plan(tuple(link), tuple(unlink), tuple(pip_install), tuple(pip_remove))


def _same_conda(entry: LockedPackage, have: InstalledConda) -> bool:
    if have.sha256:
        return have.sha256 == entry.sha256
    return (have.version, have.build) == (entry.version, entry.build)


def locked_entries(lock: Lock, platform: str) -> list[LockedPackage]:
    """The lock's entries for `platform`; an InputError naming the fix if it is not locked."""
    if platform not in lock.platforms:
        raise InputError(
            lock.path,
            f"platform {platform} is not locked (locked: {', '.join(lock.platforms)})",
            "add it to `platforms:` in the env spec and run `make lock`, or pass --platform",
        )
    return lock.for_platform(platform)


def plan_against(entries: Sequence[LockedPackage], prefix: Path) -> Plan:
    """`make_plan` for what `prefix` holds (nothing, if it does not exist). A distribution it would
    pip-remove may be a conda package's metadata under another name (pytables' `tables-*.egg-info`):
    only then are all conda records read for the files they own."""
    moves = _python_moves(entries, prefix)
    plan = make_plan(entries, conda_packages(prefix), [] if moves else pip_distributions(prefix))
    if moves:  # rattler relinks each noarch: python package into the new site-packages: from a verified archive
        planned = {e.name for e in plan.link}
        relinked = {c.name: c for c in conda_records(prefix) if c.noarch == "python" and c.name not in planned}
        again = [e for e in entries if e.manager == "conda" and e.name in relinked]
        plan = dataclasses.replace(
            plan,
            link=tuple(sorted((*plan.link, *again), key=lambda e: e.name)),
            unlink=tuple(sorted((*plan.unlink, *(relinked[e.name] for e in again)), key=lambda c: c.name)),
        )
    if plan.pip_remove:
        owned = conda_owned_metadata(prefix)
        plan = dataclasses.replace(plan, pip_remove=tuple(d for d in plan.pip_remove if d.dist_info.name not in owned))
    return plan


def _python_moves(entries: Sequence[LockedPackage], prefix: Path) -> bool:
    """Whether the lock's python is another minor version than the one whose site-packages `prefix` has:
    its own site-packages holds no pip distribution yet, so every locked one is installed again
    (those of the old version stay behind with it, out of the new python's sight, as conda leaves them)."""
    site = site_packages(prefix)
    locked = [e.version for e in entries if e.manager == "conda" and e.name == "python"]
    return (
        site is not None
        and site.parent.name.startswith("python")
        and bool(locked)
        and python_version(site.parent.name) != python_version(locked[0])
    )


@dataclass(frozen=True)
class Change:
    """Where a change starts and what it applies there, decided once (`plan_change`)."""

    start: gens.Start
    plan: Plan  # against `base`
    base: Optional[Path]  # the directory the change starts from (None: empty)

    def plan_in_partial(self) -> Plan:
        """The plan, naming what it removes where the base is once renamed or cloned to the partial."""
        return self.plan if self.base is None else self.plan.moved(self.base, self.start.partial)


def plan_change(layout: gens.Layout, entries: list[LockedPackage], grace_s: float = 0.0) -> Optional[Change]:
    """None when the current generation holds exactly `entries`; else where the next change starts
    (`generations.next_start`, recycling only generations retired `grace_s` ago) and the plan against
    what that directory holds."""
    current = layout.current()
    against_current = plan_against(entries, layout.path(current)) if current is not None else None
    if current is not None and against_current is not None and layout.path(current).is_dir() and against_current.empty:
        return None
    start = gens.next_start(layout, grace_s)
    if start.base is None:
        return Change(start, make_plan(entries, (), ()), None)
    base = layout.path(start.base)
    kept = against_current if start.base == current else None
    return Change(start, kept if kept is not None else plan_against(entries, base), base)
