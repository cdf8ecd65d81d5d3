"""A driver older than every driver the tables list is too old, not unknown.

NVML answers `cuda_driver_version` on every driver it runs on, but facts from
`nvidia-smi` (or a file written by hand) may carry only the driver number.
Below the oldest Table 3 row (CUDA 11.0.1: 450.36.06 on Linux, 451.22 on
Windows) no CUDA 11+ binary runs, so every tabled torch build must fail.
"""

from __future__ import annotations

import json

import pytest

from bootstrap.cli import main
from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.rules import check_driver, evaluate
from bootstrap.compat.target import TorchTarget, driver_fit, older_than_tables, suggest_builds
from bootstrap.compat.versions import (
    cuda_supported_by_driver_number,
    cuda_to_int,
    driver_older_than_tables,
    driver_tuple,
    minor_version_floor,
)
from bootstrap.report import Status
from tests.fixtures import REPO

V100 = GpuFacts(index=0, name="Tesla V100-SXM2-32GB", compute_capability=(7, 0))
FACTS = REPO / "tests" / "data" / "verify" / "rtx3090-535.183.01.facts.json"


def oldest(os_name: str) -> str:
    """The oldest driver number the tables list for an OS series."""
    column = "windows" if os_name == "windows" else "linux"
    return min((row[column] for row in data.TOOLKIT_DRIVERS if driver_tuple(row[column])), key=driver_tuple)


def below(driver: str) -> list:
    """Driver numbers just and far below `driver` (the major, the minor, the patch each one less)."""
    parts = driver_tuple(driver)
    found = {f"{parts[0] - 1}.99", f"{parts[0] - 32}.67", "340.108", "1.0"}
    if parts[1] > 0:
        found.add(".".join(map(str, (parts[0], parts[1] - 1) + parts[2:])))
    if len(parts) > 2 and parts[2] > 0:
        found.add(f"{parts[0]}.{parts[1]}.{parts[2] - 1:02d}")
    return sorted(found, key=driver_tuple)


OLD = [(driver, os_name) for os_name in ("linux", "windows") for driver in below(oldest(os_name))]
BUILDS = [
    (release["release"], variant["tag"], variant["cuda"])
    for release in data.TORCH_RELEASES
    for variant in release["variants"]
]


def target(release: str, tag: str, cuda: str, os_name: str) -> TorchTarget:
    return TorchTarget(
        version=f"{release}.0",
        cuda=cuda,
        variant=tag,
        arch_list=("sm_70", "sm_80", "sm_90"),
        platform="windows_x86_64" if os_name == "windows" else "linux_x86_64",
        source="test",
    )


def facts(driver: str, os_name: str, **more) -> DriverFacts:
    return DriverFacts(os=os_name, driver_version=driver, cuda_driver_version=None, gpus=(V100,), source="test", **more)


def test_the_oldest_rows_are_those_of_cuda_11() -> None:
    assert oldest("linux") == "450.36.06" and oldest("windows") == "451.22"


@pytest.mark.parametrize(("driver", "os_name"), OLD, ids=[f"{os}-{d}" for d, os in OLD])
@pytest.mark.parametrize(("release", "tag", "cuda"), BUILDS, ids=[f"{r}+{t}" for r, t, _ in BUILDS])
def test_a_driver_below_every_row_fails_every_tabled_build(driver, os_name, release, tag, cuda) -> None:
    host = facts(driver, os_name)
    build = target(release, tag, cuda, os_name)
    check = check_driver(host, build)
    floor, _ = minor_version_floor(cuda_to_int(cuda) // 1000, os_name)
    assert check.status is Status.FAIL, check
    assert "older than any CUDA 11.0 driver" in check.observed
    assert f">= {floor}" in check.remedy and "no torch build in the packaged table" in check.remedy
    assert driver_fit(host, cuda_to_int(cuda)) is Status.FAIL
    assert suggest_builds([(7, 0)], build, host) == []


@pytest.mark.parametrize("os_name", ["linux", "windows"])
def test_the_oldest_row_itself_is_judged_by_the_tables(os_name) -> None:
    driver = oldest(os_name)
    assert not driver_older_than_tables(driver, os_name)
    assert cuda_supported_by_driver_number(driver, os_name) == 11000
    check = check_driver(facts(driver, os_name), target("2.8", "cu128", "12.8", os_name))
    assert check.status is Status.FAIL and "CUDA 11.0 (at least" in check.observed


@pytest.mark.parametrize(
    "host",
    [
        DriverFacts(driver_version=None, cuda_driver_version=None, gpus=(V100,), reason="nvidia-smi: no driver number"),
        facts("418.67", "linux", jetson="R32 (release), REVISION: 7.1"),
    ],
    ids=["no-driver-number", "jetson"],
)
def test_an_unknown_driver_stays_a_skip_with_its_reason(host) -> None:
    assert not older_than_tables(host)
    assert check_driver(host, target("2.8", "cu128", "12.8", "linux")).status is Status.SKIP
    assert driver_fit(host, 12080) is Status.OK


def test_a_cuda_older_than_the_tables_is_not_judged_by_them() -> None:
    assert driver_fit(facts("418.67", "linux"), 10020) is Status.OK  # torch cu102: no CUDA 10 rows to judge by


def test_a_reported_cuda_still_decides() -> None:
    host = DriverFacts(driver_version="418.67", cuda_driver_version=10010, gpus=(V100,), source="test")
    assert not older_than_tables(host)
    assert check_driver(host, target("2.8", "cu128", "12.8", "linux")).status is Status.FAIL


def test_doctor_refuses_the_lock_on_a_418_driver_without_a_reported_cuda(tmp_path, capsys) -> None:
    raw = json.loads(FACTS.read_text())
    raw["nvidia"].update(driver_version="418.67", cuda_driver_version=None)
    path = tmp_path / "r418.facts.json"
    path.write_text(json.dumps(raw))
    capsys.readouterr()
    code = main(["doctor", "--json", "--lock", str(REPO / "conda-lock.yml"), "--facts", str(path)])
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 1
    assert checks["cuda.driver"]["status"] == "fail" and ">= 525.60.13" in checks["cuda.driver"]["remedy"]
    assert checks["lock.torch"]["status"] == "fail" and "runs here" not in checks["lock.torch"]["observed"]
    assert "CUDA < 11.0" in checks["nvidia.driver"]["observed"]


def test_every_check_of_an_old_driver_is_a_verdict_not_a_crash() -> None:
    for driver, os_name in OLD:
        assert evaluate(facts(driver, os_name), target("2.10", "cu128", "12.8", os_name))
