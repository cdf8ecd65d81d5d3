"""The constructed facts files (tests/data/verify/constructed-*) replay to the verdicts their machines need."""

from __future__ import annotations

import json

import pytest

from bootstrap.cli import main
from bootstrap.compat.probe import load_facts
from tests.fixtures import REPO

FACTS = REPO / "tests" / "data" / "verify"
LOCK = REPO / "conda-lock.yml"


def verify_json(capsys, name: str) -> tuple:
    capsys.readouterr()
    code = main(["verify", "--json", "--lock", str(LOCK), "--facts", str(FACTS / f"{name}.facts.json")])
    return code, {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}


def test_a_v100_hidden_by_cuda_visible_devices_does_not_fail_the_run(capsys) -> None:
    code, checks = verify_json(capsys, "constructed-v100-a100-cvd1-580.95.05")
    assert code == 0 and checks["cuda.arch.gpu1"]["status"] == "ok"
    assert checks["cuda.arch.gpu0"]["status"] == "skip" and "would be fail" in checks["cuda.arch.gpu0"]["detail"]


def test_a_windows_528_24_driver_under_wsl2_fails_the_windows_floor(capsys) -> None:
    code, checks = verify_json(capsys, "constructed-wsl2-528.24")
    assert code == 1 and checks["cuda.driver"]["status"] == "fail"
    assert ">= 528.33" in checks["cuda.driver"]["remedy"] and "Windows host's" in checks["cuda.driver"]["remedy"]
    assert checks["nvidia.gpu0"]["status"] == "ok"  # no persistence mode under WSL: nothing to switch on


def test_a_container_started_without_gpus_fails_with_the_flag(capsys) -> None:
    code, checks = verify_json(capsys, "constructed-docker-without-gpus")
    assert code == 1 and checks["nvidia.driver"]["status"] == "fail"
    assert "`docker run --gpus all" in checks["nvidia.driver"]["remedy"]


def test_a_jetson_is_told_about_jetpack_not_a_driver_upgrade(capsys) -> None:
    code, checks = verify_json(capsys, "constructed-jetson-orin-r36")
    assert code == 0 and checks["cuda.driver"]["status"] == "warn"
    assert "JetPack" in checks["cuda.driver"]["remedy"] and "upgrade the NVIDIA" not in checks["cuda.driver"]["remedy"]


@pytest.mark.parametrize("path", sorted(FACTS.glob("*.facts.json")), ids=lambda p: p.name.split(".facts")[0])
def test_the_new_fields_are_written_only_where_a_file_has_them(path) -> None:
    raw, written = json.loads(path.read_text()), load_facts(path).to_dict()
    for key in ("wsl", "jetson", "gpu_signs"):
        assert (key in written["nvidia"]) == (key in raw["nvidia"]) and written["nvidia"].get(key) == raw["nvidia"].get(
            key
        )
    for old, new in zip(raw["nvidia"]["gpus"], written["nvidia"]["gpus"]):
        assert new.get("mig_uuids") == old.get("mig_uuids")
