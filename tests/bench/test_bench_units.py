"""Pure parts of the bench: config and thresholds, the tuner's search, verdicts, reports, PNG, snippet, aggregation."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from dataclasses import replace

import pytest

from bootstrap.bench import tuner
from bootstrap.bench.config import (
    BenchOptions,
    Thresholds,
    ThresholdSet,
    WorkloadSpec,
    load_config,
    parse_threshold_flags,
)
from bootstrap.bench.distributed import aggregate, torchrun_env
from bootstrap.bench.report import dataloader_snippet, render_text, to_envelope, write_reports
from bootstrap.bench.results import (
    LoaderConfig,
    Measurement,
    Metrics,
    SamplerReport,
    Ties,
    TuningRecord,
    UtilStats,
)
from bootstrap.bench.verdicts import (
    VerdictFacts,
    affinity_check,
    efficiency_check,
    evaluate,
    inconclusive_reason,
    recheck_check,
    shm_check,
    speedup_check,
    tuned_check,
)
from bootstrap.errors import InputError
from bootstrap.report import Check, Status
from tests.fixtures import DATA as ALL_DATA
from tests.fixtures.bench import assert_bench_contract, synthetic_result

DATA = ALL_DATA / "bench"


# --------------------------------------------------------------------------- config


def test_thresholds_default_to_bench_method_and_name_their_source():
    t = ThresholdSet()
    assert (t.values.efficiency_pass, t.values.efficiency_warn) == (0.90, 0.75)
    assert t.to_dict()["efficiency_pass"] == {"value": 0.90, "source": "default"}


def test_config_file_then_flags_override(tmp_path):
    thresholds, options = load_config(DATA / "bench-config.yaml")
    assert thresholds.values.efficiency_pass == 0.85
    assert thresholds.source("efficiency_pass") == str(DATA / "bench-config.yaml")
    assert options == {"budget_s": 60, "batch_size": 128, "cpu_ms": 2.5}
    flagged = thresholds.override(parse_threshold_flags(["efficiency_pass=0.8"]), "--threshold")
    assert flagged.values.efficiency_pass == 0.8 and flagged.source("efficiency_pass") == "--threshold"
    assert flagged.values.efficiency_warn == 0.70
    json_thresholds, json_options = load_config(DATA / "bench-config.json")
    assert json_thresholds.values.util_p95_pass == 60 and json_options == {"device": "cpu"}


@pytest.mark.parametrize(
    "text, problem",
    [
        ("thresholds: {efficiency: 0.9}\n", "unknown threshold 'efficiency'"),
        ("thresholds: {efficiency_pass: high}\n", "thresholds.efficiency_pass: expected a number"),
        ("limits: {}\n", "unknown key 'limits'"),
        ("thresholds: [1]\n", "must be a mapping"),
        ("thresholds: {efficiency_pass: 0.9\n", "malformed YAML"),
        # finite numbers in range, a pass bound on the passing side of its warn bound
        (
            "thresholds: {efficiency_pass: 5, efficiency_warn: -3}\n",
            "thresholds.efficiency_pass: expected a number from 0 to 1, got 5",
        ),
        (
            "thresholds: {efficiency_pass: true}\n",
            "thresholds.efficiency_pass: expected a number from 0 to 1, got true",
        ),
        ("thresholds: {efficiency_pass: .inf}\n", "thresholds.efficiency_pass: expected a number from 0 to 1, got inf"),
        (
            "thresholds: {efficiency_pass: 0.5}\n",
            "thresholds.efficiency_pass: 0.5 is below efficiency_warn 0.75 (from default)",
        ),
        (
            "thresholds: {device_idle_pass: 0.3}\n",
            "thresholds.device_idle_pass: 0.3 is above device_idle_warn 0.25 (from default)",
        ),
        ("thresholds: {util_p95_pass: 170}\n", "thresholds.util_p95_pass: expected a number from 0 to 100, got 170"),
    ],
)
def test_bad_config_names_file_and_field(tmp_path, text, problem):
    path = tmp_path / "bench.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_config(path)
    assert problem in str(info.value) and str(info.value).startswith(str(path))


def test_cli_options_precedence(tmp_path):
    from bootstrap.commands.bench import build_options, configure

    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(
        ["--config", str(DATA / "bench-config.yaml"), "--batch-size", "32", "--threshold", "efficiency_warn=0.6"]
    )
    options = build_options(args)
    assert options.budget_s == 60 and options.workload.batch_size == 32 and options.workload.cpu_ms == 2.5
    assert options.thresholds.values.efficiency_pass == 0.85 and options.thresholds.values.efficiency_warn == 0.6
    bad = tmp_path / "bad.yaml"
    bad.write_text("options: {budget: 5}\n")
    with pytest.raises(InputError, match="unknown option 'budget'"):
        build_options(parser.parse_args(["--config", str(bad)]))
    with pytest.raises(InputError, match="--threshold"):
        build_options(parser.parse_args(["--threshold", "efficiency_pass"]))


def test_options_validate():
    with pytest.raises(InputError, match="--storage"):
        BenchOptions(workload=WorkloadSpec(storage="tape")).validate()
    with pytest.raises(InputError, match="--budget"):
        BenchOptions(budget_s=0).validate()
    with pytest.raises(InputError, match="--crop-size"):
        WorkloadSpec(image_size=32, crop_size=64).validate()


# --------------------------------------------------------------------------- tuner


def test_predict_workers_caps():
    io_bound = tuner.predict_workers(0.010, 0.0005, 1000, tuner.Limits(cpus=2))
    assert io_bound.predicted == 12 and not io_bound.cpu_bound
    assert io_bound.cap == 16 and "I/O-bound" in io_bound.cap_reason
    cpu_bound = tuner.predict_workers(0.004, 0.004, 3000, tuner.Limits(cpus=16))
    assert cpu_bound.predicted == 15 and cpu_bound.start == 14 and cpu_bound.cap == 16 and cpu_bound.chosen == 14
    assert tuner.worker_candidates(cpu_bound.start, cpu_bound.cap) == (0, 1, 2, 4, 7, 8, 14, 16)
    small_host = tuner.predict_workers(0.003, 0.003, 4000, tuner.Limits(cpus=2, reserved_cpus=1))
    assert (small_host.start, small_host.cap) == (1, 2)
    assert tuner.worker_candidates(small_host.start, small_host.cap) == (0, 1, 2)
    small_shm = tuner.predict_workers(
        0.004, 0.004, 3000, tuner.Limits(cpus=16, shm_free_bytes=64 << 20, batch_bytes=9_633_792)
    )
    assert small_shm.cap == 1 and "/dev/shm" in small_shm.cap_reason
    forced = tuner.predict_workers(0.004, 0.004, 3000, tuner.Limits(cpus=16, max_workers=3))
    assert forced.cap == 3 and forced.cap_reason == "--max-workers"


def test_candidates_and_units():
    assert tuner.worker_candidates(5, 40) == (0, 1, 2, 3, 4, 5, 8, 10)
    assert tuner.worker_candidates(18, 14) == (0, 1, 2, 4, 7, 8, 14)
    assert tuner.worker_candidates(3, 0) == (0,)
    # I/O-bound reaches 4 W*: sleeping workers cost memory, not cores
    assert tuner.worker_candidates(5, 16, io_bound=True) == (0, 1, 2, 3, 4, 5, 8, 10, 16)
    assert tuner.worker_candidates(5, 40, io_bound=True) == (0, 1, 2, 3, 4, 5, 8, 10, 16, 20)
    assert tuner.halving_units(8) == 24 and tuner.measurements_left(8) == 14 and tuner.rounds_left(8) == 3


class FakeLoaderModel:
    """Throughput of a pipeline with W workers of known latency feeding a consumer of known rate, on a fake clock.
    `luck` gives a worker count's successive windows a factor each (a lucky or unlucky moment of the host)."""

    def __init__(self, per_worker, ceiling, startup_s=0.3, luck=None):
        self.per_worker, self.ceiling, self.startup_s = per_worker, ceiling, startup_s
        self.luck = {workers: list(factors) for workers, factors in (luck or {}).items()}
        self.now = 0.0
        self.windows = []

    def clock(self):
        return self.now

    def measure(self, config, window_s):
        self.windows.append(window_s)
        self.now += self.startup_s + window_s * 1.33
        # 0 workers: the main process loads (half a worker's rate, it also steps); more processes cost a little.
        rate = min(self.ceiling, max(config.num_workers, 0.5) * self.per_worker)
        rate *= 0.99 if config.num_workers > 6 else 1.0
        factors = self.luck.get(config.num_workers)
        rate *= factors.pop(0) if factors else 1.0
        return Measurement("tune", config.label, config, 10, round(rate * window_s), window_s, rate, cv=0.01)


def test_successive_halving_picks_a_saturating_count_within_budget():
    model = FakeLoaderModel(per_worker=100.0, ceiling=450.0)  # W_sat = 5
    configs = [LoaderConfig(num_workers=w) for w in tuner.worker_candidates(5, 16)]
    result = tuner.successive_halving(
        configs,
        model.measure,
        30.0,
        tuner.SearchOptions(ceiling_samples_per_s=1000.0, early_stop=0.95, minimum_noise=0.03, reserve_measurements=1),
        clock=model.clock,
    )
    assert result.winner.config.num_workers >= 5
    assert result.winner.config.num_workers <= 8  # within noise, fewer workers win
    assert model.now <= 30.0
    assert len(result.rounds) == 3 and not result.stopped_early
    assert model.windows[-1] > model.windows[0]  # windows grow as candidates are halved


def test_a_further_round_starts_only_when_it_and_the_reserved_windows_fit():
    """The knobs and confirmations after the search keep their time: a round that would eat it is not run."""
    model = FakeLoaderModel(per_worker=100.0, ceiling=450.0, startup_s=0.3)
    configs = [LoaderConfig(num_workers=w) for w in tuner.worker_candidates(5, 16)]
    deadline, reserve = 14.0, 4
    result = tuner.successive_halving(
        configs,
        model.measure,
        deadline,
        tuner.SearchOptions(
            ceiling_samples_per_s=None,
            early_stop=0.95,
            minimum_noise=0.03,
            reserve_measurements=reserve,
            min_window_s=0.5,
            confirm=tuner.CONFIRM,
        ),
        clock=model.clock,
    )
    last_window = result.rounds[-1][0]
    knobs_s = (reserve - tuner.CONFIRM) * (last_window * tuner.MEASURE_OVERHEAD + result.overhead_s)
    assert deadline - model.now >= knobs_s  # the knob window still fits after the search
    assert result.winner is not None


def test_io_bound_search_takes_the_fastest_not_the_cheapest_in_the_noise_band():
    pool = [
        Measurement("tune", f"w={w}", LoaderConfig(num_workers=w), 10, 80, 2.0, rate, cv=0.04)
        for w, rate in ((4, 560.0), (8, 575.0), (16, 580.0))
    ]
    assert tuner.pick(pool, 0.03).config.num_workers == 4  # CPU-bound: within the noise, fewer workers win
    assert tuner.pick(pool, 0.03, prefer_fewer=False).config.num_workers == 16


def test_an_io_bound_search_keeps_the_cheapest_of_the_configs_tied_within_the_repeat_noise():
    """3 to 16 workers all deliver about what the step eats; w=6 had a lucky first window (876/s) and w=8 an
    unlucky repeat. Within the noise the repeats measured, the fastest is as likely the lucky window: the
    fewest workers win, and the others are named as ties."""
    model = FakeLoaderModel(per_worker=300.0, ceiling=840.0, luck={6: [1.043], 3: [0.95], 8: [1.0, 0.9]})
    counts = tuner.worker_candidates(6, 16, io_bound=True)
    configs = [LoaderConfig(num_workers=w, persistent_workers=w > 0) for w in tuner.measure_order(counts, 6)]
    options = tuner.SearchOptions(
        ceiling_samples_per_s=None,
        early_stop=0.95,
        minimum_noise=0.03,
        reserve_measurements=4,
        min_window_s=0.2,
        confirm=tuner.CONFIRM,
        prefer_fewer=False,
    )
    result = tuner.successive_halving(configs, model.measure, 8.0, options, clock=model.clock)
    assert len(result.rounds) == 1 and result.noise > tuner.PICK_NOISE_CAP  # w=8's repeat: 832 then 749/s
    assert result.winner.config.num_workers == 4 and result.winner.samples_per_s == pytest.approx(840.0, rel=1e-3)
    assert [m.config.num_workers for m in result.ties] == [6, 12, 16]  # fastest first; w=3 (798/s) is beyond
    assert result.tie_noise == tuner.PICK_NOISE_CAP
    assert max(result.ties, key=lambda m: m.samples_per_s).samples_per_s > 850.0  # the lucky w=6, pooled


def test_ties_go_to_fewer_workers_then_no_pinning_then_the_smaller_prefetch():
    def at(rate, **config):
        loader = LoaderConfig(**config)
        return Measurement("tune", loader.label, loader, 10, round(rate * 4), 4.0, rate, cv=0.01)

    pool = [at(101.0, num_workers=4, pin_memory=True), at(100.0, num_workers=4), at(102.0, num_workers=8)]
    picked = tuner.tied(pool, 0.03, noise=0.02)
    assert picked.winner.config == LoaderConfig(num_workers=4) and picked.noise == 0.03
    assert [m.config for m in picked.ties] == [pool[2].config, pool[0].config]
    prefetch = [at(100.0, num_workers=4, prefetch_factor=4), at(99.0, num_workers=4)]
    assert tuner.pick(prefetch, 0.03).config.prefetch_factor == 2
    alone = at(100.0, num_workers=2)
    assert tuner.tied([alone], 0.03) == tuner.Pick(alone)  # no ties, no band
    assert tuner.tied(pool, 0.03, prefer_fewer=False).winner is pool[2]  # I/O-bound, no repeats: the fastest


def test_a_knob_that_makes_the_loader_cheaper_is_kept_within_the_noise():
    """Unpinned memory within the noise of pinned ties with it, and the cheaper wins; pinning again, or a
    deeper prefetch, must gain beyond the noise."""
    base_config = LoaderConfig(num_workers=4, prefetch_factor=2, pin_memory=True, non_blocking=True)
    base = Measurement("knob", "base", base_config, 10, 400, 4.0, 100.0, cv=0.01)
    rates = {"prefetch_factor": 102.0, "pin_memory": 98.5, "non_blocking": 101.0}

    def measure(config, window):
        changed = [k for k in rates if getattr(config, k) != getattr(base_config, k)]
        rate = rates[changed[-1]]
        return Measurement("knob", config.label, config, 10, round(rate * window), window, rate, cv=0.01)

    result = tuner.try_knobs(base, tuner.knob_changes(base_config, cuda=True), measure, 4.0, minimum_noise=0.03)
    kept = {name.split("=")[0]: keep for name, _, keep, _, _ in result.trials}
    assert kept == {"prefetch_factor": False, "pin_memory": True, "non_blocking": False}
    assert result.winner.config.pin_memory is False and result.winner.config.prefetch_factor == 2
    unpinned = replace(base, config=replace(base_config, pin_memory=False))
    pinned = Measurement("knob", "pin", base_config, 10, 404, 4.0, 101.0, cv=0.01)
    again = tuner.try_knobs(unpinned, [("pin_memory=True", base_config)], lambda c, w: pinned, 4.0, 0.03)
    assert again.winner.config.pin_memory is False  # pinning costs more, and +1% is within the noise


def tuned_state(best, *, cpus=2, cpu_bound=False, ties=None, knobs=()):
    """A run's state as the tuner left it: the loader phase's costs (0.6 ms CPU of 4 ms a sample), the
    prediction, the winner, and what the search and the knobs recorded."""
    from bootstrap.bench.state import new_state

    state = new_state(BenchOptions(device="cpu", budget_s=5.0))
    state.cpus, state.best = cpus, best
    state.metrics.cpu_s_per_sample, state.metrics.wall_s_per_sample = 0.0006, 0.0045
    state.metrics.run_queue_s_per_sample = 0.0005  # waiting for a CPU is contention, not I/O
    state.prediction = tuner.WorkerPrediction(12, 12, 16, "I/O-bound", cpu_bound)
    state.tuning = TuningRecord(winner=best, ties=ties, knobs=knobs)
    return state


def test_the_report_names_the_configs_the_pick_tied_with():
    from bootstrap.bench.outcome import build_result

    ties = Ties(("w=3 pf=2 nopin", 812.0), (("w=6 pf=2 nopin", 876.0), ("w=12 pf=2 nopin", 799.0)), 0.05)
    knobs = (("pin_memory=False", "w=3 pf=2 nopin", True, -0.012, 0.03),)
    notes = build_result(tuned_state(LoaderConfig(num_workers=3), cpus=4, ties=ties, knobs=knobs)).notes
    assert notes == (
        "tie: w=6 pf=2 nopin (876/s), w=12 pf=2 nopin (799/s) tie with w=3 pf=2 nopin (812/s) within the noise "
        "(5%): the cheapest was kept (fewest workers, then no pinning, then the smaller prefetch)",
        "tie: pin_memory=False kept as the cheaper, -1.2% within the noise (3.0%)",
    )
    alone = Ties(("w=3 pf=2 nopin", 812.0))
    assert build_result(tuned_state(LoaderConfig(num_workers=3), cpus=4, ties=alone)).notes == ()


def test_more_workers_than_cpus_says_the_samples_wait_on_io():
    from bootstrap.bench.outcome import build_result

    notes = build_result(tuned_state(LoaderConfig(num_workers=8))).notes
    assert notes == (
        "num_workers=8 is more than the 2 usable CPUs: a sample waits on I/O 85% of its time (0.60 ms CPU of "
        "4.00 ms, measured with num_workers=0), and a waiting worker holds no CPU; torch's warning that the "
        "suggested max number of workers is 2 counts CPUs, not waits",
    )
    assert build_result(tuned_state(LoaderConfig(num_workers=2))).notes == ()  # within the CPUs
    assert build_result(tuned_state(LoaderConfig(num_workers=8), cpu_bound=True)).notes == ()  # bench.affinity's


def test_successive_halving_on_a_tight_budget_decides_on_what_fits():
    """With room for a few measurements only, the search skips what would overrun and still picks one."""
    model = FakeLoaderModel(per_worker=100.0, ceiling=450.0, startup_s=0.5)
    configs = [LoaderConfig(num_workers=w) for w in tuner.worker_candidates(5, 16)]
    result = tuner.successive_halving(
        configs,
        model.measure,
        3.0,
        tuner.SearchOptions(ceiling_samples_per_s=1000.0, early_stop=0.95, minimum_noise=0.03, min_window_s=0.2),
        clock=model.clock,
    )
    assert model.now <= 3.0 + 0.5 + 0.2 * 1.33  # at most the first measurement runs past the estimate
    assert len(model.windows) < len(configs) and result.winner in result.rounds[0][1]


def test_a_start_up_slower_than_the_guess_prices_the_next_measurement_of_the_round():
    """Spawned workers can take seconds to start where the search guessed a fraction of one: once a
    measurement showed it, the next one of the same round is priced with it and not started past the end."""
    model = FakeLoaderModel(per_worker=100.0, ceiling=450.0, startup_s=3.0)
    configs = [LoaderConfig(num_workers=w) for w in (1, 2, 4)]
    result = tuner.successive_halving(
        configs,
        model.measure,
        4.5,
        tuner.SearchOptions(
            ceiling_samples_per_s=None, early_stop=0.95, minimum_noise=0.03, min_window_s=0.2, overhead_s=0.1
        ),
        clock=model.clock,
    )
    assert len(model.windows) == 1 and model.now <= 4.5
    assert result.winner.config.num_workers == 1 and result.unmeasured == tuple(configs[1:])


def test_successive_halving_stops_early_at_the_ceiling():
    model = FakeLoaderModel(per_worker=100.0, ceiling=450.0)
    configs = [LoaderConfig(num_workers=w) for w in (0, 2, 5, 8)]
    result = tuner.successive_halving(
        configs,
        model.measure,
        30.0,
        tuner.SearchOptions(ceiling_samples_per_s=450.0, early_stop=0.95, minimum_noise=0.03),
        clock=model.clock,
    )
    assert result.stopped_early and len(result.rounds) == 1 and result.winner.samples_per_s >= 0.95 * 450


def test_successive_halving_reuses_prior_measurement():
    model = FakeLoaderModel(per_worker=100.0, ceiling=450.0)
    configs = [LoaderConfig(num_workers=w) for w in (0, 1, 2)]
    prior = {configs[0]: Measurement("naive", "naive", configs[0], 5, 40, 1.0, 40.0)}
    tuner.successive_halving(
        configs,
        model.measure,
        10.0,
        tuner.SearchOptions(ceiling_samples_per_s=None, early_stop=0.95, minimum_noise=0.03),
        prior=prior,
        clock=model.clock,
    )
    assert len(model.windows) == 2 + 2  # round 1 measures only workers 1 and 2; round 2 the best two


def test_knobs_kept_only_above_the_noise_floor():
    base_config = LoaderConfig(num_workers=4, prefetch_factor=2, pin_memory=True, non_blocking=True)
    base = Measurement("tune", "base", base_config, 10, 80, 1.0, 100.0, cv=0.01)
    rates = {"prefetch_factor": 102.0, "pin_memory": 80.0, "non_blocking": 110.0}

    def measure(config, window):
        changed = [k for k in rates if getattr(config, k) != getattr(base_config, k)]
        return Measurement("knob", config.label, config, 10, 80, window, rates[changed[-1]], cv=0.01)

    result = tuner.try_knobs(base, tuner.knob_changes(base_config, cuda=True), measure, 1.0, minimum_noise=0.03)
    kept = {name.split("=")[0]: keep for name, _, keep, _, _ in result.trials}
    assert kept == {"prefetch_factor": False, "pin_memory": False, "non_blocking": True}
    assert result.winner.config.non_blocking is False and result.winner.config.prefetch_factor == 2
    assert [name for name, _ in tuner.knob_changes(base_config, cuda=False)] == ["prefetch_factor=4"]


# --------------------------------------------------------------------------- verdicts


def test_efficiency_bands_and_cpu_never_fails():
    t = Thresholds()
    cuda = VerdictFacts(device_type="cuda")
    assert efficiency_check(Metrics(efficiency=0.93), cuda, t).status is Status.OK
    assert efficiency_check(Metrics(efficiency=0.80), cuda, t).status is Status.WARN
    assert efficiency_check(Metrics(efficiency=0.50, cores_per_device_needed=12.0), cuda, t).status is Status.FAIL
    assert "12.0 cores" in efficiency_check(Metrics(efficiency=0.50, cores_per_device_needed=12.0), cuda, t).remedy
    assert efficiency_check(Metrics(efficiency=0.50), VerdictFacts(device_type="cpu"), t).status is Status.WARN
    assert efficiency_check(Metrics(), cuda, t).status is Status.SKIP
    assert efficiency_check(Metrics(efficiency=0.80), cuda, replace(t, efficiency_pass=0.8)).status is Status.OK


@pytest.mark.parametrize(
    ("cpu_bound", "workers", "cap", "predicted", "says_max_workers"),
    [
        (False, 16, 16, 51, True),  # I/O-bound, stopped by the cap below the prediction
        (False, 12, 16, 51, False),  # the cap was not what stopped it
        (False, 16, 16, 16, False),  # the prediction was reached
        (True, 16, 16, 51, False),  # CPU-bound: more workers than cores do not help
    ],
)
def test_an_io_bound_loader_at_the_worker_cap_is_told_to_raise_it(cpu_bound, workers, cap, predicted, says_max_workers):
    facts = VerdictFacts(
        device_type="cuda", cpu_bound=cpu_bound, workers=workers, worker_cap=cap, predicted_workers=predicted
    )
    remedy = efficiency_check(Metrics(efficiency=0.5, cores_per_device_needed=3.0), facts, Thresholds()).remedy
    assert (f"--max-workers {predicted}" in remedy) is says_max_workers, remedy
    assert ("DALI" in remedy) is not says_max_workers


def remedies_of_a_troubled_run(script):
    """Every remedy (and detail) that names an option, each from the case that gives it."""
    t = Thresholds()
    facts = VerdictFacts(device_type="cuda", cpus=2, cpus_total=2, budget_s=10.0, script=script)
    short = replace(facts, left_out="tune: w=2 pf=2 nopin (~9.0 s)")
    complete = Metrics(tune_candidates=3.0, tune_candidates_measured=2.0, tuned_windows=3.0, budget_needed_s=50.0)
    at_cap = replace(facts, cpu_bound=False, workers=16, worker_cap=16, predicted_workers=51)
    checks = [
        tuned_check(complete, short),
        tuned_check(Metrics(), facts),  # nothing fed the step, and no estimate of what would
        affinity_check(replace(facts, cpu_bound=True, workers=4)),
        shm_check(replace(facts, shm_free_mib=10.0, shm_need_mib=100.0), t),
        efficiency_check(Metrics(efficiency=0.5), at_cap, t),
        recheck_check(Metrics(tuned_samples_per_s=200.0, recheck_samples_per_s=150.0), t, script=script),
        recheck_check(Metrics(tuned_samples_per_s=200.0, recheck_samples_per_s=198.0, recheck_steps=3), t, script),
    ]
    reasons = [
        inconclusive_reason(Metrics(tuned_window_steps=4.0, tuned_prefetched_batches=8.0), t, script),
        inconclusive_reason(Metrics(tuned_spread_pct=30.0), t, script),
        inconclusive_reason(Metrics(recheck_gap_pct=-30.0), t, script),
    ]
    return [c.remedy for c in checks] + [checks[1].detail] + [remedy for _why, remedy in reasons]


def test_remedies_name_the_flag_on_the_command_line_and_the_keyword_in_a_script():
    """A run from tune_loader is told `tune_loader(budget=50)`, not `--budget 50`; the command line's own
    remedies are as they were."""
    assert remedies_of_a_troubled_run(script=False) == [
        "rerun with --budget 50 (or more)",
        "rerun with a larger --budget",
        "cap the workers: --max-workers 2",
        "give /dev/shm 256 MiB or more: `docker run --shm-size=256m ...` (or `--ipc=host`), `sudo mount -o "
        "remount,size=256m /dev/shm` on a host; or use fewer workers (--max-workers) or a smaller batch (loader "
        "workers die with 'Bus error' when shm runs out)",
        "the loader waits on I/O, not on CPU, and the winner sits at the tuner's cap of 16 workers (predicted 51): "
        "try --max-workers 51 (tune_loader: max_workers=), since a waiting worker needs no core (each needs RAM "
        "and /dev/shm), or read from faster storage",
        "the host's load changed during the run: rerun on a quiet host, or with a longer --budget",
        "a longer --budget leaves the re-measure a full window",
        "slow samples? a smaller --batch-size makes each measurement shorter",
        "rerun with a longer --budget for longer windows",
        "rerun on a quieter host, or with a longer --budget for longer windows",
        "rerun on a quieter host, or with a longer --budget",
    ]
    script = remedies_of_a_troubled_run(script=True)
    assert not [r for r in script if re.search(r"--(budget|max-workers|batch-size)", r)], script
    assert script[:3] == [
        "rerun with tune_loader(budget=50) (or more)",
        "rerun with a larger tune_loader(budget=...)",
        "cap the workers: tune_loader(max_workers=2)",
    ]
    assert "or use fewer workers (tune_loader(max_workers=...))" in script[3]
    assert "try tune_loader(max_workers=51), since a waiting worker" in script[4]
    assert script[7] == "slow samples? a smaller tune_loader(batch_size=...) makes each measurement shorter"
    assert script[-1] == "rerun on a quieter host, or with a longer tune_loader(budget=...)"


def test_the_budget_note_and_the_worker_cap_of_a_script_name_the_keyword():
    from bootstrap.bench.outcome import build_result
    from bootstrap.bench.phases import least_prediction
    from bootstrap.bench.state import new_state
    from bootstrap.bench.user import UserWorkload
    from bootstrap.compat.facts import HostFacts

    def note(user):
        state = new_state(BenchOptions(device="cpu", budget_s=5.0, user=user))
        state.cut("tune", "w=2 pf=2 nopin", 20.0)
        return [n for n in build_result(state).notes if n.startswith("budget too small")][0]

    def cap_reason(user):
        state = new_state(BenchOptions(device="cpu", budget_s=5.0, max_workers=3, user=user))
        state.host, state.cpus, state.batch_bytes = HostFacts(), 2, 1 << 20
        return least_prediction(state).cap_reason

    assert cap_reason(None) == "--max-workers"
    assert cap_reason(UserWorkload(object())) == "tune_loader(max_workers=...)"

    assert re.fullmatch(r"budget too small .* s would cover them \(--budget \d+\)", note(None))
    script = note(UserWorkload(object()))
    assert re.fullmatch(r"budget too small .* s would cover them \(tune_loader\(budget=\d+\)\)", script), script


def test_speedup_against_prediction_and_naive():
    t = Thresholds()
    assert speedup_check(Metrics(speedup=4.5, predicted_speedup=5.0), t).status is Status.OK
    assert speedup_check(Metrics(speedup=3.0, predicted_speedup=5.0), t).status is Status.WARN
    assert speedup_check(Metrics(speedup=0.9, predicted_speedup=5.0), t).status is Status.FAIL


def test_shm_need_against_free():
    t = Thresholds()
    assert shm_check(VerdictFacts(device_type="cuda", shm_free_mib=64, shm_need_mib=147), t).status is Status.FAIL
    warn = shm_check(VerdictFacts(device_type="cuda", shm_free_mib=200, shm_need_mib=147), t)
    assert warn.status is Status.WARN and "--shm-size=" in warn.remedy
    assert shm_check(VerdictFacts(device_type="cuda", shm_free_mib=64, shm_need_mib=0), t).status is Status.OK
    assert shm_check(VerdictFacts(device_type="cuda"), t).status is Status.SKIP


def test_nofile_remedy_raises_the_hard_limit_first_when_it_is_low():
    from bootstrap.bench.verdicts import nofile_check

    low_hard = nofile_check(VerdictFacts(device_type="cpu", nofile_soft=64, nofile_hard=64))
    assert low_hard.id == "bench.nofile" and low_hard.status is Status.WARN
    assert low_hard.remedy.startswith("raise the hard limit") and "--ulimit nofile=65536:65536" in low_hard.remedy
    room = nofile_check(VerdictFacts(device_type="cpu", nofile_soft=1024, nofile_hard=1048576))
    assert room.remedy.startswith("`ulimit -n 65536`")
    assert nofile_check(VerdictFacts(device_type="cpu", nofile_soft=65536, nofile_hard=65536)).status is Status.OK
    assert nofile_check(VerdictFacts(device_type="cpu")).status is Status.SKIP


def test_scaling_verdict_names_its_w_and_says_why_it_is_missing():
    from bootstrap.bench.verdicts import scaling_check

    t = Thresholds()
    slower = scaling_check(Metrics(loader_scaling_efficiency=0.45, loader_scaling_workers=2.0), t)
    assert slower.status is Status.WARN and slower.observed == "S(2) / (2 x S(1)) = 0.45"
    only_one = scaling_check(Metrics(loader_scaling={1: 40.0}), t)
    assert only_one.status is Status.SKIP and only_one.observed == "only S(1) measured"


def test_gpu_micro_verdicts_on_recorded_figures():
    """Matmul against the SKU's dense peak, H2D against the PCIe link (figures as an H200 would report them)."""
    from bootstrap.bench.verdicts import device_idle_check, h2d_check, matmul_check

    t = Thresholds()
    h200 = VerdictFacts(device_type="cuda", gpu_name="NVIDIA H200", pcie=(5, 16, 5, 16))
    assert matmul_check(Metrics(matmul_tflops=760.0), h200, t).status is Status.OK  # 77% of 989
    assert matmul_check(Metrics(matmul_tflops=600.0), h200, t).status is Status.WARN  # 61%
    assert (
        matmul_check(Metrics(matmul_tflops=500.0), replace(h200, gpu_name="NVIDIA H100 PCIe"), t).status is Status.WARN
    )
    assert matmul_check(Metrics(matmul_tflops=90.0), replace(h200, gpu_name="Tesla T4"), t).status is Status.SKIP
    assert h2d_check(Metrics(h2d_pinned_gb_per_s=53.0), h200, t).status is Status.OK  # 84% of 63 GB/s
    assert h2d_check(Metrics(h2d_pinned_gb_per_s=40.0), h200, t).status is Status.WARN
    downtrained = h2d_check(Metrics(h2d_pinned_gb_per_s=26.0), replace(h200, pcie=(4, 16, 5, 16)), t)
    assert downtrained.status is Status.FAIL and "Gen5 x16" in downtrained.observed
    assert device_idle_check(Metrics(stall_device_idle_pct=4.0), h200, t).status is Status.OK
    contention = device_idle_check(Metrics(stall_device_idle_pct=12.0, stall_differential_pct=40.0), h200, t)
    assert contention.status is Status.WARN and "CPU contention" in contention.detail


def test_device_idle_gaps_from_cuda_events():
    """Gaps between one step's end event and the next step's start event, summed; overlaps count as 0."""
    from bootstrap.bench.measure import _CudaGaps

    class Event:
        def __init__(self, t_ms):
            self.t = t_ms

        def elapsed_time(self, other):
            return other.t - self.t

    gaps = _CudaGaps.__new__(_CudaGaps)
    gaps.enabled = True
    gaps.pairs = [(Event(0), Event(10)), (Event(12), Event(20)), (Event(19), Event(30)), (Event(35), Event(40))]
    assert gaps.idle_s() == pytest.approx((2 + 0 + 5) / 1000.0)


def test_every_verdict_on_a_cpu_host_skips_gpu_checks():
    checks = evaluate(
        Metrics(efficiency=0.95, speedup=4.0, predicted_speedup=4.2),
        VerdictFacts(device_type="cpu", cpus=2, cpus_total=2, shm_free_mib=1000, shm_need_mib=1),
        SamplerReport(reason="no GPU: CPU run"),
        Thresholds(),
    )
    status = {c.id: c.status for c in checks}
    for gpu_only in ("bench.h2d", "bench.stall_device_idle", "bench.nvml_util", "bench.gpm_sm_active"):
        assert status[gpu_only] is Status.SKIP
    assert status["bench.efficiency"] is Status.OK and status["bench.speedup"] is Status.OK


# --------------------------------------------------------------------------- report, PNG, snippet


def test_json_contract_on_a_synthetic_result(tmp_path):
    result = synthetic_result()
    envelope = json.loads(json.dumps(to_envelope(result)))
    assert_bench_contract(envelope)
    assert envelope["extra"]["best"]["num_workers"] == 4 and envelope["extra"]["best"]["label"] == "w=4 pf=2 nopin"
    assert envelope["extra"]["sampler"]["gpu_utilization_pct"]["p95"] == 99.0
    assert envelope["extra"]["tuning"]["ties"] == {
        "picked": {"label": "w=4 pf=2 nopin", "samples_per_s": 230.0},
        "noise": 0.03,
        "results": [{"label": "w=8 pf=2 nopin", "samples_per_s": 232.0}],
    }


def test_reports_written_and_png_opens(tmp_path):
    from PIL import Image

    written = write_reports(synthetic_result(partial=True), tmp_path / "out")
    assert [p.name for p in written] == ["bench.json", "bench.png"]
    assert json.loads(written[0].read_text())["extra"]["partial"] is True
    with Image.open(written[1]) as image:
        image.verify()
    with Image.open(written[1]) as image:
        assert image.format == "PNG" and image.size[0] == 960 and image.size[1] > 300  # bars + timeline
    assert not list((tmp_path / "out").glob(".*.tmp"))


def test_text_report_has_the_figures_and_the_snippet():
    text = render_text(synthetic_result(partial=True))
    assert "[PARTIAL]" in text and "note: a note" in text
    assert "efficiency 0.95" in text and "2.85x over naive" in text
    assert "DataLoader(" in text and "num_workers=4," in text
    assert "GPU util mean 90%" in text
    assert "H2D" not in text and "D2H" not in text  # a CPU run copies nothing to a device
    copies = {"h2d_pinned_gb_per_s": 55.3, "h2d_pageable_gb_per_s": 21.04, "d2h_pinned_gb_per_s": 53.9}
    cuda = dataclasses.replace(synthetic_result(), metrics=dataclasses.replace(synthetic_result().metrics, **copies))
    assert "H2D pinned 55.3 / pageable 21.0 GB/s; D2H pinned 53.9 / pageable - GB/s" in render_text(cuda)


def test_printing_a_result_gives_a_few_lines_and_where_the_rest_is():
    """`print(report)` in a script or a notebook: the device, the winner against naive and the ceiling, the
    verdicts; every field is still there, and asdict and the JSON are as they were."""
    result = synthetic_result(partial=True)
    warned = Check("bench.tuned", Status.WARN, "x", "y", "rerun")
    checks = (*result.checks, warned, Check("bench.recheck", Status.INCONCLUSIVE, "x", "y"))
    shown = replace(result, checks=checks)
    assert str(shown) == repr(shown)
    assert repr(shown).splitlines() == [
        "BenchResult: cpu (CPU), torch 2.x, 2 CPUs; 6.0 s of a 10 s budget [PARTIAL]",
        "  winner w=4 pf=2 nopin: 228.0 samples/s; naive 80.0 (2.85x); ceiling 240.0 (efficiency 0.95)",
        "  verdicts: 1 ok, 1 warn, 1 inconclusive; not ok: bench.tuned warn; bench.recheck inconclusive",
        "  more: report.checks (each verdict, its remedy), report.notes, report.best, report.metrics",
        "  the full report: print(bootstrap.bench.report.render_text(report))",
    ]
    unpicked = repr(replace(shown, best=None, checks=())).splitlines()
    assert unpicked[1:3] == [
        "  winner: none (the budget ended before the tuner picked: see bench.tuned in report.checks)",
        "  verdicts: none",
    ]
    fields = dataclasses.asdict(shown)
    assert fields["best"]["num_workers"] == 4 and fields["metrics"]["tuned_samples_per_s"] == 228.0
    assert_bench_contract(json.loads(json.dumps(to_envelope(shown))))


@pytest.mark.parametrize(
    "config, device",
    [
        (LoaderConfig(num_workers=2, prefetch_factor=4, persistent_workers=True), "cpu"),
        (LoaderConfig(), "cpu"),
        (
            LoaderConfig(
                num_workers=1,
                pin_memory=True,
                non_blocking=True,
                amp_dtype="bfloat16",
                channels_last=True,
                persistent_workers=True,
            ),
            "cuda",
        ),
    ],
)
def test_snippet_is_python_that_builds_the_loader_and_trains(config, device):
    """The pasted code runs: it builds a DataLoader over the bench's workload and trains one epoch."""
    import torch
    from torch.utils.data import DataLoader

    from bootstrap.bench.step import build_model
    from bootstrap.bench.synthetic import MemoryStore, SyntheticImages, encode_images

    spec = WorkloadSpec(samples=16, image_size=24, crop_size=16, batch_size=4, num_classes=4, epoch_batches=2)
    snippet = dataloader_snippet(config, spec, device)
    code = compile(snippet, "<snippet>", "exec")
    if device == "cuda":
        assert 'torch.autocast(device_type="cuda", dtype=torch.bfloat16)' in snippet
        assert "memory_format=torch.channels_last" in snippet and "non_blocking=True" in snippet
        return  # GPU-only to run
    model = build_model("tiny", spec.num_classes)
    namespace = {
        "dataset": SyntheticImages(MemoryStore(*encode_images(spec)), spec),
        "model": model,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "device": torch.device("cpu"),
    }
    exec(code, namespace)
    loader = namespace["loader"]
    assert isinstance(loader, DataLoader)
    assert loader.num_workers == config.num_workers and loader.batch_size == 4
    if config.num_workers:
        assert loader.prefetch_factor == config.prefetch_factor and loader.persistent_workers
    assert namespace["loss"].item() > 0 and namespace["images"].dtype == torch.float32


BOTH = (
    "# bench read the data shuffled, in full batches (shuffle=True, drop_last=True):",
    "# set shuffle and drop_last as you train",
)
FULL = ("# bench read the data in full batches (drop_last=True):", "# set drop_last as you train")
ASSUMED = {  # the comment on what bench read the data with, unasked, by what the user gave it
    "builtin": BOTH,
    "map": BOTH,
    "stream": FULL,
    "sampler": FULL,
    "batched": ("# bench read the data shuffled (shuffle=True):", "# set shuffle as you train"),
    "batch_sampler": (),
}


@pytest.mark.parametrize("given", sorted(ASSUMED))
def test_the_snippet_passes_what_the_user_gave_and_says_what_bench_assumed(given):
    """No shuffle or drop_last the user did not ask for as arguments: the loader it builds reads the data
    as DataLoader's defaults and the user's own objects say, and a comment names what bench read it with."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, SubsetRandomSampler, TensorDataset

    dataset = TensorDataset(torch.arange(10))
    objects = {"dataset": dataset}
    user = {"dataset": "m:f", "stream": True} if given == "stream" else {"dataset": "m:f"}
    if given in ("sampler", "batch_sampler"):
        user = {"dataset": "m:f", given: "m:s", "collate": "m:c"}
        objects["collate_fn"] = lambda batch: torch.stack([sample[0] for sample in batch])
        objects["sampler"] = SubsetRandomSampler(range(7))
        objects["batch_sampler"] = BatchSampler(SequentialSampler(dataset), 3, False)
    spec = WorkloadSpec(batch_size=4, batched=given == "batched")
    snippet = dataloader_snippet(LoaderConfig(num_workers=1), spec, "cpu", user=None if given == "builtin" else user)
    comments = tuple(line.strip() for line in snippet.splitlines() if line.startswith("    #"))
    assert comments == ASSUMED[given]
    arguments = [line.strip() for line in snippet.splitlines() if line.startswith("    ") and "=" in line]
    assert not {"shuffle=True,", "drop_last=True,", "generator=generator,"} & set(arguments)
    assert all(len(line) < 100 for line in snippet.splitlines())
    if given == "builtin":
        return  # its loop needs a model; test_snippet_is_python_that_builds_the_loader_and_trains runs it
    namespace = dict(objects)
    exec(compile(snippet, "bench-snippet", "exec"), namespace)
    loader = namespace["loader"]
    assert isinstance(loader, DataLoader) and loader.num_workers == 1 and loader.drop_last is False
    expected = SubsetRandomSampler if given == "sampler" else SequentialSampler
    assert type(loader.sampler) is expected  # the user's own order, or DataLoader's: never a shuffle bench added
    batch_sizes = {"map": 4, "stream": 4, "sampler": 4, "batched": None, "batch_sampler": None}
    assert loader.batch_size == batch_sizes[given]


# --------------------------------------------------------------------------- distributed aggregation


def rank_payload(rank, efficiency, idle, host="node-a", shm_need=300.0, shm_free=1000.0):
    metrics = {
        "efficiency": efficiency,
        "tuned_samples_per_s": 1000 * efficiency,
        "ceiling_samples_per_s": 1000.0,
        "stall_device_idle_pct": idle,
        "stall_host_wait_pct": idle,
        "shm_need_mib": shm_need,
    }
    status = "ok" if efficiency >= 0.9 else "warn"
    return {
        "rank": rank,
        "host": host,
        "ddp_ceiling_samples_per_s": 900.0,
        "checks": [
            {"id": "bench.shm", "status": "ok", "observed": "x", "expected": "y"},
            {"id": "bench.efficiency", "status": status, "observed": f"{efficiency}", "expected": ">= 0.90"},
        ],
        "extra": {"metrics": metrics, "best": {"label": "w=4"}, "device": {"shm_free_mib": shm_free}},
    }


def test_aggregate_names_the_worst_rank_and_sums_shm_per_host():
    own = synthetic_result()
    gathered = [rank_payload(0, 0.95, 3.0), rank_payload(1, 0.80, 18.0), rank_payload(2, 0.97, 1.0, host="node-b")]
    result = aggregate(own, gathered, Thresholds())
    assert result.aggregate["worst_rank"] == 1 and result.aggregate["world_size"] == 3
    assert result.aggregate["tuned_samples_per_s"] == pytest.approx(2720.0)
    assert result.aggregate["scaling_efficiency"] == pytest.approx(2720.0 / 3000.0)
    assert result.aggregate["communication_loss_pct"] == pytest.approx(10.0)
    by_id = {c.id: c for c in result.checks}
    assert by_id["bench.worst_rank"].status is Status.WARN and "rank 1" in by_id["bench.worst_rank"].observed
    assert by_id["bench.efficiency"].observed.startswith("rank 1:")
    assert "rank 0 ok, rank 1 warn, rank 2 ok" in by_id["bench.efficiency"].detail
    # node-a: two ranks x 300 MiB = 600 MiB against 1000 MiB free: under 2x, so warn.
    assert by_id["bench.shm"].status is Status.WARN and "2 local ranks" in by_id["bench.shm"].observed
    assert len(result.ranks) == 3


def test_torchrun_env_required():
    with pytest.raises(InputError, match="torchrun"):
        torchrun_env({})
    assert (
        torchrun_env(
            {
                "RANK": "1",
                "WORLD_SIZE": "2",
                "LOCAL_RANK": "1",
                "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29500",
            }
        )["rank"]
        == 1
    )


RANK_1_OF_2 = {
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def test_more_ranks_than_gpus_is_one_line(monkeypatch):
    """`torchrun --nproc-per-node 8` on a node with fewer GPUs: before, torch.cuda.set_device's traceback
    ('invalid device ordinal') on the extra ranks; verify --distributed already said it in one line.
    torchrun's agent sets TORCHELASTIC_RUN_ID in every process it starts."""
    import torch

    from bootstrap.bench.distributed import run_distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for name, value in {**RANK_1_OF_2, "TORCHELASTIC_RUN_ID": "a1b2c3"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(InputError, match=r"LOCAL_RANK 1 but 1 GPU\(s\) visible.*--nproc-per-node NUMBER_OF_GPUS"):
        run_distributed(BenchOptions())


def test_one_gpu_per_task_runs_each_rank_on_the_gpu_it_sees(monkeypatch):
    """`srun --gpus-per-task=1` (or a Kubernetes device plugin) starts each task with its own GPU and no
    torchrun agent: LOCAL_RANK 1 sees one GPU, cuda:0, and runs there."""
    import torch
    import torch.distributed as dist

    from bootstrap.bench import distributed

    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.setattr(distributed, "init_process_group", lambda *args: None)
    monkeypatch.setattr(dist, "destroy_process_group", lambda *args: None)
    monkeypatch.setattr(distributed, "_run_ranks", lambda rank_options, *args: (rank_options.device, False))
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    for name, value in RANK_1_OF_2.items():
        monkeypatch.setenv(name, value)
    assert distributed.run_distributed(BenchOptions()) == ("cuda:0", False)
    assert current == [0]


def test_gpu_utilization_is_judged_only_when_a_tuned_loader_trained():
    """A budget that left out every training phase (a cold GPU's first steps) leaves NVML's
    utilization of the set-up alone: no 'the GPU idles' failure."""
    idle = SamplerReport(gpu=UtilStats("nvmlDeviceGetSamples", 40, 2.0, 0.0, 0.0, 1.0, 9.0))
    facts = VerdictFacts(device_type="cuda", cpus=16, cpus_total=16, shm_free_mib=1000, shm_need_mib=1)
    untrained = {c.id: c for c in evaluate(Metrics(), facts, idle, Thresholds())}["bench.nvml_util"]
    assert untrained.status is Status.SKIP and untrained.observed == "no tuned windows ran"
    trained = {c.id: c for c in evaluate(Metrics(tuned_samples_per_s=100.0), facts, idle, Thresholds())}[
        "bench.nvml_util"
    ]
    assert trained.status is Status.FAIL
