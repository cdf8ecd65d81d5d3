"""The kernel-image checks judge the GPUs CUDA_VISIBLE_DEVICES leaves the job; the variant pick judges all."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.pick import Candidate, pick_variant
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import TorchTarget
from bootstrap.compat.visible import visible_gpus
from bootstrap.report import Status

MODELS = {  # name, CC
    "V100": ("Tesla V100-SXM2-32GB", (7, 0)),
    "A100": ("NVIDIA A100-SXM4-80GB", (8, 0)),
    "P100": ("Tesla P100-PCIE-16GB", (6, 0)),
    "K80": ("Tesla K80", (3, 7)),
    "H100": ("NVIDIA H100 80GB HBM3", (9, 0)),
    "RTX5090": ("NVIDIA GeForce RTX 5090", (12, 0)),
}
CU130 = TorchTarget(
    version="2.9.0",
    cuda="13.0",
    variant="cu130",
    source="test",
    arch_list=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),
)
CU126 = TorchTarget(
    version="2.9.0",
    cuda="12.6",
    variant="cu126",
    source="test",
    arch_list=("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
)
MIG_A100 = "MIG-0b7d3c55-1e2f-5a6b-8c9d-aaaaaaaaaa01"


def uuid(index: int) -> str:
    return f"GPU-0b7d3c55-1e2f-4a6b-8c9d-00000000000{index}"


def node(*models: str, driver: str = "580.95.05", cuda: int = 13000) -> DriverFacts:
    gpus = tuple(
        GpuFacts(
            index=i,
            name=MODELS[m][0],
            compute_capability=MODELS[m][1],
            uuid=uuid(i),
            mig_uuids=(MIG_A100,) if m == "A100" else (),
        )
        for i, m in enumerate(models)
    )
    return DriverFacts(driver_version=driver, cuda_driver_version=cuda, gpus=gpus, source="test")


def arch(checks, index):
    return next(c for c in checks if c.id == f"cuda.arch.gpu{index}")


@pytest.mark.parametrize(
    ("value", "judged"),
    [
        (None, [0, 1]),
        ("1", [1]),
        ("0", [0]),
        ("1,0", [0, 1]),
        ("1,7,0", [1]),  # an entry naming no GPU ends the list, as CUDA reads it
        ("1,1", []),  # a repeat empties it
        ("", []),
        ("-1", []),
        (uuid(1)[: 12 + 6], []),  # a prefix both UUIDs share names none
        (uuid(1), [1]),
        (f"{uuid(1)},{uuid(0)}", [0, 1]),
        (MIG_A100, [1]),  # a MIG instance runs its parent's kernels
        (f"MIG-{uuid(1)}/1/0", [1]),  # R450-era MIG names carry the parent's UUID
        ("MIG-0b7d3c55-1e2f-5a6b-8c9d-ffffffffffff", [1]),  # parent unknown: only the A100 can hold MIG
    ],
)
def test_a_v100_the_job_does_not_see_does_not_fail_a_cuda13_run(value, judged) -> None:
    facts = node("V100", "A100")
    checks = evaluate(facts, CU130, visible_gpus(facts.gpus, value, "PCI_BUS_ID"))
    assert arch(checks, 1).status is (Status.OK if 1 in judged else Status.SKIP)
    v100 = arch(checks, 0)
    if 0 in judged:
        assert v100.status is Status.FAIL
    else:
        assert v100.status is Status.SKIP
        assert "would be fail" in v100.detail and "CUDA 13 builds never support CC < 7.5" in v100.detail
        assert "not visible" in v100.observed and "variant pick still judges" in v100.detail
    none_visible = [c for c in checks if c.id == "cuda.arch"]
    assert bool(none_visible) == (not judged)


def test_the_variant_pick_judges_every_gpu_the_driver_lists() -> None:
    facts = node("V100", "A100")
    candidates = [Candidate("cu130", Path("a.lock"), CU130, default=True), Candidate("cu126", Path("b.lock"), CU126)]
    assert pick_variant(facts, candidates).chosen.candidate.name == "cu126"  # the V100 rules cu130 out


# Generated: every node of two or three GPU models x every CUDA_VISIBLE_DEVICES of up to three
# entries x two builds, CUDA counting in nvidia-smi's order (CUDA_DEVICE_ORDER=PCI_BUS_ID). The judged
# GPUs get the all-GPU verdict; the hidden ones a skip naming it.
NODES = [m for n in (1, 2, 3) for m in itertools.combinations_with_replacement(sorted(MODELS), n)]
VALUES = [None, ""] + [",".join(p) for n in (1, 2, 3) for p in itertools.permutations("0123", n)]


@pytest.mark.slow  # the whole generated sweep: CI runs it with the slow ones
@pytest.mark.parametrize("models", NODES, ids="-".join)
def test_judged_gpus_keep_their_verdict_and_hidden_ones_say_it(models) -> None:
    facts = node(*models)
    for target in (CU130, CU126):
        everything = {c.id: c for c in evaluate(facts, target)}
        for value in VALUES:
            visible = visible_gpus(facts.gpus, value, "PCI_BUS_ID")
            checks = {c.id: c for c in evaluate(facts, target, visible)}
            shown = {g.index for g in visible.gpus}
            for gpu in facts.gpus:
                cid = f"cuda.arch.gpu{gpu.index}"
                if gpu.index in shown:  # the remedy offers a build for the job's GPUs, not the node's
                    assert (checks[cid].status, checks[cid].observed) == (
                        everything[cid].status,
                        everything[cid].observed,
                    ), (value, cid)
                else:
                    assert checks[cid].status is Status.SKIP
                    assert checks[cid].detail.startswith(f"would be {everything[cid].status.value}"), (value, cid)
            assert checks["cuda.driver"] == everything["cuda.driver"]


def test_nvml_lists_each_gpus_mig_instances_so_a_mig_uuid_finds_its_parent() -> None:
    import json

    from bootstrap.compat.facts import HostFacts
    from bootstrap.compat.nvml import Nvml
    from bootstrap.compat.probe import Facts
    from tests.fixtures import DATA
    from tests.fixtures.fakes import FakeNvml

    recorded = json.loads((DATA / "nvml" / "h200x8-580.95.05.json").read_text())
    mig = "MIG-5b1c7e2a-0f4d-5c8e-9a61-000000000301"
    recorded["devices"][3].update(
        nvmlDeviceGetMigMode=[1, 1],
        nvmlDeviceGetMaxMigDeviceCount=3,
        nvmlDeviceGetMigDeviceHandleByIndex=[{"error": 6}, {"nvmlDeviceGetUUID": mig}, {"error": 6}],
    )
    recorded["devices"][4].update(nvmlDeviceGetMigMode=[0, 0])
    facts = Nvml(FakeNvml(recorded)).facts()
    assert [g.mig_uuids for g in facts.gpus] == [()] * 3 + [(mig,)] + [()] * 4
    assert all("mig" not in m.lower() for g in facts.gpus for m in g.missing)  # MIG off is not a gap
    saved = Facts(host=HostFacts(cuda_visible_devices=mig), nvidia=facts).to_dict()
    assert "mig_uuids" not in saved["nvidia"]["gpus"][0] and saved["nvidia"]["gpus"][3]["mig_uuids"] == [mig]
    replayed = Facts.from_dict(json.loads(json.dumps(saved)))
    assert replayed.visible().parent.index == 3 and replayed.visible().devices == 1


def test_a_container_started_without_gpus_is_not_picked_a_cpu_build() -> None:
    cpu = TorchTarget(version="2.9.0", cuda=None, variant="cpu", source="test")
    candidates = [Candidate("cu126", Path("a.lock"), CU126, default=True), Candidate("cpu", Path("b.lock"), cpu)]
    assert pick_variant(DriverFacts(), candidates).chosen.candidate.name == "cpu"  # truly no GPU
    signs = DriverFacts(gpu_signs=("/proc/driver/nvidia/gpus/0000:17:00.0",))
    assert pick_variant(signs, candidates).chosen.candidate.name == "cu126"


def test_a_mig_instance_of_an_unknown_parent_is_judged_only_on_gpus_that_can_hold_mig() -> None:
    """MIG exists from compute capability 8.0: beside a V100, a MIG UUID the facts do not place belongs to
    the A100, so only the A100's kernel image is judged; on a node without such a GPU, every GPU is."""
    unknown = "MIG-0b7d3c55-1e2f-5a6b-8c9d-bbbbbbbbbb02"
    mixed = node("V100", "A100")
    shown, others = visible_gpus(mixed.gpus, unknown).split(mixed.gpus)
    assert [g.name for g in shown] == [MODELS["A100"][0]] and [g.name for g in others] == [MODELS["V100"][0]]
    old = node("V100", "P100")
    assert visible_gpus(old.gpus, unknown).split(old.gpus) == (old.gpus, ())
