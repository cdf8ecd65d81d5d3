"""The locked variants of an env as candidates for the pick, and the checks that carry it.

    envs/<env>.yml `variants:` + each variant's lock -> [Candidate]   (`env_candidates`)
    Pick (`compat.pick`) -> lock.variant (doctor), env.variant (verify: the installed one vs the pick)

Reading the locks is the I/O here; the pick itself is pure. Stdlib and pyyaml only: verify runs
this inside the env.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, List, Optional

from bootstrap.compat.facts import DriverFacts
from bootstrap.compat.pick import Candidate, Pick, Verdict, pick_variant
from bootstrap.compat.target import lock_torch_target
from bootstrap.errors import InputError
from bootstrap.lock.variants import META_VARIANT, variant_locks
from bootstrap.report import Check, Status


def env_candidates(project: Any, env: str, spec: Any, platform: str, read: Any = None) -> List[Candidate]:
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
    path: Path, platform: str, name: Optional[str] = None, default: bool = True, read: Any = None
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


def variant_check(pick: Pick, env: str, installed: str = "") -> Check:
    """lock.variant: the variant of `env` to install on this host, why, and which others would run."""
    cid = "lock.variant"
    expected = f"a locked variant of {env} that runs on this host"
    if pick.chosen is None:
        names = ", ".join(v.candidate.label for v in pick.verdicts)
        none = "runs here" if pick.installs_here else "is locked for this platform"
        return Check(cid, pick.status, f"none of {names} {none}", expected, pick.remedy, pick.why)
    chosen = pick.chosen.candidate
    others = ", ".join(v.candidate.label for v in pick.others) or "none"
    observed = f"{chosen.label}: {pick.chosen.build} from {chosen.lock_path.name}; also runs: {others}"
    if installed and installed != chosen.name:
        observed += f"; installed: {installed}"
    return Check(cid, pick.status, observed, expected, pick.remedy, pick.why)


def installed_variant_check(state: Any, nvidia: DriverFacts) -> Optional[Check]:
    """env.variant for verify: the variant the env was installed from, against the pick for this host;
    None when the env's spec declares no variants (or there is no env or project to tell)."""
    from bootstrap.lock.spec import read_spec

    if state.record is None or state.project is None:
        return None
    spec_path = state.project.spec_path(state.record.env)
    if not spec_path.is_file():
        return None
    expected = "the variant picked for this host"
    try:
        spec = read_spec(spec_path)
    except (InputError, ImportError) as exc:  # a spec with a torch pin needs `packaging`, which an env may lack
        return Check(
            "env.variant", Status.SKIP, f"cannot read the variants of {spec_path.name}", expected, detail=str(exc)
        )
    if not spec.variants:
        return None
    installed = state.record.variant or (state.lock.custom.get(META_VARIANT, "") if state.lock else "")
    pick = pick_variant(nvidia, env_candidates(state.project, state.record.env, spec, state.platform))
    return judge_installed(pick, installed, Path(state.record.lock_path).name, state.commands.switch)


def judge_installed(pick: Pick, installed: str, lock_name: str, switch_to: Callable[[str], str]) -> Check:
    """env.variant: ok when the installed variant is the pick; fail when it will not run here but
    another locked variant does; warn when it runs but another is the pick (newer torch, no caveat),
    or when it is no variant of the spec any more."""
    cid, expected = "env.variant", "the variant picked for this host"
    observed = f"{installed or '(none recorded)'} from {lock_name}"
    verdict = pick.find(installed) if installed else None
    chosen = pick.chosen
    switch = "" if chosen is None else f"{switch_to(chosen.candidate.name)} installs it in place"
    if verdict is None:
        return Check(
            cid, Status.WARN, observed + ": not a variant of the spec", expected, switch or pick.remedy, pick.why
        )
    if verdict is chosen:
        return Check(cid, Status.OK, observed + f": {verdict.build}, the pick for this host", expected, detail=pick.why)
    if verdict.status is Status.FAIL:
        if chosen is not None and chosen.runs:
            return Check(
                cid,
                Status.FAIL,
                observed + f": will not run here ({verdict.reasons[0]}); this host should run {chosen.candidate.label}",
                expected,
                switch,
                pick.why,
            )
        return Check(cid, Status.WARN, observed + ": no locked variant runs here", expected, pick.remedy, pick.why)
    if chosen is None or verdict.status is Status.SKIP:
        return Check(cid, Status.SKIP, observed + ": not judged", expected, detail=_reason(verdict) or pick.why)
    return Check(
        cid,
        Status.WARN,
        observed + f": runs, but {chosen.candidate.label} is the pick for this host",
        expected,
        f"{switch}, or keep this one with VARIANT={installed}",
        pick.why,
    )


def _reason(verdict: Verdict) -> str:
    return verdict.reasons[0] if verdict.reasons else ""
