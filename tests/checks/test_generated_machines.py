"""Machines nobody recorded: a seeded generator of valid facts files (mixed GPUs from Kepler to
Blackwell, drivers of every series, MIG instances, CUDA_VISIBLE_DEVICES in every form the field
uses, containers, WSL2, Jetson, small hosts, torch builds of every variant or none), each replayed
through `verify` and `doctor` the way a team replays `--save-facts` from a node of its own.

Whatever the machine, what holds for every one: exit 0 or 1 (never 2: the file is valid; never a
traceback), one JSON document, exit 1 exactly when a check fails, and each failing or warning check
says what to do about it.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from bootstrap.cli import main
from tests.fixtures import REPO

LOCK = REPO / "conda-lock.yml"
MACHINES = 150

# (name as NVML gives it, compute capability, memory in MiB): discrete GPUs of each generation.
GPUS = [
    ("Tesla K80", (3, 7), 11441),
    ("Tesla P100-PCIE-16GB", (6, 0), 16280),
    ("NVIDIA GeForce GTX 1080 Ti", (6, 1), 11264),
    ("Tesla V100-SXM2-32GB", (7, 0), 32768),
    ("Tesla T4", (7, 5), 15360),
    ("NVIDIA A100-SXM4-80GB", (8, 0), 81920),
    ("NVIDIA GeForce RTX 3090", (8, 6), 24576),
    ("NVIDIA A10", (8, 6), 23028),
    ("NVIDIA L4", (8, 9), 23034),
    ("NVIDIA GeForce RTX 4090", (8, 9), 24564),
    ("NVIDIA H100 80GB HBM3", (9, 0), 81559),
    ("NVIDIA H200", (9, 0), 143771),
    ("NVIDIA B200", (10, 0), 183359),
    ("NVIDIA GeForce RTX 5090", (12, 0), 32607),
]
# (driver, the CUDA version it reports as NVML's integer): one of each series a cluster may still run.
DRIVERS = [
    ("450.80.02", 11000),
    ("470.256.02", 11040),
    ("525.147.05", 12000),
    ("535.183.01", 12020),
    ("550.127.05", 12040),
    ("560.35.03", 12060),
    ("570.124.06", 12080),
    ("575.57.08", 12090),
    ("580.95.05", 13000),
]
WINDOWS_DRIVERS = [("528.24", 12000), ("566.36", 12070), ("581.29", 13000)]
# (variant, CUDA, arch list) of torch builds as their wheels list them; None: no torch installed.
TORCHES: list[Any] = [
    None,
    ("cpu", None, []),
    ("cu118", "11.8", ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]),
    ("cu126", "12.6", ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]),
    ("cu128", "12.8", ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]),
    ("cu130", "13.0", ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]),
]


def gpu(rng: random.Random, index: int, machine: int) -> dict[str, Any]:
    name, cc, memory = rng.choice(GPUS)
    uuid = f"GPU-{machine:08x}-0000-4000-8000-{index:012x}"
    mig = [f"MIG-{machine:08x}-{index:04x}-4000-8000-{i:012x}" for i in range(rng.choice([0, 0, 0, 2, 7]))]
    healthy = rng.random() > 0.1
    return {
        "index": index,
        "name": name,
        "compute_capability": list(cc),
        "memory_total_mib": memory,
        "memory_used_mib": rng.choice([0, 0, memory // 2, memory - 1]),
        "uuid": uuid,
        "persistence_mode": rng.choice([True, False, None]),
        "ecc_enabled": rng.choice([True, False, None]),
        "retired_pages": 0 if healthy else rng.randint(1, 64),
        "retired_pages_pending": not healthy and rng.random() < 0.5,
        "remapped_rows_pending": rng.choice([False, None]) if healthy else True,
        "remapped_rows_failed": rng.choice([False, None]),
        "missing": [],
        **({"mig_uuids": mig} if mig else {}),
    }


def visible_devices(rng: random.Random, gpus: list[dict[str, Any]]) -> Any:
    """CUDA_VISIBLE_DEVICES as jobs set it: unset, empty, indices (some beyond the GPUs there), a
    UUID, a MIG instance, -1."""
    forms: list[Any] = [None, None, "", "-1", "0", "1,0", "7", "0,0"]
    uuids = [g["uuid"] for g in gpus if g.get("uuid")]
    if uuids:
        forms.append(rng.choice(uuids))
        forms.append(",".join(str(g["index"]) for g in reversed(gpus)))
        migs = [m for g in gpus for m in g.get("mig_uuids", [])]
        if migs:
            forms.append(rng.choice(migs))
    return rng.choice(forms)


def machine(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    kind = rng.choice(["server", "server", "server", "container", "wsl2", "jetson", "no driver"])
    aarch64 = kind == "jetson" or (kind == "server" and rng.random() < 0.15)
    platform = "linux_aarch64" if aarch64 else "linux_x86_64"
    nvidia: dict[str, Any] = {"os": "linux", "source": "nvml", "reason": "", "peers": [], "gpus": []}
    if kind == "no driver":
        nvidia.update(source="", reason="NVML: libnvidia-ml.so.1: cannot open shared object file")
    elif kind == "jetson":
        nvidia.update(
            driver_version="540.4.0",
            cuda_driver_version=12060,
            jetson="R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic, EABI: aarch64",
            gpus=[{"index": 0, "name": "Orin (nvgpu)", "compute_capability": [8, 7], "missing": []}],
        )
    else:
        windows = kind == "wsl2"
        driver, cuda = rng.choice(WINDOWS_DRIVERS if windows else DRIVERS)
        nvidia.update(driver_version=driver, cuda_driver_version=cuda)
        if windows:
            nvidia.update(os="windows", wsl="/proc/sys/kernel/osrelease: 5.15.167.4-microsoft-standard-WSL2")
        nvidia["gpus"] = [gpu(rng, i, seed) for i in range(rng.choice([0, 1, 1, 2, 4, 8]))]
    torch = rng.choice(TORCHES)
    cpus = rng.choice([1, 2, 4, 16, 64, 256])
    host = {
        "cpus_total": cpus,
        "cpus_usable": rng.randint(1, cpus),
        "memory_total_mib": rng.choice([4096, 32768, 1048576]),
        "memory_available_mib": rng.choice([512, 2048, 30000]),
        "shm_total_mib": rng.choice([64, 8192, 65536]),
        "shm_free_mib": rng.choice([1, 64, 8000]),
        "disk_path": "/workspace",
        "disk_free_mib": rng.choice([100, 50000]),
        "nofile_soft": rng.choice([1024, 65536, -1]),
        "nofile_hard": rng.choice([4096, 1048576, -1]),
        "start_method": rng.choice(["fork", "spawn", "forkserver"]),
        "start_method_explicit": rng.random() < 0.3,
        "container_hints": ["/.dockerenv"] if kind == "container" else [],
        "cuda_visible_devices": visible_devices(rng, nvidia["gpus"]),
        "missing": [],
    }
    if kind == "container" and rng.random() < 0.6:  # a pod's or `docker run`'s limits, which cap the figures
        quota = rng.choice([0.5, 1.0, 2.5, 8.0])
        limit = rng.choice([2048, 16384])
        host.update(cpus_quota=quota, cpus_usable=min(host["cpus_usable"], math.ceil(quota)), memory_limit_mib=limit)
        host.update(memory_total_mib=min(host["memory_total_mib"], limit))
        host.update(memory_available_mib=min(host["memory_available_mib"], limit))
    facts: dict[str, Any] = {
        "format": "bootstrap.facts",
        "version": 1,
        "platform": platform,
        "python": "3.10.19",
        "host": host,
        "nvidia": nvidia,
        "torch_reason": "" if torch else "torch is not installed in this interpreter",
    }
    if torch is not None:
        variant, cuda, arch = torch
        facts["torch"] = {
            "version": "2.9.0",
            "variant": variant,
            "cuda": cuda,
            "arch_list": arch if not aarch64 else (["sm_87"] if kind == "jetson" and cuda else arch),
            "cudnn": None,
            "nccl": None,
            "confidence": "high",
            "notes": [],
            "platform": platform,
            "source": "installed torch",
            "unknown": "",
        }
    return facts


def replay(tmp_path: Path, capsys, seed: int, argv: list[str]) -> tuple[int, dict[str, Any]]:
    path = tmp_path / f"machine-{seed}.facts.json"
    path.write_text(json.dumps(machine(seed)))
    capsys.readouterr()
    code = main([*argv, "--json", "--facts", str(path)])
    out, err = capsys.readouterr()
    assert code in (0, 1), f"seed {seed}: exit {code}: {err}"
    return code, json.loads(out)


def assert_actionable(seed: int, code: int, checks: list[dict[str, Any]]) -> None:
    statuses = {c["status"] for c in checks}
    assert statuses <= {"ok", "warn", "fail", "skip"}, f"seed {seed}: {statuses}"
    assert code == (1 if "fail" in statuses else 0), f"seed {seed}: exit {code} with {sorted(statuses)}"
    for check in checks:
        if check["status"] in ("fail", "warn"):
            assert check["remedy"].strip(), f"seed {seed}: {check['id']} {check['status']}s with no remedy: {check}"


@pytest.mark.parametrize("seed", range(MACHINES))
def test_verify_judges_any_machine_and_says_what_to_do(tmp_path: Path, capsys, seed: int) -> None:
    code, report = replay(tmp_path, capsys, seed, ["verify", "--lock", str(LOCK)])
    assert_actionable(seed, code, report["checks"])


@pytest.mark.parametrize("seed", range(0, MACHINES, 5))
def test_doctor_judges_any_machine_and_says_what_to_do(tmp_path: Path, capsys, seed: int) -> None:
    code, report = replay(tmp_path, capsys, seed, ["doctor", "--lock", str(LOCK)])
    assert_actionable(seed, code, report["checks"])


def test_the_machines_span_the_verdicts(tmp_path: Path, capsys) -> None:
    """The generator is no fixed point: its machines pass, and fail each of the fits a node can miss."""
    codes, failed = set(), set()
    for seed in range(MACHINES):
        code, report = replay(tmp_path, capsys, seed, ["verify", "--lock", str(LOCK)])
        codes.add(code)
        failed |= {c["id"].split(".gpu")[0] for c in report["checks"] if c["status"] == "fail"}
    assert codes == {0, 1}
    assert {"cuda.driver", "cuda.arch", "torch.cuda_build", "host.shm"} <= failed, failed


def test_a_machine_in_a_limited_container_says_which_limit_it_read(tmp_path: Path, capsys) -> None:
    limited = [seed for seed in range(MACHINES) if "cpus_quota" in machine(seed)["host"]]
    assert len(limited) >= 5, limited
    for seed in limited[:5]:
        quota = machine(seed)["host"]["cpus_quota"]
        _, report = replay(tmp_path, capsys, seed, ["verify", "--lock", str(LOCK)])
        checks = {c["id"]: c for c in report["checks"]}
        assert f"(a CPU quota of {quota:g})" in checks["host.cpus"]["observed"], checks["host.cpus"]
        assert checks["host.memory"]["observed"].endswith("(cgroup memory limit)"), checks["host.memory"]
