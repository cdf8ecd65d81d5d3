"""Windows torch builds: one documented arch-list table for a span of releases, no cu118 row in it."""

from __future__ import annotations

import itertools

import pytest

from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import torch_target_from_lock_entry, unlisted_builds
from bootstrap.report import Status

GPUS = [
    ("NVIDIA GeForce RTX 3090", (8, 6)),
    ("NVIDIA GeForce GTX 1080", (6, 1)),
    ("NVIDIA GeForce RTX 4090", (8, 9)),
    ("NVIDIA GeForce RTX 5090", (12, 0)),
    ("Quadro GV100", (7, 0)),
]
DRIVERS = [
    ("516.01", 11070),
    ("522.06", 11080),
    ("528.24", 12000),
    ("537.13", 12020),
    ("572.61", 12080),
    ("581.15", 13000),
]
BUILDS = [f"{row['versions'][-1]}+{v['tag']}" for row in data.TORCH_RELEASES for v in row["variants"]]


def windows(driver, cuda, gpu):
    return DriverFacts(
        os="windows",
        driver_version=driver,
        cuda_driver_version=cuda,
        source="constructed",
        gpus=(GpuFacts(index=0, name=gpu[0], compute_capability=gpu[1]),),
    )


def test_a_windows_cu118_case_names_the_build_whose_windows_kernels_are_unknown() -> None:
    checks = {
        c.id: c
        for c in evaluate(windows("522.06", 11080, GPUS[0]), torch_target_from_lock_entry("2.7.1+cu126", "win-64"))
    }
    remedy = checks["cuda.driver"].remedy
    assert "is known to run on this driver" in remedy and "+cu118" in remedy and "no row for cu118" in remedy
    cu118 = {
        c.id: c
        for c in evaluate(windows("522.06", 11080, GPUS[0]), torch_target_from_lock_entry("2.4.1+cu118", "win-64"))
    }
    assert cu118["cuda.arch.gpu0"].status is Status.SKIP and "no cu118 row" in cu118["cuda.arch.gpu0"].detail
    assert "cu118" not in data.WINDOWS_ARCH_LISTS["sass"]  # not invented: cuda_compat.yml has no such row


@pytest.mark.parametrize("build", BUILDS)
def test_every_windows_verdict_says_which_releases_its_arch_list_was_documented_for(build) -> None:
    target = torch_target_from_lock_entry(build, "win-64")
    for (driver, cuda), gpu in itertools.product(DRIVERS, GPUS):
        facts = windows(driver, cuda, gpu)
        for check in evaluate(facts, target):
            if check.id.startswith("cuda.arch") and check.status is not Status.SKIP:
                assert "documented for" in check.detail and "applied to torch" in check.detail, (build, check)
            if "(windows_x86_64) runs on this driver" in check.remedy:  # 'none runs' only when none may
                assert not unlisted_builds(target, facts), (build, driver, check.remedy)
