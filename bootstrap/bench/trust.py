"""Whether the measured rates can carry a verdict.

A verdict on a rate is only as good as the rate: when the host was
saturated by other processes, the tuned windows were too short to outlast
the batches the workers had prefetched, or the tuned windows and an
independent re-measure of the winner disagree by more than
`noise_inconclusive`, the
rate verdicts (`RATE_CHECKS`) become `inconclusive`, with the reason and
what to do, instead of a pass, warn or fail they cannot stand on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import List, Mapping, Optional, Tuple

from bootstrap.bench.config import Thresholds
from bootstrap.report import Check, Status

# Verdicts on the loader's measured rates: what a saturated or noisy host leaves undecided.
RATE_CHECKS = (
    "bench.efficiency",
    "bench.stall_device_idle",
    "bench.speedup",
    "bench.nvml_util",
    "bench.gpm_sm_active",
    "bench.loader_scaling",
)


# A tuned window must outlast the batches the workers queued before it (num_workers x prefetch_factor),
# which it takes at the step's pace however slow the loader is, by this many steps of the loader's own.
STEPS_PAST_PREFETCH = 3


def inconclusive_reason(m: Mapping[str, Optional[float]], t: Thresholds) -> Tuple[str, str]:
    """(why, what to do) when the rates cannot separate pass from fail; ('', '') when they can."""
    busy = m.get("host_busy_before_pct")
    if busy is not None and busy >= t.host_saturated_pct:
        return (
            f"host saturated: {busy:.0f}% CPU busy from other processes before the run",
            "rerun when the host is quiet (`uptime`, `top`: load below the CPU count), or on a node of its own",
        )
    steps, prefetched = m.get("tuned_window_steps"), m.get("tuned_prefetched_batches")
    if steps is not None and prefetched and steps < prefetched + STEPS_PAST_PREFETCH:
        return (
            f"windows too short: a tuned window ran {steps:.0f} steps, and the workers had up to "
            f"{prefetched:.0f} batches prefetched, which it drains faster than the loader makes them",
            "rerun with a longer --budget for longer windows",
        )
    spread = m.get("tuned_spread_pct")
    if spread is not None and spread / 100.0 > t.noise_inconclusive:
        return (
            f"too noisy: the tuned windows spread {spread:.0f}% (> {t.noise_inconclusive:.0%})",
            "rerun on a quieter host, or with a longer --budget for longer windows",
        )
    gap = m.get("recheck_gap_pct")
    if gap is not None and abs(gap) / 100.0 > t.noise_inconclusive:
        return (
            f"not repeatable: an independent re-measure of the winner differs by {gap:+.0f}% "
            f"(> {t.noise_inconclusive:.0%})",
            "rerun on a quieter host, or with a longer --budget",
        )
    return "", ""


def undecided(checks: List[Check], reason: Tuple[str, str]) -> List[Check]:
    """The rate checks (RATE_CHECKS) that judged ok/warn/fail turned `inconclusive` for `reason`."""
    why, remedy = reason
    if not why:
        return checks
    judged = (Status.OK, Status.WARN, Status.FAIL)
    return [
        replace(
            c,
            status=Status.INCONCLUSIVE,
            observed=f"{c.observed}; {why}",
            remedy=remedy,
            detail=f"would be {c.status.value}; {c.detail}".rstrip("; "),
        )
        if c.id in RATE_CHECKS and c.status in judged
        else c
        for c in checks
    ]


MIN_RECHECK_STEPS = 6  # fewer, and the re-measure's own noise is unknown (its CV needs steps in each third)


def recheck_check(m: Mapping[str, Optional[float]], t: Thresholds) -> Check:
    """The tuned figure against an independent re-measure of the same config (a fresh loader)."""
    cid = "bench.recheck"
    tuned, again, noise = m.get("tuned_samples_per_s"), m.get("recheck_samples_per_s"), m.get("recheck_noise")
    if tuned is None or again is None:
        return Check(cid, Status.SKIP, "not measured", "", detail="needs the tuned windows and time for one more")
    noise = noise or t.noise_floor_min
    gap = again / tuned - 1.0
    observed = f"tuned {tuned:.0f}, re-measured {again:.0f} samples/s ({gap:+.1%})"
    expected = f"within the measured noise ({noise:.0%}) and {t.noise_inconclusive:.0%}"
    steps = m.get("recheck_steps")
    if steps is not None and steps < MIN_RECHECK_STEPS:
        return Check(
            cid,
            Status.SKIP,
            f"{observed}, over {steps:.0f} steps: too few to confirm or refute",
            expected,
            "a longer --budget leaves the re-measure a full window",
            "the budget left the re-measure less than a window (a slow first batch of a fresh loader?)",
        )
    detail = "a fresh loader of the winner, after the tuned windows"
    if abs(gap) <= min(noise, t.noise_inconclusive):
        return Check(cid, Status.OK, observed, expected, detail=detail)
    # Agreement inside a noise wider than a verdict can stand on is not agreement: the rate checks say
    # the same (`inconclusive_reason`).
    why = "the two disagree beyond the noise" if abs(gap) > noise else f"they agree only within a noise of {noise:.0%}"
    return Check(
        cid,
        Status.INCONCLUSIVE,
        f"{observed}; {why}",
        expected,
        "the host's load changed during the run: rerun on a quiet host, or with a longer --budget",
        f"{detail}; the rates are not repeatable",
    )
