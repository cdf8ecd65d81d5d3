"""`make bench-loader`: what the bench's DataLoader tuner buys, and what its sampler costs, on this host.

In one run, side by side:
  * the I/O-latency workload (each sample waits --io-ms, each step --step-ms
    as a stand-in device) and the CPU-cost workload (each sample spends
    --cpu-ms of CPU on top of the JPEG decode): naive (num_workers=0) vs
    tuned samples/s, the speedup, and the speedup predicted from the costs
    the bench measured (ratio target >= 0.8);
  * tuning time against the tuner's budget, and each run's wall time
    against its budget (target: inside);
  * the utilisation sampler's overhead: its thread's CPU time over wall
    time while the bench runs, and an A/B of the tuned pipeline with the
    sampler off and on (NVML answered by a replaying stand-in here, since
    this host has no GPU: the driver's own call cost is not in it)
    (target < 1 % of step time);
  * W2: loader-only samples/s from memory, many small files and one packed
    file, warm and cold page cache.

Usage: python scripts/bench_loader.py [--budget S] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bootstrap.bench import BenchOptions, WorkloadSpec, run_bench  # noqa: E402  (after sys.path)
from bootstrap.bench.config import OPTION_RULES, check_value  # noqa: E402
from bootstrap.bench.device import Device, Trainer  # noqa: E402
from bootstrap.bench.host import usable_cpus  # noqa: E402
from bootstrap.bench.results import LoaderConfig  # noqa: E402
from bootstrap.bench.sampler import UtilSampler  # noqa: E402
from bootstrap.bench.stream import BatchStream, make_loader  # noqa: E402
from bootstrap.bench.window import WindowPlan, measure_loader_only, run_window, warm_up  # noqa: E402
from bootstrap.bench.workloads import SyntheticImages, build_store, drop_page_cache  # noqa: E402
from bootstrap.errors import InputError  # noqa: E402

IO = WorkloadSpec(samples=256, image_size=64, crop_size=56, batch_size=16, io_ms=10.0, step_ms=20.0, model="tiny")
CPU = WorkloadSpec(samples=256, image_size=64, crop_size=56, batch_size=16, cpu_ms=3.0, step_ms=10.0, model="tiny")


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


def one_run(label: str, spec: WorkloadSpec, budget: float) -> Dict[str, Any]:
    started = time.perf_counter()
    result = run_bench(BenchOptions(workload=spec, budget_s=budget, device="cpu"))
    if result.partial:  # bench turns Ctrl-C into a partial report: here it stops the figures, not just this run
        raise KeyboardInterrupt
    m = result.metrics
    row = {
        "workload": label, "budget_s": budget, "wall_s": time.perf_counter() - started, "run_s": result.seconds,
        "naive": m.get("naive_samples_per_s"), "tuned": m.get("tuned_samples_per_s"),
        "ceiling": m.get("ceiling_samples_per_s"), "speedup": m.get("speedup"),
        "predicted": m.get("predicted_speedup"), "workers": result.best.num_workers if result.best else None,
        "w_star": result.tuning.predicted_workers, "tune_s": result.tuning.seconds,
        "tune_budget_s": result.tuning.budget_s,
        "c_ms": 1000 * (m.get("cpu_s_per_sample") or 0), "l_ms": 1000 * (m.get("wall_s_per_sample") or 0),
        "sampler_pct": result.sampler.overhead_pct, "sampler_polls": result.sampler.polls,
        "efficiency": m.get("efficiency"),
        "tuned_check": next((c.status.value for c in result.checks if c.id == "bench.tuned"), "-"),
    }
    row["ratio"] = row["speedup"] / row["predicted"] if row["speedup"] and row["predicted"] else None
    return row


def _f(value: Any, spec: str) -> str:
    """`value` formatted, or '-' right-aligned to the same width when it was not measured."""
    if value is None:
        width = "".join(ch for ch in spec.split(".")[0] if ch.isdigit())
        return f"{'-':>{width or 1}}"
    return f"{value:{spec}}"


def sampler_ab(spec: WorkloadSpec, workers: int, seconds: float, rounds: int = 3) -> Dict[str, Any]:
    """Steps/s of the tuned pipeline with the sampler off and on (0.2 s and 0.02 s polling), interleaved.

    The step gets half the CPUs' torch threads, as `bench` does on a CPU host.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, usable_cpus() // 2))
    store = build_store(spec, None)
    dataset = SyntheticImages(store, spec)
    device = Device("cpu")
    config = LoaderConfig(num_workers=workers, persistent_workers=workers > 0)
    trainer = Trainer("tiny", spec.num_classes, device, config, step_s=spec.step_ms / 1000)
    stream = BatchStream(make_loader(dataset, spec.batch_size, config))
    plan = WindowPlan().scaled(seconds)
    rates: Dict[str, List[float]] = {"off": [], "on 0.2 s": [], "on 0.02 s": []}
    cpu: Dict[str, List[float]] = {"on 0.2 s": [], "on 0.02 s": []}
    try:
        warm_up(lambda: next(stream), trainer.step, device, plan, time.perf_counter() + 5)
        for _ in range(rounds):
            for mode in rates:
                sampler = None
                if mode != "off":
                    interval = 0.2 if "0.2 s" in mode else 0.02
                    sampler = UtilSampler(nvml_module=ReplayNvml(), device_index=0, interval_s=interval).start()
                zero = time.perf_counter()
                m = run_window(lambda: next(stream), trainer.step, device, plan, zero + 2 * seconds,
                               phase="ab", label=mode, config=config, batch_size=spec.batch_size,
                               clock_zero=zero, warmup=False)
                rates[mode].append(m.samples_per_s)
                if sampler is not None:
                    cpu[mode].append(sampler.stop().overhead_pct)
    finally:
        stream.close()
        torch.set_num_threads(threads)
    out: Dict[str, Any] = {mode: statistics.median(values) for mode, values in rates.items()}
    out["rounds"] = rates
    out.update({f"cpu% {mode}": statistics.median(values) for mode, values in cpu.items()})
    return out


def w2_rates(seconds: float) -> List[Dict[str, Any]]:
    """Loader-only samples/s, num_workers=0: memory vs many small files vs one packed file, warm and cold."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-w2-") as tmp:
        for storage in ("memory", "files", "packed"):
            spec = WorkloadSpec(samples=2048, image_size=64, crop_size=56, batch_size=16, storage=storage)
            store = build_store(spec, Path(tmp) / storage)
            dataset = SyntheticImages(store, spec)
            for cold in ((False, True) if storage != "memory" else (False,)):
                if cold:
                    drop_page_cache(store)
                stream = BatchStream(make_loader(dataset, spec.batch_size, LoaderConfig()))
                zero = time.perf_counter()
                m = measure_loader_only(lambda s=stream: next(s), replace(WindowPlan().scaled(seconds), warmup_steps=0,
                                                                      warmup_s=0.0),
                                        zero + 2 * seconds, phase="w2", label=storage, config=LoaderConfig(),
                                        batch_size=spec.batch_size, clock_zero=zero, first_batch_s=None)
                stream.close()
                rows.append({"storage": storage, "cache": "cold" if cold else "warm", "samples_per_s": m.samples_per_s})
    return rows


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=budget, default=40.0, help="bench budget per workload (s)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json {args.json}: no directory {args.json.parent} to write it in")
    if args.json is not None and args.json.is_dir():
        parser.error(f"--json {args.json}: a directory; name the file to write")
    print(f"bench-loader: {usable_cpus()} usable CPUs; budgets {args.budget:g} s per workload; CPU device; "
          f"load average before: {_loadavg()}")
    print(f"  I/O workload: io_ms={IO.io_ms:g} per sample, step_ms={IO.step_ms:g} per batch of {IO.batch_size}")
    print(f"  CPU workload: cpu_ms={CPU.cpu_ms:g} per sample (+ JPEG decode), step_ms={CPU.step_ms:g} per batch of "
          f"{CPU.batch_size}")
    runs = [one_run("I/O latency", IO, args.budget), one_run("CPU cost", CPU, args.budget),
            one_run("I/O latency", IO, args.budget / 2)]
    print()
    header = (f"{'workload':<12} {'budget':>6} {'naive/s':>8} {'tuned/s':>8} {'W*':>3} {'W':>3} {'speedup':>7} "
              f"{'predict':>7} {'ratio':>5} {'eff':>5} {'tune s':>11} {'run s':>11} {'sampler':>8} {'tuned':>5}")
    print(header)
    for r in runs:
        print(f"{r['workload']:<12} {r['budget_s']:>6.0f} {_f(r['naive'], '>8.1f')} {_f(r['tuned'], '>8.1f')} "
              f"{_f(r['w_star'], '>3')} {_f(r['workers'], '>3')} "
              f"{_f(r['speedup'], '>6.2f')}x {_f(r['predicted'], '>6.2f')}x "
              f"{_f(r['ratio'], '>5.2f')} {_f(r['efficiency'], '>5.2f')} "
              f"{r['tune_s']:>5.1f}/{r['tune_budget_s']:<5.1f} "
              f"{r['run_s']:>5.1f}/{r['budget_s']:<5.0f} {r['sampler_pct']:>7.2f}% {r['tuned_check']:>5}")
    print("  ratio = measured speedup / speedup predicted from measured costs (target >= 0.8); "
          "tune s / run s = time used / budget (target: inside); sampler = its thread's CPU / wall (target < 1%); "
          "tuned = bench.tuned (warn: the budget was too small for a complete tune)")
    for r in runs[:2]:
        print(f"  {r['workload']}: c = {r['c_ms']:.2f} ms CPU, l = {r['l_ms']:.2f} ms wall per sample; "
              f"ceiling {_f(r['ceiling'], '.0f')} samples/s")

    ab = sampler_ab(IO, runs[0]["workers"] or 1, seconds=2.0)
    print()
    print(f"sampler A/B on the tuned I/O pipeline (w={runs[0]['workers']}, replayed NVML): "
          f"off {ab['off']:.1f}/s, on@0.2s {ab['on 0.2 s']:.1f}/s ({ab['on 0.2 s'] / ab['off'] - 1:+.1%}), "
          f"on@0.02s {ab['on 0.02 s']:.1f}/s ({ab['on 0.02 s'] / ab['off'] - 1:+.1%}); "
          f"sampler CPU {ab['cpu% on 0.2 s']:.2f}% / {ab['cpu% on 0.02 s']:.2f}% of wall")

    w2 = w2_rates(seconds=1.5)
    print()
    print("W2, loader only, num_workers=0: " + "; ".join(
        f"{row['storage']} ({row['cache']}) {row['samples_per_s']:.0f}/s" for row in w2))
    print(f"load average after: {_loadavg()}")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "sampler_ab": ab, "w2": w2}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nbench-loader: interrupted", file=sys.stderr)
        sys.exit(130)
