"""Real bench runs on this CPU: the I/O-latency workload end to end, Ctrl-C, and torchrun with gloo.

The I/O workload's costs are known sleeps: each sample waits IO_MS (storage
latency, no CPU) and each step waits STEP_MS (a stand-in device) plus the
small model's own compute, which the ceiling measures. From them follow the
worker count that saturates the consumer and the speedup a tuned loader
must show over num_workers=0; the tests derive both rather than hard-code a
speed. On a busy host set-up alone can take most of a small budget and the
optional scaling phase gives way to the tuner: the budgeted run's budget
starts when set-up ends (`run_after_setup`), and what it still could not
pay for is checked as reported; the tuner and the scaling phase are checked
in a run that every phase reaches in full (`run_every_phase`).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bootstrap.bench.config import BenchOptions, WorkloadSpec
from tests.fixtures import REPO
from tests.fixtures.bench import assert_bench_contract, run_after_setup, run_every_phase

IO_MS, STEP_MS, BATCH = 15.0, 40.0, 8
BUDGET_S = 16.0
IO_WORKLOAD = WorkloadSpec(samples=64, image_size=32, crop_size=24, batch_size=BATCH, io_ms=IO_MS, step_ms=STEP_MS)
TORCHRUN = Path(sys.executable).with_name("torchrun")


def bench_argv(out: Path, *extra: str) -> list:
    return [
        sys.executable,
        "-m",
        "bootstrap",
        "bench",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--samples",
        "64",
        "--image-size",
        "32",
        "--crop-size",
        "24",
        "--batch-size",
        str(BATCH),
        *extra,
    ]


@pytest.fixture(scope="module")
def io_every_phase(tmp_path_factory):
    """The I/O-latency workload with every phase run in full, whatever the host's load, its reports written:
    (its JSON envelope, the output dir). (The command line's own run, printing what it writes:
    test_bench_outputs.)"""
    from bootstrap.bench.report import envelope_json, write_reports

    out = tmp_path_factory.mktemp("bench-io")
    result = run_every_phase(BenchOptions(workload=IO_WORKLOAD, device="cpu"), budget_s=30.0)
    write_reports(result, out)
    return json.loads(envelope_json(result)), out


@pytest.fixture(scope="module")
def io_run():
    """The same workload within BUDGET_S, counted from the end of set-up: its JSON envelope."""
    from bootstrap.bench.report import envelope_json

    return json.loads(
        envelope_json(run_after_setup(BenchOptions(workload=IO_WORKLOAD, budget_s=BUDGET_S, device="cpu")))
    )


def step_ms(metrics) -> float:
    """The consumer's period: the STEP_MS sleep plus the model's compute, which a busy host stretches; the
    ceiling (the step on a batch already in place) measures it."""
    return max(STEP_MS, 1000.0 * BATCH / metrics["ceiling_samples_per_s"])


@pytest.mark.slow
def test_tuner_saturates_the_consumer(io_every_phase):
    extra = io_every_phase[0]["extra"]
    assert extra["metrics"]["tune_candidates_measured"] == extra["metrics"]["tune_candidates"]
    # One worker delivers a batch every BATCH x IO_MS; the consumer takes one every step.
    saturating = math.ceil(BATCH * IO_MS / step_ms(extra["metrics"]))
    assert saturating >= 2  # the costs are chosen so that one worker cannot keep up
    assert extra["best"]["num_workers"] >= saturating, extra["tuning"]
    assert extra["tuning"]["predicted_workers"] >= saturating


def test_tuned_beats_naive_by_the_margin_the_costs_predict(io_every_phase):
    extra = io_every_phase[0]["extra"]
    metrics, workers = extra["metrics"], extra["best"]["num_workers"]
    step = step_ms(metrics)
    naive_period = BATCH * IO_MS + step  # num_workers=0 loads, then steps, in series
    tuned_period = max(step, BATCH * IO_MS / workers)  # workers load while the consumer steps
    predicted = naive_period / tuned_period
    assert metrics["speedup"] >= 0.8 * predicted, (metrics["speedup"], predicted)
    assert metrics["tuned_samples_per_s"] > metrics["naive_samples_per_s"]


def test_the_tuner_ends_within_its_time(io_every_phase):
    tuning = io_every_phase[0]["extra"]["tuning"]
    assert tuning["seconds"] <= tuning["budget_s"] * 1.1 + 0.5


@pytest.mark.slow  # the budget holding is test_slow_batches_stay_inside_the_budget's too
def test_run_stays_inside_its_budget_and_reports_what_it_left_out(io_run):
    extra, metrics = io_run["extra"], io_run["extra"]["metrics"]
    budget_end_s = extra["phases"][0]["started_s"] + BUDGET_S  # the budget starts as set-up ends
    assert extra["seconds"] <= budget_end_s + 2.0
    tuning = extra["tuning"]
    assert tuning["seconds"] <= tuning["budget_s"] * 1.1 + 0.5
    # What the budget paid for depends on the host's load; what it did not pay for is reported, never dropped.
    phases = {p["name"]: p for p in extra["phases"]}
    ids = {c["id"]: c["status"] for c in io_run["checks"]}
    tuned_windows = len([m for m in extra["measurements"] if m["phase"] == "tuned"])
    assert metrics["tuned_windows"] == tuned_windows
    if metrics.get("budget_needed_s") is None:  # nothing left out: every phase and window ran
        assert phases["scaling"]["status"] == "done" and tuned_windows == 3 and ids["bench.tuned"] == "ok"
    else:
        assert metrics["budget_needed_s"] > BUDGET_S
        assert any(note.startswith("budget too small for a complete run") for note in extra["notes"])
        if tuned_windows < 3:
            assert ids["bench.tuned"] == "warn"
            assert not extra["snippet"] or extra["snippet"].startswith("# NOT FULLY TUNED")
    if metrics["loader_scaling_efficiency"] is not None:
        assert ids["bench.loader_scaling"] in ("ok", "warn", "inconclusive")
    else:  # the budget cut the scaling phase short: said, with the budget a complete run needs
        assert ids["bench.loader_scaling"] == "skip" and metrics["budget_needed_s"] is not None
        assert "scaling: " in next(n for n in extra["notes"] if n.startswith("budget too small"))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_report_contract_files_and_snippet(io_every_phase):
    """bench.json holds the run's envelope in the pinned layout; bench.png opens; the snippet runs."""
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader

    from bootstrap.bench.step import build_model
    from bootstrap.bench.synthetic import MemoryStore, SyntheticImages, encode_images

    envelope, out = io_every_phase
    assert_bench_contract(envelope)
    assert json.loads((out / "bench.json").read_text()) == envelope
    with Image.open(out / "bench.png") as image:
        assert image.format == "PNG" and image.size[1] > 300
    extra = envelope["extra"]
    assert extra["partial"] is False
    assert {p["name"] for p in extra["phases"]} >= {"loader", "ceiling", "naive", "scaling", "tune", "tuned"}
    assert len([m for m in extra["measurements"] if m["phase"] == "tuned"]) == 3
    assert extra["thresholds"]["efficiency_pass"] == {"value": 0.9, "source": "default"}
    assert any("share" in note for note in extra["notes"])  # CPU mode says the cores are shared
    ids = {c["id"]: c["status"] for c in envelope["checks"]}
    assert ids["bench.nvml_util"] == "skip" and ids["bench.loader_scaling"] in ("ok", "warn", "inconclusive")
    for key in ("cpu_s_per_sample", "feedable_samples_per_s", "loader_scaling_efficiency", "sampler_overhead_pct"):
        assert extra["metrics"][key] is not None, key
    assert ids["bench.tuned"] == "ok"

    spec = WorkloadSpec(samples=16, image_size=32, crop_size=24, batch_size=BATCH, num_classes=4, epoch_batches=2)
    model = build_model("tiny", 4)
    namespace = {
        "dataset": SyntheticImages(MemoryStore(*encode_images(spec)), spec),
        "model": model,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "device": torch.device("cpu"),
    }
    exec(compile(extra["snippet"], "bench-snippet", "exec"), namespace)
    assert isinstance(namespace["loader"], DataLoader)
    assert namespace["loader"].num_workers == extra["best"]["num_workers"]


def test_the_scaling_phase_judges_w_workers_against_one(io_every_phase):
    """CPU hosts: the loader alone at 1 and W workers; the verdict compares S(W) with W x S(1) at some
    W >= 2 (at W = 1 it could never fail)."""
    extra = io_every_phase[0]["extra"]
    scaling = next(p for p in extra["phases"] if p["name"] == "scaling")
    assert scaling["status"] == "done" and scaling["note"].startswith("S(1) = "), scaling
    measured = {m["config"]["num_workers"] for m in extra["measurements"] if m["phase"] == "scaling"}
    verdict_w = min(8, max(2, extra["device"]["cpus_usable"] - 1))
    assert {1, verdict_w} <= measured
    assert extra["metrics"]["loader_scaling_workers"] == verdict_w
    assert extra["metrics"]["loader_scaling_efficiency"] > 0
    ids = {c["id"]: c["status"] for c in io_every_phase[0]["checks"]}
    assert ids["bench.loader_scaling"] in ("ok", "warn", "inconclusive")


@pytest.mark.slow
def test_ctrl_c_prints_and_writes_a_partial_report(tmp_path):
    """SIGINT after the first measurement: exit 130, the table so far on stdout, bench.json marked partial."""
    proc = subprocess.Popen(
        bench_argv(tmp_path, "--budget", "60", "--cpu-ms", "2"),
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "ceiling: start" in line:  # the loader phase has measured; interrupt the ceiling phase
                break
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(seen) + stderr
    assert "[PARTIAL]" in stdout and "loader w=0 nopin" in stdout
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["extra"]["partial"] is True
    assert report["extra"]["measurements"] and report["extra"]["metrics"]["cpu_s_per_sample"] > 0.0015
    assert report["extra"]["phases"][-1]["status"] == "interrupted"
    assert (tmp_path / "bench.png").exists()


@pytest.mark.slow
def test_sigterm_ends_the_run_like_ctrl_c_and_removes_the_sample_files(tmp_path):
    """Slurm, Docker and Kubernetes stop jobs with SIGTERM: before, exit 143 with no report and the
    temporary sample files left behind."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = tmp_path / "out"
    proc = subprocess.Popen(
        bench_argv(out, "--budget", "60", "--cpu-ms", "2", "--storage", "files"),
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "ceiling: start" in line:
                break
        assert list(scratch.glob("bootstrap-bench-*")), "".join(seen)  # the files store is there mid-run
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, "".join(seen) + stderr
    assert "[PARTIAL]" in stdout and "loader w=0 nopin" in stdout
    assert json.loads((out / "bench.json").read_text())["extra"]["partial"] is True
    assert not list(scratch.iterdir())


def test_a_stop_as_the_run_ends_still_cleans_up_and_reports(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM while the run cleans up (a job's time limit at the end of its budget): before, the
    KeyboardInterrupt escaped run_bench, so no report, 'interrupted', and the sample files left in --data-dir."""
    import bootstrap.bench.run as bench_run
    from bootstrap.bench import BenchOptions, run_bench

    clean_up, calls = bench_run.clean_up, []

    def stopped_while_cleaning_up(state):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the signal lands at the first line of the clean-up
        clean_up(state)

    monkeypatch.setattr(bench_run, "clean_up", stopped_while_cleaning_up)
    spec = WorkloadSpec(samples=16, image_size=32, crop_size=24, batch_size=8, model="tiny", storage="files")
    result = run_bench(BenchOptions(workload=spec, budget_s=2.0, device="cpu", data_dir=tmp_path))
    assert result.partial and result.checks
    assert list(tmp_path.iterdir()) == []  # the sample files are gone


def test_workers_a_stop_signal_killed_shut_down_without_a_traceback():
    """Slurm signals every process of the job, the loader's workers too: the stream shuts its iterator down
    itself, so no 'DataLoader worker ... is killed by signal' traceback follows the partial report."""
    script = textwrap.dedent("""
        import multiprocessing.process as mp, os, signal, subprocess, sys, time
        from torch.utils.data import DataLoader
        from torch.utils.data._utils.signal_handling import _error_if_any_worker_fails
        from bootstrap.bench.loader import BatchStream
        stream = BatchStream(DataLoader(list(range(64)), batch_size=4, num_workers=2))
        signal.signal(signal.SIGCHLD, lambda *_: None)  # torch hears of the death only in the shutdown below
        victim = stream._iterator._workers[0].pid
        subprocess.run(["kill", "-TERM", str(victim)], check=True)  # as Slurm stops a job: not from the parent
        while os.waitid(os.P_PID, victim, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:  # dead, not reaped
            time.sleep(0.01)
        join = mp.BaseProcess.join
        def join_as_sigchld_arrives(self, timeout=None):
            _error_if_any_worker_fails()  # torch's SIGCHLD handler, as the other worker exits
            return join(self, timeout)
        mp.BaseProcess.join = join_as_sigchld_arrives
        stream.close()
        print("closed")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0 and done.stdout == "closed\n", done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed beside this python")
def test_torchrun_two_ranks_one_aggregated_report(tmp_path):
    argv = [
        str(TORCHRUN),
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "bootstrap",
        "bench",
        "--distributed",
        *bench_argv(tmp_path, "--budget", "6", "--json", "--quiet")[4:],
    ]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report = json.loads(done.stdout)  # exactly one JSON document: only rank 0 reports
    aggregate = report["extra"]["aggregate"]
    assert aggregate["world_size"] == 2 and len(report["extra"]["ranks"]) == 2
    assert aggregate["worst_rank"] in (0, 1)
    worst = next(c for c in report["checks"] if c["id"] == "bench.worst_rank")
    assert f"rank {aggregate['worst_rank']}" in worst["observed"]
    assert aggregate["ddp_ceiling_samples_per_s"] > 0
    assert report["extra"]["device"]["cpus_usable"] == max(1, (os.cpu_count() or 2) // 2)
    assert json.loads((tmp_path / "bench.json").read_text())["extra"]["aggregate"]["world_size"] == 2
