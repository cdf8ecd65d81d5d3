"""CUDA_VISIBLE_DEVICES indices count in CUDA's order, which is nvidia-smi's only under CUDA_DEVICE_ORDER=PCI_BUS_ID.

By default (FASTEST_FIRST) CUDA numbers the fastest GPU 0, so on a node of
several GPU models `CUDA_VISIBLE_DEVICES=1` need not be nvidia-smi's GPU 1:
the kernel-image verdicts must not trust the PCI-order reading there.
"""

from __future__ import annotations

import itertools
import json

import pytest

from bootstrap.checks.nvidia import nvidia_checks
from bootstrap.cli import main
from bootstrap.compat.facts import HostFacts
from bootstrap.compat.probe import Facts, load_facts
from bootstrap.compat.rules import evaluate
from bootstrap.compat.visible import visible_gpus
from bootstrap.report import Status
from tests.compat.test_visible import CU126, CU130, MODELS, node, uuid
from tests.fixtures import REPO

FACTS = REPO / "tests" / "data" / "verify" / "constructed-v100-a100-cvd1-580.95.05.facts.json"
ORDERS = [None, "FASTEST_FIRST", "pci_bus_id", " PCI_BUS_ID"]  # only the documented spelling is trusted
NODES = [m for n in (2, 3) for m in itertools.combinations_with_replacement(sorted(MODELS), n)]


def arch(checks) -> dict:
    return {c.id: c for c in checks if c.id.startswith("cuda.arch.gpu")}


def indices(gpus: int) -> list:
    """CUDA_VISIBLE_DEVICES values for a node of `gpus` GPUs: one or two of its indices and one past
    them, in every order, and every order of all its indices."""
    digits = "0123"[: gpus + 1]
    return [",".join(p) for n in (1, 2) for p in itertools.permutations(digits, n)] + [
        ",".join(p) for p in itertools.permutations(digits[:gpus])
    ]


@pytest.mark.slow  # the whole generated sweep: CI runs it with the slow ones
@pytest.mark.parametrize("models", NODES, ids="-".join)
def test_indices_on_a_mixed_node_without_pci_order_never_hide_a_gpu(models) -> None:
    facts = node(*models)
    is_mixed = len(set(models)) > 1
    for target in (CU130, CU126):
        everything = arch(evaluate(facts, target))
        running = sum(c.status is not Status.FAIL for c in everything.values())
        for value in indices(len(models)):
            pci = arch(evaluate(facts, target, visible_gpus(facts.gpus, value, "PCI_BUS_ID")))
            for order in ORDERS[:3:2]:
                visible = visible_gpus(facts.gpus, value, order)
                checks = arch(evaluate(facts, target, visible))
                if not is_mixed or not visible.devices:
                    assert checks == pci, (value, order)  # one model: every order numbers them alike
                    continue
                assert visible.unordered and visible.uncertain
                for cid, check in checks.items():
                    whole = everything[cid]
                    assert "not visible" not in check.observed, (value, order, cid)  # any GPU may be the one
                    if whole.status is Status.FAIL and visible.devices < len(facts.gpus) and running >= visible.devices:
                        assert check.status is Status.WARN and "may be visible" in check.observed, (value, cid)
                        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in check.remedy and whole.remedy in check.remedy
                    else:
                        assert check == whole, (value, order, cid)


@pytest.mark.parametrize("order", ORDERS, ids=repr)
def test_uuids_name_the_same_gpus_whatever_the_order(order) -> None:
    facts = node("V100", "A100")
    visible = visible_gpus(facts.gpus, uuid(1), order)
    assert not visible.uncertain and [g.index for g in visible.gpus] == [1]
    assert arch(evaluate(facts, CU130, visible))["cuda.arch.gpu0"].status is Status.SKIP


def test_a_failing_gpu_fails_the_run_when_the_job_cannot_miss_it() -> None:
    facts = node("V100", "P100", "A100")  # only the A100 runs CUDA 13; the job gets two of the three
    checks = arch(evaluate(facts, CU130, visible_gpus(facts.gpus, "0,1")))
    assert {c.status for c in checks.values()} == {Status.FAIL, Status.OK}


@pytest.mark.parametrize(
    ("value", "order", "status", "phrase"),
    [
        (None, None, Status.WARN, "cuda:N is not nvidia-smi's GPU N"),
        (None, "FASTEST_FIRST", Status.WARN, "CUDA_DEVICE_ORDER='FASTEST_FIRST'"),
        ("1", None, Status.WARN, "which 1 of the 2 GPU(s) it names is CUDA's guess"),
        (None, "PCI_BUS_ID", None, ""),
        ("1", "PCI_BUS_ID", Status.OK, "1 of 2 GPU(s) (nvidia-smi's 1)"),
        ("0", "PCI_BUS_ID", Status.OK, "1 of 2 GPU(s) (nvidia-smi's 0)"),
        ("1,0", "PCI_BUS_ID", Status.OK, "2 of 2 GPU(s) (nvidia-smi's 1, 0)"),
        (uuid(1), None, Status.OK, "1 of 2 GPU(s) (nvidia-smi's 1)"),
        ("", None, Status.WARN, "leaves CUDA programs none"),
    ],
)
def test_nvidia_visible_warns_where_cuda_numbers_gpus_otherwise(value, order, status, phrase) -> None:
    facts = node("V100", "A100")
    rows = [
        c
        for c in nvidia_checks(facts, HostFacts(cuda_visible_devices=value, cuda_device_order=order))
        if c.id == "nvidia.visible"
    ]
    assert [c.status for c in rows] == ([status] if status else [])
    if status is Status.WARN and phrase != "leaves CUDA programs none":
        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in rows[0].remedy
    assert all(phrase in c.observed for c in rows)


def test_one_gpu_model_needs_no_order() -> None:
    facts = node("A100", "A100")
    rows = [c for c in nvidia_checks(facts, HostFacts(cuda_visible_devices="1")) if c.id == "nvidia.visible"]
    assert [c.status for c in rows] == [Status.OK]


def test_the_order_is_recorded_only_when_set(tmp_path) -> None:
    assert "cuda_device_order" not in HostFacts().to_dict()
    facts = load_facts(FACTS)
    assert facts.host.cuda_device_order == "PCI_BUS_ID" and facts.host.to_dict()["cuda_device_order"] == "PCI_BUS_ID"
    assert Facts.from_dict(json.loads(json.dumps(facts.to_dict()))).visible() == facts.visible()


def test_the_v100_a100_node_without_pci_order_may_run_the_v100(tmp_path, capsys) -> None:
    raw = json.loads(FACTS.read_text())
    del raw["host"]["cuda_device_order"]
    path = tmp_path / "fastest-first.facts.json"
    path.write_text(json.dumps(raw))
    capsys.readouterr()
    code = main(["verify", "--json", "--lock", str(REPO / "conda-lock.yml"), "--facts", str(path)])
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 0 and checks["nvidia.visible"]["status"] == "warn"
    assert checks["cuda.arch.gpu0"]["status"] == "warn" and "may be visible" in checks["cuda.arch.gpu0"]["observed"]
    assert "CUDA 13 builds never support CC < 7.5" in checks["cuda.arch.gpu0"]["remedy"]
