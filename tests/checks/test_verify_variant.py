"""verify's `env.variant`: the variant an env was installed from against the pick for this host
(pure: a Pick and the installed name in, a check out). The real installs: tests/install/test_env_variants.py."""

from __future__ import annotations

from pathlib import Path

from bootstrap.checks.variant import judge_installed
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.pick import Candidate, pick_variant
from bootstrap.compat.target import torch_target_from_lock_entry
from bootstrap.report import Status


def candidate(name: str, version: str, default: bool = False) -> Candidate:
    return Candidate(name, Path(f"py310.{name}.conda-lock.yml"), torch_target_from_lock_entry(version), default=default)


def switch(name: str) -> str:
    return f"`make env VARIANT={name}` installs it in place"


PASCAL = DriverFacts(
    driver_version="580.95.05", cuda_driver_version=13000, gpus=(GpuFacts(0, "NVIDIA GeForce GTX 1080", (6, 1)),)
)
CU128, CU130 = candidate("cu128", "2.10.0+cu128", default=True), candidate("cu130", "2.11.0+cu130")


def test_installed_variants_against_the_pick() -> None:
    pascal = pick_variant(PASCAL, [CU128, candidate("cu126", "2.10.0+cu126")])
    failing = judge_installed(pascal, "cu128", "conda-lock.yml", switch)
    assert failing.status is Status.FAIL and failing.remedy == "`make env VARIANT=cu126` installs it in place"
    assert judge_installed(pascal, "cu126", "x.yml", switch).status is Status.OK
    gone = judge_installed(pascal, "cu118", "x.yml", switch)
    assert gone.status is Status.WARN and gone.observed == "cu118 from x.yml: not a variant of the spec"
    unrecorded = judge_installed(pascal, "", "x.yml", switch)
    assert unrecorded.status is Status.WARN and unrecorded.observed.startswith("(none recorded) from x.yml")
    nothing = pick_variant(PASCAL, [CU128, CU130])  # no Pascal kernels in either: the cuda.* checks fail already
    none = judge_installed(nothing, "cu128", "conda-lock.yml", switch)
    assert none.status is Status.WARN and none.observed.endswith(": no locked variant runs here")
    assert "declare a variant with torch==" in none.remedy
    newer = pick_variant(
        DriverFacts(driver_version="580.95.05", cuda_driver_version=13000, gpus=(GpuFacts(0, "NVIDIA H200", (9, 0)),)),
        [CU128, CU130],
    )
    older = judge_installed(newer, "cu128", "conda-lock.yml", switch)
    assert older.status is Status.WARN and older.observed.endswith("runs, but cu130 is the pick for this host")
    unjudged = pick_variant(PASCAL, [candidate("next", "2.99.0", default=True), CU130])
    assert judge_installed(unjudged, "next", "conda-lock.yml", switch).status is Status.OK  # the pick, unjudged


def test_an_env_whose_spec_declares_no_variants_has_no_variant_check(tmp_path: Path) -> None:
    from bootstrap.checks.envstate import EnvCommands, EnvState
    from bootstrap.checks.variant import installed_variant_check
    from bootstrap.prefix import InstallRecord
    from bootstrap.project import Project
    from tests.fixtures.project import make_project

    project: Project = make_project(tmp_path / "proj")
    record = InstallRecord(
        lock_path=str(project.lock_path("py310")),
        env="py310",
        platform="linux-64",
        content_hash="",
        generation="1",
        bootstrap_version="0",
        installed_at="",
    )
    prefix = project.root / ".envs" / "py310"
    state = EnvState(prefix, record, 0.0, None, None, "", "linux-64", EnvCommands("py310", prefix, True, True), project)
    assert installed_variant_check(state, PASCAL) is None
    project.spec_path("py310").write_text("name: [")
    broken = installed_variant_check(state, PASCAL)
    assert broken.status is Status.SKIP and "malformed YAML" in broken.detail
