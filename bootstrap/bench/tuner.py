"""The DataLoader auto-tuner, as pure functions over a `measure(config, window_s)` callback
(docs/benchmark.md, "Tuning the workers").

Predict W* from the measured costs, search the worker counts around it by successive halving inside a
deadline (confirming the top few in reverse order, so drift cannot decide the winner), keep the cheapest
of the configs tied within the noise, then try the knobs one at a time, each kept only above the noise
floor unless it makes the loader cheaper. Nothing here imports torch: the tests drive
the search with a fake loader on a fake clock.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Sequence

from bootstrap.bench.results import Knob, LoaderConfig, Measurement

ETA = 2
# A measurement costs its window, its warm-up (a third of the window) and a fixed start-up cost that
# the search learns as it runs.
MEASURE_OVERHEAD = 1.4
IO_WORKERS_PER_CPU = 8
IO_WORKERS_MAX = 64
# A cheaper config (`cost`) wins only within the measured noise, and never when it is this much slower.
PICK_NOISE_CAP = 0.05
CONFIRM = 3
Measure = Callable[[LoaderConfig, float], Optional[Measurement]]
Clock = Callable[[], float]


@dataclass(frozen=True)
class Limits:
    """What caps the worker count: the CPUs (and those the main process and pin thread keep), /dev/shm
    for the prefetched batches, RAM for the workers, and --max-workers."""

    cpus: int
    reserved_cpus: int = 2
    shm_free_bytes: Optional[int] = None
    batch_bytes: int = 0
    prefetch: int = 2
    mem_available_bytes: Optional[int] = None
    worker_bytes: Optional[int] = None
    max_workers: Optional[int] = None
    max_workers_name: str = "--max-workers"  # how the caller set it (a script: tune_loader's keyword)


@dataclass(frozen=True)
class WorkerPrediction:
    predicted: int  # W* = ceil(1.2 x R x l), uncapped
    start: int  # where the search centres: W* capped at the CPUs left after main process (+ pin thread)
    cap: int  # the most workers the search tries
    cap_reason: str
    cpu_bound: bool

    @property
    def chosen(self) -> int:
        return max(0, min(self.start, self.cap))


def predict_workers(wall_s: float, cpu_s: float, ceiling_samples_per_s: float, limits: Limits) -> WorkerPrediction:
    """W* from the wall (`wall_s`) and CPU (`cpu_s`) seconds per sample and the ceiling's rate, where the
    search starts, and the binding cap with its reason. CPU-bound work starts at most at the CPUs less
    those reserved, and tries up to the CPUs, never past them (PyTorch #46867); I/O-bound work, whose
    workers sleep, up to 8 a CPU."""
    predicted = max(1, math.ceil(1.2 * ceiling_samples_per_s * wall_s - 1e-9))
    cpu_share = cpu_s / wall_s if wall_s > 0 else 1.0
    cpus, start = limits.cpus, predicted
    if limits.max_workers is not None:
        caps = [(limits.max_workers, limits.max_workers_name)]
    elif cpu_share >= 0.5:
        start = min(predicted, max(1, cpus - limits.reserved_cpus))
        why = f"search starts at W* <= {cpus} - {limits.reserved_cpus} for the main process and pin thread"
        caps = [(cpus, f"CPU-bound: the {cpus} usable CPUs ({why})")]
    else:
        why = f"{IO_WORKERS_PER_CPU} x {cpus} CPUs, at most {IO_WORKERS_MAX}"
        caps = [
            (
                min(IO_WORKERS_MAX, IO_WORKERS_PER_CPU * cpus),
                f"I/O-bound (CPU is {cpu_share:.0%} of the per-sample time): {why}",
            )
        ]
    if limits.shm_free_bytes is not None and limits.batch_bytes > 0:
        shm, batch, prefetch = limits.shm_free_bytes, limits.batch_bytes, limits.prefetch
        why = f"/dev/shm: {shm >> 20} MiB free / (2 x prefetch {prefetch} x {batch >> 10} KiB batch)"
        caps.append((int(shm // (2 * prefetch * batch)), why))
    if limits.max_workers is None and limits.mem_available_bytes and limits.worker_bytes:
        memory, worker = limits.mem_available_bytes, limits.worker_bytes
        caps.append(
            (int(memory * 0.5 // worker), f"RAM: half of {memory >> 20} MiB available / {worker >> 20} MiB per worker")
        )
    cap, reason = min(caps, key=lambda item: item[0])
    cap = max(0, cap)
    return WorkerPrediction(predicted, min(start, cap), cap, reason, cpu_share >= 0.5)


def worker_candidates(predicted: int, cap: int, io_bound: bool = False) -> tuple[int, ...]:
    """{0, W*/2, W*, 1.5 W*, 2 W*} plus powers of two up to min(cap, 2 W*), all within [0, cap]; I/O-bound
    work reaches to 4 W* ({0, W*/2, W*, 2 W*, 4 W*}): a sleeping worker costs memory, not a core."""
    w = max(1, min(predicted, cap)) if cap > 0 else 0
    top = (4 if io_bound else 2) * w
    values = {0, math.ceil(w / 2), w, top, 2 * w if io_bound else math.ceil(1.5 * w)}
    values |= {2**k for k in range(0, 32) if 2**k <= min(cap, top)}
    return tuple(sorted(v for v in values if 0 <= v <= cap))


def measure_order(counts: Sequence[int], predicted: int) -> tuple[int, ...]:
    """`counts` in the order the first round measures them: the prediction first, then by distance from it
    in doublings, fewer workers first on a tie; a deadline cuts the furthest, never the prediction."""
    return tuple(sorted(counts, key=lambda w: (abs(math.log2(w + 1) - math.log2(predicted + 1)), w)))


def rounds_left(count: int, eta: int = ETA) -> int:
    """Rounds successive halving runs on `count` candidates (one when there are at most two)."""
    rounds = 1
    while count > 2:
        count, rounds = math.ceil(count / eta), rounds + 1
    return rounds


def measurements_left(count: int, eta: int = ETA) -> int:
    """Measurements successive halving makes on `count` candidates: 8 -> 8 + 4 + 2 = 14."""
    total = 0
    for _ in range(rounds_left(count, eta)):
        total, count = total + count, math.ceil(count / eta)
    return total


def halving_units(count: int, eta: int = ETA) -> float:
    """First-round windows successive halving spends on `count` candidates: 8 -> 8 + 4 x 2 + 2 x 4 = 24."""
    units, survivors, scale = 0.0, count, 1.0
    for _ in range(rounds_left(count, eta)):
        units, survivors, scale = units + survivors * scale, math.ceil(survivors / eta), scale * eta
    return max(units, 1.0)


def noise_floor(a: Measurement, b: Measurement, minimum: float) -> float:
    """A difference between two windows is real only above max(minimum, 2 x their larger CV)."""
    return max(minimum, 2.0 * max(a.cv, b.cv))


def cost(config: Optional[LoaderConfig]) -> tuple[int, bool, int]:
    """What a config costs, to order configs equal within the noise: its workers (each a process, and
    its memory), then pinning (a pin thread and page-locked memory), then the batches it prefetches."""
    c = config or LoaderConfig()
    return c.num_workers, c.pin_memory, c.prefetch_factor if c.num_workers else 0


@dataclass(frozen=True)
class Pick:
    """The winner of a pool, the others equal to it within the noise (fastest first), and the widest
    noise band that admitted one of them (None when none did)."""

    winner: Measurement
    ties: tuple[Measurement, ...] = ()
    noise: Optional[float] = None


def tied(
    pool: Sequence[Measurement], minimum_noise: float, noise: Optional[float] = None, prefer_fewer: bool = True
) -> Pick:
    """The cheapest config (`cost`) of those equal to the fastest within the noise, and which others tie.
    CPU-bound work (`prefer_fewer`): the noise measured between repeated windows, else twice the windows'
    own CV, at least `minimum_noise`. I/O-bound work: only the measured repeat noise, since more waiting
    workers keep raising the rate and only a repeat shows how much of a gap is a lucky window. Either
    band is capped at PICK_NOISE_CAP: a cheaper config never costs more throughput than that."""
    best = max(pool, key=lambda m: m.samples_per_s)

    def band(m: Measurement) -> float:
        if not prefer_fewer:
            return 0.0 if noise is None else min(PICK_NOISE_CAP, noise)
        return min(PICK_NOISE_CAP, noise_floor(m, best, minimum_noise) if noise is None else max(minimum_noise, noise))

    close = [m for m in pool if m.samples_per_s >= best.samples_per_s * (1.0 - band(m))]
    winner = min(close, key=lambda m: (*cost(m.config), -m.samples_per_s))
    ties = sorted((m for m in close if m is not winner), key=lambda m: -m.samples_per_s)
    widest = max((band(m) for m in ties), default=None)
    return Pick(winner, tuple(ties), widest)


def pick(
    pool: Sequence[Measurement], minimum_noise: float, noise: Optional[float] = None, prefer_fewer: bool = True
) -> Measurement:
    """The winner of `tied`: the cheapest config within the noise of the fastest."""
    return tied(pool, minimum_noise, noise, prefer_fewer).winner


def pooled(first: Measurement, second: Measurement) -> Measurement:
    """Two windows of one config as one: samples over seconds, so a short window weighs little."""
    seconds, samples = first.seconds + second.seconds, first.samples + second.samples
    rate = samples / seconds if seconds > 0 else 0.0
    steps, cv = first.steps + second.steps, max(first.cv, second.cv)
    return replace(second, steps=steps, samples=samples, seconds=seconds, samples_per_s=rate, cv=cv)


def repeat_noise(pairs: Sequence[tuple[Measurement, Measurement]]) -> Optional[float]:
    """The largest relative gap between two windows of the same config over `pairs` (None: no pair)."""
    rates = [(a.samples_per_s, b.samples_per_s) for a, b in pairs if a.samples_per_s + b.samples_per_s > 0]
    return max((abs(a - b) / (a + b) for a, b in rates), default=None)


@dataclass(frozen=True)
class SearchOptions:
    """How successive halving runs: stop once a candidate reaches `early_stop` x the ceiling; keep
    `reserve_measurements` final-round windows for the knobs; windows of at least `min_window_s` (workers
    started together deliver in bursts); a fixed cost per measurement first guessed as `overhead_s`;
    the top `confirm` measured again; `prefer_fewer` goes to `tied`."""

    ceiling_samples_per_s: Optional[float]
    early_stop: float
    minimum_noise: float
    reserve_measurements: int = 0
    min_window_s: float = 0.0
    overhead_s: float = 0.25
    eta: int = ETA
    confirm: int = 0
    prefer_fewer: bool = True


@dataclass(frozen=True)
class SearchResult:
    winner: Optional[Measurement]  # None: nothing could be measured and nothing was known
    rounds: tuple[tuple[float, tuple[Measurement, ...]], ...]
    stopped_early: bool
    overhead_s: float = 0.0  # the fixed cost per measurement the search observed
    unmeasured: tuple[LoaderConfig, ...] = ()  # first-round candidates the deadline left out
    failed: tuple[LoaderConfig, ...] = ()  # candidates whose loader died (measure returned None)
    cost_s: float = 0.0  # what one first-round measurement was expected to cost
    noise: Optional[float] = None  # the gap between repeated windows of the confirmed configs
    ties: tuple[Measurement, ...] = ()  # configs equal to the winner within the noise, fastest first
    tie_noise: Optional[float] = None  # the noise band they tie within


@dataclass
class _Search:
    """What successive halving carries from round to round."""

    measure: Measure
    clock: Clock
    overhead_s: float
    fixed: list[float] = field(default_factory=list)  # each measurement's cost beyond its window
    latest: dict[LoaderConfig, Measurement] = field(default_factory=dict)
    failed: list[LoaderConfig] = field(default_factory=list)

    @property
    def per_measurement(self) -> float:
        return statistics.median(self.fixed) if self.fixed else self.overhead_s

    def cost(self, window: float) -> float:
        return window * MEASURE_OVERHEAD + self.per_measurement

    def once(self, config: LoaderConfig, window: float) -> Optional[Measurement]:
        began = self.clock()
        result = self.measure(config, window)
        self.fixed.append(max(0.0, self.clock() - began - window * MEASURE_OVERHEAD))
        if result is None:
            self.failed.append(config)
        return result

    def run(
        self, configs: Sequence[LoaderConfig], window: float, deadline: float, known: Sequence[Measurement]
    ) -> tuple[list[Measurement], list[LoaderConfig]]:
        """(measurements, left out): each of `configs` not `known` measured while, priced with what those
        before it cost (a slow start-up counts at once), it ends by `deadline`."""
        measured, done = list(known), {m.config for m in known}
        left_out: list[LoaderConfig] = []
        for config in (c for c in configs if c not in done):
            if left_out or self.clock() + self.cost(window) > deadline:
                left_out.append(config)  # it would not finish in time: decide on what was measured
                continue
            result = self.once(config, window)
            measured += [result] if result is not None else []
        self.latest.update({m.config: m for m in measured if m.config is not None})
        return measured, left_out


def successive_halving(
    configs: Sequence[LoaderConfig],
    measure: Measure,
    deadline: float,
    options: SearchOptions,
    prior: Optional[dict[LoaderConfig, Measurement]] = None,
    clock: Clock = time.perf_counter,
) -> SearchResult:
    """Successive halving over `configs`, finishing by `deadline` (a `clock()` value). Each round's window
    is the time left, less the fixed cost of the measurements still to run, over the window units of this
    round and the later ones (the reserved windows included); a further round starts only when it and the
    reserved windows fit. `prior` holds first-round results measured elsewhere; the winner is picked over
    every config's latest result, so it is never slower than one already measured."""
    o, search = options, _Search(measure, clock, options.overhead_s)
    survivors = list(configs)
    known = [prior[c] for c in survivors if prior and c in prior]
    rounds: list[tuple[float, tuple[Measurement, ...]]] = []
    unmeasured: list[LoaderConfig] = []
    first_cost = 0.0
    while True:
        final_scale = o.eta ** (rounds_left(len(survivors), o.eta) - 1)
        units = halving_units(len(survivors), o.eta) + o.reserve_measurements * final_scale
        fixed_s = (measurements_left(len(survivors), o.eta) + o.reserve_measurements) * search.per_measurement
        window = max(o.min_window_s, (max(0.0, deadline - clock()) - fixed_s) / (units * MEASURE_OVERHEAD))
        first_cost = first_cost or search.cost(window)
        measured, left_out = search.run(survivors, window, deadline, known)
        unmeasured, known = unmeasured or ([] if rounds else left_out), []
        rounds.append((window, tuple(measured)))
        ceiling = o.ceiling_samples_per_s
        reached = [m for m in measured if ceiling and m.samples_per_s >= o.early_stop * ceiling]
        next_round_s = (math.ceil(len(measured) / o.eta) + o.reserve_measurements) * search.cost(window * o.eta)
        if reached or len(measured) <= 2 or left_out or clock() + next_round_s > deadline:
            break
        ranked = sorted(measured, key=lambda m: m.samples_per_s, reverse=True)
        survivors = [m.config for m in ranked[: math.ceil(len(ranked) / o.eta)] if m.config is not None]
    pool, noise = reached, None
    if not reached:
        after_s = max(0, o.reserve_measurements - o.confirm) * search.cost(window)
        pool, noise = confirmed(search, list(search.latest.values()), o.confirm, window, deadline - after_s)
    chosen = tied(pool, o.minimum_noise, noise, o.prefer_fewer) if pool else None
    return SearchResult(
        chosen.winner if chosen else None,
        tuple(rounds),
        bool(reached),
        search.per_measurement,
        tuple(unmeasured),
        tuple(search.failed),
        first_cost,
        noise,
        chosen.ties if chosen else (),
        chosen.noise if chosen else None,
    )


def confirmed(
    search: _Search, pool: list[Measurement], count: int, window: float, deadline: float
) -> tuple[list[Measurement], Optional[float]]:
    """`pool` with its fastest `count` configs measured again, slowest of them first (the reverse of their
    ranking), each pooled with its earlier window; and the noise those pairs show."""
    ranked = sorted(pool, key=lambda m: m.samples_per_s, reverse=True)
    cost = search.cost(window)
    # As many as the time left pays for, the fastest always among them: the others are its rivals.
    fits = int(max(0.0, deadline - search.clock()) // cost) if cost > 0 else count
    again = [m for m in ranked[: min(count, fits)] if m.config is not None][::-1] if count > 1 else []
    pairs: list[tuple[Measurement, Measurement]] = []
    for earlier in again:
        assert earlier.config is not None
        if search.clock() + cost > deadline:
            break
        second = search.once(earlier.config, window)
        if second is None:
            pool = [m for m in pool if m.config != earlier.config]
        else:
            pairs.append((earlier, second))
    # A result of an earlier phase (naive, or the scaling phase's estimate without the step) is replaced,
    # not pooled: only two windows of the tuner's own measurement measure the same thing.
    same = [(a, b) for a, b in pairs if a.phase == b.phase]
    merged = {b.config: b for _, b in pairs}
    merged.update({a.config: pooled(a, b) for a, b in same})
    return [merged.get(m.config, m) for m in pool], repeat_noise(same)


def knob_changes(base: LoaderConfig, *, cuda: bool) -> list[tuple[str, LoaderConfig]]:
    """The one-at-a-time changes tried on the search's winner (CPU: only prefetch_factor applies)."""
    changes: list[tuple[str, LoaderConfig]] = []
    if base.num_workers > 0:
        prefetch = 4 if base.prefetch_factor == 2 else 2
        changes.append((f"prefetch_factor={prefetch}", replace(base, prefetch_factor=prefetch)))
    if cuda:
        changes.append((f"pin_memory={not base.pin_memory}", replace(base, pin_memory=not base.pin_memory)))
        changes.append((f"non_blocking={not base.non_blocking}", replace(base, non_blocking=not base.non_blocking)))
    return changes


@dataclass(frozen=True)
class KnobResult:
    winner: Measurement
    trials: tuple[Knob, ...]


def try_knobs(
    start: Measurement,
    changes: Sequence[tuple[str, LoaderConfig]],
    measure: Measure,
    window_s: float,
    minimum_noise: float,
    fits: Callable[[], bool] = lambda: True,
) -> KnobResult:
    """Each change tried against the current best and kept when its gain beats the noise floor, or, for a
    cheaper config (`cost`), when it is not slower beyond that floor (capped at PICK_NOISE_CAP), while
    another measurement `fits` the time left; one whose loader dies gets a NaN gain."""
    current, trials = start, []
    for name, proposed in changes:
        if not fits():
            break
        # Re-applied to the config as it stands now, so that a kept prefetch change survives the next trial.
        knob = name.split("=", 1)[0]
        config = replace(current.config, **{knob: getattr(proposed, knob)}) if current.config else proposed
        trial = measure(config, window_s)
        if trial is None:
            trials.append((name, config.label, False, math.nan, minimum_noise))
            continue
        noise = noise_floor(current, trial, minimum_noise)
        gain = trial.samples_per_s / current.samples_per_s - 1.0 if current.samples_per_s > 0 else 0.0
        # A cheaper change (no pinning) that is not slower beyond the noise ties, and the cheaper wins.
        cheaper = cost(config) < cost(current.config)
        kept = gain > noise or (cheaper and gain >= -min(PICK_NOISE_CAP, noise))
        trials.append((name, config.label, kept, gain, noise))
        current = trial if kept else current
    return KnobResult(current, tuple(trials))
