"""A Jetson is a GPU host with or without NVML: its torch is NVIDIA's build for its JetPack.

L4T R35 and older have no NVML, so the facts list no GPU and no driver, only
the L4T release (`jetson`). Doctor and verify must neither call that CPU mode
nor pass a CPU torch there, and both point at NVIDIA's PyTorch for Jetson
wheels rather than at `make env`, whose PyPI aarch64 builds do not run a
Jetson's GPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from bootstrap.checks.doctor import fit_check
from bootstrap.checks.torch import device_checks
from bootstrap.cli import main
from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.pick import Candidate, pick_variant
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import TorchTarget, find_release, torch_target_from_lock_entry, variant_arch_list
from bootstrap.compat.versions import IGPU_CCS, cuda_to_int, kernel_for
from bootstrap.report import Status, worst
from tests.fixtures import REPO

WHEELS = "NVIDIA's PyTorch for Jetson wheels"
RELEASES = [
    "R32 (release), REVISION: 7.4, GCID: 33514132, BOARD: t210ref, EABI: aarch64",
    "R35 (release), REVISION: 5.0, GCID: 35550185, BOARD: t186ref, EABI: aarch64",
    "R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic, EABI: aarch64",
]
ORIN = GpuFacts(index=0, name="Orin (nvgpu)", compute_capability=(8, 7))
NO_NVML = "no NVIDIA driver found (NVML: NVML library not found; nvidia-smi: not found on PATH)"


def hosts(release: str) -> list:
    """The same Jetson without NVML (L4T R35 and older) and with it (R36)."""
    return [
        DriverFacts(jetson=release, reason=NO_NVML),
        DriverFacts(driver_version="540.4.0", cuda_driver_version=12060, gpus=(ORIN,), jetson=release, source="nvml"),
    ]


CPU_BUILDS = [torch_target_from_lock_entry(v, "linux-aarch64") for v in ("2.4.1", "2.8.0", "2.10.0", "2.10.0+cpu")]
CPU_BUILDS += [
    TorchTarget(version="2.8.0", cuda=None, variant="cpu", platform="linux_aarch64", source="installed torch")
]
JETPACK_BUILD = TorchTarget(
    version="2.1.0", cuda="11.4", arch_list=("sm_72", "sm_87"), platform="linux_aarch64", source="installed torch"
)


def by_id(checks) -> dict:
    return {c.id: c for c in checks}


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r[:3])
@pytest.mark.parametrize("target", CPU_BUILDS, ids=lambda t: f"{t.label}{'-locked' if t.locked else ''}")
def test_a_cpu_torch_on_a_jetson_fails_and_points_at_jetpacks_torch(release, target) -> None:
    for facts in hosts(release):
        checks = evaluate(facts, target)
        build = by_id(checks)["torch.cuda_build"]
        assert build.status is Status.FAIL and WHEELS in build.remedy and release in build.remedy
        assert "make env" not in build.remedy and "--index-url" not in build.remedy
        fit = fit_check(target, "", checks, "lock [linux-aarch64]", facts)
        assert fit.status is Status.FAIL and "runs on the CPU" not in fit.observed and WHEELS in fit.remedy


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r[:3])
def test_a_cuda_torch_on_a_jetson_without_nvml_is_not_cpu_mode(release) -> None:
    facts = hosts(release)[0]
    for target in (JETPACK_BUILD, torch_target_from_lock_entry("2.10.0", "linux-64")):
        checks = by_id(evaluate(facts, target))
        for cid in ("cuda.driver", "cuda.arch"):
            assert checks[cid].status is Status.SKIP and f"Jetson ({release})" in checks[cid].observed
            assert "CPU mode" not in checks[cid].observed and "no NVIDIA GPU" != checks[cid].observed
        fit = fit_check(target, "", list(checks.values()), "lock", facts)
        assert fit.status is Status.SKIP and "not judged on this Jetson" in fit.observed and WHEELS in fit.detail


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r[:3])
def test_the_pick_on_a_jetson_without_nvml_takes_no_cpu_build(release) -> None:
    facts = hosts(release)[0]
    cpu = Candidate("cpu", Path("cpu.lock"), CPU_BUILDS[-2], default=True)
    cuda = Candidate("cu128", Path("cu128.lock"), torch_target_from_lock_entry("2.10.0", "linux-64"))
    only_cpu = pick_variant(facts, [cpu])
    assert only_cpu.chosen is None and WHEELS in only_cpu.remedy and "declare a variant" not in only_cpu.remedy
    both = pick_variant(facts, [cpu, cuda])
    assert both.chosen is not None and both.chosen.candidate.name == "cu128" and "Jetson" in both.why


def test_verify_on_a_recorded_r35_jetson_with_pypi_cpu_torch(capsys) -> None:
    path = REPO / "tests" / "data" / "verify" / "constructed-jetson-r35-cpu-torch.facts.json"
    capsys.readouterr()
    code = main(["verify", "--json", "--lock", str(REPO / "conda-lock.yml"), "--facts", str(path)])
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 1 and checks["torch.cuda_build"]["status"] == "fail"
    assert WHEELS in checks["torch.cuda_build"]["remedy"] and "make env" not in checks["torch.cuda_build"]["remedy"]
    assert "Jetson" in checks["cuda.driver"]["observed"] and "Jetson" in checks["cuda.arch"]["observed"]


def jetson_torch(available: bool, count: int):
    cuda = SimpleNamespace(is_available=lambda: available, device_count=lambda: count)
    return SimpleNamespace(cuda=cuda, version=SimpleNamespace(cuda="11.4"))


@pytest.mark.parametrize(("available", "count", "status"), [(False, 0, Status.FAIL), (True, 0, Status.FAIL)])
def test_verify_inside_the_env_asks_torch_on_a_jetson_without_nvml(available, count, status) -> None:
    checks = by_id(device_checks(jetson_torch(available, count), hosts(RELEASES[1])[0], JETPACK_BUILD, environ={}))
    first = checks["torch.cuda_available"] if not available else checks["torch.device_count"]
    assert first.status is status and WHEELS in first.remedy
    assert worst(checks.values()) is Status.FAIL and "CPU mode" not in " ".join(c.detail for c in checks.values())


def test_no_remedy_on_a_jetson_offers_a_pypi_build_without_its_kernels() -> None:
    """Every Jetson GPU, reporting every CUDA of the toolkit table, under every aarch64 build of the
    torch table: a build offered has SASS for the GPU in the packaged aarch64 arch list; none of PyPI's
    server (SBSA) builds whose arch list the table lacks is offered to try."""
    cudas = sorted({cuda_to_int(row["cuda"]) // 10 * 10 for row in data.TOOLKIT_DRIVERS})
    locks = [f"{r['versions'][-1]}+{v['tag']}" for r in data.TORCH_RELEASES for v in r["variants"]]
    offered = 0
    for cc in sorted(IGPU_CCS):
        for cuda in cudas[::2]:
            gpu = GpuFacts(index=0, name="Jetson GPU", compute_capability=cc)
            facts = DriverFacts(
                driver_version="540.4.0", cuda_driver_version=cuda, gpus=(gpu,), jetson=RELEASES[2], source="nvml"
            )
            for lock in locks[::2]:
                for check in evaluate(facts, torch_target_from_lock_entry(lock, "linux-aarch64")):
                    assert "the packaged linux_aarch64 arch lists have no row" not in check.remedy, (cc, cuda, lock)
                    for pin, tag in re.findall(r"torch==([0-9.]+)\+(cu[0-9]+)", check.remedy):
                        variant = next(v for v in find_release(pin)["variants"] if v["tag"] == tag)
                        arch = variant_arch_list(variant, "linux_aarch64") or ()
                        assert kernel_for(cc, arch, cuda_to_int(variant["cuda"]))[0], (cc, cuda, lock, check)
                        offered += 1
    assert offered  # Thor (11.0) runs the CUDA 13 aarch64 builds' sm_110
