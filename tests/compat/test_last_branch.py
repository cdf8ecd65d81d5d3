"""A driver upgrade a remedy offers never goes past the last driver branch of a GPU the host has.

Generated: each pre-Turing GPU model, alone and beside newer ones, on the
newest Linux driver of every tabled branch up to its last, under a build of every CUDA the
torch table has. Every driver number offered in a cuda.* remedy is of the
oldest GPU's last branch (R470 for Kepler, R580 for Maxwell, Pascal and
Volta) or older; where a build needs more, the remedy says no driver runs
both and offers the build the driver runs.
"""

from __future__ import annotations

import re

from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import torch_target_from_lock_entry
from bootstrap.compat.upgrade import LAST_BRANCHES, branch_cuda
from bootstrap.compat.versions import cuda_to_int, driver_tuple
from bootstrap.report import Status

OLD = {"Tesla K80": (3, 7), "Tesla M60": (5, 2), "Tesla P100": (6, 0), "Tesla V100": (7, 0)}
NEW = {"NVIDIA H100": (9, 0), "NVIDIA Rubin": (10, 7)}  # one every driver knows, one none of these does
BRANCH_OF = {(3, 7): 470, (5, 2): 580, (6, 0): 580, (7, 0): 580}
DRIVERS = {}  # the newest Linux driver of each branch, with the CUDA it reports
for row in data.TOOLKIT_DRIVERS:
    number = driver_tuple(row["linux"])
    if number and (number[0] not in DRIVERS or number > driver_tuple(DRIVERS[number[0]][0])):
        DRIVERS[number[0]] = (row["linux"], cuda_to_int(row["cuda"]) // 10 * 10)
BRANCHES = sorted(DRIVERS)
DRIVERS = {key: DRIVERS[key] for key in BRANCHES[::-2] + [470, 580]}  # every other branch, and the last ones
LOCKS = {}  # one build of each CUDA, the newest release that has it
for release in data.TORCH_RELEASES:
    for variant in release["variants"]:
        LOCKS[variant["cuda"]] = f"{release['versions'][-1]}+{variant['tag']}"
OFFERED = re.compile(r">= ([0-9]{3}(?:\.[0-9]+)+)")  # driver numbers (3-digit branch), not CUDA versions
REPORTS = re.compile(r"one that reports CUDA >= ([0-9]+\.[0-9]+)")


def test_the_reference_names_the_last_branches() -> None:
    text = data.CAVEATS["r580_last_for_pre_turing"]["text"]
    assert "R580 driver series is the last to support Maxwell, Pascal and Volta" in text
    assert "R470 was the last for Kepler" in text
    assert LAST_BRANCHES == {"Kepler": 470, "Maxwell": 580, "Pascal": 580, "Volta": 580}
    assert (branch_cuda(470), branch_cuda(580)) == (11040, 13000)


def test_no_remedy_offers_a_driver_past_the_last_branch_of_a_gpu_here() -> None:
    judged = capped = 0
    for old, cc in OLD.items():
        branch = BRANCH_OF[cc]
        for others in [()] + [(name,) for name in NEW]:
            models = {old: cc, **{name: NEW[name] for name in others}}
            gpus = tuple(
                GpuFacts(index=i, name=name, compute_capability=c) for i, (name, c) in enumerate(models.items())
            )
            for driver, cuda in (row for key, row in DRIVERS.items() if key <= branch):  # newer ones drop it
                facts = DriverFacts(driver_version=driver, cuda_driver_version=cuda, gpus=gpus, source="test")
                for lock in LOCKS.values():
                    for check in evaluate(facts, torch_target_from_lock_entry(lock)):
                        if not check.id.startswith("cuda.") or check.status not in (Status.FAIL, Status.WARN):
                            continue
                        judged += 1
                        where = (old, others, driver, lock, check.id, check.remedy)
                        assert all(driver_tuple(n)[0] <= branch for n in OFFERED.findall(check.remedy)), where
                        assert all(cuda_to_int(c) <= branch_cuda(branch) for c in REPORTS.findall(check.remedy)), where
                        capped += "no NVIDIA driver" in check.remedy
    assert judged > 1000 and capped > 100


def test_a_pascal_beside_a_rubin_is_told_no_driver_runs_both() -> None:
    facts = DriverFacts(
        driver_version="580.95.05",
        cuda_driver_version=13000,
        source="test",
        gpus=(
            GpuFacts(index=0, name="Tesla P100", compute_capability=(6, 0)),
            GpuFacts(index=1, name="NVIDIA Rubin", compute_capability=(10, 7)),
        ),
    )
    checks = {c.id: c for c in evaluate(facts, torch_target_from_lock_entry("2.10.0+cu126"))}
    assert checks["cuda.arch.gpu1"].status is Status.FAIL
    assert (
        "no NVIDIA driver runs both the Tesla P100 (CC 6.0, Pascal) and the NVIDIA Rubin"
        in checks["cuda.arch.gpu1"].remedy
    )
