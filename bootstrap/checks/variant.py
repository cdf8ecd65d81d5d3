"""The locked variants of an env as candidates for the pick, and the checks that carry it.

    envs/<env>.yml `variants:` + each variant's lock -> [Candidate]   (`env_candidates`)
    Pick (`compat.pick`) -> lock.variant (doctor)

Reading the locks is the I/O here; the pick itself is pure. Stdlib and pyyaml only: verify runs
this inside the env.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

from bootstrap.checks.model import Check
from bootstrap.compat.pick import Candidate, Pick
from bootstrap.compat.target import lock_torch_target
from bootstrap.errors import InputError
from bootstrap.lock.variants import META_VARIANT, variant_locks


def env_candidates(project: Any, env: str, spec: Any, platform: str) -> List[Candidate]:
    """Each locked variant of `env` (`spec` read from its file) as the pick sees it on `platform`,
    default first; a spec without variants gives its one lock."""
    out = []
    for variant, path in variant_locks(project, env, spec):
        if variant is not None and platform not in variant.platforms:
            out.append(Candidate(variant.name, path, None, f"not locked for {platform} (the variant's platforms: "
                                 f"{', '.join(variant.platforms)})", variant.default))
        else:
            out.append(lock_candidate(path, platform, variant.name if variant else "",
                                      default=variant is None or variant.default))
    return out


def lock_candidate(path: Path, platform: str, name: Optional[str] = None, default: bool = True) -> Candidate:
    """One lock as a candidate: the torch it installs on `platform`, or why there is none. `name`
    None: the variant its metadata records."""
    from bootstrap.lock.lockfile import read_lock

    if not path.is_file():
        return Candidate(name or "", path, None, f"not locked yet: no {path.name} (`make lock`)", default)
    try:
        lock = read_lock(path)
    except InputError as exc:
        return Candidate(name or "", path, None, str(exc), default)
    target, why = lock_torch_target(lock, platform)
    return Candidate(lock.custom.get(META_VARIANT, "") if name is None else name, path, target, why, default)


def variant_check(pick: Pick, env: str, installed: str = "") -> Check:
    """lock.variant: the variant of `env` to install on this host, why, and which others would run."""
    cid = "lock.variant"
    expected = f"a locked variant of {env} that runs on this host"
    if pick.chosen is None:
        names = ", ".join(v.candidate.label for v in pick.verdicts)
        return Check(cid, pick.status, f"none of {names} runs here", expected, pick.remedy, pick.why)
    chosen = pick.chosen.candidate
    others = ", ".join(v.candidate.label for v in pick.others) or "none"
    observed = f"{chosen.label}: {pick.chosen.build} from {chosen.lock_path.name}; also runs: {others}"
    if installed and installed != chosen.name:
        observed += f"; installed: {installed}"
    return Check(cid, pick.status, observed, expected, pick.remedy, pick.why)
