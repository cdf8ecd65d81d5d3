"""The pick among an env's torch variants: a case table of hosts x variants -> the variant and why,
then every combination of a few drivers, GPU sets and variant sets held to the pick's promises."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from bootstrap.checks.doctor import fit_check
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.pick import Candidate, pick_variant
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import torch_target_from_lock_entry
from bootstrap.compat.versions import release_key
from bootstrap.report import Status

H200 = ("NVIDIA H200", (9, 0))
RTX3090 = ("NVIDIA GeForce RTX 3090", (8, 6))
RTX5090 = ("NVIDIA GeForce RTX 5090", (12, 0))
GTX1080 = ("NVIDIA GeForce GTX 1080", (6, 1))
V100 = ("Tesla V100-SXM2-32GB", (7, 0))
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0))


def host(driver, cuda, *gpus):
    listed = tuple(GpuFacts(index=i, name=name, compute_capability=cc) for i, (name, cc) in enumerate(gpus))
    return DriverFacts(os="linux", driver_version=driver, cuda_driver_version=cuda, source="test", gpus=listed)


NO_GPU = DriverFacts(reason="no NVIDIA driver found")
UNSEEN = DriverFacts(reason="no NVIDIA driver found", gpu_signs=("/proc/driver/nvidia/gpus/0000:17:00.0",))
R580 = ("580.95.05", 13000)  # CUDA 13.0
R570 = ("570.124.06", 12080)  # CUDA 12.8: too old for CUDA 13 builds
R535 = ("535.183.01", 12020)  # CUDA 12.2: 12.x builds through minor-version compatibility


def variant(name, version, default=False, platform="linux-64"):
    path = Path(f"envs/py310.{name}.conda-lock.yml") if not default else Path("conda-lock.yml")
    return Candidate(name, path, torch_target_from_lock_entry(version, platform), default=default)


def not_locked(name, platform="linux-64"):
    return Candidate(
        name, Path(f"envs/py310.{name}.conda-lock.yml"), None, f"not locked for {platform}", installs=False
    )


CU128 = variant("cu128", "2.10.0+cu128", default=True)
CU126 = variant("cu126", "2.10.0+cu126")
CU130 = variant("cu130", "2.11.0+cu130")
CPU = variant("cpu", "2.10.0+cpu")
CPU_DEFAULT = variant("cpu", "2.10.0+cpu", default=True)
CU128_OTHER = variant("cu128", "2.10.0+cu128")
CU121_OLD = variant("cu121", "2.5.1+cu121")
UNKNOWN_DEFAULT = variant("next", "2.99.0", default=True)  # newer than the packaged tables

# (case id, facts, candidates, the pick (None: none runs), its status, phrases `why` + `remedy` must hold)
CASES = [
    (
        "Pascal: cu128 lacks sm_61, cu126 has it",
        host(*R580, GTX1080),
        [CU128, CU126],
        "cu126",
        Status.OK,
        ["the newest torch that runs fully", "the default cu128 will not run here", "no kernel image"],
    ),
    (
        "driver too old for CUDA 13, fine for 12.8",
        host(*R570, H200),
        [CU128, CU130],
        "cu128",
        Status.OK,
        ["cu128: the newest torch that runs fully"],
    ),
    (
        "R580 runs the CUDA 13 build of a newer torch",
        host(*R580, H200),
        [CU128, CU130],
        "cu130",
        Status.OK,
        ["the default cu128 runs too"],
    ),
    (
        "mixed Volta + Blackwell: cu130 lacks sm_70",
        host(*R580, V100, RTX5090),
        [CU128, CU130],
        "cu128",
        Status.OK,
        ["every GPU"],
    ),
    ("no GPU, a CPU variant", NO_GPU, [CU128, CPU], "cpu", Status.OK, ["a CPU build needs no CUDA libraries"]),
    (
        "no GPU, no CPU variant: the default, not the newest",
        NO_GPU,
        [CU128, CU130],
        "cu128",
        Status.OK,
        ["no CPU build locked", "runs on the CPU"],
    ),
    (
        "no GPU, the default is the CPU build",
        NO_GPU,
        [CPU_DEFAULT, CU128_OTHER],
        "cpu",
        Status.OK,
        ["the default variant is a CPU build"],
    ),
    (
        "GPUs without a driver to ask: the default, not the newest CUDA",
        UNSEEN,
        [CU128, CU130],
        "cu128",
        Status.OK,
        ["the kernel shows NVIDIA GPUs but no driver answers here", "until the driver can be judged"],
    ),
    (
        "GPUs without a driver to ask: no CPU build even as the default",
        UNSEEN,
        [CPU_DEFAULT, CU128_OTHER],
        "cu128",
        Status.OK,
        [],
    ),
    (
        "a GPU: the CPU default will not do",
        host(*R580, H200),
        [CPU_DEFAULT, CU128_OTHER],
        "cu128",
        Status.OK,
        ["the default cpu will not run here", "CPU build"],
    ),
    (
        "only caveats: 535 runs 12.x builds by minor-version compatibility",
        host(*R535, RTX3090),
        [CU128, CU130],
        "cu128",
        Status.WARN,
        ["no variant runs fully here", "cuda.driver", "minor-version compatibility"],
    ),
    (
        "fully running beats a newer torch with a caveat",
        host(*R535, RTX3090),
        [CU128, CU121_OLD],
        "cu121",
        Status.OK,
        ["the default cu128 runs with a caveat"],
    ),
    (
        "a variant not locked for this platform is skipped",
        host(*R580, H200),
        [CU128, not_locked("cu130")],
        "cu128",
        Status.OK,
        [],
    ),
    ("same torch: the default wins the tie", host(*R580, H200), [CU128, CU126], "cu128", Status.OK, []),
    (
        "same torch, no default among them: the newer CUDA",
        host(*R580, H200),
        [CPU_DEFAULT, CU126, CU128_OTHER],
        "cu128",
        Status.OK,
        [],
    ),
    (
        "the tables do not know the default: installed unjudged",
        host(*R580, H200),
        [UNKNOWN_DEFAULT],
        "next",
        Status.SKIP,
        ["not judged", "not in the packaged table"],
    ),
    (
        "an unknown default loses to a known variant that runs",
        host(*R580, H200),
        [UNKNOWN_DEFAULT, CU126],
        "cu126",
        Status.OK,
        ["the default next is not judged"],
    ),
    (
        "none runs: Pascal on cu128 and cu130",
        host(*R580, GTX1080),
        [CU128, CU130],
        None,
        Status.FAIL,
        [
            "no locked variant runs here",
            "cu128: cuda.arch.gpu0",
            "declare a variant with torch==",
            "+cu126",
            "`make lock`",
        ],
    ),
    (
        "none runs: driver R470",
        host("470.182.03", 11040, V100),
        [CU128, CU126],
        None,
        Status.FAIL,
        ["upgrade the NVIDIA driver", "cu118"],
    ),
    (
        "nothing locked for this platform: make env installs nothing",
        host(*R580, H200),
        [not_locked("cu128"), not_locked("cu126")],
        None,
        Status.FAIL,
        ["no variant is locked for this platform", "add it to `platforms:`", "`make lock`"],
    ),
    (
        "a lock without torch installs, unjudged",
        host(*R580, H200),
        [Candidate("", Path("conda-lock.yml"), None, "conda-lock.yml has no torch pip entry for linux-64")],
        None,
        Status.SKIP,
        ["no torch pip entry"],
    ),
    (
        "an env without variants: its only lock",
        host(*R570, H200),
        [Candidate("", Path("conda-lock.yml"), torch_target_from_lock_entry("2.10.0"), default=True)],
        "",
        Status.OK,
        ["conda-lock.yml: the env's only lock, runs here"],
    ),
]


@pytest.mark.parametrize("facts, candidates, name, status, phrases", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pick_table(facts, candidates, name, status, phrases) -> None:
    pick = pick_variant(facts, candidates)
    assert (None if pick.chosen is None else pick.chosen.candidate.name) == name, pick.why
    assert pick.status is status
    text = f"{pick.why} {pick.remedy}"
    for phrase in phrases:
        assert phrase in text, (phrase, text)


def test_others_that_run_are_listed_and_every_verdict_carries_its_reasons() -> None:
    pick = pick_variant(host(*R580, GTX1080), [CU128, CU126, CU121_OLD, not_locked("cu130")])
    assert pick.chosen.candidate.name == "cu126"
    assert [v.candidate.name for v in pick.others] == ["cu121"]
    body = pick.to_dict()
    assert body["chosen"] == "cu126" and body["chosen_lock"] == "envs/py310.cu126.conda-lock.yml"
    assert body["others"] == ["cu121"] and body["status"] == "ok"
    by_name = {v["name"]: v for v in body["variants"]}
    assert by_name["cu128"] == {
        "name": "cu128",
        "lock": "conda-lock.yml",
        "default": True,
        "torch": "2.10.0+cu128",
        "cuda": "12.8",
        "status": "fail",
        "reasons": [by_name["cu128"]["reasons"][0]],
    }
    assert "no kernel image" in by_name["cu128"]["reasons"][0]
    assert by_name["cu130"]["status"] == "skip" and by_name["cu130"]["reasons"] == ["not locked for linux-64"]
    assert by_name["cu126"]["reasons"] == [] and by_name["cu126"]["cuda"] == "12.6"
    lines = pick.lines()
    assert lines[1].startswith("* cu126") and lines[0].startswith("  cu128") and lines[-1] == f"pick: {pick.why}"


def test_a_warn_pick_carries_the_caveats_remedy() -> None:
    pick = pick_variant(host(*R535, RTX3090), [CU128, CU130])
    assert pick.status is Status.WARN and pick.remedy.startswith("cuda.driver: runs through CUDA minor-version")


# --------------------------------------------------------------------------- every combination

DRIVERS = [None, R535, R570, R580, ("470.182.03", 11040)]
GPU_SETS = [(), (H200,), (GTX1080,), (V100, RTX5090), (A100, A100), (RTX3090, GTX1080)]
VARIANT_SETS = [
    (CU128, CU126),
    (CU128, CU130),
    (CU128, CPU),
    (CPU_DEFAULT, CU126, CU128_OTHER),
    (CU128, CU126, CU130, CPU),
    (CU128, not_locked("cu130"), CU121_OLD),
    (UNKNOWN_DEFAULT, CU126),
]


def combinations():
    for driver, gpus, variants in itertools.product(DRIVERS, GPU_SETS, VARIANT_SETS):
        if driver is None and gpus:
            continue  # GPUs come with a driver
        facts = NO_GPU if driver is None else host(*driver, *gpus)
        yield pytest.param(
            facts,
            variants,
            id=f"{driver and driver[0]}-{'+'.join(g[0][-8:] for g in gpus)}-{'+'.join(v.name for v in variants)}",
        )


@pytest.mark.parametrize("facts, candidates", list(combinations()))
def test_every_combination_keeps_the_picks_promises(facts: DriverFacts, candidates) -> None:
    pick = pick_variant(facts, candidates)
    runs = [v for v in pick.verdicts if v.runs]
    chosen = pick.chosen
    if chosen is None:  # none chosen only when none runs and the default could be judged
        assert not runs and pick.remedy and pick.status in (Status.FAIL, Status.SKIP)
        return
    if not chosen.runs:  # the default the tables cannot judge, taken when nothing else runs
        assert chosen.candidate.default and chosen.status is Status.SKIP and not runs
        return
    if any(v.status is Status.OK for v in runs) and facts.gpus:
        assert chosen.status is Status.OK
        newest = max(release_key(v.candidate.target.version) for v in runs if v.status is Status.OK)
        assert release_key(chosen.candidate.target.version) == newest
    if facts.gpus:  # it runs on every GPU the driver lists
        assert not [c for c in chosen.checks if c.id.startswith("cuda.arch.") and c.status is Status.FAIL]
        assert chosen.candidate.target.cuda is not None
    elif any(v.candidate.target is not None and v.candidate.target.cuda is None for v in runs):
        assert chosen.candidate.target.cuda is None  # no GPU: a CPU build when one is locked
    elif any(v.candidate.default for v in runs):
        assert chosen.candidate.default
    assert chosen not in pick.others and set(map(id, pick.others)) == {id(v) for v in runs} - {id(chosen)}


def test_the_star_marks_the_pick_or_the_variant_named() -> None:
    pick = pick_variant(host(*R580, H200), [CU128, CU126])
    assert [line[0] for line in pick.lines()[:-1]] == ["*", " "]
    assert [line[0] for line in pick.lines(starred="cu126")[:-1]] == [" ", "*"]


def test_a_jetson_without_a_lock_is_pointed_at_jetpacks_torch_not_at_locking_aarch64() -> None:
    from dataclasses import replace

    jetson = replace(host(*R580, H200), jetson="R36.4.0")
    pick = pick_variant(jetson, [not_locked("cu128", "linux-aarch64")])
    assert pick.status is Status.FAIL and "made for its JetPack (R36.4.0" in pick.remedy
    assert "platforms:" not in pick.remedy


def test_without_a_gpu_the_pick_agrees_with_lock_torch_whatever_the_driver() -> None:
    """Every driver (none, too old for any tabled CUDA, minor-version compatibility, current) listing no
    GPU x every variant set: `lock.torch` on the default says it runs on the CPU, and so does the pick,
    which takes the default (a CPU build first, one being locked)."""
    drivers = [
        DriverFacts(reason="no NVIDIA driver found"),
        host("390.48", None),
        host("418.67", 10010),
        host("450.36.06", 11000),
        host(*R535),
        host(*R570),
        host(*R580),
    ]
    sets = [[CU128, CU126], [CU128, CU130], [CU128, CPU], [CPU_DEFAULT, CU128_OTHER], [CU128], [CU121_OLD]]
    for facts, candidates in itertools.product(drivers, sets):
        default = next((c for c in candidates if c.default), candidates[0])
        fit = fit_check(default.target, "", evaluate(facts, default.target), "conda-lock.yml", facts)
        pick = pick_variant(facts, candidates)
        assert fit.status is Status.OK and pick.status is Status.OK, (facts.driver_version, pick.why)
        cpu = [c for c in candidates if c.target.cuda is None]
        assert pick.chosen.candidate is (cpu[0] if cpu else default), (facts.driver_version, pick.why)
