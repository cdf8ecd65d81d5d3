"""The bench run: phases inside one time budget, returning a frozen `BenchResult`.

Phases (bench_method.md section 5): checks (L1 facts) -> micro (matmul,
H2D; L2) -> loader (num_workers=0 alone: CPU and wall seconds per sample)
-> ceiling (the step on a batch resident on the device) -> naive
(num_workers=0, no pinning, blocking copies, the ceiling's step) ->
scaling (CPU-only: loader rate against workers) -> tune (see `tune`) ->
tuned (three windows of the winner). Each is a plain function of the run's
state (`state.RunState`): the first five live in `baselines`, scaling and
tune in `search`, the tuned windows in `tuned`; `schedule` gives each its
slice of the budget and `outcome` computes the result from the state.

A measurement starts only when it ends inside the budget, and what the
budget could not pay for is reported with the budget a complete run would
need. Ctrl-C (and SIGTERM, through the CLI) ends the run where it is: the
result is marked `partial` and holds what was measured. A run still going
well past its budget is stuck (`watchdog`): it stops, and raises one
InputError naming the dataset. Nothing here prints; progress goes to the
callback the caller passes.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

from bootstrap.bench import baselines, search
from bootstrap.bench.config import BenchOptions, option_name
from bootstrap.bench.outcome import build_result
from bootstrap.bench.results import BenchResult, PhaseRecord
from bootstrap.bench.schedule import Phase, applicable_phases, run_phase
from bootstrap.bench.startup import clean_up, set_up
from bootstrap.bench.state import Progress, ProgressFn, RunState, new_state
from bootstrap.bench.trials import dataset_where
from bootstrap.bench.tuned import tuned
from bootstrap.bench.user import REF_FLAGS
from bootstrap.bench.watchdog import Stalled, give_up_s, watchdog
from bootstrap.errors import BootstrapError, InputError

__all__ = ["PHASE_FUNCTIONS", "Progress", "ProgressFn", "run_bench", "run_phases", "run_scheduled_phases"]

PHASE_FUNCTIONS: Dict[str, Phase] = {
    "checks": baselines.checks,
    "micro": baselines.micro,
    "loader": baselines.loader,
    "ceiling": baselines.ceiling,
    "naive": baselines.naive,
    "scaling": search.scaling,
    "tune": search.tune_phase,
    "tuned": tuned,
}


def run_bench(
    options: BenchOptions,
    progress: Optional[ProgressFn] = None,
    *,
    barrier: Optional[Callable[[], None]] = None,
    rank: Optional[Dict[str, int]] = None,
) -> BenchResult:
    """Run every phase within `options.budget_s`; Ctrl-C returns the partial result instead of raising.
    A run stuck past its budget (`watchdog`), or the user's dataset, collate or step raising what no
    phase expects (sys.exit, say), raises one InputError naming them, after the clean-up.

    `barrier` (torchrun: `dist.barrier`) is called at the start of the
    ceiling, naive, tune and tuned phases and of each tuned window, the same
    number of times on every rank.
    """
    state = new_state(options, progress, barrier=barrier, rank=rank)
    failure: Optional[InputError] = None
    try:
        with watchdog(give_up_s(state.options.budget_s)):
            run_phases(state)
    except KeyboardInterrupt:
        mark_interrupted(state)
    except Stalled:
        failure = stalled_error(state)
    except BootstrapError:
        raise
    except BaseException as exc:
        if state.options.user is None:
            raise
        failure = user_code_error(state, exc)
        failure.__cause__ = exc  # --debug shows where it came from
    finally:
        try:
            clean_up(state)
        except KeyboardInterrupt:  # the stop came as the run ended (a job's time limit): the clean-up still finishes
            mark_interrupted(state)
            clean_up(state)
    if failure is not None:
        raise failure
    return build_result(state)


def run_phases(state: RunState) -> None:
    """Set the run up, then run its phases (`run_scheduled_phases`)."""
    state.say("setup", "building the workload")
    set_up(state)
    run_scheduled_phases(state)


def run_scheduled_phases(state: RunState) -> None:
    """Each phase that applies, in order, each with its slice of what is left of the budget."""
    applicable = applicable_phases(state)
    for index, (name, _) in enumerate(applicable):
        run_phase(state, name, applicable[index:], PHASE_FUNCTIONS[name])


def mark_interrupted(state: RunState) -> None:
    """Ctrl-C: note where it landed, even between phases or during setup."""
    state.interrupted = True
    if not state.phase_records or state.phase_records[-1].status != "interrupted":
        state.phase_records.append(
            PhaseRecord(state.current_phase, state.elapsed_s(), 0.0, 0.0, "interrupted", "interrupted here")
        )


def stalled_error(state: RunState) -> InputError:
    """The one line for a run the watchdog stopped: where it was, and what usually holds a run."""
    budget_s = state.options.budget_s
    over = (
        f"still running {state.elapsed_s() - budget_s:.0f} s past its {budget_s:g} s budget, "
        f"in the {state.current_phase} phase: stopped"
    )
    if state.options.user is None:
        return InputError(f"bench --budget {budget_s:g}", over, "give it a larger --budget")
    script = state.options.from_script
    return InputError(
        user_where(state),
        f"{over}; a __getitem__ (or __iter__), collate, model or step that never returns?",
        f"time one sample by hand; a dataset this slow needs a larger {option_name('budget_s', script)} "
        f"or a smaller {option_name('batch_size', script)}",
    )


def user_code_error(state: RunState, exc: BaseException) -> InputError:
    """The one line for what escaped the phases of a run over the user's code (their dataset, collate or
    step in this process: sys.exit, an exception no phase expects)."""
    from bootstrap.bench.device import StepFailed
    from bootstrap.bench.trials import step_failed
    from bootstrap.bench.user import describe_error

    if isinstance(exc, StepFailed):
        return step_failed(state, exc, f"in the {state.current_phase} phase")
    if "pickle" in str(exc).lower():  # spawn/forkserver: DataLoader pickles the dataset for each worker
        return InputError(
            user_where(state),
            f"cannot be sent to DataLoader workers: {describe_error(exc)}",
            "under spawn (macOS, Windows, or set_start_method) a dataset must pickle: no lambdas or "
            "open handles in its attributes",
        )
    debug = "" if state.options.from_script else " (--debug)"  # a script's traceback shows the cause as it is
    exited = "" if isinstance(exc, Exception) else "a sample, collate or step must return, not exit; "
    return InputError(
        user_where(state),
        f"{describe_error(exc)} in the {state.current_phase} phase: stopped",
        f"{exited}the traceback is the error's cause{debug}",
    )


def user_where(state: RunState) -> str:
    """The user's references a message names: the dataset, and the collate, model and step when given."""
    user = state.options.user
    named = [f"{flag} {getattr(user, name)}" for name, flag in REF_FLAGS[1:] if isinstance(getattr(user, name), str)]
    return " ".join([dataset_where(state), *named])
