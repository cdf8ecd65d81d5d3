"""`doctor` on an env whose spec declares torch variants: every locked variant judged on the host,
the one to install named with why (`lock.variant`, the JSON's `extra.pick`), and `lock.torch` on the
installed variant, else the pick. Projects and hosts: tests/fixtures/variants.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bootstrap.checks.doctor import DoctorOptions, run_doctor
from bootstrap.cli import main
from bootstrap.prefix import InstallRecord, write_install_record
from bootstrap.report import Status, from_json
from tests.fixtures import REPO
from tests.fixtures.fakes import FakeNvml, missing_binary_runner
from tests.fixtures.variants import R570, facts_file, plain_project, variant_project

PASCAL = ("NVIDIA GeForce GTX 1080", (6, 1))
H200 = ("NVIDIA H200", (9, 0))
V100 = ("Tesla V100-SXM2-32GB", (7, 0))
RTX5090 = ("NVIDIA GeForce RTX 5090", (12, 0))
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0))
CU128_CU126 = [("cu128", "2.10.0+cu128", ()), ("cu126", "2.10.0+cu126", ("linux-64",))]
CU128_CU130 = [("cu128", "2.10.0+cu128", ()), ("cu130", "2.11.0+cu130", ("linux-64",))]
CU128_CPU = [("cu128", "2.10.0+cu128", ()), ("cpu", "2.10.0+cpu", ())]


def doctor(capsys, root: Path, *args: str) -> tuple:
    capsys.readouterr()
    code = main(["doctor", "--json", "--root", str(root), *args])
    envelope = json.loads(capsys.readouterr().out)
    return code, {c.id: c for c in from_json(envelope)}, envelope["extra"]


def test_a_pascal_host_gets_the_cu126_variant(tmp_path: Path, capsys) -> None:
    project = variant_project(tmp_path / "proj", CU128_CU126)
    facts = facts_file(tmp_path / "pascal.json", [PASCAL])
    code, checks, extra = doctor(capsys, project.root, "--facts", str(facts))
    assert code == 0  # the env `make env` installs here runs here
    fit = checks["lock.torch"]
    assert fit.status is Status.OK and fit.observed.startswith(
        "torch 2.10.0+cu126 (CUDA 12.6) from py310.cu126.conda-lock.yml [linux-64]"
    )
    assert checks["cuda.arch.gpu0"].status is Status.OK and "runs sm_60" in checks["cuda.arch.gpu0"].observed
    pick = checks["lock.variant"]
    assert pick.status is Status.OK
    assert pick.observed == "cu126: torch 2.10.0+cu126 (CUDA 12.6) from py310.cu126.conda-lock.yml; also runs: none"
    assert "the default cu128 will not run here (cuda.arch.gpu0: NVIDIA GeForce GTX 1080 CC 6.1" in pick.detail
    assert extra["env"] == "py310" and extra["lock"] == str(project.variant_lock_path("py310", "cu126"))
    body = extra["pick"]
    assert (body["chosen"], body["status"], body["others"]) == ("cu126", "ok", [])
    assert [(v["name"], v["torch"], v["cuda"], v["status"], v["default"]) for v in body["variants"]] == [
        ("cu128", "2.10.0+cu128", "12.8", "fail", True),
        ("cu126", "2.10.0+cu126", "12.6", "ok", False),
    ]
    assert body["variants"][0]["lock"] == str(project.lock_path("py310"))
    assert "no kernel image" in body["variants"][0]["reasons"][0]
    capsys.readouterr()
    assert main(["doctor", "--root", str(project.root), "--facts", str(facts)]) == 0
    out = capsys.readouterr().out
    assert "variants of py310 on this host [linux-64]:\n    cu128  torch 2.10.0+cu128 (CUDA 12.8)  fail" in out
    assert "\n  * cu126  torch 2.10.0+cu126 (CUDA 12.6)  ok    py310.cu126.conda-lock.yml\n" in out
    assert "\npick: cu126: the newest torch that runs fully" in out and out.rstrip().endswith(
        "`make env ENV=py310` installs it"
    )


def test_the_installed_variant_is_judged_and_the_pick_named_as_the_way_out(tmp_path: Path) -> None:
    project = variant_project(tmp_path / "proj", CU128_CPU)
    record = InstallRecord(
        lock_path=str(project.variant_lock_path("py310", "cpu")),
        env="py310",
        platform="linux-64",
        content_hash="",
        generation="1",
        bootstrap_version="0",
        installed_at="",
        variant="cpu",
    )
    (project.root / ".envs" / "py310" / "conda-meta").mkdir(parents=True)
    write_install_record(project.root / ".envs" / "py310", record)
    result = run_doctor(
        DoctorOptions(root=project.root, platform="linux-64"),
        nvml=FakeNvml.load("h200x8-580.95.05.json"),
        runner=missing_binary_runner,
    )
    checks = {c.id: c for c in result.checks}
    fit = checks["lock.torch"]
    assert fit.status is Status.FAIL and fit.observed.startswith("torch 2.10.0+cpu (CPU build) from py310.cpu.")
    assert fit.remedy.startswith(
        "variant cu128 runs here (torch 2.10.0+cu128 (CUDA 12.8), from conda-lock.yml): "
        "`make env` installs it; or torch.cuda_build: "
    )
    assert checks["lock.variant"].status is Status.OK and checks["lock.variant"].observed.endswith("; installed: cpu")
    # Recorded facts are another machine's: the env installed here says nothing about it.
    saved = tmp_path / "h200.json"
    run_doctor(
        DoctorOptions(root=project.root, platform="linux-64", save_facts=saved),
        nvml=FakeNvml.load("h200x8-580.95.05.json"),
        runner=missing_binary_runner,
    )
    replayed = {c.id: c for c in run_doctor(DoctorOptions(root=project.root, facts_path=saved)).checks}
    assert replayed["lock.torch"].status is Status.OK and "installed" not in replayed["lock.variant"].observed


@pytest.mark.parametrize(
    "gpus, visible, variants, chosen, status",
    [
        ((), None, CU128_CPU, "cpu", Status.OK),  # no GPU: the CPU build
        ((), None, CU128_CU130, "cu128", Status.WARN),  # no GPU, no CPU build: the default, and how to add one
        ((V100, RTX5090), None, CU128_CU130, "cu128", Status.OK),  # cu130 lacks sm_70: every GPU must run it
        ((H200,), "MIG-4f3e2d1c-aaaa-bbbb-cccc-000000000001", CU128_CPU, "cu128", Status.OK),  # a MIG slice is a GPU
        ((H200,), "", CU128_CPU, "cu128", Status.OK),  # hidden from this shell, not from the env
        ((PASCAL,), None, CU128_CU130, None, Status.FAIL),  # neither has Pascal kernels
    ],
    ids=["no GPU", "no GPU, no CPU build", "Volta + Blackwell", "MIG", "all hidden", "none runs"],
)
def test_the_pick_on_recorded_hosts(tmp_path: Path, capsys, gpus, visible, variants, chosen, status) -> None:
    project = variant_project(tmp_path / "proj", variants)
    facts = facts_file(tmp_path / "host.json", gpus, driver=None if not gpus else ("580.95.05", 13000), visible=visible)
    code, checks, extra = doctor(capsys, project.root, "--facts", str(facts))
    assert (extra["pick"]["chosen"], checks["lock.variant"].status) == (chosen, status)
    assert code == (1 if status is Status.FAIL else 0)
    if status is Status.WARN:  # the CUDA build runs on the CPU, with libraries nothing uses: the way to a CPU one
        assert checks["lock.variant"].remedy == (
            "no NVIDIA GPU here and no CPU variant locked: cu128 installs CUDA libraries nothing here uses; "
            'declare a CPU variant in the spec and `make lock` (docs/lock.md, "A CPU-only torch beside a CUDA one")'
        )
        assert extra["pick"]["note"] == checks["lock.variant"].remedy
    if chosen is None:
        assert checks["lock.torch"].observed.startswith("torch 2.10.0+cu128 (CUDA 12.8) from conda-lock.yml")
        assert "declare a variant with torch==" in checks["lock.variant"].remedy
        assert "cu126" in checks["lock.variant"].remedy


def test_driver_too_old_for_cuda_13_keeps_cuda_12_and_says_why(tmp_path: Path, capsys) -> None:
    project = variant_project(tmp_path / "proj", CU128_CU130)
    _, checks, extra = doctor(capsys, project.root, "--facts", str(facts_file(tmp_path / "h.json", [H200], R570)))
    assert extra["pick"]["chosen"] == "cu128"
    cu130 = extra["pick"]["variants"][1]
    assert cu130["status"] == "fail" and cu130["reasons"][0].startswith("cuda.driver: driver 570.124.06")
    r580 = facts_file(tmp_path / "r580.json", [H200])
    _, checks, extra = doctor(capsys, project.root, "--facts", str(r580))
    assert extra["pick"]["chosen"] == "cu130" and extra["pick"]["others"] == ["cu128"]
    assert checks["lock.variant"].observed.endswith("; also runs: cu128")


def test_a_variant_not_locked_for_the_platform_or_not_locked_yet_is_skipped(tmp_path: Path, capsys) -> None:
    project = variant_project(tmp_path / "proj", CU128_CU126)
    mac = facts_file(tmp_path / "mac.json", [], driver=None, platform="macos")
    _, checks, extra = doctor(capsys, project.root, "--facts", str(mac))
    assert extra["platform"] == "osx-arm64" and extra["pick"]["chosen"] == "cu128"
    assert extra["pick"]["variants"][1]["status"] == "skip"
    assert extra["pick"]["variants"][1]["reasons"] == ["not locked for osx-arm64 (the variant's platforms: linux-64)"]
    unlocked = variant_project(tmp_path / "unlocked", CU128_CU126, missing=("cu126",))
    pascal = facts_file(tmp_path / "pascal.json", [PASCAL])
    code, checks, extra = doctor(capsys, unlocked.root, "--facts", str(pascal))
    assert code == 1 and extra["pick"]["chosen"] is None
    assert extra["pick"]["variants"][1]["reasons"] == ["not locked yet: no py310.cu126.conda-lock.yml (`make lock`)"]


def test_env_picks_the_env_and_lock_judges_one_lock(tmp_path: Path, capsys) -> None:
    project = variant_project(tmp_path / "proj", CU128_CU126)
    pascal = str(facts_file(tmp_path / "pascal.json", [PASCAL]))
    code, checks, extra = doctor(capsys, project.root, "--facts", pascal, "--env", "py39")
    assert extra["env"] == "py39" and "lock.variant" not in checks  # py39 declares no variants
    assert extra["pick"]["variants"][0]["name"] is None and extra["lock"].endswith("py39.conda-lock.yml")
    code, checks, extra = doctor(capsys, project.root, "--facts", pascal, "--lock", str(project.lock_path("py310")))
    assert code == 1 and extra["env"] is None and "lock.variant" not in checks
    assert checks["lock.torch"].status is Status.FAIL and checks["lock.torch"].remedy.startswith("cuda.arch.gpu0: ")
    assert extra["pick"]["variants"][0]["name"] == "cu128"  # the lock says which variant it holds
    assert main(["doctor", "--root", str(project.root), "--facts", pascal, "--env", "py311"]) == 2
    assert "unknown env 'py311'" in capsys.readouterr().err
    assert (
        main(
            [
                "doctor",
                "--root",
                str(project.root),
                "--facts",
                pascal,
                "--env",
                "py39",
                "--lock",
                str(project.lock_path("py310")),
            ]
        )
        == 2
    )
    assert "--env: does not apply to --lock FILE" in capsys.readouterr().err


def test_a_spec_without_variants_is_judged_as_before(tmp_path: Path, capsys) -> None:
    project = plain_project(tmp_path / "proj")
    facts = REPO / "tests" / "data" / "verify" / "rtx3090-535.183.01.facts.json"
    _, by_root, extra = doctor(capsys, project.root, "--facts", str(facts))
    _, by_lock, _ = doctor(capsys, project.root, "--facts", str(facts), "--lock", str(project.lock_path("py310")))
    assert by_root == by_lock and "lock.variant" not in by_root
    assert extra["pick"]["chosen"] is None and extra["pick"]["chosen_lock"] == str(project.lock_path("py310"))
    assert extra["pick"]["why"].startswith("conda-lock.yml: the env's only lock, runs with a caveat")


def test_a_platform_no_variant_is_locked_for_fails_with_the_way_to_lock_it(tmp_path: Path, capsys) -> None:
    project = variant_project(tmp_path / "proj", CU128_CU126)
    gh200 = facts_file(tmp_path / "gh200.json", [H200], platform="linux_aarch64")
    code, checks, extra = doctor(capsys, project.root, "--facts", str(gh200))
    assert code == 1 and extra["platform"] == "linux-aarch64" and extra["pick"]["chosen"] is None
    for check in (checks["lock.torch"], checks["lock.variant"]):
        assert check.status is Status.FAIL and "add it to `platforms:`" in check.remedy, check
    assert checks["lock.variant"].observed == "none of cu128, cu126 is locked for this platform"
    assert {v["status"] for v in extra["pick"]["variants"]} == {"skip"}  # each is simply not for this platform
