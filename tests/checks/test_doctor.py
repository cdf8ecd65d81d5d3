"""`bootstrap doctor`: host facts (recorded NVML answers, recorded facts files) against the lock's torch build.

The committed lock's torch 2.10.0 linux-64 entry is the PyPI default wheel:
CUDA 12.8, SASS sm_70..sm_120. Doctor must run without torch: one test runs
it in a subprocess whose import system refuses `torch`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap.checks.doctor import DoctorOptions, run_doctor
from bootstrap.cli import main
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.probe import load_facts, probe_gpus, save_facts
from bootstrap.errors import InputError
from bootstrap.report import Status, from_json
from tests.fixtures import REPO
from tests.fixtures.fakes import FakeNvml, missing_binary_runner

LOCK = REPO / "conda-lock.yml"
FACTS = REPO / "tests" / "data" / "verify"
H200 = FACTS / "h200x8-580.95.05.facts.json"
RTX3090 = FACTS / "rtx3090-535.183.01.facts.json"


def by_id(checks) -> dict:
    return {c.id: c for c in checks}


def doctor_json(capsys, *args: str) -> tuple:
    capsys.readouterr()
    code = main(["doctor", "--json", "--lock", str(LOCK), *args])
    envelope = json.loads(capsys.readouterr().out)
    return code, envelope, by_id(from_json(envelope))


# --------------------------------------------------------------------------- recorded machines


def test_h200_node_runs_the_locked_torch(capsys) -> None:
    code, envelope, checks = doctor_json(capsys, "--facts", str(H200))
    assert code == 0 and envelope["kind"] == "doctor"
    assert checks["nvidia.driver"].status is Status.OK
    assert "580.95.05" in checks["nvidia.driver"].observed and "CUDA 13.0" in checks["nvidia.driver"].observed
    for index in range(8):
        assert checks[f"nvidia.gpu{index}"].status is Status.OK
        assert "NVIDIA H200, CC 9.0" in checks[f"nvidia.gpu{index}"].observed
        assert checks[f"cuda.arch.gpu{index}"].status is Status.OK
        assert "runs sm_90" in checks[f"cuda.arch.gpu{index}"].observed
    assert checks["cuda.driver"].status is Status.OK
    fit = checks["lock.torch"]
    assert fit.status is Status.OK and "torch 2.10.0 (CUDA 12.8)" in fit.observed and "runs here" in fit.observed
    assert envelope["extra"]["target"]["cuda"] == "12.8" and envelope["extra"]["platform"] == "linux-64"
    assert checks.pop("lock.system").status is Status.SKIP  # recorded before doctor recorded the C library
    assert all(c.status is Status.OK for c in checks.values())


def test_rtx3090_on_r535_runs_with_minor_version_compatibility(capsys) -> None:
    code, _, checks = doctor_json(capsys, "--facts", str(RTX3090))
    assert "CUDA 12.2" in checks["nvidia.driver"].observed
    driver = checks["cuda.driver"]
    assert driver.status is Status.WARN and "minor-version compatibility" in driver.remedy
    assert ">= 570.26" in driver.remedy  # the driver for full CUDA 12.8 support
    assert checks["cuda.arch.gpu0"].status is Status.OK and "sm_86" in checks["cuda.arch.gpu0"].observed
    assert checks["lock.torch"].status is Status.WARN and "runs with caveats" in checks["lock.torch"].observed
    assert checks["nvidia.gpu0"].status is Status.WARN and "nvidia-persistenced" in checks["nvidia.gpu0"].remedy
    # The recorded workstation runs in Docker with its 64 MB /dev/shm and a soft ulimit -n of 1024.
    assert checks["host.shm"].status is Status.FAIL and "--shm-size=" in checks["host.shm"].remedy
    assert checks["host.nofile"].status is Status.WARN and "ulimit -n 65536" in checks["host.nofile"].remedy
    assert code == 1


@pytest.mark.parametrize("facts", [H200, RTX3090], ids=lambda p: p.name.split("-")[0])
def test_recorded_facts_match_the_nvml_recordings(facts: Path) -> None:
    recorded = load_facts(facts)
    name = facts.name.replace(".facts.json", ".json")
    replayed = probe_gpus(nvml=FakeNvml.load(name), runner=missing_binary_runner, os_name="linux")
    assert recorded.nvidia == replayed


def test_live_probe_with_recorded_nvml_gives_the_same_verdicts() -> None:
    live = run_doctor(
        DoctorOptions(lock_path=LOCK, platform="linux-64"),
        nvml=FakeNvml.load("h200x8-580.95.05.json"),
        runner=missing_binary_runner,
    )
    recorded = run_doctor(DoctorOptions(lock_path=LOCK, facts_path=H200))

    def driver_and_gpus(checks):  # this machine's own C library and limits are not the recorded node's
        return [c for c in checks if not c.id.startswith("host.") and c.id != "lock.system"]

    assert driver_and_gpus(live.checks) == driver_and_gpus(recorded.checks)


def test_save_facts_then_facts_reproduces_the_verdicts(tmp_path: Path, capsys) -> None:
    saved = tmp_path / "facts.json"
    first = run_doctor(
        DoctorOptions(lock_path=LOCK, platform="linux-64", save_facts=saved),
        nvml=FakeNvml.load("rtx3090-535.183.01.json"),
        runner=missing_binary_runner,
    )
    assert json.loads(saved.read_text())["format"] == "bootstrap.facts"
    _, envelope, _ = doctor_json(capsys, "--facts", str(saved))  # another invocation, through the CLI
    assert [c.to_dict() for c in first.checks] == envelope["checks"]
    assert not [p for p in tmp_path.iterdir() if p.name != "facts.json"]  # atomic: no temp file left


def test_saved_facts_go_through_a_link_into_a_fifo_and_never_replace_either(tmp_path: Path) -> None:
    import os
    import threading

    target, link, fifo = tmp_path / "team" / "facts.json", tmp_path / "link.json", tmp_path / "fifo"
    target.parent.mkdir()
    target.write_text("old")
    link.symlink_to(target)
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    for path in (link, fifo):
        run_doctor(
            DoctorOptions(lock_path=LOCK, platform="linux-64", save_facts=path),
            nvml=FakeNvml.load("rtx3090-535.183.01.json"),
            runner=missing_binary_runner,
        )
    reader.join(timeout=10)
    assert link.is_symlink() and json.loads(target.read_text())["format"] == "bootstrap.facts"
    assert fifo.is_fifo() and json.loads(received[0])["format"] == "bootstrap.facts"


def test_an_unwritable_save_facts_path_fails_before_any_probe(tmp_path: Path, capsys) -> None:
    def no_probe(*args, **kwargs):
        raise AssertionError("probed before checking --save-facts")

    (tmp_path / "file").write_text("")
    for path, words in (
        (tmp_path, "is a directory"),
        (tmp_path / "file" / "x.json", "is not a directory"),
        (tmp_path / "missing" / "x.json", "does not exist"),
    ):
        with pytest.raises(InputError, match=words):
            run_doctor(DoctorOptions(lock_path=LOCK, save_facts=path), nvml=no_probe, runner=no_probe)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_facts_that_cannot_be_saved_are_one_line() -> None:
    """/dev/full answers every write with ENOSPC, as a full disk does: one DiskFullError naming the flag."""
    from bootstrap.errors import DiskFullError

    with pytest.raises(DiskFullError, match=r"^no space left on device while writing /dev/full .*--save-facts"):
        run_doctor(
            DoctorOptions(lock_path=LOCK, platform="linux-64", save_facts=Path("/dev/full")),
            nvml=FakeNvml.load("rtx3090-535.183.01.json"),
            runner=missing_binary_runner,
        )


def _gpu0(facts: dict) -> dict:
    return facts["nvidia"]["gpus"][0]


EDITED_FACTS = {
    "cc as text": (
        lambda f: _gpu0(f).update(compute_capability="8.6"),
        "nvidia.gpus[0].compute_capability: expected a list of 2 integers, got '8.6'",
    ),
    "cc cut": (
        lambda f: _gpu0(f).update(compute_capability=[8]),
        "nvidia.gpus[0].compute_capability: expected a list of 2 integers",
    ),
    "cc impossible": (
        lambda f: _gpu0(f).update(compute_capability=[-1, 99]),
        "nvidia.gpus[0].compute_capability[0]: -1 is negative",
    ),
    "cuda as text": (
        lambda f: f["nvidia"].update(cuda_driver_version="12.2"),
        "nvidia.cuda_driver_version: expected an integer, got '12.2'",
    ),
    "cuda impossible": (
        lambda f: f["nvidia"].update(cuda_driver_version=12),
        "nvidia.cuda_driver_version: 12 is not a CUDA version",
    ),
    "driver banana": (
        lambda f: f["nvidia"].update(driver_version="banana"),
        "nvidia.driver_version: 'banana' is not a driver version",
    ),
    "gpus of text": (lambda f: f["nvidia"].update(gpus=["a"]), "nvidia.gpus[0]: expected an object, got 'a'"),
    "gpu without name": (lambda f: f["nvidia"].update(gpus=[{"index": 0}]), "nvidia.gpus[0].name: missing"),
    "torch as text": (lambda f: f.update(torch="2.10"), "torch: expected an object, got '2.10'"),
    "torch cuda banana": (
        lambda f: f.update(torch={"version": "2.10.0", "cuda": "banana"}),
        "torch.cuda: 'banana' is not a CUDA version",
    ),
    "torch version banana": (
        lambda f: f.update(torch={"version": "banana", "cuda": None}),
        "torch.version: 'banana' is not a torch version",
    ),
    "memory as text": (
        lambda f: f["host"].update(memory_total_mib="24GB"),
        "host.memory_total_mib: expected an integer, got '24GB'",
    ),
    "negative cpus": (lambda f: f["host"].update(cpus_usable=-4), "host.cpus_usable: -4 is negative"),
    "unknown field": (lambda f: f["host"].update(gpu_count=8), "host.gpu_count: unknown field"),
    "no host": (lambda f: f.update(host=None), "host: expected an object, got None"),
    "peer status as text": (
        lambda f: f["nvidia"].update(peers=[{"a": 0, "b": 1, "read": "yes"}]),
        "nvidia.peers[0].read: expected an integer, got 'yes'",
    ),
    "peer of itself": (
        lambda f: f["nvidia"].update(peers=[{"a": 0, "b": 0}]),
        "nvidia.peers[0]: a pair is two GPUs, the lower index first (a < b), got 0-0",
    ),
    "peer not a gpu": (
        lambda f: f["nvidia"].update(peers=[{"a": 0, "b": 9}]),
        "nvidia.peers[0]: GPU 9 is not among the GPUs (0)",
    ),
    "peer twice": (
        lambda f: f["nvidia"].update(
            gpus=[*f["nvidia"]["gpus"], {**f["nvidia"]["gpus"][0], "index": 1, "uuid": "GPU-1"}],
            peers=[{"a": 0, "b": 1}, {"a": 0, "b": 1}],
        ),
        "nvidia.peers[1]: the pair 0-1 is given twice",
    ),
    "peer status 99": (
        lambda f: f["nvidia"].update(peers=[{"a": 0, "b": 1, "read": 99}]),
        "nvidia.peers[0].read: 99 is not an NVML P2P status (0-6)",
    ),
    "peer topology 45": (
        lambda f: f["nvidia"].update(peers=[{"a": 0, "b": 1, "topology": 45}]),
        "nvidia.peers[0].topology: 45 is not an NVML topology level (0, 10, 20, 30, 40, 50)",
    ),
    "visible devices as a list": (
        lambda f: f["host"].update(cuda_visible_devices=[0, 1]),
        "host.cuda_visible_devices: expected a string, got [0, 1]",
    ),
}


@pytest.mark.parametrize("case", EDITED_FACTS, ids=list(EDITED_FACTS))
def test_an_edited_facts_file_names_the_field(tmp_path: Path, capsys, case: str) -> None:
    edit, words = EDITED_FACTS[case]
    facts = json.loads(RTX3090.read_text())
    edit(facts)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    assert main(["doctor", "--facts", str(path), "--lock", str(LOCK)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: {words}") and err.count("\n") == 1, err
    assert "--save-facts" in err


def test_unlimited_open_files_read_back() -> None:
    facts = json.loads(RTX3090.read_text())
    facts["host"]["nofile_soft"] = facts["host"]["nofile_hard"] = -1
    from bootstrap.compat.probe import Facts

    assert Facts.from_dict(facts).host.nofile_soft == -1


# --------------------------------------------------------------------------- what to change


def write_facts(path: Path, gpus, driver: str, cuda: int) -> Path:
    facts = load_facts(H200)
    nvidia = DriverFacts(os="linux", driver_version=driver, cuda_driver_version=cuda, gpus=tuple(gpus), source="nvml")
    save_facts(type(facts)(facts.host, nvidia, None, "", facts.python, facts.platform), path)
    return path


def test_the_host_is_sized_for_the_gpus_cuda_visible_devices_leaves_the_job(tmp_path: Path, capsys) -> None:
    """A job given 16 CPUs and 2 of a node's 8 H200s (Slurm, `docker --gpus`): its CPUs and
    /dev/shm are judged for 2 GPUs, as the affinity already limits the CPUs to the job's."""
    raw = json.loads(H200.read_text())
    raw["host"].update(cpus_usable=16, memory_total_mib=600_000, memory_available_mib=500_000)
    facts = tmp_path / "job.json"
    for visible, cpus, memory, loaders in (
        (None, Status.WARN, Status.WARN, "8 loader(s) x 1 workers"),
        ("6,7", Status.OK, Status.OK, "2 loader(s) x 6 workers"),
        ("", Status.OK, Status.OK, "1 loader(s) x 14 workers"),
    ):
        raw["host"]["cuda_visible_devices"] = visible
        facts.write_text(json.dumps(raw))
        _, _, checks = doctor_json(capsys, "--facts", str(facts))
        assert (checks["host.cpus"].status, checks["host.memory"].status) == (cpus, memory)
        assert checks["host.shm"].detail.startswith(f"need = {loaders} x prefetch 2")
        assert checks["nvidia.gpu0"].status is Status.OK  # every GPU of the node is still listed and judged
    assert checks["host.cpus"].expected == "any (no GPU to feed, CUDA_VISIBLE_DEVICES='')"
    raw["host"]["cuda_visible_devices"] = "6,7"
    facts.write_text(json.dumps(raw))
    _, _, checks = doctor_json(capsys, "--facts", str(facts))
    assert checks["host.cpus"].expected == ">= 3 per GPU (6 for 2 GPU(s), CUDA_VISIBLE_DEVICES='6,7')"
    assert "total >= GPU memory (287542 MiB)" in checks["host.memory"].expected
    assert checks["nvidia.visible"].observed == "CUDA_VISIBLE_DEVICES='6,7': 2 of 8 GPU(s) (nvidia-smi's 6, 7)"
    assert checks["nvidia.p2p"].observed == "1 GPU pair peer-to-peer, 1 over NVLink, CUDA_VISIBLE_DEVICES='6,7'"
    capsys.readouterr()
    assert main(["verify", "--facts", str(facts), "--json", "--lock", str(LOCK)]) == 0  # the same rows on replay
    replayed = by_id(from_json(json.loads(capsys.readouterr().out)))
    assert {cid: replayed[cid] for cid in ("nvidia.visible", "nvidia.p2p", "host.cpus")} == {
        cid: checks[cid] for cid in ("nvidia.visible", "nvidia.p2p", "host.cpus")
    }
    raw["host"]["cuda_visible_devices"] = "MIG-4f3e2d1c-aaaa-bbbb-cccc-000000000001"
    facts.write_text(json.dumps(raw))
    _, _, checks = doctor_json(capsys, "--facts", str(facts))
    assert checks["host.cpus"].expected.startswith(">= 3 per GPU (3 for 1 GPU(s), CUDA_VISIBLE_DEVICES='MIG-")
    assert checks["nvidia.visible"].observed.endswith(": one MIG instance of 8 GPU(s)")
    assert "nvidia.p2p" not in checks


def test_a_cuda_visible_devices_that_leaves_no_gpu_is_a_warning(tmp_path: Path, capsys) -> None:
    raw = json.loads(H200.read_text())
    facts = tmp_path / "job.json"
    for value in ("8,0", "0,1,0", "gpu-5b1c7e2a", "GPU-"):
        raw["host"]["cuda_visible_devices"] = value
        facts.write_text(json.dumps(raw))
        _, _, checks = doctor_json(capsys, "--facts", str(facts))
        hidden = checks["nvidia.visible"]
        assert (
            hidden.status is Status.WARN
            and hidden.observed == f"CUDA_VISIBLE_DEVICES={value!r} leaves CUDA programs none of the 8 GPU(s)"
        )
        assert "`unset CUDA_VISIBLE_DEVICES`, or name GPUs by index (0-7)" in hidden.remedy
    raw["host"]["cuda_visible_devices"] = None
    facts.write_text(json.dumps(raw))
    assert "nvidia.visible" not in doctor_json(capsys, "--facts", str(facts))[2]


def test_this_hosts_cuda_visible_devices_reaches_doctor_and_verify(monkeypatch, tmp_path: Path) -> None:
    from bootstrap.checks.verify import VerifyOptions, run_verify

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b03,4")
    h200 = FakeNvml.load("h200x8-580.95.05.json")
    live = by_id(
        run_doctor(DoctorOptions(lock_path=LOCK, platform="linux-64"), nvml=h200, runner=missing_binary_runner).checks
    )
    inside = by_id(
        run_verify(VerifyOptions(prefix=tmp_path / "none", bench=False), nvml=h200, runner=missing_binary_runner).checks
    )
    for checks in (live, inside):
        # a UUID list stops at the index
        assert checks["nvidia.visible"].observed.endswith(": 1 of 8 GPU(s) (nvidia-smi's 3)")
        assert "nvidia.p2p" not in checks  # one GPU: no pair
        assert checks["host.cpus"].expected.startswith(">= 3 per GPU (3 for 1 GPU(s), CUDA_VISIBLE_DEVICES='GPU-5b")


# --------------------------------------------------------------------------- peer-to-peer between GPUs


def pcie_box(across_sockets: object = 3, nvlink: object = 5) -> FakeNvml:
    """Four PCIe GPUs, two under each CPU socket: NVML's P2P answer within a socket is OK (0), across
    sockets `across_sockets` (3: the PCIe topology does not carry it); no NVLink (5: not supported)."""
    recorded = json.loads((REPO / "tests" / "data" / "nvml" / "h200x8-580.95.05.json").read_text())
    template = recorded["devices"][0]
    devices = []
    for index in range(4):
        peers = [j for j in range(4) if j != index]
        same = {j: index // 2 == j // 2 for j in peers}
        devices.append(
            {
                **template,
                "nvmlDeviceGetName": "NVIDIA L40S",
                "nvmlDeviceGetUUID": f"GPU-{index:08d}",
                "nvmlDeviceGetP2PStatus": {str(j): {"0": 0 if same[j] else across_sockets, "2": nvlink} for j in peers},
                "nvmlDeviceGetTopologyCommonAncestor": {str(j): 10 if same[j] else 50 for j in peers},
            }
        )
    return FakeNvml({**recorded, "nvmlDeviceGetCount": 4, "devices": devices})


def p2p(nvml: FakeNvml, visible=None):
    from bootstrap.checks.nvidia import nvidia_checks
    from bootstrap.compat.facts import HostFacts

    nvidia = probe_gpus(nvml=nvml, runner=missing_binary_runner, os_name="linux")
    return by_id(nvidia_checks(nvidia, HostFacts(cuda_visible_devices=visible))).get("nvidia.p2p")


def test_gpu_pairs_without_peer_to_peer_are_named_with_the_way_out() -> None:
    across = p2p(pcie_box())
    assert across.status is Status.WARN
    assert across.observed == "4 of 6 GPU pairs without it (PCIe topology not supported): 0-2, 0-3, 1-2, 1-3"
    assert p2p(FakeNvml.load("h200x8-580.95.05.json")).observed == "28 GPU pairs peer-to-peer, 28 over NVLink"
    assert "under one CPU socket (`nvidia-smi topo -m`" in across.remedy
    assert across.detail.startswith("0-2: PCIe topology not supported, across CPU sockets; 0-3: ")
    assert "through host memory" in across.detail
    # The job's GPUs decide: two under one socket are fine, one GPU has no pair to check.
    job = p2p(pcie_box(), visible="1,0")
    assert (
        job.status is Status.OK and job.observed == "1 GPU pair peer-to-peer, 0 over NVLink, CUDA_VISIBLE_DEVICES='1,0'"
    )
    assert p2p(pcie_box(), visible="2") is None
    geforce = p2p(pcie_box(across_sockets=2))
    assert geforce.status is Status.WARN and "GeForce" in geforce.remedy and "--distributed" in geforce.remedy
    assert "registry key" in p2p(pcie_box(across_sockets=4)).remedy
    assert "ACS off" in p2p(pcie_box(across_sockets=5)).remedy
    assert "under one CPU socket" in p2p(pcie_box(across_sockets=1)).remedy
    assert p2p(pcie_box(nvlink=0)).status is Status.WARN  # NVLink said yes, reads said no: reads decide
    mixed = pcie_box()
    mixed.recorded["devices"][1]["nvmlDeviceGetP2PStatus"]["3"]["0"] = 4  # 1-3, the last pair: another cause
    worst = p2p(mixed)
    assert worst.observed.startswith("4 of 6 GPU pairs without it (PCIe topology not supported): ")
    assert "under one CPU socket" in worst.remedy and "1-3: disabled by the driver's registry key" in worst.detail


def test_peer_to_peer_nvml_cannot_answer_is_a_skip_with_its_reason(capsys) -> None:
    partly = p2p(pcie_box(across_sockets={"error": 3}))
    assert partly.status is Status.SKIP and partly.detail == "read: not supported on this GPU"
    assert partly.observed == "2 GPU pairs peer-to-peer, 0 over NVLink; 4 not answered"
    box = pcie_box()
    for device in box.recorded["devices"]:
        device["nvmlDeviceGetP2PStatus"] = {"error": 3}
    nothing = p2p(box)
    assert nothing.status is Status.SKIP and nothing.observed == "unknown for 6 GPU pairs"
    assert nothing.detail == "read: not supported on this GPU; nvlink: not supported on this GPU"
    # Facts from nvidia-smi's CSV (no NVML) have no pairs at all.
    from bootstrap.checks.nvidia import nvidia_checks
    from bootstrap.compat.facts import DriverFacts, GpuFacts

    smi = DriverFacts(
        driver_version="580.95.05", gpus=(GpuFacts(0, "NVIDIA H200"), GpuFacts(1, "NVIDIA H200")), source="nvidia-smi"
    )
    skip = by_id(nvidia_checks(smi))["nvidia.p2p"]
    assert (
        skip.status is Status.SKIP
        and skip.detail == "no answers in these facts: nvidia-smi's CSV has none (NVML answers it)"
    )
    old = json.loads(H200.read_text())  # saved before facts had peers
    del old["nvidia"]["peers"]
    from bootstrap.compat.probe import Facts

    old_skip = by_id(nvidia_checks(Facts.from_dict(old).nvidia))["nvidia.p2p"]
    assert old_skip.status is Status.SKIP and "saved before bootstrap asked NVML for them" in old_skip.detail


def test_old_driver_fails_with_the_upgrade(tmp_path: Path, capsys) -> None:
    facts = write_facts(
        tmp_path / "r470.json", [GpuFacts(0, "Tesla V100-SXM2-16GB", (7, 0), 16384)], "470.182.03", 11040
    )
    code, _, checks = doctor_json(capsys, "--facts", str(facts))
    assert code == 1
    assert checks["cuda.driver"].status is Status.FAIL
    assert "upgrade the NVIDIA driver to >= 525.60.13" in checks["cuda.driver"].remedy
    assert "--index-url https://download.pytorch.org/whl/cu118" in checks["cuda.driver"].remedy  # or another build
    assert checks["lock.torch"].status is Status.FAIL and "will not run here" in checks["lock.torch"].observed


def test_gpu_without_kernels_names_a_build_to_lock_not_another_env(tmp_path: Path, capsys) -> None:
    """Pascal (6.0) has no SASS in torch 2.10's CUDA 12.8 wheel. Another env of the project whose lock
    has a cu126 build is no remedy (its Python and packages differ too): a variant of this env is
    (tests/checks/test_doctor_variants.py)."""
    root = tmp_path / "proj"
    shutil.copytree(REPO / "envs", root / "envs")
    shutil.copy(LOCK, root / "conda-lock.yml")
    py39 = root / "envs" / "py39.conda-lock.yml"
    entry = "- name: torch\n  version: 2.8.0\n  manager: pip\n  platform: linux-64\n"
    assert entry in py39.read_text()
    py39.write_text(py39.read_text().replace(entry, entry.replace("2.8.0", "2.8.0+cu126")))
    facts = write_facts(
        tmp_path / "p100.json", [GpuFacts(0, "Tesla P100-PCIE-16GB", (6, 0), 16384)], "580.95.05", 13000
    )
    capsys.readouterr()
    assert main(["doctor", "--json", "--root", str(root), "--facts", str(facts)]) == 1
    checks = by_id(from_json(json.loads(capsys.readouterr().out)))
    arch = checks["cuda.arch.gpu0"]
    assert arch.status is Status.FAIL and "no kernel image" in arch.observed
    assert "--index-url https://download.pytorch.org/whl/cu126" in arch.remedy
    fit = checks["lock.torch"]
    assert fit.status is Status.FAIL and fit.remedy.startswith("cuda.arch.gpu0: lock torch==")
    assert "ENV=py39" not in fit.remedy


# --------------------------------------------------------------------------- this machine, no torch


BLOCK_TORCH = """
import json, sys
attempts = []

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'torch':
            attempts.append(name)
            raise ImportError('torch is not installed here (blocked by the test)')
        return None

sys.meta_path.insert(0, NoTorch())
from bootstrap.cli import main
code = main(sys.argv[1:])
print(json.dumps({'code': code, 'torch_attempts': attempts, 'torch_loaded': 'torch' in sys.modules}))
"""


def test_doctor_runs_without_torch(tmp_path: Path) -> None:
    saved = tmp_path / "here.json"
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH, "doctor", "--json", "--lock", str(LOCK), "--save-facts", str(saved)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    envelope_text, _, status_line = done.stdout.rstrip().rpartition("\n")
    status = json.loads(status_line)
    assert status == {"code": status["code"], "torch_attempts": [], "torch_loaded": False}
    checks = by_id(from_json(json.loads(envelope_text)))
    assert "lock.torch" in checks and "host.shm" in checks and "nvidia.driver" in checks
    assert load_facts(saved).torch is None  # doctor never probes torch


def test_doctor_on_a_bare_python_without_pyyaml_still_reports_the_host() -> None:
    """A node's system python3 may lack PyYAML: the driver, GPU and host checks still come, and the
    lock's check says why it could not be read."""
    code = "import sys; sys.modules['yaml'] = None; from bootstrap.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "doctor", "--json", "--lock", str(LOCK), "--facts", str(H200)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == ""
    checks = by_id(from_json(json.loads(done.stdout)))
    assert checks["nvidia.gpu7"].status is Status.OK and checks["host.cpus"].status is Status.OK
    fit = checks["lock.torch"]
    assert fit.status is Status.SKIP and "cannot read conda-lock.yml: pyyaml is not installed here" in fit.detail


def test_this_machine_without_driver_is_a_skip_not_a_crash(capsys) -> None:
    """Recorded 'no driver' facts (this CI machine has none): skips with reasons, the CUDA build still fits."""
    result = run_doctor(
        DoctorOptions(lock_path=LOCK, platform="linux-64"),
        nvml=FakeNvml({}, init_error=12),
        runner=missing_binary_runner,
    )
    checks = by_id(result.checks)
    assert checks["nvidia.driver"].status is Status.SKIP and "NVML library not found" in checks["nvidia.driver"].detail
    assert checks["cuda.driver"].status is Status.SKIP and checks["cuda.driver"].detail
    assert checks["lock.torch"].status is Status.OK and "runs on the CPU" in checks["lock.torch"].observed


# --------------------------------------------------------------------------- usage


def test_a_platform_the_lock_lacks_or_a_missing_root_is_bad_usage(tmp_path: Path, capsys) -> None:
    assert main(["doctor", "--facts", str(H200), "--lock", str(LOCK), "--platform", "plan9-64"]) == 2
    assert (
        "--platform: 'plan9-64' is not locked in conda-lock.yml (linux-64, osx-arm64, win-64)"
        in capsys.readouterr().err
    )
    assert main(["doctor", "--facts", str(H200), "--root", str(tmp_path / "nowhere")]) == 2
    assert "--root: " in capsys.readouterr().err


def test_bad_usage_exits_2(tmp_path: Path, capsys) -> None:
    assert main(["doctor", "--facts", str(H200), "--save-facts", str(tmp_path / "x.json")]) == 2
    assert main(["doctor", "--facts", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: file not found" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    assert main(["doctor", "--facts", str(tmp_path / "bad.json")]) == 2
    assert "not a bootstrap.facts v1 file" in capsys.readouterr().err
    assert main(["doctor", "--no-such-flag"]) == 2  # argparse's usage error, returned (a --json run gets its envelope)


def test_human_table_lists_driver_gpus_and_verdict(capsys) -> None:
    capsys.readouterr()
    assert main(["doctor", "--lock", str(LOCK), "--facts", str(RTX3090)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"doctor: facts from {RTX3090}; torch build from conda-lock.yml [linux-64]")
    assert "NVIDIA GeForce RTX 3090, CC 8.6" in out and "-> start the container with `docker run --ipc=host" in out


def test_facts_captured_on_a_real_h200_replay_to_the_verdicts_seen_there(capsys) -> None:
    """Recorded by `doctor --save-facts` on a lent H200 (driver 580.159.04, CUDA 13.0): the lock's
    torch 2.10 (CUDA 12.8) runs there; host.memory warns (128 GB of RAM under a 141 GB GPU)."""
    code, envelope, checks = doctor_json(
        capsys, "--facts", str(FACTS / "h200x1-580.159.04.facts.json"), "--lock", str(LOCK)
    )
    assert code == 0
    assert checks["nvidia.gpu0"].observed == "NVIDIA H200, CC 9.0, 143771 MiB (ECC on, persistence on)"
    assert checks["cuda.arch.gpu0"].status is Status.OK and "runs sm_90" in checks["cuda.arch.gpu0"].observed
    assert checks["lock.torch"].status is Status.OK and checks["host.memory"].status is Status.WARN
    assert [c.id for c in checks.values() if c.status is Status.FAIL] == []
