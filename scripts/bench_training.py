"""`make bench-training`: is `tune_training`'s recommendation the best step, and does it tune within budget?

Two workloads on the host's CPU, each with effective batch 256:
  * tiny: bench's built-in small CNN on its synthetic images (uint8, 3 x 64 x 64);
  * overhead: a user model whose per-sample cost falls with batch size: besides a small MLP over 64
    features, every step multiplies a 512 x 512 weight by itself, whatever the batch holds, so a larger
    micro-batch spreads that fixed cost over more samples.
For each, `tune_training` runs within its budget (default 120 s; its wall time is reported against it),
then an exhaustive grid over the same choices it considered (every micro-batch size x precision x memory
format of its grid that fit) is timed in interleaved rounds, rotated, each configuration's rate the median
over the rounds; the grid's best point is the highest median. Then the recommendation and the grid's best
are timed alternately (ABAB) in fresh steady-state windows: each pair gives a ratio, recommended / best,
and the median ratio with its interquartile range and min-max is the figure (target: >= 0.95, within 5 %).
Rates are the tuner's own measure (`Workbench.time_row`): warm-up steps, then the median of windows of
steps on one batch already on the device, with the torch threads the tuner uses.

Usage: python scripts/bench_training.py [--budget S] [--rounds N] [--pairs N] [--window S] [--only NAME]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bootstrap.bench.host import usable_cpus  # noqa: E402  (after sys.path)
from bootstrap.bench.recipe import TrainingAdvice  # noqa: E402
from bootstrap.bench.training import TrainingOptions, Workbench, tune_training  # noqa: E402

EFFECTIVE = 256
TARGET = 0.95  # recommended / grid's best


def tiny_workload() -> tuple[Any, Callable[[], Any], str]:
    from bootstrap.bench.config import WorkloadSpec
    from bootstrap.bench.step import build_model
    from bootstrap.bench.synthetic import SyntheticImages, build_store

    spec = WorkloadSpec(samples=256, image_size=72, crop_size=64, epoch_batches=4, batch_size=64)
    dataset = SyntheticImages(build_store(spec, None), spec)
    return dataset, lambda: build_model("tiny", spec.num_classes), "bench's tiny CNN, synthetic images 3x64x64"


def overhead_workload() -> tuple[Any, Callable[[], Any], str]:
    import torch
    from torch import nn

    class FixedCost(nn.Module):
        """An MLP, plus a 512 x 512 matmul a step whatever the batch: its cost per sample falls with size."""

        def __init__(self) -> None:
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
            self.mix = nn.Parameter(torch.randn(512, 512) / 512**0.5)

        def forward(self, x: Any) -> Any:
            fixed = (self.mix @ self.mix).mean()  # independent of the batch
            return self.mlp(x) + fixed

    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(2048, 64, generator=generator), torch.randint(0, 10, (2048,), generator=generator)
    )

    def model() -> Any:
        torch.manual_seed(0)
        return FixedCost()

    return data, model, "an MLP plus a fixed 512x512 matmul a step, 64 features"


WORKLOADS = {"tiny": tiny_workload, "overhead": overhead_workload}


def label(key: tuple[int, str, bool]) -> str:
    micro, precision, channels_last = key
    return f"{micro} {precision}{' channels_last' if channels_last else ''}"


def interleaved_grid(
    bench: Workbench, keys: Sequence[tuple[int, str, bool]], rounds: int, window_s: float
) -> dict[tuple[int, str, bool], list[float]]:
    """Every configuration timed once a round, the rounds in rotated order."""
    rates: dict[tuple[int, str, bool], list[float]] = {key: [] for key in keys}
    for turn in range(rounds):
        shift = turn % len(keys)
        for key in list(keys[shift:]) + list(keys[:shift]):
            row = bench.time_row(*key, window_s)
            if row.samples_per_s:
                rates[key].append(row.samples_per_s)
    return rates


def abab(
    bench: Workbench, a: tuple[int, str, bool], b: tuple[int, str, bool], pairs: int, window_s: float
) -> list[float]:
    """a / b over `pairs` pairs, timed alternately, the order flipped every pair (ABBA...)."""
    ratios = []
    for pair in range(pairs):
        first, second = (a, b) if pair % 2 == 0 else (b, a)
        rates = [bench.time_row(*key, window_s).samples_per_s or 0.0 for key in (first, second)]
        rate_a, rate_b = rates if pair % 2 == 0 else rates[::-1]
        if rate_b:
            ratios.append(rate_a / rate_b)
    return ratios


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def measure(name: str, args: argparse.Namespace) -> bool:
    import torch

    dataset, model, described = WORKLOADS[name]()
    print(f"workload {name}: {described}; effective batch {EFFECTIVE}", flush=True)
    started = time.perf_counter()
    advice: TrainingAdvice = tune_training(dataset, model, effective_batch=EFFECTIVE, budget=args.budget, device="cpu")
    tuning_s = time.perf_counter() - started
    chosen = (advice.micro_batch, advice.precision, advice.channels_last)
    print(f"  tuning: {tuning_s:.1f} s wall of a {args.budget:g} s budget; recommended {advice!r}", flush=True)
    keys = sorted({row.key for row in advice.grid if row.fits})
    bench = Workbench(dataset, model, None, TrainingOptions(effective_batch=EFFECTIVE, tune_loader=False))
    saved = torch.get_num_threads()
    torch.set_num_threads(max(1, usable_cpus() // 2))  # as the tuner times the step on a CPU
    try:
        rates = interleaved_grid(bench, keys, args.rounds, args.window)
        medians = {key: statistics.median(r) for key, r in rates.items() if r}
        best = max(medians, key=lambda key: medians[key])
        print(f"  grid: {len(keys)} configurations x {args.rounds} rounds of {args.window:g} s windows")
        for key in keys:
            mark = " <- best" if key == best else ""
            mark += " <- recommended" if key == chosen else ""
            print(f"    {label(key):24} {medians.get(key, 0.0):>12,.0f} samples/s{mark}")
        # The same configuration on both sides still gets its pairs: their spread is the measurement's noise.
        ratios = abab(bench, chosen, best, args.pairs, args.window)
    finally:
        torch.set_num_threads(saved)
    ratio = statistics.median(ratios)
    low, high = quartiles(ratios)
    same = " (the same configuration, timed twice a pair)" if best == chosen else ""
    within = ratio >= TARGET
    in_budget = tuning_s <= args.budget
    print(
        f"result {name}: recommended {label(chosen)} / grid's best {label(best)}{same} = {ratio:.3f} "
        f"(IQR {low:.3f}-{high:.3f}, min-max {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} ABAB pairs); "
        f"within 5 %: {'met' if within else 'MISSED'}; tuning {tuning_s:.1f} s of {args.budget:g} s: "
        f"{'met' if in_budget else 'MISSED'}",
        flush=True,
    )
    return within and in_budget


def positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def check(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
        return value

    return check


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=positive(float), default=120.0, help="tune_training's budget (s)")
    parser.add_argument("--rounds", type=positive(int), default=3, help="interleaved rounds of the grid")
    parser.add_argument("--pairs", type=positive(int), default=6, help="ABAB pairs, recommended against best")
    parser.add_argument("--window", type=positive(float), default=1.0, help="seconds each configuration is timed")
    parser.add_argument("--only", choices=sorted(WORKLOADS), action="append", help="one workload (repeatable)")
    args = parser.parse_args()
    print(f"host: {usable_cpus()} usable CPUs; torch step threads {max(1, usable_cpus() // 2)}", flush=True)
    results = [measure(name, args) for name in WORKLOADS if not args.only or name in args.only]
    return 0 if all(results) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nbench_training: interrupted", file=sys.stderr)
        sys.exit(130)
