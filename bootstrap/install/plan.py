"""Plan, then apply: what `bootstrap env` must change to make a prefix match a lock.

Pure: (locked entries for this platform, what is installed) -> Plan. The
plan is what `--dry-run` prints and what the tests assert on; applying it
is `bootstrap.install.env`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from bootstrap.lock.lockfile import LockedPackage
from bootstrap.install.prefix import InstalledConda, InstalledPip, normalise


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

    def to_dict(self) -> dict:
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
