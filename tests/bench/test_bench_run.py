"""Real bench runs on this CPU: the I/O-latency workload end to end, Ctrl-C, and torchrun with gloo.

The I/O workload's costs are known sleeps: each sample waits IO_MS (storage
latency, no CPU) and each step waits STEP_MS (a stand-in device). From them
alone follow the worker count that saturates the consumer and the speedup a
tuned loader must show over num_workers=0; the tests derive both rather
than hard-code a speed.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bootstrap.bench.config import WorkloadSpec
from tests.fixtures.bench import assert_bench_contract
from tests.fixtures import REPO

IO_MS, STEP_MS, BATCH = 15.0, 40.0, 8
BUDGET_S = 16.0
TORCHRUN = Path(sys.executable).with_name("torchrun")


def bench_argv(out: Path, *extra: str) -> list:
    return [sys.executable, "-m", "bootstrap", "bench", "--device", "cpu", "--out", str(out), "--samples", "64",
            "--image-size", "32", "--crop-size", "24", "--batch-size", str(BATCH), *extra]


@pytest.fixture(scope="module")
def io_run(tmp_path_factory):
    """One CLI run of the I/O-latency workload: (JSON envelope printed, output dir, wall seconds)."""
    out = tmp_path_factory.mktemp("bench-io")
    started = time.perf_counter()
    done = subprocess.run(bench_argv(out, "--budget", str(BUDGET_S), "--io-ms", str(IO_MS), "--step-ms", str(STEP_MS),
                                     "--json", "--quiet"),
                          capture_output=True, text=True, cwd=REPO, timeout=BUDGET_S + 60)
    wall = time.perf_counter() - started
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout), out, wall


def test_tuner_saturates_the_consumer(io_run):
    envelope, _, _ = io_run
    extra = envelope["extra"]
    # One worker delivers a batch every BATCH x IO_MS; the consumer takes one every STEP_MS (at best).
    saturating = math.ceil(BATCH * IO_MS / STEP_MS)
    assert saturating >= 2  # the costs are chosen so that one worker cannot keep up
    assert extra["best"]["num_workers"] >= saturating, extra["tuning"]
    assert extra["tuning"]["predicted_workers"] >= saturating


def test_tuned_beats_naive_by_the_margin_the_costs_predict(io_run):
    envelope, _, _ = io_run
    metrics, workers = envelope["extra"]["metrics"], envelope["extra"]["best"]["num_workers"]
    naive_period = BATCH * IO_MS + STEP_MS                  # num_workers=0 loads, then steps, in series
    tuned_period = max(STEP_MS, BATCH * IO_MS / workers)    # workers load while the consumer steps
    predicted = naive_period / tuned_period
    assert metrics["speedup"] >= 0.8 * predicted, (metrics["speedup"], predicted)
    assert metrics["tuned_samples_per_s"] > metrics["naive_samples_per_s"]


def test_run_stays_inside_its_budget(io_run):
    envelope, _, wall = io_run
    extra = envelope["extra"]
    assert extra["seconds"] <= BUDGET_S + 2.0
    tuning = extra["tuning"]
    assert tuning["seconds"] <= tuning["budget_s"] * 1.1 + 0.5
    assert wall <= BUDGET_S + 15.0  # interpreter and torch start-up, report writing


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_report_contract_files_and_snippet(io_run):
    """bench.json matches what was printed and the pinned layout; bench.png opens; the snippet runs."""
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader

    from bootstrap.bench.workloads import MemoryStore, SyntheticImages, build_model, encode_images

    envelope, out, _ = io_run
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
    assert ids["bench.nvml_util"] == "skip" and ids["bench.loader_scaling"] in ("ok", "warn")
    for key in ("cpu_s_per_sample", "feedable_samples_per_s", "loader_scaling_efficiency", "sampler_overhead_pct"):
        assert extra["metrics"][key] is not None, key
    # The scaling verdict compares S(W) with W x S(1) at some W >= 2 (at W = 1 it could never fail).
    assert extra["metrics"]["loader_scaling_workers"] == min(8, max(2, extra["device"]["cpus_usable"] - 1))
    assert ids["bench.tuned"] == "ok"

    spec = WorkloadSpec(samples=16, image_size=32, crop_size=24, batch_size=BATCH, num_classes=4, epoch_batches=2)
    model = build_model("tiny", 4)
    namespace = {"dataset": SyntheticImages(MemoryStore(*encode_images(spec)), spec), "model": model,
                 "optimizer": torch.optim.SGD(model.parameters(), lr=0.1), "device": torch.device("cpu")}
    exec(compile(extra["snippet"], "bench-snippet", "exec"), namespace)
    assert isinstance(namespace["loader"], DataLoader)
    assert namespace["loader"].num_workers == extra["best"]["num_workers"]


def test_ctrl_c_prints_and_writes_a_partial_report(tmp_path):
    """SIGINT after the first measurement: exit 130, the table so far on stdout, bench.json marked partial."""
    # A job started in the background by a non-interactive shell inherits SIGINT ignored, and Python keeps
    # an ignored SIGINT ignored: give the child the default disposition, as a terminal would.
    proc = subprocess.Popen(bench_argv(tmp_path, "--budget", "60", "--cpu-ms", "2"), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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


def test_sigterm_ends_the_run_like_ctrl_c_and_removes_the_sample_files(tmp_path):
    """Slurm, Docker and Kubernetes stop jobs with SIGTERM: before, exit 143 with no report and the
    temporary sample files left behind."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = tmp_path / "out"
    proc = subprocess.Popen(bench_argv(out, "--budget", "60", "--cpu-ms", "2", "--storage", "files"), cwd=REPO,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(scratch)})
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
    """Slurm signals every process of the job, the loader's workers too. Before: the stream dropped its
    iterator and torch shut it down in __del__, where its SIGCHLD handler raised 'DataLoader worker ... is
    killed by signal: Terminated': a traceback ('Exception ignored in ... __del__') after the partial report."""
    script = textwrap.dedent("""
        import multiprocessing.process as mp, os, signal, subprocess, sys, time
        from torch.utils.data import DataLoader
        from torch.utils.data._utils.signal_handling import _error_if_any_worker_fails
        from bootstrap.bench.stream import BatchStream
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


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed beside this python")
def test_torchrun_two_ranks_one_aggregated_report(tmp_path):
    argv = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "bootstrap", "bench",
            "--distributed", *bench_argv(tmp_path, "--budget", "6", "--json", "--quiet")[4:]]
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
