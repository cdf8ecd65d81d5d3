"""The DataLoader auto-tuner, as pure functions over a `measure` callback.

1. Predict `W* = ceil(1.2 x R_gpu x l)`, where `l` is the loader's wall
   seconds per sample in one process (DS-Analyzer's cores-per-GPU what-if;
   bench_method.md uses CPU seconds `c`, and `l` equals `c` when decoding is
   the cost). CPU-bound work: start the search at W* capped at affinity - 2
   (main process + pin thread; affinity - 1 on a CPU host) and try up to the
   affinity, never past it; I/O-latency work, where sleeping workers do not
   compete for cores: up to 8 x CPUs. /dev/shm and RAM cap both.
2. Candidates {0, W/2, W, 1.5 W, 2 W} around that start W, plus powers of
   two, capped; I/O-bound, {0, W/2, W, 2 W, 4 W} and powers of two.
3. Successive halving with eta = 2: each round measures every survivor for
   the round's window, keeps the best half; windows double per round and are
   sized from the time left, and a measurement that would end past the
   deadline is not started, so the search ends inside its budget. Stop
   early once a candidate reaches the early-stop efficiency. Results the
   run already has (the naive phase, the scaling phase) count in the first
   round, and the winner is never a config slower than one measured.
   Before the pick, the top CONFIRM candidates are measured once more, in
   the reverse of their ranking (A B C, then C B A), and each one's two
   windows are pooled: a host whose load drifts, or a rate first measured in
   a short window of an earlier phase, cannot decide the winner alone, and
   the gap between a config's two windows is the measured noise the pick
   uses. CPU-bound, a cheaper config within that noise wins; I/O-bound,
   the fastest does (a sleeping worker is not a core).
4. Knobs on the winner (pin_memory, prefetch_factor, non_blocking), each
   kept only when its gain is above the noise floor max(3 %, 2 x CV).

Nothing here imports torch: `measure(config, window_s)` is passed in, so the
search is tested with a fake loader model.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from bootstrap.bench.results import LoaderConfig, Measurement

ETA = 2
# A measurement costs its window plus its warm-up (a third of the window, see WindowPlan.scaled)
# plus a fixed start-up cost estimated as the search runs.
MEASURE_OVERHEAD = 1.4
IO_WORKERS_PER_CPU = 8
IO_WORKERS_MAX = 64
# A cheaper config wins only within the measured noise, and never when it is this much slower:
# the tuned pick must stay within a few percent of the best the candidates reached.
PICK_NOISE_CAP = 0.05
CONFIRM = 3


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


def predict_workers(
    *,
    wall_s_per_sample: float,
    cpu_s_per_sample: float,
    ceiling_samples_per_s: float,
    cpus: int,
    reserved_cpus: int = 2,
    shm_free_bytes: Optional[int] = None,
    batch_bytes: int = 0,
    prefetch: int = 2,
    mem_available_bytes: Optional[int] = None,
    worker_bytes: Optional[int] = None,
    max_workers: Optional[int] = None,
) -> WorkerPrediction:
    """W*, where the search starts, and the cap that bounds it (with the reason for the binding cap).

    CPU-bound: the search starts at most at affinity - `reserved_cpus`
    (main process, and on CUDA the pin-memory thread; bench_method.md) but
    may try up to the affinity itself, never past it (PyTorch #46867): on a
    small host the main process often needs far less than a core.
    """
    predicted = max(1, math.ceil(1.2 * ceiling_samples_per_s * wall_s_per_sample - 1e-9))
    cpu_share = cpu_s_per_sample / wall_s_per_sample if wall_s_per_sample > 0 else 1.0
    cpu_bound = cpu_share >= 0.5
    start = predicted
    caps: List[Tuple[int, str]] = []
    if max_workers is not None:
        caps.append((max_workers, "--max-workers"))
    elif cpu_bound:
        start = min(predicted, max(1, cpus - reserved_cpus))
        caps.append(
            (
                cpus,
                f"CPU-bound: the {cpus} usable CPUs (search starts at W* <= {cpus} - {reserved_cpus} "
                "for the main process and pin thread)",
            )
        )
    else:
        caps.append(
            (
                min(IO_WORKERS_MAX, IO_WORKERS_PER_CPU * cpus),
                f"I/O-bound (CPU is {cpu_share:.0%} of the per-sample time): "
                f"{IO_WORKERS_PER_CPU} x {cpus} CPUs, at most {IO_WORKERS_MAX}",
            )
        )
    if shm_free_bytes is not None and batch_bytes > 0:
        caps.append(
            (
                int(shm_free_bytes // (2 * prefetch * batch_bytes)),
                f"/dev/shm: {shm_free_bytes >> 20} MiB free "
                f"/ (2 x prefetch {prefetch} x {batch_bytes >> 10} KiB batch)",
            )
        )
    if max_workers is None and mem_available_bytes and worker_bytes:
        caps.append(
            (
                int(mem_available_bytes * 0.5 // worker_bytes),
                f"RAM: half of {mem_available_bytes >> 20} MiB available / {worker_bytes >> 20} MiB per worker",
            )
        )
    cap, reason = min(caps, key=lambda item: item[0])
    cap = max(0, cap)
    return WorkerPrediction(predicted=predicted, start=min(start, cap), cap=cap, cap_reason=reason, cpu_bound=cpu_bound)


def worker_candidates(predicted: int, cap: int, io_bound: bool = False) -> Tuple[int, ...]:
    """{0, W*/2, W*, 1.5 W*, 2 W*} plus powers of two up to min(cap, 2 W*), all within [0, cap].

    I/O-bound work reaches further, {0, W*/2, W*, 2 W*, 4 W*} plus powers of two up to 4 W*: a sleeping
    worker costs memory, not a core, and the latency the prediction was made from grows on a busy host,
    so the best count sits further above W* than the CPU-bound one can.
    """
    w = max(1, min(predicted, cap)) if cap > 0 else 0
    top = (4 if io_bound else 2) * w
    values = {0, math.ceil(w / 2), w, top} | ({2 * w} if io_bound else {math.ceil(1.5 * w)})
    power = 1
    while power <= min(cap, top):
        values.add(power)
        power *= 2
    return tuple(sorted(v for v in values if 0 <= v <= cap))


def measure_order(counts: Sequence[int], predicted: int) -> Tuple[int, ...]:
    """`counts` in the order the first round measures them: the prediction first, then the others by
    distance from it (in doublings), fewer workers first on a tie. A deadline that cuts the round short
    leaves out the candidates furthest from the prediction, never the prediction itself."""

    def distance(w: int) -> Tuple[float, int]:
        return abs(math.log2(w + 1) - math.log2(predicted + 1)), w

    return tuple(sorted(counts, key=distance))


def halving_units(count: int, eta: int = ETA) -> float:
    """Window units (first-round windows) successive halving spends on `count` candidates.

    8 candidates: 8 x 1 + 4 x 2 + 2 x 4 = 24; the last pair is decided without a further round.
    """
    units, survivors, scale = 0.0, count, 1.0
    for _ in range(rounds_left(count, eta)):
        units += survivors * scale
        survivors = math.ceil(survivors / eta)
        scale *= eta
    return max(units, 1.0)


def noise_floor(a: Measurement, b: Measurement, minimum: float) -> float:
    """A difference between two windows is real only above max(minimum, 2 x their larger CV)."""
    return max(minimum, 2.0 * max(a.cv, b.cv))


def pick(
    measurements: Sequence[Measurement], minimum_noise: float, noise: Optional[float] = None, prefer_fewer: bool = True
) -> Measurement:
    """The fastest, except that a cheaper config (fewer workers) within the noise of it wins.

    `noise` is the measured noise between repeated windows of the same
    configs (`repeat_noise`); without it, twice the windows' own CV. Either
    is capped at PICK_NOISE_CAP: a noisy pair of windows must not hand the
    win to a config that is plainly slower. Without `prefer_fewer` (I/O-bound
    work: a worker is not a core) the fastest wins; the cheaper config in
    the band is as often the lucky window as the equally fast one.
    """
    best = max(measurements, key=lambda m: m.samples_per_s)
    if not prefer_fewer:
        return best

    def band(m: Measurement) -> float:
        measured = noise_floor(m, best, minimum_noise) if noise is None else max(minimum_noise, noise)
        return min(PICK_NOISE_CAP, measured)

    close = [m for m in measurements if m.samples_per_s >= best.samples_per_s * (1.0 - band(m))]
    return min(close, key=lambda m: (m.config.num_workers if m.config else 0, -m.samples_per_s))


def pooled(first: Measurement, second: Measurement) -> Measurement:
    """Two windows of one config as one: samples over seconds, so a short window weighs little."""
    seconds = first.seconds + second.seconds
    samples = first.samples + second.samples
    return replace(
        second,
        steps=first.steps + second.steps,
        samples=samples,
        seconds=seconds,
        samples_per_s=samples / seconds if seconds > 0 else 0.0,
        cv=max(first.cv, second.cv),
    )


def repeat_noise(pairs: Sequence[Tuple[Measurement, Measurement]]) -> Optional[float]:
    """The relative gap between two windows of the same config, the largest over `pairs` (None: no pair)."""
    gaps = [
        abs(a.samples_per_s - b.samples_per_s) / (a.samples_per_s + b.samples_per_s)
        for a, b in pairs
        if a.samples_per_s + b.samples_per_s > 0
    ]
    return max(gaps) if gaps else None


@dataclass(frozen=True)
class SearchResult:
    winner: Optional[Measurement]  # None: nothing could be measured and nothing was known
    rounds: Tuple[Tuple[float, Tuple[Measurement, ...]], ...]
    stopped_early: bool
    overhead_s: float = 0.0  # the fixed cost per measurement the search observed
    unmeasured: Tuple[LoaderConfig, ...] = ()  # first-round candidates the deadline left out
    failed: Tuple[LoaderConfig, ...] = ()  # candidates whose loader died (measure returned None)
    cost_s: float = 0.0  # what one first-round measurement was expected to cost
    noise: Optional[float] = None  # the gap between repeated windows of the confirmed configs


Measure = Callable[[LoaderConfig, float], Optional[Measurement]]


@dataclass
class _Search:
    """The state successive halving carries from round to round."""

    measure: Measure
    clock: Callable[[], float]
    overhead_s: float
    fixed: List[float] = field(default_factory=list)
    latest: Dict[LoaderConfig, Measurement] = field(default_factory=dict)
    failed: List[LoaderConfig] = field(default_factory=list)

    @property
    def per_measurement(self) -> float:
        return statistics.median(self.fixed) if self.fixed else self.overhead_s

    def run(
        self, configs: Sequence[LoaderConfig], window: float, deadline: float, known: Sequence[Measurement] = ()
    ) -> Tuple[List[Measurement], List[LoaderConfig]]:
        """Measure `configs` (those in `known` are not measured again) while each, priced with what those
        before it cost (a slow start-up counts at once), ends by `deadline`; returns (measurements, left out)."""
        measured = list(known)
        done = {m.config for m in known}
        left_out: List[LoaderConfig] = []
        for config in configs:
            if config in done:
                continue
            cost = window * MEASURE_OVERHEAD + self.per_measurement
            if left_out or self.clock() + cost > deadline:
                left_out.append(config)  # it would not finish in time; decide on what was measured
                continue
            began = self.clock()
            result = self.measure(config, window)
            self.fixed.append(max(0.0, self.clock() - began - window * MEASURE_OVERHEAD))
            if result is None:
                self.failed.append(config)
            else:
                measured.append(result)
        self.latest.update({m.config: m for m in measured if m.config is not None})
        return measured, left_out


def successive_halving(
    configs: Sequence[LoaderConfig],
    measure: Measure,
    deadline: float,
    *,
    ceiling_samples_per_s: Optional[float],
    early_stop: float,
    minimum_noise: float,
    reserve_measurements: int = 0,
    min_window_s: float = 0.0,
    overhead_s: float = 0.25,
    prior: Optional[Dict[LoaderConfig, Measurement]] = None,
    eta: int = ETA,
    confirm: int = 0,
    prefer_fewer: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> SearchResult:
    """Successive halving over `configs`, finishing by `deadline` (a `clock()` value).

    Each round's window is sized from the time left: (remaining - the fixed
    cost of the measurements still to run) / (window units of this and the
    later rounds + `reserve_measurements` final-round windows for the knob
    stage) / the warm-up share. The fixed cost per measurement (worker
    start-up, first batch) starts at `overhead_s` and is re-estimated from
    each measurement's wall time. Windows are never shorter than
    `min_window_s` (a few batches of one worker's latency: workers started
    together deliver in bursts), and no measurement starts that would end
    past the deadline. `prior` holds first-round results already measured
    elsewhere (the naive phase is candidate 0 on a CPU; the scaling phase's
    rates). A config whose `measure` returns None (its loader died) drops
    out. The winner is picked over every config's latest result, priors
    included, so it is never a config slower than one already measured.
    A further round starts only when all of it and the reserved windows
    still fit. With `confirm`, the top `confirm` configs are measured once
    more, in reverse order, while that still leaves the reserved windows
    beyond them (`confirmed`). `prefer_fewer` goes to `pick`.
    """
    search = _Search(measure, clock, overhead_s)
    survivors = list(configs)
    known = [prior[c] for c in survivors if prior and c in prior]
    rounds: List[Tuple[float, Tuple[Measurement, ...]]] = []
    unmeasured: List[LoaderConfig] = []
    first_cost = 0.0
    while True:
        remaining = max(0.0, deadline - clock())
        final_scale = eta ** (rounds_left(len(survivors), eta) - 1)
        units = halving_units(len(survivors), eta) + reserve_measurements * final_scale
        count = measurements_left(len(survivors), eta) + reserve_measurements
        window = max(min_window_s, (remaining - count * search.per_measurement) / (units * MEASURE_OVERHEAD))
        first_cost = first_cost or window * MEASURE_OVERHEAD + search.per_measurement
        measured, left_out = search.run(survivors, window, deadline, known)
        unmeasured = unmeasured or ([] if rounds else left_out)
        known = []
        rounds.append((window, tuple(measured)))
        # the next round's windows are eta x longer, and the reserved ones would be too
        next_cost = window * eta * MEASURE_OVERHEAD + search.per_measurement
        next_round_s = (math.ceil(len(measured) / eta) + reserve_measurements) * next_cost
        reached = [
            m for m in measured if ceiling_samples_per_s and m.samples_per_s >= early_stop * ceiling_samples_per_s
        ]
        if reached or len(measured) <= 2 or left_out or clock() + next_round_s > deadline:
            pool, noise = reached, None
            if not reached:
                after_s = max(0, reserve_measurements - confirm) * (window * MEASURE_OVERHEAD + search.per_measurement)
                pool, noise = confirmed(search, list(search.latest.values()), confirm, window, deadline - after_s)
            winner = pick(pool, minimum_noise, noise, prefer_fewer) if pool else None
            return SearchResult(
                winner,
                tuple(rounds),
                bool(reached),
                search.per_measurement,
                tuple(unmeasured),
                tuple(search.failed),
                first_cost,
                noise,
            )
        ranked = sorted(measured, key=lambda m: m.samples_per_s, reverse=True)
        survivors = [m.config for m in ranked[: math.ceil(len(ranked) / eta)] if m.config is not None]


def confirmed(
    search: _Search, pool: List[Measurement], count: int, window: float, deadline: float
) -> Tuple[List[Measurement], Optional[float]]:
    """`pool` with its fastest `count` configs measured again, slowest of them first (the reverse of
    their ranking), each pooled with its earlier window; and the noise those pairs show."""
    ranked = sorted(pool, key=lambda m: m.samples_per_s, reverse=True)
    cost = window * MEASURE_OVERHEAD + search.per_measurement
    # As many as the time left pays for, the fastest always among them: the others are its rivals.
    fits = int(max(0.0, deadline - search.clock()) // cost) if cost > 0 else count
    again = [m for m in ranked[: min(count, fits)] if m.config is not None][::-1] if count > 1 else []
    pairs: List[Tuple[Measurement, Measurement]] = []
    for earlier in again:
        if search.clock() + cost > deadline:
            break
        second = search.measure(earlier.config, window)
        if second is None:
            search.failed.append(earlier.config)
            pool = [m for m in pool if m.config != earlier.config]
            continue
        pairs.append((earlier, second))
    # A result from an earlier phase (naive, or the scaling phase's estimate without the step) is replaced,
    # not pooled: only two windows of the tuner's own measurement measure the same thing.
    same = [(a, b) for a, b in pairs if a.phase == b.phase]
    merged = {b.config: b for _, b in pairs}
    merged.update({a.config: pooled(a, b) for a, b in same})
    return [merged.get(m.config, m) for m in pool], repeat_noise(same)


def measurements_left(count: int, eta: int = ETA) -> int:
    """Measurements successive halving makes on `count` candidates: 8 -> 8 + 4 + 2 = 14."""
    total = 0
    for _ in range(rounds_left(count, eta)):
        total += count
        count = math.ceil(count / eta)
    return total


def rounds_left(count: int, eta: int = ETA) -> int:
    """Rounds successive halving runs on `count` candidates (one when there are at most two)."""
    rounds = 1
    while count > 2:
        count = math.ceil(count / eta)
        rounds += 1
    return rounds


def knob_changes(base: LoaderConfig, *, cuda: bool) -> List[Tuple[str, LoaderConfig]]:
    """The one-at-a-time changes tried on the search's winner (CPU: only prefetch_factor applies)."""
    changes: List[Tuple[str, LoaderConfig]] = []
    if base.num_workers > 0:
        changes.append(
            (
                f"prefetch_factor={4 if base.prefetch_factor == 2 else 2}",
                replace(base, prefetch_factor=4 if base.prefetch_factor == 2 else 2),
            )
        )
    if cuda:
        changes.append((f"pin_memory={not base.pin_memory}", replace(base, pin_memory=not base.pin_memory)))
        changes.append((f"non_blocking={not base.non_blocking}", replace(base, non_blocking=not base.non_blocking)))
    return changes


@dataclass(frozen=True)
class KnobResult:
    winner: Measurement
    trials: Tuple[Tuple[str, str, bool, float, float], ...]  # (knob, tried label, kept, gain, noise)


def try_knobs(
    start: Measurement,
    changes: Sequence[Tuple[str, LoaderConfig]],
    measure: Measure,
    window_s: float,
    deadline: float,
    minimum_noise: float,
    overhead_s: float = 0.0,
    clock: Callable[[], float] = time.perf_counter,
) -> KnobResult:
    """Try each change against the current best; keep it only when the gain beats the noise floor.

    A change whose measurement would not finish by `deadline` is not tried; one whose loader dies
    (`measure` returns None) is recorded with a NaN gain and dropped.
    """
    current = start
    trials = []
    for name, config in changes:
        if clock() + window_s * MEASURE_OVERHEAD + overhead_s > deadline:
            break
        if current.config is not None:
            config = _apply(current.config, name, config)
        trial = measure(config, window_s)
        if trial is None:
            trials.append((name, config.label, False, math.nan, minimum_noise))
            continue
        noise = noise_floor(current, trial, minimum_noise)
        gain = trial.samples_per_s / current.samples_per_s - 1.0 if current.samples_per_s > 0 else 0.0
        kept = gain > noise
        trials.append((name, config.label, kept, gain, noise))
        if kept:
            current = trial
    return KnobResult(current, tuple(trials))


def _apply(current: LoaderConfig, name: str, proposed: LoaderConfig) -> LoaderConfig:
    # Knobs are proposed against the search winner; re-apply each to the config as it stands now,
    # so that a kept prefetch change survives the pin_memory trial.
    field = name.split("=", 1)[0]
    return replace(current, **{field: getattr(proposed, field)})
