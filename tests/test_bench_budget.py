"""The tuner's search inside its deadline: fed numbers on a fake clock."""

from __future__ import annotations

import math

import pytest

from bootstrap.bench import tune
from bootstrap.bench.results import LoaderConfig, Measurement


# --------------------------------------------------------------------------- the search inside its deadline


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def measured(config, rate, phase="tune"):
    return Measurement(phase, config.label, config, 10, 80, 1.0, rate, cv=0.01)


def test_with_no_time_left_the_winner_is_the_fastest_result_already_known():
    """Before: the search returned the naive loader (the first prior) untried, though the scaling phase had
    measured two workers three times faster."""
    clock = Clock()
    configs = [LoaderConfig(num_workers=w, persistent_workers=w > 0) for w in (0, 1, 2)]
    prior = {configs[0]: measured(configs[0], 41.7, "naive"), configs[2]: measured(configs[2], 102.0, "scaling")}

    def measure(config, window):
        raise AssertionError("nothing fits: nothing may be measured")

    result = tune.successive_halving(configs, measure, deadline=0.5, ceiling_samples_per_s=600.0, early_stop=0.95,
                                     minimum_noise=0.03, min_window_s=1.0, prior=prior, clock=clock)
    assert result.winner.config.num_workers == 2
    assert result.unmeasured == (configs[1],) and result.cost_s > 0.5


def test_no_measurement_starts_that_would_end_past_the_deadline():
    """Before: the first candidate was always measured, whatever the time left."""
    clock = Clock()
    configs = [LoaderConfig(num_workers=w) for w in (1, 2)]
    result = tune.successive_halving(configs, lambda c, w: pytest.fail("measured"), deadline=1.0,
                                     ceiling_samples_per_s=None, early_stop=0.95, minimum_noise=0.03,
                                     min_window_s=2.0, clock=clock)
    assert result.winner is None and result.unmeasured == tuple(configs)


def test_the_winner_is_never_slower_than_a_config_measured_in_an_earlier_round():
    clock = Clock()
    configs = [LoaderConfig(num_workers=w) for w in (1, 2, 3, 4)]
    rates = {1: [100.0, 80.0], 2: [99.0, 81.0], 3: [98.0], 4: [10.0]}  # per round; the survivors slow down

    def measure(config, window):
        clock.now += window
        return measured(config, rates[config.num_workers].pop(0))

    result = tune.successive_halving(configs, measure, deadline=100.0, ceiling_samples_per_s=None, early_stop=0.95,
                                     minimum_noise=0.03, clock=clock)
    assert len(result.rounds) == 2
    assert result.winner.config.num_workers == 3 and result.winner.samples_per_s == 98.0


def test_a_candidate_whose_loader_dies_drops_out():
    clock = Clock()
    configs = [LoaderConfig(num_workers=w) for w in (0, 1, 2)]

    def measure(config, window):
        clock.now += window
        return None if config.num_workers == 2 else measured(config, 50.0 + config.num_workers)

    result = tune.successive_halving(configs, measure, deadline=100.0, ceiling_samples_per_s=None, early_stop=0.95,
                                     minimum_noise=0.03, clock=clock)
    assert result.failed == (configs[2],) and result.winner.config.num_workers in (0, 1)
    knobs = tune.try_knobs(result.winner, [("prefetch_factor=4", LoaderConfig(num_workers=1, prefetch_factor=4))],
                           lambda c, w: None, 1.0, 100.0, 0.03, clock=clock)
    assert knobs.winner is result.winner and math.isnan(knobs.trials[0][3]) and knobs.trials[0][2] is False
