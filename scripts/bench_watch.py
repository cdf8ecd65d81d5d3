"""`make bench-watch`: what `bootstrap.watch(loader)` costs a training loop.

The same loop three ways, interleaved in rotated order round after round:
  * bare: `for batch in loader: step()`;
  * watch: `for batch in watch(loader, every=100, log_path=...)`, its lines to a no-op `log`;
  * watch + sampler: the same with the NVML sampler thread polling a replayed NVML (no GPU here),
    as it runs on an NVIDIA host.
The step is a small matmul (about 1 ms, one torch thread) and the dataset an in-memory TensorDataset
read with num_workers=0, so that the loop is as light as a real one gets and any cost of watch shows.
Each arm runs warm-up steps that are not timed, then times a fixed number of steps; per round the
watched arms' CPU time per step (the whole process's, sampler thread included) is divided by the bare
arm's of the same round: on a shared machine other load moves it less than wall time, and with no
worker processes and no sleeps the loop's wall time is its CPU time. The median of those ratios over
the rounds is the overhead; its spread is their interquartile range and min-max (wall ratios beside).

Usage: python scripts/bench_watch.py [--rounds N] [--steps N] [--warmup N] [--step-ms MS]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_loader import ReplayNvml, positive_int  # noqa: E402  (beside this script)

from bootstrap.bench.watcher import Watch  # noqa: E402  (after sys.path)

BATCH = 64
EVERY = 100
TARGET = 1.01  # watched / bare time per step: at most 1 % more


def calibrated_step(step_ms: float) -> tuple[Callable[[Any], None], int, float]:
    """A step of one square matmul sized to take about `step_ms`: (step, size, measured ms)."""
    import torch

    def timed(size: int) -> float:  # the fastest of 5 runs of 10: the step's own time, not the machine's load
        a = torch.rand(size, size)
        torch.mm(a, a)
        runs = []
        for _ in range(5):
            began = time.perf_counter()
            for _ in range(10):
                torch.mm(a, a)
            runs.append((time.perf_counter() - began) / 10 * 1000)
        return min(runs)

    size = max(16, round(256 * (step_ms / timed(256)) ** (1 / 3)))  # a matmul's time grows as size^3
    weights = torch.rand(size, size)

    def step(_batch: Any) -> None:
        torch.mm(weights, weights)

    return step, size, timed(size)


def timed_loop(batches: Iterable[Any], step: Callable[[Any], None], warmup: int) -> tuple[float, float]:
    """(wall, CPU) seconds per step after the first `warmup` steps, to the end of the loop (the loader's and
    watch's wind-down included). CPU is the whole process's, every thread (watch's sampler too)."""
    began = cpu_began = 0.0
    count = 0
    for count, batch in enumerate(batches, start=1):
        step(batch)
        if count == warmup:
            began, cpu_began = time.perf_counter(), time.process_time()
    steps = count - warmup
    return (time.perf_counter() - began) / steps, (time.process_time() - cpu_began) / steps


def own_cost_us(batches: list[Any], repeats: int = 7) -> float:
    """watch's own time per step in microseconds: an empty loop over ready batches, watched minus bare,
    the fastest of `repeats` runs each."""

    def fastest(make: Callable[[], Iterable[Any]]) -> float:
        runs = []
        for _ in range(repeats):
            began = time.perf_counter()
            for _ in make():
                pass
            runs.append(time.perf_counter() - began)
        return min(runs)

    bare = fastest(lambda: batches)
    watched = fastest(lambda: Watch(batches, every=EVERY, log=_quiet))
    return (watched - bare) / len(batches) * 1e6


def _quiet(_line: str) -> None:
    return None


def quartiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def _loadavg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=100, help="interleaved rounds (default 100)")
    parser.add_argument("--steps", type=positive_int, default=60, help="timed steps per arm and round (default 60)")
    parser.add_argument("--warmup", type=positive_int, default=10, help="untimed steps first (default 10)")
    parser.add_argument("--step-ms", type=float, default=1.0, help="the matmul step's target time (default 1 ms)")
    args = parser.parse_args()

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    step, size, step_ms = calibrated_step(args.step_ms)
    samples = (args.warmup + args.steps) * BATCH
    dataset = TensorDataset(torch.rand(samples, 3, 16, 16), torch.arange(samples))
    loader = DataLoader(dataset, batch_size=BATCH)
    print(
        f"bench-watch: step = one {size}x{size} matmul ({step_ms:.2f} ms, 1 torch thread); in-memory "
        f"TensorDataset, batch {BATCH}, num_workers=0; watch every={EVERY} with a JSONL log; {args.rounds} rounds "
        f"of the arms in rotated order, {args.steps} steps timed per arm after {args.warmup} warm-up steps; "
        f"load average before: {_loadavg()}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        log = Path(tmp) / "watch.jsonl"

        arms: dict[str, Callable[[], Iterable[Any]]] = {
            "bare": lambda: loader,
            "watch": lambda: Watch(loader, every=EVERY, log=_quiet, log_path=log),
            "watch + sampler": lambda: Watch(
                loader, every=EVERY, log=_quiet, log_path=log, gpu=0, nvml_module=ReplayNvml()
            ),
        }
        names = list(arms)
        wall: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        for index in range(args.rounds):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                seconds, cpu_seconds = timed_loop(arms[name](), step, args.warmup)
                wall[name].append(seconds)
                cpu[name].append(cpu_seconds)
        logged = len(log.read_text().splitlines())
    print()
    print(f"{'':<16} {'ms/step':>8} {'CPU ratio to bare, median':>26} {'IQR':>13} {'min-max':>13} {'wall ratio':>10}")
    print(f"{'bare':<16} {statistics.median(wall['bare']) * 1000:>8.3f}")
    said = []
    for name in names[1:]:
        ratios = [watched / plain for watched, plain in zip(cpu[name], cpu["bare"])]
        walls = [watched / plain for watched, plain in zip(wall[name], wall["bare"])]
        median, (low, high) = statistics.median(ratios), quartiles(ratios)
        extra_us = (statistics.median(cpu[name]) - statistics.median(cpu["bare"])) * 1e6
        print(
            f"{name:<16} {statistics.median(wall[name]) * 1000:>8.3f} {median:>26.4f} "
            f"{f'{low:.4f}-{high:.4f}':>13} {f'{min(ratios):.4f}-{max(ratios):.4f}':>13} "
            f"{statistics.median(walls):>10.4f}"
        )
        said.append((name, median, low, high, extra_us))
    own_us, bare_ms = own_cost_us([next(iter(loader))] * 20000), statistics.median(wall["bare"]) * 1000
    share = own_us / 1000 / bare_ms
    # the loop ratios bound what else watch could cost; its own per-step time is measured precisely apart
    resolved = all(median <= TARGET or low <= 1.0 for _, median, low, _, _ in said)
    print(
        "overhead: "
        + "; ".join(
            f"{name} {median:.4f}x bare (IQR {low:.4f}-{high:.4f}, {extra_us:+.1f} us CPU a step)"
            for name, median, low, high, extra_us in said
        )
        + f"; watch's own cost {own_us:.2f} us a step = {share:.3%} of the {bare_ms:.2f} ms step; "
        f"target <= {TARGET - 1:.0%}: {'met' if resolved and share <= TARGET - 1 else 'MISSED'}"
    )
    print(
        f"  ratios per round, each watched arm against the bare arm of its round: CPU time of the process (all "
        f"threads), which other load on the machine moves less than wall time; {logged} JSONL lines written; "
        f"watch's own cost: an empty loop over 20000 ready batches, watched minus bare, fastest of 7"
    )
    print(f"load average after: {_loadavg()}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nbench-watch: interrupted", file=sys.stderr)
        sys.exit(130)
