"""On a node of several GPU models, the build a kernel-image remedy offers runs on every GPU of the job.

Generated: every pair of GPU models below x every tabled torch build as the
lock. Wherever a `cuda.arch.gpuN` row fails, the build its remedy names must
carry SASS for every GPU the job runs (not just the failing one), or the
remedy must say that no single build does.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from bootstrap.checks.doctor import fit_check
from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.pick import Candidate, pick_variant
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import find_release, suggest_builds, torch_target_from_lock_entry, variant_arch_list
from bootstrap.compat.versions import cuda_to_int, kernel_for
from bootstrap.compat.visible import visible_gpus
from bootstrap.report import Status

MODELS = {
    "K80": (3, 7),
    "P100": (6, 0),
    "GTX1080": (6, 1),
    "V100": (7, 0),
    "T4": (7, 5),
    "A100": (8, 0),
    "RTX3090": (8, 6),
    "L4": (8, 9),
    "H100": (9, 0),
    "B200": (10, 0),
    "RTX5090": (12, 0),
}
PAIRS = list(itertools.combinations(sorted(MODELS, key=MODELS.get), 2))
LOCKS = [
    f"{release['versions'][-1]}+{variant['tag']}" for release in data.TORCH_RELEASES for variant in release["variants"]
]
SUGGESTED = re.compile(r"lock torch==(\S+)\+(cu\d+) ")


def node(*models: str) -> DriverFacts:
    gpus = tuple(GpuFacts(index=i, name=name, compute_capability=MODELS[name]) for i, name in enumerate(models))
    return DriverFacts(driver_version="580.95.05", cuda_driver_version=13000, gpus=gpus, source="test")


def covers(pin: str, tag: str, ccs) -> bool:
    variant = next(v for v in find_release(pin)["variants"] if v["tag"] == tag)
    arch = [a for a in variant_arch_list(variant, "linux_x86_64") or () if a.startswith("sm_")]
    return all(kernel_for(cc, arch, cuda_to_int(variant["cuda"]))[0] for cc in ccs)


@pytest.mark.parametrize("pair", PAIRS, ids="+".join)
def test_a_remedy_offers_a_build_for_every_gpu_of_the_job_or_says_none_is(pair) -> None:
    facts = node(*pair)
    ccs = [MODELS[m] for m in pair]
    one_build = any(covers(lock.split("+")[0], lock.split("+")[1], ccs) for lock in LOCKS)
    for lock in LOCKS:
        target = torch_target_from_lock_entry(lock)
        for check in evaluate(facts, target):
            if not check.id.startswith("cuda.arch.gpu") or check.status is not Status.FAIL:
                continue
            if "newer than the driver" in check.observed:
                continue
            offered = SUGGESTED.search(check.remedy)
            if offered:
                assert covers(offered.group(1), offered.group(2), ccs), (lock, check.id, check.remedy)
            elif not one_build and suggest_builds([ccs[int(check.id[-1])]], target, facts):
                assert "no single torch build in the packaged table has SASS for every GPU here" in check.remedy


@pytest.mark.parametrize("pair", PAIRS, ids="+".join)
def test_a_gpu_the_job_does_not_see_does_not_narrow_the_remedy(pair) -> None:
    """With CUDA_VISIBLE_DEVICES naming one GPU (in nvidia-smi's order), the job's GPU alone is judged;
    a remedy for it need not carry the other GPU's kernels."""
    facts = node(*pair)
    for lock in LOCKS:
        checks = {
            c.id: c
            for c in evaluate(facts, torch_target_from_lock_entry(lock), visible_gpus(facts.gpus, "1", "PCI_BUS_ID"))
        }
        offered = SUGGESTED.search(checks["cuda.arch.gpu1"].remedy)
        if checks["cuda.arch.gpu1"].status is Status.FAIL and offered:
            assert covers(offered.group(1), offered.group(2), [MODELS[pair[1]]])


def test_p100_beside_b200_is_offered_no_cu126() -> None:
    checks = {c.id: c for c in evaluate(node("P100", "B200"), torch_target_from_lock_entry("2.10.0"))}
    remedy = checks["cuda.arch.gpu0"].remedy
    assert "no single torch build" in remedy and "CC 6.0, 10.0" in remedy and "nvidia-smi -L" in remedy
    assert not SUGGESTED.search(remedy)


def test_v100_beside_b200_is_offered_the_build_that_runs_both() -> None:
    checks = {c.id: c for c in evaluate(node("V100", "B200"), torch_target_from_lock_entry("2.11.0"))}
    offered = SUGGESTED.search(checks["cuda.arch.gpu0"].remedy)
    assert offered and covers(offered.group(1), offered.group(2), [(7, 0), (10, 0)])
    assert "and the other GPUs here (CC 10.0)" in checks["cuda.arch.gpu0"].remedy


def test_the_pick_remedy_carries_the_same_answer() -> None:
    lock = torch_target_from_lock_entry("2.10.0")
    pick = pick_variant(node("P100", "B200"), [Candidate("cu128", Path("a.lock"), lock, default=True)])
    assert pick.chosen is None and "no single torch build" in pick.remedy


def test_a_remedy_shared_by_several_checks_is_given_once_naming_them_all() -> None:
    """Nodes of 1-8 GPUs of one model, and of two models, under builds that fail them: lock.torch and the
    pick give each remedy once, naming every GPU it fixes."""
    models = [("NVIDIA GeForce GTX 1080", (6, 1)), ("Tesla K80", (3, 7))]
    for count, lock in itertools.product(range(1, 9), ("2.10.0+cu128", "2.11.0+cu130")):
        for mixed in (False, True):
            gpus = tuple(
                GpuFacts(index=i, name=models[mixed and i % 2][0], compute_capability=models[mixed and i % 2][1])
                for i in range(count)
            )
            facts = DriverFacts(driver_version="580.95.05", cuda_driver_version=13000, gpus=gpus, source="test")
            target = torch_target_from_lock_entry(lock)
            checks = evaluate(facts, target)
            fit = fit_check(target, "", checks, "conda-lock.yml", facts)
            pick = pick_variant(facts, [Candidate("", Path("conda-lock.yml"), target, default=True)])
            for remedy in (fit.remedy, pick.remedy):
                for check in checks:
                    if check.id.startswith("cuda.arch.gpu") and check.remedy:
                        assert remedy.count(check.remedy) == 1, (count, lock, mixed, remedy)
            same = [
                c.id
                for c in checks
                if c.id.startswith("cuda.arch.gpu") and c.status is Status.FAIL and c.remedy == checks[-1].remedy
            ]
            assert fit.remedy.count(", ".join([same[0]] + [i.rpartition(".")[2] for i in same[1:]]) + ": ") == 1
