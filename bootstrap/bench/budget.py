"""What a measurement costs before it runs, so that the bench starts only what it can finish.

A loader measurement pays for its first batch (one process makes a whole
batch, after the workers start), a warm-up that drains the batches the
workers loaded meanwhile, then a window of at least `floor_steps` steps
(`window.WindowPlan`: a rate needs a few steps, its CV needs thirds) and,
with workers, of a few batch latencies (they deliver in bursts).
In steady state a step comes every `period_s`: the main process alone
loads a batch and then steps; W workers deliver W batches per batch
latency (at most one per usable CPU when the samples cost CPU), never
faster than the step. From the per-sample costs the run measures (`l`
wall, `c` CPU seconds) and the step time, `Costs` prices a measurement,
and `Ledger` keeps what was left out for want of time, so the report can
say how much budget a complete run needs.

Pure arithmetic; tests feed it numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import List, Optional, Sequence, Tuple

FLOOR_STEPS = 3  # window.WindowPlan.floor_steps
# One worker's start-up before any was measured: a forked worker shares the parent's memory and imports
# nothing; a spawned one (forkserver: its server, once) starts a fresh interpreter that imports torch.
FORKED_START_S = 0.1
SPAWNED_START_S = 1.0
MIN_WINDOW_BATCHES = 4  # a worker window spans four batch latencies (trials.min_window_s)


@dataclass(frozen=True)
class Costs:
    """Per-sample and per-step costs of this run's workload, as far as they are known."""

    batch_size: int
    wall_s_per_sample: float  # l: one process, one sample, wall time
    cpu_s_per_sample: float  # c: the same in CPU time
    cpus: int = 1
    step_s: float = 0.0  # one training step on a resident batch (0 until measured)
    startup_s: float = FORKED_START_S  # workers' start-up before the first batch, for `startup_workers` workers
    startup_workers: int = 1  # the most workers a loader measured so far started (1 for the guess)

    @property
    def batch_s(self) -> float:
        return self.batch_size * self.wall_s_per_sample

    def startup_for(self, workers: int) -> float:
        """Seconds `workers` workers take to start: what the most workers measured took, and in proportion
        past them. The parent starts its workers one by one, and a spawned worker imports torch and the
        dataset's modules afresh, all of them at once on a host whose CPUs are busy: more workers than
        were measured cannot be assumed to start in the same time, whatever the CPU count."""
        return 0.0 if workers <= 0 else self.startup_s * max(1.0, workers / self.startup_workers)

    def learn_startup(self, workers: int, first_batch_s: float) -> "Costs":
        """These costs with the start-up a loader of `workers` workers showed (its first batch's wait
        beyond one batch's load): the slowest start-up seen, priced for the most workers seen. A price
        never runs short of a start-up measured with as many workers or fewer."""
        if workers <= 0:
            return self
        seen = max(0.0, first_batch_s - self.batch_s)
        learned = (max(seen, self.startup_s), max(workers, self.startup_workers))
        if learned == (self.startup_s, self.startup_workers):
            return self
        return replace(self, startup_s=learned[0], startup_workers=learned[1])

    @property
    def cpu_bound(self) -> bool:
        return self.cpu_s_per_sample >= 0.5 * self.wall_s_per_sample

    def period_s(self, workers: int, with_step: bool = True) -> float:
        """Seconds between steps in steady state."""
        step = self.step_s if with_step else 0.0
        if workers <= 0:
            return self.batch_s + step
        parallel = min(workers, max(1, self.cpus)) if self.cpu_bound else workers
        return max(self.batch_s / parallel, step)

    def warm_s(self, workers: int, with_step: bool = True) -> float:
        """The warm-up after the first batch: the main process steps once on it; W workers deliver a
        burst of about W batches (loaded while the first one was), then one more period."""
        step = self.step_s if with_step else 0.0
        return step if workers <= 0 else workers * step + self.period_s(workers, with_step)

    def window_s(self, workers: int, with_step: bool = True) -> float:
        """The shortest window worth comparing: FLOOR_STEPS steps, and for workers, which deliver in
        bursts, MIN_WINDOW_BATCHES batch latencies."""
        floor = FLOOR_STEPS * self.period_s(workers, with_step)
        return max(floor, MIN_WINDOW_BATCHES * self.batch_s) if workers else floor

    def least_s(self, workers: int, with_step: bool = True) -> float:
        """The shortest measurement worth having: the first batch, the warm-up, the shortest window."""
        first = self.batch_s + self.startup_for(workers)
        return first + self.warm_s(workers, with_step) + self.window_s(workers, with_step)


def startup_guess_s(start_method: Optional[str]) -> float:
    """`Costs.startup_s` until a loader with workers is measured (`Costs.learn_startup`)."""
    return FORKED_START_S if start_method in (None, "fork") else SPAWNED_START_S


def search_s(costs: Costs, workers: Sequence[int], *, reserve: int, overhead_s: float) -> float:
    """Least time for a search worth the name: every candidate measured once at the shortest comparable
    window (successive halving's first round; later rounds refine it), plus `reserve` such windows for
    the knobs."""
    from bootstrap.bench.tune import MEASURE_OVERHEAD

    if not workers:
        return 0.0
    window = max(0.2, costs.window_s(max(workers)))
    return (len(workers) + reserve) * (window * MEASURE_OVERHEAD + overhead_s)


def tuned_s(costs: Costs, workers: int, windows: int) -> float:
    """Least time for the tuned phase: a first batch, a warm-up as long as a third of a window, the windows."""
    window = costs.window_s(workers)
    return costs.batch_s + costs.startup_for(workers) + window / 3 + windows * window


def advised_budget_s(needed_s: float) -> float:
    """What to advise for --budget: the estimate plus a tenth for its error, rounded up to a round number."""
    return float(5 * math.ceil(needed_s * 1.1 / 5))


def phase_budget_s(name: str, remaining_s: float, later: Sequence[Tuple[str, float, float]]) -> float:
    """Seconds for phase `name` out of `remaining_s`, where `later` lists (phase, weight, least seconds)
    for it and the phases after it: each gets its least first, then the surplus is shared by weight.
    When there is less than their least, each gets a slice in proportion to its least, so the search
    does not take what the tuned windows need."""
    floor = sum(least for _, _, least in later)
    weights = sum(weight for _, weight, _ in later)
    _, weight, least = next(item for item in later if item[0] == name)
    share = weight / weights if weights else 1.0
    if remaining_s < floor:
        return remaining_s * least / floor
    return least + (remaining_s - floor) * share


# Phases before the tuner: together (with set-up) at most PRE_TUNE_SHARE of the budget, so that the
# search and the tuned windows, which the verdicts stand on, keep the rest on a slow or busy host.
PRE_TUNE_PHASES = ("checks", "micro", "loader", "ceiling", "naive", "scaling")
PRE_TUNE_SHARE = 0.25


def allowance_s(name: str, elapsed_s: float, budget_s: float, later: Sequence[Tuple[str, float, float]]) -> float:
    """Seconds for phase `name`, `elapsed_s` into a run of `budget_s`: its slice of what is left
    (`phase_budget_s` over `later`), and for a phase before the tuner no more than its slice of what is
    left of the pre-tuning share (PRE_TUNE_SHARE of the budget, set-up included)."""
    share = phase_budget_s(name, max(0.0, budget_s - elapsed_s), later)
    if name not in PRE_TUNE_PHASES:
        return share
    before = [item for item in later if item[0] in PRE_TUNE_PHASES]
    left_s = max(0.0, PRE_TUNE_SHARE * budget_s - elapsed_s)
    return min(share, phase_budget_s(name, left_s, before))


@dataclass
class Ledger:
    """Measurements left out because the budget could not pay for them, with what each would cost."""

    skipped: List[Tuple[str, str, float]] = field(default_factory=list)  # (phase, what, seconds)

    def skip(self, phase: str, what: str, seconds: float) -> None:
        self.skipped.append((phase, what, max(0.0, seconds)))

    @property
    def missing_s(self) -> float:
        return sum(seconds for _, _, seconds in self.skipped)

    def needed_s(self, spent_s: float) -> float:
        """A budget that would have paid for what was skipped too (whole seconds, rounded up)."""
        return float(math.ceil(spent_s + self.missing_s))

    def summary(self, phases: Sequence[str] = ()) -> str:
        """'PHASE: WHAT (~SECONDS s); ...' for each measurement left out, of `phases` only when given."""
        return "; ".join(
            f"{phase}: {what} (~{seconds:.1f} s)"
            for phase, what, seconds in self.skipped
            if not phases or phase in phases
        )
