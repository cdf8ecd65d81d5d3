"""cuda-compat beside a GPU it refuses (GeForce, TITAN) or may refuse (workstation boards).

Generated: every Linux driver of the toolkit table x every newer CUDA a
cuda-compat package could report over it x every CUDA of the tabled torch
builds. The remedy never asks for a driver the host already has: with
cuda-compat off the driver's own CUDA decides, and the upgrade offered is
the one that fully supports the build (Table 3), or the floor where the
driver is below it.
"""

from __future__ import annotations

import itertools
import re

import pytest

from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.forward import REFUSED, UNSURE, board_support, compat_in_use
from bootstrap.compat.rules import check_driver, evaluate
from bootstrap.compat.target import TorchTarget, driver_fit
from bootstrap.compat.versions import cuda_from_int, cuda_to_int, driver_tuple, full_support_driver
from bootstrap.compat.visible import visible_gpus
from bootstrap.report import Status

DRIVERS = sorted({row["linux"] for row in data.TOOLKIT_DRIVERS if driver_tuple(row["linux"])}, key=driver_tuple)
CUDAS = sorted({cuda_to_int(row["cuda"]) // 10 * 10 for row in data.TOOLKIT_DRIVERS})
WHEELS = sorted(
    {variant["cuda"] for release in data.TORCH_RELEASES for variant in release["variants"]}, key=cuda_to_int
)
UPGRADE = re.compile(r">= ([0-9]{3}(?:\.[0-9]+)+)")  # driver numbers (3-digit branch), not CUDA versions


def host(driver: str, cuda: int, name: str) -> DriverFacts:
    return DriverFacts(
        driver_version=driver,
        cuda_driver_version=cuda,
        source="test",
        gpus=(GpuFacts(index=0, name=name, compute_capability=(8, 6)),),
    )


def build(cuda: str) -> TorchTarget:
    return TorchTarget(version="2.10.0", cuda=cuda, arch_list=("sm_86",), source="test")


CASES = [
    (driver, cuda)
    for driver in DRIVERS
    for cuda in CUDAS
    if compat_in_use(host(driver, cuda, "NVIDIA GeForce RTX 3090")) is not None
]


def test_the_generated_cases_cover_drivers_above_and_below_the_floors() -> None:
    assert len(CASES) > 100 and {d.split(".")[0] for d, _ in CASES} >= {"470", "535", "550"}


@pytest.mark.parametrize(("driver", "cuda"), CASES, ids=[f"{d}-cc{cuda_from_int(c)}" for d, c in CASES])
def test_a_geforce_under_cuda_compat_is_offered_only_drivers_it_lacks(driver, cuda) -> None:
    facts = host(driver, cuda, "NVIDIA GeForce RTX 3090")
    native = compat_in_use(facts)
    for wheel in WHEELS:
        check = check_driver(facts, build(wheel))
        assert check.status is Status.FAIL and "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE" in check.remedy
        assert "take cuda-compat off LD_LIBRARY_PATH" in check.remedy
        offered = UPGRADE.findall(check.remedy)
        assert all(driver_tuple(number) > driver_tuple(driver) for number in offered), (wheel, check.remedy)
        fit = driver_fit(DriverFacts(driver_version=driver, cuda_driver_version=native), cuda_to_int(wheel))
        full, _ = full_support_driver(cuda_to_int(wheel), "linux")
        if fit is Status.OK:
            assert not offered and "runs CUDA" in check.remedy
        elif fit is Status.WARN:
            assert "minor-version compatibility" in check.remedy and (full is None or f">= {full}" in check.remedy)
        else:
            assert "minor-version floor" in check.remedy


def test_the_reported_case_names_570_26_not_525_60_13() -> None:
    check = check_driver(host("535.183.01", 12080, "NVIDIA GeForce RTX 3090"), build("12.8"))
    assert ">= 570.26" in check.remedy and "525.60.13" not in check.remedy


@pytest.mark.parametrize(
    ("name", "support"),
    [
        ("NVIDIA GeForce RTX 3090", REFUSED),
        ("NVIDIA GeForce GTX 1080", REFUSED),
        ("NVIDIA TITAN RTX", REFUSED),
        ("NVIDIA TITAN V", REFUSED),
        ("NVIDIA GeForce RTX 5090", REFUSED),
        ("NVIDIA RTX A2000 12GB", UNSURE),
        ("NVIDIA RTX A6000", UNSURE),
        ("Quadro RTX 8000", UNSURE),
        ("Quadro GV100", UNSURE),
        ("Quadro P5000", UNSURE),
        ("NVIDIA RTX 6000 Ada Generation", UNSURE),
        ("NVIDIA RTX 4000 SFF Ada Generation", UNSURE),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", UNSURE),
        ("NVIDIA T1000", UNSURE),
        ("NVIDIA T400 4GB", UNSURE),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", None),
        ("NVIDIA A100-SXM4-80GB", None),
        ("NVIDIA A40", None),
        ("NVIDIA A10", None),
        ("NVIDIA L40S", None),
        ("NVIDIA H200", None),
        ("Tesla T4", None),
        ("Tesla V100-SXM2-32GB", None),
        ("NVIDIA B200", None),
        ("Orin (nvgpu)", None),
    ],
)
def test_which_boards_forward_compatibility_refuses_or_may_refuse(name, support) -> None:
    assert board_support(name) == support
    check = check_driver(host("535.183.01", 12080, name), build("12.8"))
    assert check.status is {REFUSED: Status.FAIL, UNSURE: Status.WARN, None: Status.OK}[support]
    if support == UNSURE:
        assert "select NGC Server Ready RTX SKUs" in check.remedy and name in check.remedy
        assert ">= 570.26" in check.remedy and "525.60.13" not in check.remedy


def test_a_refused_gpu_beside_a_data_center_one_still_fails() -> None:
    facts = DriverFacts(
        driver_version="535.183.01",
        cuda_driver_version=12080,
        source="test",
        gpus=(
            GpuFacts(index=0, name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),
            GpuFacts(index=1, name="NVIDIA RTX A6000", compute_capability=(8, 6)),
            GpuFacts(index=2, name="NVIDIA GeForce RTX 3090", compute_capability=(8, 6)),
        ),
    )
    check = check_driver(facts, build("12.8"))
    assert check.status is Status.FAIL and "GeForce RTX 3090" in check.remedy


def test_an_unsure_board_that_the_driver_fails_anyway_keeps_the_failure() -> None:
    check = check_driver(host("535.183.01", 12080, "NVIDIA RTX A2000 12GB"), build("13.0"))
    assert check.status is Status.FAIL and ">= 580.65.06" in check.remedy


def test_only_the_gpus_cuda_visible_devices_leaves_the_job_refuse_cuda_compat() -> None:
    """Every value of CUDA_VISIBLE_DEVICES over an A100, an RTX A6000 and a GeForce (PCI bus order):
    the GeForce fails cuda-compat only when the job sees it, the A6000 warns only then."""
    facts = DriverFacts(
        driver_version="535.183.01",
        cuda_driver_version=12080,
        source="test",
        gpus=(
            GpuFacts(index=0, name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),
            GpuFacts(index=1, name="NVIDIA RTX A6000", compute_capability=(8, 6)),
            GpuFacts(index=2, name="NVIDIA GeForce RTX 3090", compute_capability=(8, 6)),
        ),
    )
    target = TorchTarget(version="2.10.0", cuda="12.8", arch_list=("sm_80", "sm_86"), source="test")
    values = [",".join(map(str, order)) for count in (1, 2, 3) for order in itertools.permutations(range(3), count)]
    for value in values:
        check = next(
            c for c in evaluate(facts, target, visible_gpus(facts.gpus, value, "PCI_BUS_ID")) if c.id == "cuda.driver"
        )
        seen = {int(i) for i in value.split(",")}
        expected = Status.FAIL if 2 in seen else Status.WARN if 1 in seen else Status.OK
        assert check.status is expected, (value, check)
    assert check_driver(facts, target).status is Status.FAIL  # the variant pick: every GPU the driver lists
