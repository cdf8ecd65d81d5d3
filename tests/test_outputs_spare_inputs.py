"""Every output option (`doctor`/`verify --save-facts`, `monitor --csv/--jsonl`, `export -o`) refuses
to replace a lock, spec or virtual packages file of the project it points into: one line, exit 2,
the file untouched."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.errors import InputError
from bootstrap.project import refuse_input
from tests.fixtures import REPO
from tests.fixtures.fakes import RecordedNvml

INPUTS = ["conda-lock.yml", "envs/py310.yml", "envs/py39.yml", "envs/py39.conda-lock.yml", "envs/virtual-packages.yml"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A copy of the committed project's specs and locks; the current directory."""
    root = tmp_path / "proj"
    shutil.copytree(REPO / "envs", root / "envs")
    shutil.copy(REPO / "conda-lock.yml", root)
    monkeypatch.chdir(root)
    monkeypatch.setitem(sys.modules, "pynvml", RecordedNvml.load("h200x2-ddp.json"))  # monitor's GPUs
    return root


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


@pytest.mark.parametrize("target", INPUTS)
@pytest.mark.parametrize(
    "argv",
    [
        ["doctor", "--save-facts"],
        ["verify", "--no-bench", "--save-facts"],
        ["monitor", "--count", "1", "--interval", "0.001", "--csv"],
        ["monitor", "--count", "1", "--interval", "0.001", "--jsonl"],
    ],
    ids=["doctor", "verify", "monitor-csv", "monitor-jsonl"],
)
def test_an_output_option_never_replaces_a_project_input(project: Path, capsys, argv, target):
    before = snapshot(project)
    assert main([*argv, target]) == 2
    err = one_line_error(capsys)
    assert f"error: {target}: is the project's " in err and f"give {argv[-1]} another file" in err
    assert snapshot(project) == before


def test_a_link_to_the_lock_and_an_absolute_path_are_refused_too(project: Path, capsys):
    (project / "facts.json").symlink_to(project / "conda-lock.yml")
    before = snapshot(project)
    for path in (project / "facts.json", project / "envs" / "py39.yml"):
        assert main(["doctor", "--save-facts", str(path)]) == 2
        assert "is the project's" in one_line_error(capsys)
    os.chdir(project.parent)  # the project is found from the path, not from the current directory
    assert main(["verify", "--no-bench", "--save-facts", "proj/conda-lock.yml"]) == 2
    assert "is the project's lock conda-lock.yml" in one_line_error(capsys)
    assert snapshot(project) == before


def test_export_refuses_another_envs_spec(project: Path, capsys):
    """`export` (py310) made from envs/py310.yml may not replace envs/py39.yml either."""
    before = snapshot(project)
    assert main(["export", "-o", "envs/py39.yml"]) == 2
    assert "is the project's spec envs/py39.yml" in one_line_error(capsys)
    assert snapshot(project) == before


@pytest.mark.parametrize(
    ("cwd", "argv"),
    [
        ("envs", ["export"]),
        (".", ["export", "-o", "envs/team.yaml"]),
        (".", ["doctor", "--save-facts", "envs/facts.yml"]),
    ],
)
def test_no_output_lands_in_envs_as_a_new_spec(project: Path, capsys, cwd: str, argv: list):
    """A new envs/*.yml is read as an env spec by every verb: `cd envs && bootstrap export` broke them all."""
    os.chdir(project / cwd)
    before = snapshot(project)
    assert main(argv) == 2
    err = one_line_error(capsys)
    assert "is in the project's envs/ folder, where every .yml file is read as an env spec" in err
    assert snapshot(project) == before


def test_the_lock_doctor_judges_is_refused_outside_a_project(tmp_path: Path, capsys):
    lock = tmp_path / "team.lock.yml"
    shutil.copy(REPO / "conda-lock.yml", lock)
    assert main(["doctor", "--lock", str(lock), "--save-facts", str(lock)]) == 2
    assert "is the lock --lock names" in one_line_error(capsys)
    assert lock.read_bytes() == (REPO / "conda-lock.yml").read_bytes()


def test_new_files_and_other_files_may_be_written(project: Path):
    refuse_input(project / "envs" / "new.json", "--save-facts")  # does not exist yet
    (project / "facts.json").write_text("{}")
    refuse_input(project / "facts.json", "--save-facts")
    os.mkfifo(project / "fifo")
    refuse_input(project / "fifo", "--csv")
    with pytest.raises(InputError, match=r"envs/py39\.conda-lock\.yml: is the project's lock envs/py39"):
        refuse_input(project / "envs" / "py39.conda-lock.yml", "--csv")
