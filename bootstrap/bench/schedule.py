"""How the phases share the budget: their order and weights, what each needs at least, and running one.

Each phase first gets the least it can do its work in, priced from the
costs measured so far (`budget.Costs`), then its share of what is left
(`budget.phase_budget_s`). A phase is a plain function
`phase(state, deadline) -> note`: `deadline` is the perf_counter reading
its slice ends at; the note (starting with 'skipped' when it measured
nothing) goes into its `PhaseRecord`. The optional scaling phase runs only
when the phases after it still get their least.
"""

from __future__ import annotations

import time
from typing import Callable, List, Tuple

from bootstrap.bench.baselines import ceiling_least_s
from bootstrap.bench.budget import PRE_TUNE_PHASES, PRE_TUNE_SHARE, advised_budget_s, allowance_s, search_s, tuned_s
from bootstrap.bench.results import PhaseRecord
from bootstrap.bench.search import likely_winner, scaling_counts, search_counts
from bootstrap.bench.state import RunState
from bootstrap.bench.trials import startup_guess_s
from bootstrap.bench.tune import CONFIRM
from bootstrap.bench.tuned import RECHECK_WINDOWS, TUNED_WINDOWS

Phase = Callable[[RunState, float], str]

# (phase, share of the budget); 'micro' and 'scaling' shares go to 'tune' where they do not apply.
# Each phase first gets the least it can do its work in (budget.phase_budget_s), then its share of the rest.
PHASES: Tuple[Tuple[str, float], ...] = (
    ("checks", 0.0),
    ("micro", 0.03),
    ("loader", 0.05),
    ("ceiling", 0.10),
    ("naive", 0.07),
    ("scaling", 0.07),
    ("tune", 0.43),
    ("tuned", 0.25),
)
OPTIONAL_PHASES = ("scaling",)  # runs only when the phases after it still get their least
BARRIER_PHASES = ("ceiling", "naive", "tune", "tuned")


def applies(state: RunState, name: str) -> bool:
    """Whether phase `name` belongs in this run: loader scaling is a CPU host's sizing figure."""
    if name == "scaling":
        return not state.is_cuda
    return True


def applicable_phases(state: RunState) -> List[Tuple[str, float]]:
    return [(name, weight) for name, weight in PHASES if applies(state, name)]


def minimum_s(state: RunState, name: str) -> float:
    """The least phase `name` can do its work in, priced with the costs known now."""
    costs = state.costs
    if costs is None:
        return 0.0
    if name == "micro":
        return 1.0 if state.is_cuda else 0.2
    if name == "loader":
        return costs.least_s(0, with_step=False)
    if name == "ceiling":
        return ceiling_least_s(state)
    if name == "naive":
        return costs.least_s(0)
    if name == "scaling":
        return sum(costs.least_s(w, with_step=False) for w in scaling_counts(state))
    if name == "tune":
        counts = search_counts(state)
        return search_s(
            costs,
            counts,
            reserve=(3 if state.is_cuda else 1) + min(CONFIRM, len(counts)),
            overhead_s=startup_guess_s(state, likely_winner(state)),
        )
    if name == "tuned":
        return tuned_s(costs, likely_winner(state), TUNED_WINDOWS + RECHECK_WINDOWS)
    return 0.0


def run_phase(state: RunState, name: str, later: List[Tuple[str, float]], body: Phase) -> None:
    """Run phase `name` with its slice of what is left (its least first, then its share of the rest);
    `later` lists it and the phases after it with their weights."""
    state.current_phase = name
    if state.barrier is not None and name in BARRIER_PHASES:
        state.barrier()
    started = time.perf_counter()
    remaining_s = max(0.0, state.run_deadline - started)
    least = [(phase, weight, minimum_s(state, phase)) for phase, weight in later]
    budget_s = allowance_s(name, started - state.clock_zero, state.options.budget_s, least)
    try:
        state.say(name, f"start ({budget_s:.1f} s of {remaining_s:.1f} s left)")
        note = _cannot_start(state, name, remaining_s, least) or body(state, started + budget_s)
    except KeyboardInterrupt:
        state.phase_records.append(
            PhaseRecord(name, started - state.clock_zero, time.perf_counter() - started, budget_s, "interrupted")
        )
        raise
    state.phase_records.append(
        PhaseRecord(
            name,
            started - state.clock_zero,
            time.perf_counter() - started,
            budget_s,
            "skipped" if note.startswith("skipped") else "done",
            note,
        )
    )


def _cannot_start(state: RunState, name: str, remaining_s: float, least: List[Tuple[str, float, float]]) -> str:
    """Why phase `name` does not run at all ('' when it runs): the budget is spent, or it is optional
    and would leave the phases after it less than their least."""
    floor_s, own_s = sum(seconds for _, _, seconds in least), least[0][2]
    pre_left_s = PRE_TUNE_SHARE * state.options.budget_s - state.elapsed_s()
    pre_floor_s = sum(seconds for phase, _, seconds in least if phase in PRE_TUNE_PHASES)
    if remaining_s <= 0 and name != "checks":
        why = "skipped: the budget is spent"
    elif name in OPTIONAL_PHASES and own_s > 0 and remaining_s < floor_s:
        why = f"skipped: the phases from here need ~{floor_s:.1f} s, {remaining_s:.1f} s left; the tuner comes first"
    elif name in OPTIONAL_PHASES and own_s > 0 and pre_left_s < pre_floor_s:
        why = (
            f"skipped: {PRE_TUNE_SHARE:.0%} of the budget goes to the phases before the tuner, "
            f"{max(0.0, pre_left_s):.1f} s of it left; the tuner comes first"
        )
    else:
        return ""
    state.ledger.skip(name, f"the {name} phase", own_s)
    return why


def needed_s(state: RunState) -> float:
    """A budget for a complete run: setup plus every phase's least, priced with the final costs (and at
    least what this run spent plus what it left out), with a margin for the estimate's error."""
    setup_s = state.phase_records[0].started_s if state.phase_records else state.elapsed_s()
    phases = [name for name, _ in PHASES if state.device is not None and applies(state, name)]
    complete_s = setup_s + sum(minimum_s(state, name) for name in phases)
    return advised_budget_s(max(complete_s, state.ledger.needed_s(state.elapsed_at_end_s or state.elapsed_s())))
