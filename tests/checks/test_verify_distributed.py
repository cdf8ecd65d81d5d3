"""`verify --distributed`: the cross-rank rules on recorded rank answers, then real torchrun with gloo on this CPU."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bootstrap.checks.distributed import all_reduce_check, all_reduce_trial, bus_bandwidth_gb_s, same_env_check
from bootstrap.errors import InputError
from bootstrap.report import Status
from bootstrap.torchrun import torchrun_env
from tests.fixtures import REPO

TORCHRUN = Path(sys.executable).with_name("torchrun")


PACKAGES = "a1b2c3d4e5f6 (31 conda, 24 pip, linux-64)"


def rank(
    number: int,
    host: str = "node1",
    packages: str = PACKAGES,
    driver: str = "570.124.06",
    ok: bool = True,
    seconds: float = 0.1,
) -> dict:
    return {
        "rank": number,
        "host": host,
        "checks": [],
        "facts": {"packages": packages, "driver": driver},
        "all_reduce_ok": ok,
        "all_reduce_s": seconds,
    }


def test_ranks_that_run_the_same_env_agree() -> None:
    check = same_env_check([rank(1, "node2"), rank(0)])
    assert check.status is Status.OK
    assert check.observed == (
        f"2 rank(s) on 2 host(s) agree: the packages installed {PACKAGES}, the NVIDIA driver 570.124.06"
    )


def test_a_rank_with_other_packages_fails_and_is_named() -> None:
    other = "ffff00000000 (29 conda, 24 pip, linux-64)"
    check = same_env_check([rank(0), rank(1), rank(2, "node3", packages=other, driver="535.183.01")])
    assert check.status is Status.FAIL
    assert f"rank 2 on node3 {other}" in check.observed and "rank 2 on node3 535.183.01" in check.observed
    assert "make env" in check.remedy


def test_another_driver_alone_is_a_warning() -> None:
    check = same_env_check([rank(0), rank(1, "node2", driver="535.183.01")])
    assert check.status is Status.WARN
    assert check.observed == "the NVIDIA driver: rank 0 570.124.06, rank 1 on node2 535.183.01"
    no_driver = same_env_check([rank(0), rank(1, "node2", driver=None)])
    assert no_driver.observed == "the NVIDIA driver: rank 0 570.124.06, rank 1 on node2 none seen"


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
    alone = all_reduce_check([rank(0, seconds=None)], "cpu", "gloo")
    assert alone.observed == "sums right; one rank: no bandwidth to measure"


def test_outside_torchrun_says_how_to_start_it() -> None:
    with pytest.raises(InputError, match=r"torchrun --nproc-per-node N -m bootstrap verify --distributed"):
        torchrun_env({}, "verify")
    with pytest.raises(InputError, match="MASTER_ADDR/MASTER_PORT not set"):  # RANK set by hand, not torchrun
        torchrun_env({"RANK": "0", "WORLD_SIZE": "1"}, "verify")


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE: 0 is outside >= 1"),
        ({"RANK": "x"}, "RANK: 'x' is not an integer"),
        ({"RANK": "3"}, "RANK: 3 is outside 0..1"),  # would wait at the rendezvous forever
        ({"RANK": "-1"}, "RANK: -1 is outside 0..1"),
        ({"MASTER_PORT": "abc"}, "MASTER_PORT: 'abc' is not an integer"),
        ({"LOCAL_RANK": "2"}, "LOCAL_RANK: 2 is outside 0..1"),
        ({"MASTER_ADDR": ""}, "MASTER_ADDR not set: not started by torchrun"),
        ({"MASTER_ADDR": "no.such.host.invalid"}, "MASTER_ADDR: 'no.such.host.invalid' does not resolve to an address"),
        (
            {"MASTER_ADDR": "127.0.0.1:5"},
            r"MASTER_ADDR: '127.0.0.1:5' does not resolve .*; its port goes in MASTER_PORT",
        ),
    ],
)
def test_rank_variables_torchrun_would_never_set_are_refused(changes: dict, words: str) -> None:
    environ = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }
    assert torchrun_env(environ) == {"rank": 1, "world_size": 2, "local_rank": 1, "local_world_size": 2}
    with pytest.raises(InputError, match=words):
        torchrun_env({**environ, **changes})


@pytest.mark.parametrize(
    ("local_rank", "gpus", "agent", "device"),
    [
        (0, 8, True, 0),
        (5, 8, True, 5),
        (0, 1, True, 0),
        (1, 1, True, None),  # torchrun --nproc-per-node 2 on one GPU: both ranks would share it
        (3, 2, False, None),
        (1, 1, False, 0),  # srun --gpus-per-task=1, a Kubernetes device plugin: each task its own GPU
        (7, 1, False, 0),
    ],
)
def test_a_rank_runs_on_its_local_rank_or_on_the_one_gpu_its_task_was_given(local_rank, gpus, agent, device) -> None:
    from bootstrap.torchrun import gpu_of_rank

    environ = {"TORCHELASTIC_RUN_ID": "a1b2c3"} if agent else {}
    if device is None:
        with pytest.raises(InputError, match=f"LOCAL_RANK {local_rank} but {gpus} GPU"):
            gpu_of_rank(local_rank, gpus, environ)
    else:
        assert gpu_of_rank(local_rank, gpus, environ) == device


def test_verify_with_one_gpu_per_task_checks_the_gpu_the_task_sees(monkeypatch) -> None:
    import torch
    import torch.distributed as dist

    from bootstrap.checks import distributed
    from bootstrap.checks.verify import VerifyOptions

    class Checked(Exception):
        pass

    def run_verify(options):
        raise Checked(options.gpu)

    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.setattr(distributed, "init_process_group", lambda *args: None)
    monkeypatch.setattr(dist, "destroy_process_group", lambda *args: None)
    monkeypatch.setattr(distributed, "run_verify", run_verify)
    environ = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "3",
        "LOCAL_WORLD_SIZE": "4",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }
    with pytest.raises(Checked) as checked:
        distributed.run_verify_distributed(VerifyOptions(), lambda result: None, environ)
    assert checked.value.args == (0,) and current == [0]


def test_all_reduce_trial_on_a_real_gloo_group_of_one(tmp_path: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1)
    try:
        assert all_reduce_trial(torch, dist, torch.device("cpu"), 0, 1) == (True, None)
    finally:
        dist.destroy_process_group()


def by_hand(monkeypatch, port: int, addr: str = "127.0.0.1") -> None:
    """The rank variables as srun or a user sets them: no torchrun agent, so rank 0 listens on MASTER_PORT."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": addr, "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)


@pytest.mark.parametrize("verb", ["verify", "bench"])
def test_a_master_port_in_use_is_one_line(tmp_path: Path, monkeypatch, capsys, verb: str) -> None:
    """A real gloo rendezvous on a port another socket listens on: c10d's DistNetworkError, a traceback before."""
    from bootstrap.cli import main

    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        by_hand(monkeypatch, port)
        capsys.readouterr()
        argv = (
            ["verify", "--distributed", "--prefix", str(tmp_path / "no-env")]
            if verb == "verify"
            else ["bench", "--distributed", "--device", "cpu", "--budget", "30", "--out", str(tmp_path / "bench")]
        )
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: MASTER_PORT: {port} is in use on this host, so rank 0 cannot listen on it "
        "(set MASTER_PORT to a free port, or pass torchrun --master-port PORT)\n"
    )


def test_a_master_addr_that_names_no_host_is_one_line_not_a_silent_wait(tmp_path: Path) -> None:
    """Rank 0 of a group started by hand: the rendezvous retried the name for its whole timeout (600 s)."""
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "no.such.host.invalid", "MASTER_PORT": "29521"}
    done = subprocess.run(
        [sys.executable, "-m", "bootstrap", "verify", "--distributed", "--prefix", str(tmp_path / "no-env")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: MASTER_ADDR: 'no.such.host.invalid' does not resolve to an address: ")
    assert len(done.stderr.splitlines()) == 1 and done.stdout == ""


def test_a_resolver_that_never_answers_is_given_up_on(monkeypatch) -> None:
    """getaddrinfo(3) has no timeout: a resolver that never answers (faked, as no test host has one) would hold
    the run as long as the rendezvous."""
    from bootstrap import torchrun

    released = threading.Event()
    monkeypatch.setattr(torchrun.socket, "getaddrinfo", lambda *args, **kwargs: released.wait(60))
    monkeypatch.setattr(torchrun, "RESOLVE_S", 1.0)
    environ = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "node1", "MASTER_PORT": "29500"}
    try:
        with pytest.raises(
            InputError, match="'node1' does not resolve to an address: no answer from the resolver in 1 s"
        ):
            torchrun_env(environ)
    finally:
        released.set()


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed beside this python")
def test_torchrun_two_ranks_one_report_and_one_exit_code(tmp_path: Path) -> None:
    argv = [
        str(TORCHRUN),
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "bootstrap",
        "verify",
        "--distributed",
        "--json",
        "--prefix",
        str(tmp_path / "no-env"),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300)
    report = json.loads(done.stdout)  # exactly one JSON document: only rank 0 reports
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["env.prefix"]["status"] == "fail" and checks["env.prefix"]["observed"].startswith("rank 0: ")
    assert "rank 0 fail, rank 1 fail" in checks["env.prefix"]["detail"]
    assert done.returncode == 1  # every rank exits with the aggregate's code, so torchrun does too
    assert checks["dist.same_env"]["status"] == "ok" and checks["dist.same_env"]["observed"].startswith(
        "2 rank(s) on 1 host"
    )
    assert [r["rank"] for r in report["extra"]["ranks"]] == [0, 1]
    reduce = checks["dist.all_reduce"]
    assert reduce["status"] == "ok" and "2 ranks, gloo, 16 MiB float32" in reduce["observed"]
    assert float(reduce["observed"].split()[2]) > 0  # "bus bandwidth X GB/s"
    assert [c["id"] for c in report["checks"]].count("bench") == 1


def test_rank_facts_digest_every_package_of_the_install_record(tmp_path: Path) -> None:
    from bootstrap.checks.distributed import rank_facts
    from bootstrap.checks.verify import VerifyResult
    from bootstrap.prefix import InstallRecord, write_install_record

    def facts(torch_sha: str) -> dict:
        (tmp_path / "conda-meta").mkdir(exist_ok=True)
        write_install_record(
            tmp_path,
            record=InstallRecord(
                lock_path="conda-lock.yml",
                env="py310",
                platform="linux-64",
                content_hash="same-inputs",
                generation="1",
                bootstrap_version="0",
                installed_at="",
                conda={"python": "aa"},
                pip={"torch": {"version": "2.10.0", "sha256": torch_sha}},
                conda_meta={},
            ),
        )
        return rank_facts(
            VerifyResult(checks=(), prefix=tmp_path, lock_path=None, inside=False, facts=None, facts_source="this host")
        )

    first, same, other = facts("11"), facts("11"), facts("22")
    assert first == same and first["packages"].endswith("(1 conda, 1 pip, linux-64)")
    assert other["packages"] != first["packages"]  # the same lock inputs, another torch wheel


@pytest.mark.slow  # two interpreters and a rendezvous
def test_a_rank_that_goes_away_mid_bench_is_one_line_on_the_others(tmp_path: Path) -> None:
    """Rank 1 joins the group and exits (a crash, a Ctrl-C of its own): rank 0, waiting at its first phase
    barrier, gets gloo's "Connection closed by peer", a traceback before and no report either way."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "LOCAL_WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "PYTHONPATH": str(REPO),
    }
    env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    rank0 = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bootstrap",
            "bench",
            "--distributed",
            "--device",
            "cpu",
            "--budget",
            "30",
            "--quiet",
            "--out",
            str(tmp_path / "bench"),
        ],
        cwd=REPO,
        env={**env, "RANK": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    gone = (
        "import os, datetime, torch.distributed as dist\n"
        "dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=60))\nos._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", gone], env={**env, "RANK": "1"}, timeout=120, check=True)
    try:
        out, err = rank0.communicate(timeout=120)
    finally:
        rank0.kill()
    assert rank0.returncode == 1, err
    assert err.startswith(
        "error: rank 0: another rank of the job went away (interrupted, or crashed: its own "
        "output says why), so this one stopped without a report: "
    ), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err and out == ""
