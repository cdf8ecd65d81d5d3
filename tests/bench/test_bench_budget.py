"""The budget: phases end by fixed points of it, measurements are cut at their deadline, the search
never runs past it, and what was cut is reported with the budget a complete run needs.

Pure parts run on fake phases and a fake clock; one real run with slow batches (each sample sleeps
IO_MS, so a batch takes BATCH x IO_MS) checks that the run ends within its budget, that --max-workers
caps every phase, and that a budget too small for a tune is reported as such. Its budget starts when
set-up ends (`run_after_setup`): on a busy host set-up alone can outlast a small budget.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace

import pytest

from bootstrap.bench import phases, tuner
from bootstrap.bench.config import BenchOptions, WorkloadSpec
from bootstrap.bench.measure import Window, run_window
from bootstrap.bench.report import dataloader_snippet, envelope_json
from bootstrap.bench.results import LoaderConfig, Measurement, Metrics
from bootstrap.bench.state import new_state
from bootstrap.bench.verdicts import VerdictFacts, tuned_check
from bootstrap.report import Status
from tests.fixtures.bench import run_after_setup

# --------------------------------------------------------------------------- phases and windows


def fake_phases(monkeypatch, overrun_s=0.0):
    """PHASES replaced by fakes that note their deadline; 'naive' overruns it by `overrun_s`."""
    seen = {}

    def body(name):
        def run(state, deadline):
            seen[name] = deadline
            if name == "naive":
                time.sleep(max(0.0, deadline - time.perf_counter()) + overrun_s)
            return "done"

        return run

    fakes = tuple(phases.Phase(p.name, p.share, body(p.name), cuda_never=p.cuda_never) for p in phases.PHASES)
    monkeypatch.setattr(phases, "PHASES", fakes)
    return seen


def test_each_phase_ends_by_its_fixed_point_of_what_set_up_left(monkeypatch):
    seen = fake_phases(monkeypatch)
    state = new_state(BenchOptions(budget_s=100.0, device="cpu"))
    state.run_deadline = time.perf_counter() + 1.0
    start = time.perf_counter()
    phases.run_phases(state)
    total = sum(p.share for p in phases.PHASES)
    cumulative = 0.0
    for phase in phases.PHASES:  # a CPU run: every phase applies
        cumulative += phase.share
        expected = start + (state.run_deadline - start) * cumulative / total
        assert seen[phase.name] == pytest.approx(expected, abs=0.01), phase.name
    assert [r.name for r in state.phase_records] == [p.name for p in phases.PHASES]


def test_a_phase_that_overruns_leaves_the_later_ones_less_and_the_run_end_stays(monkeypatch):
    seen = fake_phases(monkeypatch, overrun_s=0.3)
    state = new_state(BenchOptions(budget_s=100.0, device="cpu"))
    state.run_deadline = time.perf_counter() + 0.5
    phases.run_phases(state)
    assert seen["tuned"] == pytest.approx(state.run_deadline)
    records = {r.name: r for r in state.phase_records}
    assert records["naive"].seconds >= 0.3 and records["scaling"].budget_s < 0.05


def test_phases_after_the_run_s_end_are_skipped_and_counted_as_cut(monkeypatch):
    seen = fake_phases(monkeypatch)
    state = new_state(BenchOptions(budget_s=10.0, device="cpu"))
    state.run_deadline = time.perf_counter() - 1.0  # set-up took the whole budget
    phases.run_phases(state)
    assert set(seen) == {"checks"}  # host facts are always reported
    skipped = [r for r in state.phase_records if r.status == "skipped"]
    assert [r.note for r in skipped] == ["skipped: the budget is spent"] * (len(phases.PHASES) - 1)
    assert {c.phase for c in state.cuts} == {p.name for p in phases.PHASES} - {"checks"}
    assert state.budget_needed_s() > 10.0


def window_state(run_left_s):
    state = new_state(BenchOptions(workload=WorkloadSpec(batch_size=2), budget_s=60.0, device="cpu"))
    state.run_deadline = time.perf_counter() + run_left_s
    return state


def slow_step(_batch):
    time.sleep(0.02)


def test_a_window_ends_by_its_plan_or_is_cut_at_its_deadline_after_three_steps():
    state = window_state(60.0)
    planned = run_window(state, lambda: 0, slow_step, Window(0.1), time.perf_counter() + 10, ("tune", "x", None))
    assert not planned.truncated and planned.seconds >= 0.1 and planned.steps >= 3
    cut = run_window(state, lambda: 0, slow_step, Window(5.0), time.perf_counter() + 0.01, ("tune", "x", None))
    assert cut.truncated and cut.steps == 3 and cut.seconds < 1.0
    slow = run_window(
        state, lambda: 0, slow_step, Window(0.05, min_steps=100), time.perf_counter() + 10, ("t", "x", None)
    )
    assert not slow.truncated and slow.steps < 100  # twice its seconds after three steps: too few steps is no cut


def test_the_run_s_end_cuts_a_window_at_once():
    state = window_state(0.0)
    cut = run_window(state, lambda: 0, slow_step, Window(5.0), time.perf_counter() + 10, ("tune", "x", None))
    assert cut.truncated and cut.steps == 1


def test_a_window_cut_well_short_is_a_cut_with_what_it_lacked_and_the_advice_covers_it():
    state = window_state(60.0)
    short = Measurement("tune", "w=2", LoaderConfig(num_workers=2), 2, 16, 0.5, 32.0, truncated=True)
    state.record(short, planned_s=2.0)
    (cut,) = state.cuts
    assert cut.phase == "tune" and cut.need_s == pytest.approx(1.5 + 0.25)  # 1.5 s of window, one step short
    state.record(Measurement("tune", "w=4", None, 30, 240, 1.9, 126.0, truncated=True), planned_s=2.0)
    assert len(state.cuts) == 1  # a window a busy moment ended a little early lacked nothing worth a budget
    state.elapsed_at_end_s = 10.2
    assert state.budget_needed_s() == 5 * math.ceil((10.2 + 1.75) * 1.1 / 5)
    assert state.cuts_summary() == "tune: w=2 (~1.8 s)" and state.cuts_summary(("tuned",)) == ""


class SlowStart:
    """Samples that cost nothing, in workers that take a second or two to start (spawned workers import
    torch afresh), each worker slower than the one before."""

    started = False

    def __len__(self):
        return 64

    def __getitem__(self, index):
        import time

        import torch
        from torch.utils.data import get_worker_info

        worker = get_worker_info()
        if worker is not None and not SlowStart.started:
            SlowStart.started = True  # in this worker's own copy of the class
            time.sleep(1.0 + 0.5 * worker.id)
        return torch.zeros(3, 8, 8, dtype=torch.uint8), index % 10


def test_a_loader_s_slow_start_stays_out_of_its_window():
    """The warm-up drains a batch of each worker: the window holds none of the later ones' start-up."""
    from bootstrap.bench.measure import measure_loader
    from bootstrap.bench.run import clean_up, set_up
    from bootstrap.bench.user import UserWorkload

    state = new_state(
        BenchOptions(workload=WorkloadSpec(batch_size=8), budget_s=60, device="cpu", user=UserWorkload(SlowStart()))
    )
    try:
        set_up(state)
        config = LoaderConfig(num_workers=4, persistent_workers=True)
        plan = Window.scaled(0.3, drain=5)
        measured = measure_loader(state, config, plan, time.perf_counter() + 30, "tune", with_step=False)
    finally:
        clean_up(state)
    assert measured.first_batch_s >= 1.0
    assert measured.seconds < 1.0, measured


def test_the_step_is_timed_with_the_torch_threads_the_phases_give_it():
    """On the host the step gets half the CPUs' threads beside the workers; timed with all of them, on a
    busy host, its OpenMP threads spin against the other load and the step comes out many times slower."""
    import torch
    from torch.utils.data import TensorDataset

    from bootstrap.bench.run import clean_up, set_up
    from bootstrap.bench.user import UserWorkload

    threads = []

    def step(model, batch, device):
        threads.append(torch.get_num_threads())

    dataset = TensorDataset(torch.zeros(8, 3, 8, 8), torch.zeros(8, dtype=torch.long))
    state = new_state(
        BenchOptions(
            workload=WorkloadSpec(batch_size=4),
            budget_s=60,
            device="cpu",
            cpus=2,
            user=UserWorkload(dataset, step=step),
        )
    )
    saved = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        set_up(state)
    finally:
        clean_up(state)
        torch.set_num_threads(saved)
    assert threads == [1, 1]  # the first step and the one that times it


# --------------------------------------------------------------------------- the search inside its deadline


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def measured(config, rate, phase="tune"):
    return Measurement(phase, config.label, config, 10, 80, 1.0, rate, cv=0.01)


def test_with_no_time_left_the_winner_is_the_fastest_result_already_known():
    """With no time left to measure, the winner is the fastest configuration measured already (the scaling
    phase's two workers), not the first prior (the naive loader)."""
    clock = Clock()
    configs = [LoaderConfig(num_workers=w, persistent_workers=w > 0) for w in (0, 1, 2)]
    prior = {configs[0]: measured(configs[0], 41.7, "naive"), configs[2]: measured(configs[2], 102.0, "scaling")}

    def measure(config, window):
        raise AssertionError("nothing fits: nothing may be measured")

    result = tuner.successive_halving(
        configs,
        measure,
        0.5,
        tuner.SearchOptions(ceiling_samples_per_s=600.0, early_stop=0.95, minimum_noise=0.03, min_window_s=1.0),
        prior=prior,
        clock=clock,
    )
    assert result.winner.config.num_workers == 2
    assert result.unmeasured == (configs[1],) and result.cost_s > 0.5


def test_no_measurement_starts_that_would_end_past_the_deadline():
    """No candidate is measured whose window would end past the deadline, the first one included."""
    clock = Clock()
    configs = [LoaderConfig(num_workers=w) for w in (1, 2)]
    result = tuner.successive_halving(
        configs,
        lambda c, w: pytest.fail("measured"),
        1.0,
        tuner.SearchOptions(ceiling_samples_per_s=None, early_stop=0.95, minimum_noise=0.03, min_window_s=2.0),
        clock=clock,
    )
    assert result.winner is None and result.unmeasured == tuple(configs)


def test_the_winner_is_never_slower_than_a_config_measured_in_an_earlier_round():
    clock = Clock()
    configs = [LoaderConfig(num_workers=w) for w in (1, 2, 3, 4)]
    rates = {1: [100.0, 80.0], 2: [99.0, 81.0], 3: [98.0], 4: [10.0]}  # per round; the survivors slow down

    def measure(config, window):
        clock.now += window
        return measured(config, rates[config.num_workers].pop(0))

    result = tuner.successive_halving(
        configs,
        measure,
        100.0,
        tuner.SearchOptions(ceiling_samples_per_s=None, early_stop=0.95, minimum_noise=0.03),
        clock=clock,
    )
    assert len(result.rounds) == 2
    assert result.winner.config.num_workers == 3 and result.winner.samples_per_s == 98.0


def test_a_candidate_whose_loader_dies_drops_out():
    clock = Clock()
    configs = [LoaderConfig(num_workers=w) for w in (0, 1, 2)]

    def measure(config, window):
        clock.now += window
        return None if config.num_workers == 2 else measured(config, 50.0 + config.num_workers)

    result = tuner.successive_halving(
        configs,
        measure,
        100.0,
        tuner.SearchOptions(ceiling_samples_per_s=None, early_stop=0.95, minimum_noise=0.03),
        clock=clock,
    )
    assert result.failed == (configs[2],) and result.winner.config.num_workers in (0, 1)
    knobs = tuner.try_knobs(
        result.winner,
        [("prefetch_factor=4", LoaderConfig(num_workers=1, prefetch_factor=4))],
        lambda c, w: None,
        1.0,
        0.03,
    )
    assert knobs.winner is result.winner and math.isnan(knobs.trials[0][3]) and knobs.trials[0][2] is False


# --------------------------------------------------------------------------- saying so


def test_tuned_verdict_says_when_the_budget_was_too_small():
    facts = VerdictFacts(device_type="cpu", budget_s=10.0, left_out="tune: w=2 pf=2 nopin (~9.0 s)")
    complete = Metrics(tune_candidates=3.0, tune_candidates_measured=3.0, tuned_windows=3.0)
    assert tuned_check(complete, facts).status is Status.OK
    short = tuned_check(replace(complete, tune_candidates_measured=2.0, budget_needed_s=50.0), facts)
    assert short.status is Status.WARN and short.observed.startswith("budget too small: ~50 s needed, 10 s given")
    assert short.remedy == "rerun with --budget 50 (or more)" and "w=2 pf=2 nopin" in short.detail
    # A budget too small for the scaling phase alone is no reason to call the tune incomplete.
    assert tuned_check(replace(complete, budget_needed_s=50.0), VerdictFacts(device_type="cpu")).status is Status.OK
    died = tuned_check(replace(complete, tune_candidates_measured=1.0, tune_candidates_failed=2.0), facts)
    assert died.status is Status.WARN and "2 failed" in died.observed and "bench.shm" in died.remedy
    assert tuned_check(Metrics(naive_samples_per_s=90.0), facts).status is Status.WARN  # no search at all
    nothing = tuned_check(Metrics(budget_needed_s=2410.0), facts)  # not even the naive loader fed the step
    assert nothing.status is Status.FAIL and nothing.remedy == "rerun with --budget 2410 (or more)"
    assert nothing.observed == "no loader was measured with the step: the budget ended first"
    assert tuned_check(Metrics(), VerdictFacts(device_type="cpu", partial=True)).status is Status.SKIP


def test_a_snippet_from_an_incomplete_search_says_so_first():
    spec = WorkloadSpec(samples=16, image_size=24, crop_size=16, batch_size=4)
    snippet = dataloader_snippet(LoaderConfig(num_workers=2), spec, "cpu", caveat="budget too small: ~50 s needed")
    assert snippet.splitlines()[0] == "# NOT FULLY TUNED: budget too small: ~50 s needed"
    assert not dataloader_snippet(LoaderConfig(num_workers=2), spec, "cpu").startswith("# NOT")


# --------------------------------------------------------------------------- a real run with slow batches

IO_MS, BATCH, BUDGET_S = 40.0, 8, 6.0


@pytest.fixture(scope="module")
def slow_run():
    """Batches of 8 x 40 ms: far too slow for a full tune in 6 s. The run stays inside its budget, no phase
    goes past --max-workers 1, and the report does not present num_workers=0 as the tuned winner."""
    spec = WorkloadSpec(samples=16, image_size=32, crop_size=24, batch_size=BATCH, io_ms=IO_MS, step_ms=5.0)
    result = run_after_setup(BenchOptions(workload=spec, budget_s=BUDGET_S, device="cpu", max_workers=1))
    return json.loads(envelope_json(result))


@pytest.mark.slow
def test_slow_batches_stay_inside_the_budget(slow_run):
    extra = slow_run["extra"]
    batch_s = BATCH * IO_MS / 1000.0
    budget_end_s = extra["phases"][0]["started_s"] + BUDGET_S  # the budget starts as set-up ends
    assert extra["seconds"] <= budget_end_s + batch_s + 0.5, extra["phases"]
    for phase in extra["phases"]:
        assert phase["started_s"] <= budget_end_s + batch_s, phase


@pytest.mark.slow  # the budget's arithmetic is the unit tests' above; this is a whole run
def test_max_workers_caps_every_phase(slow_run):
    workers = [m["config"]["num_workers"] for m in slow_run["extra"]["measurements"] if m["config"]]
    assert workers and max(workers) <= 1
    assert max(slow_run["extra"]["tuning"]["candidates"] or [0]) <= 1


@pytest.mark.slow  # the budget's arithmetic is the unit tests' above; this is a whole run
def test_a_budget_too_small_is_reported_with_the_budget_it_needs(slow_run):
    extra = slow_run["extra"]
    check = next(c for c in slow_run["checks"] if c["id"] == "bench.tuned")
    needed = extra["metrics"]["budget_needed_s"]
    assert check["status"] == "warn" and check["observed"].startswith(f"budget too small: ~{needed:.0f} s needed")
    assert needed > BUDGET_S and check["remedy"] == f"rerun with --budget {needed:.0f} (or more)"
    assert any(note.startswith("budget too small for a complete run") for note in extra["notes"])
    if extra["snippet"]:
        assert extra["snippet"].startswith("# NOT FULLY TUNED: budget too small")
