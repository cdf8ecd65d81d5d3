"""The benchmark scripts' command lines (`make bench-env`, `bench-loader`, `bench-verify`, `bench-lock`):
a bad argument is refused in one line, exit 2, before any fixture is built."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures import REPO


def script(name: str, *argv: str, tmp: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / name), *argv],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TMPDIR": str(tmp)},
    )


def in_tmp(argv: tuple, error: str, tmp: Path) -> tuple[tuple, str]:
    """A missing path lives under the test's own folder: a fixed one such as /nonexistent may exist on the
    machine running the suite (it is `nobody`'s home on some images)."""
    return tuple(a.replace("{tmp}", str(tmp)) for a in argv), error.replace("{tmp}", str(tmp))


@pytest.mark.parametrize(
    "argv, error",
    [
        (("--runs", "0"), "argument --runs: expected an integer >= 1, got 0"),
        (("--packages", "3"), "argument --packages: expected an integer >= 8, got 3"),
        (("--big-mb", "-1"), "argument --big-mb: expected an integer >= 0, got -1"),
        (("--dir", "{tmp}/missing/bench"), "--dir {tmp}/missing/bench: no such directory"),
    ],
)
def test_bench_env_refuses_bad_arguments_before_building(tmp_path: Path, argv: tuple, error: str) -> None:
    argv, error = in_tmp(argv, error, tmp_path)
    done = script("bench_env.py", *argv, tmp=tmp_path)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == f"bench_env.py: error: {error}", done.stderr
    assert "Traceback" not in done.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv, error",
    [
        (("--budget", "0"), "argument --budget: expected a number > 0 and <= 86,400, got 0.0"),
        (("--budget", "nan"), "argument --budget: expected a number > 0 and <= 86,400, got nan"),
        (
            ("--json", "{tmp}/missing/loader.json"),
            "--json {tmp}/missing/loader.json: no directory {tmp}/missing to write it in",
        ),
        (("--json", "."), "--json .: a directory; name the file to write"),
        (("--final-rounds", "0"), "argument --final-rounds: expected an integer >= 1, got 0"),
    ],
)
def test_bench_loader_refuses_bad_arguments_before_its_runs(tmp_path: Path, argv: tuple, error: str) -> None:
    argv, error = in_tmp(argv, error, tmp_path)
    done = script("bench_loader.py", "--budget", "0.5", *argv, tmp=tmp_path)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == f"bench_loader.py: error: {error}", done.stderr
    assert "Traceback" not in done.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv, error",
    [
        (("--budget", "0"), "argument --budget: expected a finite number > 0, got 0"),
        (("--budget", "inf"), "argument --budget: expected a finite number > 0, got inf"),
        (("--rounds", "1.5"), "argument --rounds: expected a finite number > 0, got 1.5"),
        (("--pairs", "0"), "argument --pairs: expected a finite number > 0, got 0"),
        (("--only", "huge"), "argument --only: invalid choice: 'huge'"),  # the choices' quoting varies by Python
    ],
)
def test_bench_training_refuses_bad_arguments_before_its_runs(tmp_path: Path, argv: tuple, error: str) -> None:
    done = script("bench_training.py", *argv, tmp=tmp_path)
    assert done.returncode == 2 and done.stderr.splitlines()[-1].startswith(f"bench_training.py: error: {error}")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_bench_training_prints_the_result_lines_its_reader_parses(tmp_path: Path) -> None:
    argv = ("--budget", "4", "--rounds", "1", "--pairs", "2", "--window", "0.2", "--only", "overhead")
    done = script("bench_training.py", *argv, tmp=tmp_path, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    assert done.stdout.count("\nresult overhead: recommended ") == 1
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from bench_report import read_training
    finally:
        sys.path.remove(str(REPO / "scripts"))
    assert read_training(done.stdout).startswith("Target (issue 35)")


@pytest.mark.slow
def test_bench_loader_compares_the_pick_with_the_advice_and_the_grid(tmp_path: Path) -> None:
    done = script(
        "bench_loader.py",
        "--quick",
        "--budget",
        "8",
        "--rounds",
        "1",
        "--final-rounds",
        "1",
        "--window",
        "0.2",
        "--json",
        "loader.json",
        tmp=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "naive/s advice/s grid best/s" in " ".join(done.stdout.split())
    runs = json.loads((tmp_path / "loader.json").read_text())["runs"]
    assert [r["workload"] for r in runs] == ["I/O latency", "CPU cost"]
    for run in runs:
        # the grid's rounds choose its best point; fresh rounds measure it beside the pick
        assert run["grid_best_selection"] == max(run["grid"].values()) and run["configs"] >= 14
        assert run["grid"][run["grid_label"]] == run["grid_best_selection"]
        if run["pick_label"] == "-":  # a busy host: bench's 8 s ran out before its tuner picked
            assert run["pick"] is None and run["pick_vs_best"] is None
        else:
            assert run["pick_vs_best"] == pytest.approx(run["pick"] / run["grid_best"])


@pytest.mark.parametrize("name", ["bench_verify.py", "bench_lock.py"])
def test_bench_scripts_without_options_answer_help_and_refuse_arguments(tmp_path: Path, name: str) -> None:
    helped = script(name, "--help", tmp=tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith(f"usage: {name} [-h]")
    done = script(name, "--runs", "3", tmp=tmp_path)
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == f"{name}: error: unrecognized arguments: --runs 3"
    assert list(tmp_path.iterdir()) == []


def test_bench_env_on_a_full_dir_says_so_in_one_line(small_fs) -> None:
    mount, _ = small_fs
    done = script("bench_env.py", "--packages", "8", "--runs", "1", "--dir", str(mount), tmp=mount)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "bench-env: no space left on device for the fixture, its caches and every run's envs (2.5 GB at the defaults): "
        "free some, or give --dir a larger file system"
    ], done.stderr
    assert list(mount.iterdir()) == []  # its scratch directory removed


@pytest.mark.slow
def test_ctrl_c_in_bench_env_says_so_and_removes_its_fixture(tmp_path: Path) -> None:
    """Ctrl-C lands while rattler installs: one line, exit 130, and nothing left in $TMPDIR
    (rattler's threads wrote on while the temporary directory was removed)."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "bench_env.py"), "--runs", "3"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert proc.stdout is not None and proc.stdout.readline().startswith("fixture env:")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and stderr.strip() == "bench-env: interrupted", stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_ctrl_c_in_bench_loader_stops_it(tmp_path: Path) -> None:
    """bench turns Ctrl-C into a partial report; bench-loader must stop there, not go on to its next runs."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "bench_loader.py"), "--budget", "5"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    for _ in range(3):
        proc.stdout.readline()  # the header: the first bench run starts now
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and stderr.strip() == "bench-loader: interrupted", stderr
