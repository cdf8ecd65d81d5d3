"""The budget: what measurements cost, how phases share the time, and a search that never runs past it.

Pure parts are fed numbers; one real run with slow batches (each sample
sleeps IO_MS, so a batch takes BATCH x IO_MS) checks that the run ends
within its budget, that --max-workers caps every phase, and that a budget
too small for a tune is reported as such. Its budget starts when set-up
ends (`run_after_setup`): on a busy host set-up alone can outlast a small
budget, and then no phase would be left to check.
"""

from __future__ import annotations

import json
import math

import pytest

from bootstrap.bench import tune
from bootstrap.bench.budget import Costs, Ledger, advised_budget_s, phase_budget_s, search_s, startup_guess_s, tuned_s
from bootstrap.bench.config import BenchOptions, WorkloadSpec
from bootstrap.bench.report import dataloader_snippet, envelope_json
from bootstrap.bench.results import LoaderConfig, Measurement
from bootstrap.bench.verdicts import VerdictFacts, tuned_check
from bootstrap.report import Status
from tests.fixtures.bench import run_after_setup

# --------------------------------------------------------------------------- what a measurement costs


def test_costs_of_a_measurement():
    cpu = Costs(batch_size=10, wall_s_per_sample=0.1, cpu_s_per_sample=0.1, cpus=2, step_s=0.2, startup_s=0.1)
    assert cpu.batch_s == pytest.approx(1.0)
    assert cpu.period_s(0) == pytest.approx(1.2)  # load, then step
    assert cpu.period_s(8) == pytest.approx(0.5)  # CPU-bound: two CPUs make two batches a second
    assert cpu.period_s(8, with_step=False) == pytest.approx(0.5)
    assert cpu.window_s(2) == pytest.approx(4.0)  # workers: four batch latencies
    assert cpu.window_s(0) == pytest.approx(3 * 1.2)  # the main process: three steps
    assert cpu.least_s(0) == pytest.approx(1.0 + 0.2 + 3.6)  # first batch, one step on it, the window
    assert cpu.least_s(2) == pytest.approx(1.2 + (2 * 0.2 + 0.5) + 4.0)  # two workers start: 0.1 s each
    io = Costs(batch_size=10, wall_s_per_sample=0.1, cpu_s_per_sample=0.001, cpus=2, step_s=0.05)
    assert io.period_s(8) == pytest.approx(1.0 / 8)  # sleeping workers are not capped by CPUs
    assert io.period_s(100) == pytest.approx(0.05)  # never faster than the step


def test_worker_start_up_is_learned_from_the_first_batch_and_priced_per_worker():
    """Spawned workers import torch afresh, together, queueing for the CPUs: what a loader's first batch
    waited beyond one batch's load prices every later loader, in proportion past the most workers seen,
    even within the CPU count (on a busy host 2 spawned workers took 3x one worker's start-up)."""
    c = Costs(
        batch_size=10,
        wall_s_per_sample=0.01,
        cpu_s_per_sample=0.01,
        cpus=2,
        step_s=0.1,
        startup_s=startup_guess_s("spawn"),
    )
    assert startup_guess_s("fork") < startup_guess_s("forkserver") == c.startup_s
    assert c.startup_for(0) == 0.0 and c.startup_for(8) == pytest.approx(4 * c.startup_for(2))
    one = c.learn_startup(1, first_batch_s=1.6)  # one worker: 1.5 s
    assert one.startup_for(1) == pytest.approx(1.5) and one.startup_for(2) == pytest.approx(3.0)
    learned = one.learn_startup(4, first_batch_s=6.1)  # 4 workers: 6 s
    assert (learned.startup_s, learned.startup_workers) == (pytest.approx(6.0), 4)
    assert learned.least_s(8) - c.least_s(8) == pytest.approx(2 * 6.0 - 8 * c.startup_s)
    assert learned.learn_startup(1, first_batch_s=0.2) is learned  # a faster start never lowers the price
    assert learned.learn_startup(0, first_batch_s=60.0) is learned  # no workers: nothing started
    quick = one.learn_startup(8, first_batch_s=1.1)  # 8 workers started in 1 s: priced from 8, not 1
    assert quick.startup_for(8) == pytest.approx(1.5) and quick.startup_for(16) == pytest.approx(3.0)


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


def test_a_loader_s_slow_start_prices_the_later_ones_and_stays_out_of_its_window():
    import time

    from bootstrap.bench.startup import clean_up, set_up
    from bootstrap.bench.state import new_state
    from bootstrap.bench.trials import measure_loader
    from bootstrap.bench.user import UserWorkload

    state = new_state(
        BenchOptions(workload=WorkloadSpec(batch_size=8), budget_s=60, device="cpu", user=UserWorkload(SlowStart()))
    )
    try:
        set_up(state)
        guessed = state.costs.least_s(4)
        measured = measure_loader(
            state,
            LoaderConfig(num_workers=4, persistent_workers=True),
            0.3,
            time.perf_counter() + 30,
            "tune",
            with_step=False,
        )
    finally:
        clean_up(state)
    assert measured.first_batch_s >= 1.0
    assert state.costs.least_s(4) - guessed >= 0.5
    # the warm-up drained a batch of each worker: the window holds none of the later ones' start-up
    assert measured.seconds < 1.0, measured


def test_the_step_is_priced_with_the_torch_threads_the_phases_give_it():
    """On the host the step gets half the CPUs' threads beside the workers; priced with all of them, on a
    busy host, its OpenMP threads spin against the other load and the price comes out many times too high."""
    import torch
    from torch.utils.data import TensorDataset

    from bootstrap.bench.startup import clean_up, set_up
    from bootstrap.bench.state import new_state
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
    assert threads == [1, 1]  # the first step and the one that prices the phases


def test_each_phase_gets_its_least_first_then_a_share_of_the_rest():
    later = [("naive", 0.1, 2.0), ("tune", 0.6, 10.0), ("tuned", 0.3, 5.0)]
    assert phase_budget_s("naive", 37.0, later) == pytest.approx(2.0 + 20.0 * 0.1)
    assert phase_budget_s("tuned", 37.0, later[2:]) == pytest.approx(37.0)  # the last phase takes what is left
    # Less than the phases' least: slices in proportion to it, so the search leaves the tuned windows theirs.
    assert phase_budget_s("naive", 8.5, later) == pytest.approx(1.0)
    assert phase_budget_s("tune", 7.5, later[1:]) == pytest.approx(5.0)
    assert phase_budget_s("tuned", 2.5, later[2:]) == pytest.approx(2.5)


def test_search_and_tuned_least_and_the_advice():
    c = Costs(batch_size=8, wall_s_per_sample=0.05, cpu_s_per_sample=0.001, cpus=2, step_s=0.01)
    window = c.window_s(4)  # 4 batch latencies = 1.6 s
    assert search_s(c, (0, 1, 2, 4), reserve=1, overhead_s=0.3) == pytest.approx(5 * (window * 1.4 + 0.3))
    assert tuned_s(c, 4, 3) == pytest.approx(c.batch_s + 4 * c.startup_s + window / 3 + 3 * window)  # 4 workers
    assert advised_budget_s(41.0) == 50.0 and advised_budget_s(45.0) == 50.0 and advised_budget_s(46.0) == 55.0
    ledger = Ledger()
    ledger.skip("tune", "w=4", 2.25)
    ledger.skip("tuned", "window #3", 1.0)
    assert ledger.needed_s(10.2) == 14.0
    assert ledger.summary() == "tune: w=4 (~2.2 s); tuned: window #3 (~1.0 s)"


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

    result = tune.successive_halving(
        configs,
        measure,
        deadline=0.5,
        ceiling_samples_per_s=600.0,
        early_stop=0.95,
        minimum_noise=0.03,
        min_window_s=1.0,
        prior=prior,
        clock=clock,
    )
    assert result.winner.config.num_workers == 2
    assert result.unmeasured == (configs[1],) and result.cost_s > 0.5


def test_no_measurement_starts_that_would_end_past_the_deadline():
    """No candidate is measured whose window would end past the deadline, the first one included."""
    clock = Clock()
    configs = [LoaderConfig(num_workers=w) for w in (1, 2)]
    result = tune.successive_halving(
        configs,
        lambda c, w: pytest.fail("measured"),
        deadline=1.0,
        ceiling_samples_per_s=None,
        early_stop=0.95,
        minimum_noise=0.03,
        min_window_s=2.0,
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

    result = tune.successive_halving(
        configs, measure, deadline=100.0, ceiling_samples_per_s=None, early_stop=0.95, minimum_noise=0.03, clock=clock
    )
    assert len(result.rounds) == 2
    assert result.winner.config.num_workers == 3 and result.winner.samples_per_s == 98.0


def test_a_candidate_whose_loader_dies_drops_out():
    clock = Clock()
    configs = [LoaderConfig(num_workers=w) for w in (0, 1, 2)]

    def measure(config, window):
        clock.now += window
        return None if config.num_workers == 2 else measured(config, 50.0 + config.num_workers)

    result = tune.successive_halving(
        configs, measure, deadline=100.0, ceiling_samples_per_s=None, early_stop=0.95, minimum_noise=0.03, clock=clock
    )
    assert result.failed == (configs[2],) and result.winner.config.num_workers in (0, 1)
    knobs = tune.try_knobs(
        result.winner,
        [("prefetch_factor=4", LoaderConfig(num_workers=1, prefetch_factor=4))],
        lambda c, w: None,
        1.0,
        100.0,
        0.03,
        clock=clock,
    )
    assert knobs.winner is result.winner and math.isnan(knobs.trials[0][3]) and knobs.trials[0][2] is False


# --------------------------------------------------------------------------- saying so


def test_tuned_verdict_says_when_the_budget_was_too_small():
    facts = VerdictFacts(device_type="cpu", budget_s=10.0, left_out="tune: w=2 pf=2 nopin (~9.0 s)")
    complete = {"tune_candidates": 3.0, "tune_candidates_measured": 3.0, "tuned_windows": 3.0}
    assert tuned_check(complete, facts).status is Status.OK
    short = tuned_check({**complete, "tune_candidates_measured": 2.0, "budget_needed_s": 50.0}, facts)
    assert short.status is Status.WARN and short.observed.startswith("budget too small: ~50 s needed, 10 s given")
    assert short.remedy == "rerun with --budget 50 (or more)" and "w=2 pf=2 nopin" in short.detail
    # A budget too small for the scaling phase alone is no reason to call the tune incomplete.
    assert tuned_check({**complete, "budget_needed_s": 50.0}, VerdictFacts(device_type="cpu")).status is Status.OK
    died = tuned_check({**complete, "tune_candidates_measured": 1.0, "tune_candidates_failed": 2.0}, facts)
    assert died.status is Status.WARN and "2 failed" in died.observed and "bench.shm" in died.remedy
    assert tuned_check({"naive_samples_per_s": 90.0}, facts).status is Status.WARN  # no search at all
    nothing = tuned_check({"budget_needed_s": 2410.0}, facts)  # not even the naive loader fed the step
    assert nothing.status is Status.FAIL and nothing.remedy == "rerun with --budget 2410 (or more)"
    assert nothing.observed == "no loader was measured with the step: the budget ended first"
    assert tuned_check({}, VerdictFacts(device_type="cpu", partial=True)).status is Status.SKIP


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
