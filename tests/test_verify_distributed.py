"""`verify --distributed`: the cross-rank rules on recorded rank answers, then real torchrun with gloo on this CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap.checks import Status
from bootstrap.errors import InputError
from bootstrap.ranks import torchrun_env
from bootstrap.verify_distributed import all_reduce_check, all_reduce_trial, bus_bandwidth_gb_s, same_env_check

REPO = Path(__file__).resolve().parent.parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


def rank(number: int, host: str = "node1", lock: str = "a1b2c3 (linux-64)", torch: str = "2.10.0 (CUDA 12.8)",
         driver: str = "570.124.06", ok: bool = True, seconds: float = 0.1) -> dict:
    return {"rank": number, "host": host, "checks": [], "facts": {"lock": lock, "torch": torch, "driver": driver},
            "all_reduce_ok": ok, "all_reduce_s": seconds}


def test_ranks_that_run_the_same_env_agree() -> None:
    check = same_env_check([rank(1, "node2"), rank(0)])
    assert check.status is Status.OK
    assert check.observed.startswith("2 ranks on 2 host(s) agree: the lock the env was built from a1b2c3 (linux-64)")


def test_a_rank_on_another_lock_fails_and_is_named() -> None:
    check = same_env_check([rank(0), rank(1), rank(2, "node3", lock="ffff00 (linux-64)", driver="535.183.01")])
    assert check.status is Status.FAIL
    assert "rank 2 on node3 ffff00 (linux-64)" in check.observed and "rank 2 on node3 535.183.01" in check.observed
    assert "make env" in check.remedy


def test_another_driver_alone_is_a_warning() -> None:
    check = same_env_check([rank(0), rank(1, "node2", driver="535.183.01")])
    assert check.status is Status.WARN
    assert check.observed == "the NVIDIA driver: rank 0 570.124.06, rank 1 on node2 535.183.01"


def test_bus_bandwidth_is_nccl_tests_busbw() -> None:
    algbw, busbw = bus_bandwidth_gb_s(10**9, 0.5, 4)
    assert algbw == pytest.approx(2.0) and busbw == pytest.approx(3.0)  # x 2(n-1)/n


def test_all_reduce_check_reports_the_slowest_rank_and_fails_a_wrong_sum() -> None:
    check = all_reduce_check([rank(0, seconds=0.01), rank(1, "node2", seconds=0.02)], "cpu", "gloo")
    assert check.status is Status.OK
    assert check.observed == "bus bandwidth 0.84 GB/s (algbw 0.84), 2 ranks, gloo, 16 MiB float32"  # 16 MiB / 0.02 s
    assert check.detail == "slowest: rank 1 on node2"
    wrong = all_reduce_check([rank(0), rank(1, ok=False)], "cuda", "nccl")
    assert wrong.status is Status.FAIL and wrong.observed == "wrong sum on rank(s) 1 of 2"
    assert "NCCL_DEBUG=INFO" in wrong.remedy
    assert all_reduce_check([rank(0, seconds=None)], "cpu", "gloo").observed == "sums right; 1 rank: no bandwidth to measure"


def test_outside_torchrun_says_how_to_start_it() -> None:
    with pytest.raises(InputError, match=r"torchrun --nproc-per-node N -m bootstrap verify --distributed"):
        torchrun_env({}, "verify")


def test_all_reduce_trial_on_a_real_gloo_group_of_one(tmp_path: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1)
    try:
        assert all_reduce_trial(torch, dist, torch.device("cpu"), 0, 1) == (True, None)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed beside this python")
def test_torchrun_two_ranks_one_report_and_one_exit_code(tmp_path: Path) -> None:
    argv = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "bootstrap", "verify", "--distributed",
            "--json", "--prefix", str(tmp_path / "no-env")]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300)
    report = json.loads(done.stdout)  # exactly one JSON document: only rank 0 reports
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["env.prefix"]["status"] == "fail" and checks["env.prefix"]["observed"].startswith("rank 0: ")
    assert "rank 0 fail, rank 1 fail" in checks["env.prefix"]["detail"]
    assert done.returncode == 1  # every rank exits with the aggregate's code, so torchrun does too
    assert checks["dist.same_env"]["status"] == "ok" and checks["dist.same_env"]["observed"].startswith("2 ranks on 1 host")
    reduce = checks["dist.all_reduce"]
    assert reduce["status"] == "ok" and "2 ranks, gloo, 16 MiB float32" in reduce["observed"]
    assert float(reduce["observed"].split()[2]) > 0  # "bus bandwidth X GB/s"
    assert [c["id"] for c in report["checks"]].count("bench") == 1
