"""`make bench-loader`: is the bench's DataLoader pick the best one, against what people do instead?

Per workload (bench's own: its default images with --io-ms 5, an I/O
latency per sample, and with --cpu-ms 5, a CPU cost per sample), side by
side, all measured interleaved in the same run after `bench` tuned:
  * naive: num_workers=0, no pinning;
  * the fixed advice people follow: workers = CPUs, pin_memory,
    prefetch_factor 2, persistent workers;
  * the best point of an exhaustive grid (workers {0, 1, 2, 4, 8, 12, 16}
    x pin_memory x prefetch_factor {2, 4});
  * the tuned pick, against the grid's best (target: within 5 %), and the
    time the tuner took.
Every config is measured once per round, rounds in rotated order, and its
rate is the median over rounds. The grid's rounds only choose its best
point: the largest of some thirty noisy medians is biased high (the
winner's curse), so naive, the advice, the grid's best and the tuned pick
are then measured again, side by side in fresh interleaved rounds, and
those rounds give every figure in the table. Then the utilisation sampler's overhead
(NVML replayed, no GPU here) and W2: loader-only samples/s from memory, many
small files and one packed file, warm and cold page cache.

Usage: python scripts/bench_loader.py [--budget S] [--quick] [--rounds N] [--final-rounds N] [--window S]
                                      [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bootstrap.bench import BenchOptions, WorkloadSpec, run_bench  # noqa: E402  (after sys.path)
from bootstrap.bench.config import MAX_BUDGET_S, OPTION_RULES, check_value  # noqa: E402
from bootstrap.bench.device import Device  # noqa: E402
from bootstrap.bench.host import usable_cpus  # noqa: E402
from bootstrap.bench.loader import BatchStream, make_loader  # noqa: E402
from bootstrap.bench.measure import Window, run_window, warm_up  # noqa: E402
from bootstrap.bench.results import LoaderConfig  # noqa: E402
from bootstrap.bench.state import RunState, new_state  # noqa: E402
from bootstrap.bench.step import Trainer, resolve_model_name  # noqa: E402
from bootstrap.bench.synthetic import SyntheticImages, build_store, drop_page_cache  # noqa: E402
from bootstrap.bench.utilization import UtilSampler  # noqa: E402
from bootstrap.errors import InputError  # noqa: E402

# Set by Ctrl-C. The KeyboardInterrupt it raises can land in a finaliser (a DataLoader iterator's __del__
# joining its workers), where Python reports and drops it: the flag still stops the run at the next config.
INTERRUPTED: list[int] = []


def _interrupt(signum: int, _frame: Any) -> None:
    INTERRUPTED.append(signum)
    raise KeyboardInterrupt


def stop_if_interrupted() -> None:
    if INTERRUPTED:
        raise KeyboardInterrupt


# bench's own workloads: its defaults, with the per-sample cost the issue names
WORKLOADS = (("I/O latency", replace(WorkloadSpec(), io_ms=5.0)), ("CPU cost", replace(WorkloadSpec(), cpu_ms=5.0)))
GRID_WORKERS = (0, 1, 2, 4, 8, 12, 16)
QUICK_WORKERS = (0, 1, 2, 4)
# the sampler A/B keeps the small workload it always had: it times the sampler, not the loader
IO = WorkloadSpec(samples=256, image_size=64, crop_size=56, batch_size=16, io_ms=10.0, step_ms=20.0, model="tiny")


class ReplayNvml:
    """Answers the sampler's NVML calls instantly from fixed values (no GPU here)."""

    class NVMLError(Exception):
        value = 3

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return "gpu0"

    def nvmlDeviceGetSamples(self, handle: str, kind: int, last_us: int) -> Any:
        now = int(time.time() * 1e6)
        return 1, [SimpleNamespace(timeStamp=now, sampleValue=SimpleNamespace(uiVal=97))]


def tuned_run(label: str, spec: WorkloadSpec, budget: float) -> dict[str, Any]:
    """`bench` on this workload: its pick, tuned rate, how long tuning took, whether the tune was complete."""
    started = time.perf_counter()
    result = run_bench(BenchOptions(workload=spec, budget_s=budget, device="cpu"))
    if result.partial:  # bench turns Ctrl-C into a partial report: here it stops the figures, not just this run
        raise KeyboardInterrupt
    m = result.metrics.to_dict()
    return {
        "workload": label,
        "budget_s": budget,
        "wall_s": time.perf_counter() - started,
        "run_s": result.seconds,
        "best": result.best,
        "tuned": m.get("tuned_samples_per_s"),
        "recheck": m.get("recheck_samples_per_s"),
        "tune_s": result.tuning.seconds,
        "w_star": result.tuning.predicted_workers,
        "sampler_pct": result.sampler.overhead_pct,
        "checks": {c.id: c.status.value for c in result.checks},
    }


def grid(workers: Sequence[int]) -> list[LoaderConfig]:
    """workers x pin_memory x prefetch_factor {2, 4} (prefetch only with workers), persistent workers."""
    out = []
    for w in workers:
        for pin in (False, True):
            for prefetch in (2, 4) if w else (2,):
                out.append(
                    LoaderConfig(num_workers=w, pin_memory=pin, prefetch_factor=prefetch, persistent_workers=w > 0)
                )
    return out


def interleaved(spec: WorkloadSpec, configs: Sequence[LoaderConfig], rounds: int, window_s: float) -> dict[Any, float]:
    """Samples/s of each config with the training step, the median over `rounds` rounds, each round in a
    rotated order so a host whose load drifts favours none of them."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, usable_cpus() // 2))  # as bench does on a CPU host
    store = build_store(spec, None)
    dataset = SyntheticImages(store, spec)
    state = timing(spec)
    model, _ = resolve_model_name(spec.model, "cpu")
    trainer = Trainer(model, spec.num_classes, state.device, LoaderConfig(), step_s=spec.step_ms / 1000)
    rates: dict[Any, list[float]] = {c: [] for c in configs}
    # Every config gets the same seconds: a step floor would stretch the slow ones' windows and the round
    plan = replace(Window.scaled(window_s), min_steps=Window(0).min_steps)
    try:
        for index in range(rounds):
            shift = index * len(configs) // max(1, rounds)
            for config in list(configs[shift:]) + list(configs[:shift]):
                stop_if_interrupted()
                stream = BatchStream(make_loader(dataset, spec.batch_size, config, seed=spec.seed))
                try:
                    deadline = time.perf_counter() + 3 * window_s + 5
                    what = ("grid", config.label, config)
                    take = lambda s=stream: next(s)  # noqa: E731
                    warm_up(state, take, trainer.step, plan, deadline)
                    m = run_window(state, take, trainer.step, plan, deadline, what)
                    rates[config].append(m.samples_per_s)
                finally:
                    stream.close()
    finally:
        torch.set_num_threads(threads)
    return {c: statistics.median(r) for c, r in rates.items() if r}


def compare(
    label: str,
    spec: WorkloadSpec,
    budget: float,
    workers: Sequence[int],
    rounds: int,
    final_rounds: int,
    window_s: float,
) -> dict[str, Any]:
    """Tune with bench; the grid (and naive, the advice, the pick) interleaved to choose the grid's best;
    then naive, the advice, the grid's best and the pick again in fresh rounds, which give the figures."""
    row = tuned_run(label, spec, budget)
    stop_if_interrupted()
    cpus = usable_cpus()
    naive = LoaderConfig()
    advice = LoaderConfig(num_workers=cpus, pin_memory=True, prefetch_factor=2, persistent_workers=True)
    best = row["best"]
    # the pick as the grid spells it (non_blocking and the step settings do not change a CPU loader)
    pick = (
        None
        if best is None
        else LoaderConfig(
            num_workers=best.num_workers,
            pin_memory=best.pin_memory,
            prefetch_factor=best.prefetch_factor if best.num_workers else 2,
            persistent_workers=best.num_workers > 0,
        )
    )
    configs = list(dict.fromkeys([naive, advice, *grid(workers), *([pick] if pick else [])]))
    rates = interleaved(spec, configs, rounds, window_s)
    top = max(rates, key=rates.__getitem__)
    final = interleaved(
        spec, list(dict.fromkeys([naive, advice, top, *([pick] if pick else [])])), final_rounds, window_s
    )
    row.update(
        naive=final.get(naive),
        advice=final.get(advice),
        grid_best=final[top],
        grid_label=top.label,
        grid_best_selection=rates[top],
        pick=final.get(pick) if pick else None,
        pick_label=pick.label if pick else "-",
        configs=len(configs),
        grid={c.label: r for c, r in rates.items()},
    )
    row["pick_vs_best"] = row["pick"] / row["grid_best"] if row["pick"] else None
    row.pop("best")
    return row


def _f(value: Any, spec: str) -> str:
    """`value` formatted, or '-' right-aligned to the same width when it was not measured."""
    if value is None:
        width = "".join(ch for ch in spec.split(".")[0] if ch.isdigit())
        return f"{'-':>{width or 1}}"
    return f"{value:{spec}}"


def sampler_ab(spec: WorkloadSpec, workers: int, seconds: float, rounds: int = 3) -> dict[str, Any]:
    """Steps/s of the tuned pipeline with the sampler off and on (0.2 s and 0.02 s polling), interleaved.

    The step gets half the CPUs' torch threads, as `bench` does on a CPU host.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, usable_cpus() // 2))
    store = build_store(spec, None)
    dataset = SyntheticImages(store, spec)
    state = timing(spec)
    config = LoaderConfig(num_workers=workers, persistent_workers=workers > 0)
    trainer = Trainer("tiny", spec.num_classes, state.device, config, step_s=spec.step_ms / 1000)
    stream = BatchStream(make_loader(dataset, spec.batch_size, config))
    plan = Window.scaled(seconds)
    rates: dict[str, list[float]] = {"off": [], "on 0.2 s": [], "on 0.02 s": []}
    cpu: dict[str, list[float]] = {"on 0.2 s": [], "on 0.02 s": []}
    try:
        warm_up(state, lambda: next(stream), trainer.step, plan, time.perf_counter() + 5)
        for _ in range(rounds):
            for mode in rates:
                stop_if_interrupted()
                sampler = None
                if mode != "off":
                    interval = 0.2 if "0.2 s" in mode else 0.02
                    sampler = UtilSampler(nvml_module=ReplayNvml(), device_index=0, interval_s=interval).start()
                deadline = time.perf_counter() + 2 * seconds
                m = run_window(state, lambda: next(stream), trainer.step, plan, deadline, ("ab", mode, config))
                rates[mode].append(m.samples_per_s)
                if sampler is not None:
                    cpu[mode].append(sampler.stop().overhead_pct)
    finally:
        stream.close()
        torch.set_num_threads(threads)
    out: dict[str, Any] = {mode: statistics.median(values) for mode, values in rates.items()}
    out["rounds"] = rates
    out.update({f"cpu% {mode}": statistics.median(values) for mode, values in cpu.items()})
    return out


def w2_rates(seconds: float) -> list[dict[str, Any]]:
    """Loader-only samples/s, num_workers=0: memory vs many small files vs one packed file, warm and cold."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-w2-") as tmp:
        for storage in ("memory", "files", "packed"):
            spec = WorkloadSpec(samples=2048, image_size=64, crop_size=56, batch_size=16, storage=storage)
            store = build_store(spec, Path(tmp) / storage)
            dataset = SyntheticImages(store, spec)
            for cold in (False, True) if storage != "memory" else (False,):
                stop_if_interrupted()
                if cold:
                    drop_page_cache(store)
                stream = BatchStream(make_loader(dataset, spec.batch_size, LoaderConfig()))
                deadline = time.perf_counter() + 2 * seconds
                what = ("w2", storage, LoaderConfig())
                m = run_window(timing(spec), lambda s=stream: next(s), None, Window.scaled(seconds), deadline, what)
                stream.close()
                rows.append({"storage": storage, "cache": "cold" if cold else "warm", "samples_per_s": m.samples_per_s})
    return rows


def timing(spec: WorkloadSpec) -> RunState:
    """What a window is timed against: the CPU, the batch size, and no end to the run."""
    state = new_state(BenchOptions(workload=spec, budget_s=MAX_BUDGET_S, device="cpu"))
    state.device = Device("cpu")
    return state


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def budget(text: str) -> float:
    """--budget as `bench` takes it (> 0 s, at most a day), refused before the minutes of runs, not after."""
    try:
        return check_value(float(text), OPTION_RULES["budget_s"], "--budget")
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.problem) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def main() -> int:
    # A CPU host has no device to pin for: the grid still spans pin_memory (as the advice names it), and
    # torch's warning that it does nothing here would repeat for every such loader.
    warnings.filterwarnings("ignore", message="'pin_memory' argument is set as true")
    signal.signal(signal.SIGINT, _interrupt)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=budget, default=60.0, help="bench budget per workload (s)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="workers {0, 1, 2, 4} only, one-second windows, two rounds; no sampler A/B or W2",
    )
    parser.add_argument("--rounds", type=positive_int, help="grid rounds (default 2)")
    parser.add_argument(
        "--final-rounds",
        type=positive_int,
        help="fresh rounds of naive, advice, the grid's best and the pick (default 6, --quick 3)",
    )
    parser.add_argument("--window", type=budget, help="grid window seconds (default 1.5, --quick 1)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json {args.json}: no directory {args.json.parent} to write it in")
    if args.json is not None and args.json.is_dir():
        parser.error(f"--json {args.json}: a directory; name the file to write")
    workers = QUICK_WORKERS if args.quick else GRID_WORKERS
    rounds = args.rounds or 2
    final_rounds = args.final_rounds or (3 if args.quick else 6)
    window_s = args.window or (1.0 if args.quick else 1.5)
    print(
        f"bench-loader: {usable_cpus()} usable CPUs; bench budget {args.budget:g} s per workload; CPU device; "
        f"grid workers {{{', '.join(map(str, workers))}}} x pin x prefetch {{2, 4}}, {rounds} interleaved rounds "
        f"of {window_s:g} s windows to choose its best, then {final_rounds} fresh rounds of naive, advice, "
        f"the grid's best and the pick; load average before: {_loadavg()}"
    )
    for label, spec in WORKLOADS:
        print(
            f"  {label}: bench's workload with cpu_ms={spec.cpu_ms:g}, io_ms={spec.io_ms:g} per sample, "
            f"batch {spec.batch_size} x {spec.crop_size}px, model {spec.model}"
        )
    runs = [compare(label, spec, args.budget, workers, rounds, final_rounds, window_s) for label, spec in WORKLOADS]
    print()
    print(
        f"{'workload':<12} {'naive/s':>8} {'advice/s':>8} {'grid best/s':>11} {'grid best config':<24} "
        f"{'tuned/s':>8} {'tuned pick':<24} {'pick/best':>9} {'tune s':>7} {'bench.tuned':>11}"
    )
    for r in runs:
        print(
            f"{r['workload']:<12} {_f(r['naive'], '>8.1f')} {_f(r['advice'], '>8.1f')} "
            f"{_f(r['grid_best'], '>11.1f')} {r['grid_label']:<24} {_f(r['pick'], '>8.1f')} {r['pick_label']:<24} "
            f"{_f(r['pick_vs_best'], '>9.2f')} {_f(r['tune_s'], '>7.1f')} {r['checks'].get('bench.tuned', '-'):>11}"
        )
    print(
        "  every rate: samples/s with the training step, median of the fresh interleaved rounds; advice = workers = "
        "CPUs, pin_memory, prefetch_factor 2, persistent; pick/best = the tuned pick's rate / the grid's best "
        "(target >= 0.95); tune s = the tuner's own time inside bench's budget"
    )
    for r in runs:
        print(
            f"  {r['workload']}: bench's own figures: tuned {_f(r['tuned'], '.1f')}/s, re-measured "
            f"{_f(r['recheck'], '.1f')}/s, W* = {r['w_star']}, run {r['run_s']:.1f} s of {r['budget_s']:g} s; "
            f"the grid's best in its own rounds {r['grid_best_selection']:.1f}/s; "
            f"verdicts: "
            + ", ".join(
                f"{cid[6:]} {status}"
                for cid, status in r["checks"].items()
                if cid in ("bench.efficiency", "bench.speedup", "bench.recheck")
            )
        )
    out: dict[str, Any] = {"runs": runs}
    if not args.quick:
        tuned_workers = next((int(r["pick_label"].split()[0][2:]) for r in runs if r["pick_label"].startswith("w=")), 1)
        ab = sampler_ab(IO, max(1, tuned_workers), seconds=2.0)
        print()
        print(
            f"sampler A/B on a small I/O pipeline (w={max(1, tuned_workers)}, replayed NVML): "
            f"off {ab['off']:.1f}/s, on@0.2s {ab['on 0.2 s']:.1f}/s ({ab['on 0.2 s'] / ab['off'] - 1:+.1%}), "
            f"on@0.02s {ab['on 0.02 s']:.1f}/s ({ab['on 0.02 s'] / ab['off'] - 1:+.1%}); "
            f"sampler CPU {ab['cpu% on 0.2 s']:.2f}% / {ab['cpu% on 0.02 s']:.2f}% of wall"
        )
        w2 = w2_rates(seconds=1.5)
        print()
        print(
            "W2, loader only, num_workers=0: "
            + "; ".join(f"{row['storage']} ({row['cache']}) {row['samples_per_s']:.0f}/s" for row in w2)
        )
        out.update(sampler_ab=ab, w2=w2)
    print(f"load average after: {_loadavg()}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nbench-loader: interrupted", file=sys.stderr)
        sys.exit(130)
