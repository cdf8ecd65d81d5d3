"""The checks that carry the pick of a locked variant: `lock.variant` (doctor) and `env.variant`
(verify: the installed one vs the pick), from the candidates of `lock.candidates`. Stdlib and pyyaml
only: verify runs this inside the env.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from bootstrap.compat.facts import DriverFacts
from bootstrap.compat.pick import Pick, Verdict, pick_variant
from bootstrap.errors import InputError
from bootstrap.lock.candidates import env_candidates
from bootstrap.lock.variants import META_VARIANT
from bootstrap.report import Check, Status

if TYPE_CHECKING:
    from bootstrap.checks.envstate import EnvState


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
    if pick.note and pick.status is Status.OK:  # it runs, but the user should hear what it costs
        return Check(cid, Status.WARN, observed, expected, pick.note, pick.why)
    return Check(cid, pick.status, observed, expected, pick.remedy, pick.why)


def installed_variant_check(state: EnvState, nvidia: DriverFacts) -> Optional[Check]:
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
    switch = "" if chosen is None else switch_to(chosen.candidate.name)
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
