"""scripts/gpu-check.sh, the prepared check for a lent GPU machine, run here on the CPU with tiny
budgets: it completes, every step has a summary line with its exit status and wall time, the GPU-only
steps say why they did not pass, and every output lands in the one folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO

STEPS = (
    "preflight",
    "doctor",
    "verify",
    "monitor",
    "monitor-once",
    "allreduce",
    "bench-cuda1",
    "bench-builtin",
    "dataset",
    "bench-dataset",
    "bench-training",
)
SMALL = {
    "GPU_CHECK_BENCH_BUDGET": "3",
    "GPU_CHECK_BENCH_ARGS": "--samples 64 --image-size 32 --crop-size 24",
    "GPU_CHECK_MONITOR_COUNT": "1",
    "GPU_CHECK_IMAGES": "8",
    "GPU_CHECK_BATCH_SIZE": "8",
    "GPU_CHECK_TRAINING_BUDGET": "3",
    "GPU_CHECK_EFFECTIVE_BATCH": "16",
}


def gpu_check(out: Path, **environ: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    env.update({"PYTHON": sys.executable, "OUT": str(out), **SMALL, **environ})
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-check.sh")],
        cwd=out.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


def summary(out: Path) -> dict:
    rows = {}
    for line in (out / "summary.txt").read_text().splitlines()[1:]:
        found = re.match(r"(\S+)\s+(-|\d+)\s+([\d.]+)\s+(ok|failed|timeout|skipped)\s*(.*)", line)
        if found:
            rows[found.group(1)] = found.groups()[1:]
    return rows


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils' timeout")
def test_the_gpu_check_completes_on_a_cpu_host_into_one_folder(tmp_path):
    out = tmp_path / "gpu-check"
    done = gpu_check(out)
    assert done.returncode in (0, 1), done.stderr
    rows = summary(out)
    assert tuple(rows) == STEPS, (out / "summary.txt").read_text()
    for step, (rc, seconds, verdict, _) in rows.items():
        assert rc == "-" or int(rc) >= 0
        assert float(seconds) >= 0.0
        if verdict != "skipped":
            assert (out / f"{step}.stdout").exists() and (out / f"{step}.stderr").exists(), step
    assert rows["doctor"][2] == "ok" and (out / "facts.json").is_file()
    assert rows["verify"][2] == "ok" and "env.* left out" in rows["verify"][3]  # torch checks, no bootstrap env
    assert rows["monitor"][2] == "skipped" and "no CUDA GPU" in rows["monitor"][3]
    once = rows["monitor-once"]
    assert once[0] == "0" and once[2] == "skipped" and "no CUDA GPU here: no NVIDIA GPU to monitor" in once[3]
    assert rows["bench-cuda1"][2] == "skipped" and "needs two CUDA GPUs or more (0 here)" in rows["bench-cuda1"][3]
    assert "dist.all_reduce" in rows["allreduce"][3]
    for run in ("bench-builtin", "bench-dataset"):
        assert (out / run / "bench.json").is_file() and (out / run / "bench.png").is_file(), run
    assert (out / "my_data.py").is_file() and (out / "verify.json").is_file()
    training = rows["bench-training"]
    assert training[2] == "ok" and "cpu: " in training[3], training
    assert (out / "bench-training" / "training.json").is_file() and (out / "bench-training" / "training.png").is_file()
    assert (out / "bench-training.stdout").read_text().startswith("Verdict:")
    assert re.search(r"^total \d+ s of 330 s", (out / "summary.txt").read_text(), re.M)


@pytest.mark.slow
def test_an_interpreter_without_torch_is_said_and_the_rest_is_skipped(tmp_path):
    out = tmp_path / "gpu-check"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} -S -I "$@"\n')  # no site-packages: no torch, no yaml
    fake.chmod(0o755)
    done = gpu_check(out, PYTHON=str(fake))
    assert done.returncode == 1
    rows = summary(out)
    assert "torch" in rows["preflight"][3]
    assert all(rows[step][2] == "skipped" for step in STEPS[1:] if step != "dataset")
