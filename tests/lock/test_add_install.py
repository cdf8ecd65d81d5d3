"""`bootstrap add` without `--no-install`: the relocked env applied to .envs/py310, as `bootstrap env`
applies it; and an install that fails after the lock was written, which keeps the lock and says how
to retry. The project's python is the runnable channel's shim (tests/fixtures/runnable_env.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.lock.lockfile import read_lock
from bootstrap.project import Project
from tests.fixtures.env_project import CONDA, PIP, offline_sources, prefix_of, relock, run_python
from tests.fixtures.project import copy_project, make_project
from tests.fixtures.runnable_env import build_runnable_channel
from tests.fixtures.wheels import WheelSpec, build_wheelhouse, standard_wheels

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the runnable channel is linux-64 only")


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("add-install")
    channel = build_runnable_channel(root / "channel", big_files=2)
    wheels = build_wheelhouse(root / "wheels", [*standard_wheels(), WheelSpec("delta", "1.0")])
    return channel, wheels


@pytest.fixture(scope="module")
def locked_once(tmp_path_factory, sources: tuple[Path, Path]) -> Project:
    project = make_project(
        tmp_path_factory.mktemp("add-installed") / "proj", platforms=("linux-64",), conda=CONDA, pip=PIP
    )
    relock(project, *sources)
    return project


def add(project: Project, sources: tuple[Path, Path], *argv: str) -> list[str]:
    channel, wheels = sources
    return [
        "add",
        *offline_sources(project, channel, wheels),
        "--repodata-cache",
        str(project.root / ".repodata"),
        "--cache-dir",
        str(project.root / ".cache"),
        "--quiet",
        *argv,
    ]


def test_add_installs_what_it_added(locked_once: Project, sources, tmp_path: Path, capsys) -> None:
    project = copy_project(locked_once, tmp_path / "proj")
    capsys.readouterr()
    assert main(add(project, sources, "delta", "--json")) == 0
    envelope = json.loads(capsys.readouterr().out)
    assert envelope["install"]["changed"] and envelope["edits"][0]["manager"] == "pip"
    assert run_python(prefix_of(project), "import delta; print(delta.__version__)") == "1.0"


def test_an_install_that_fails_keeps_the_new_lock_and_says_how_to_retry(
    locked_once: Project, sources, tmp_path: Path, capsys
) -> None:
    project = copy_project(locked_once, tmp_path / "proj")
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not an env\n")
    capsys.readouterr()
    code = main(add(project, sources, "delta", "--prefix", str(in_the_way)))
    out, err = capsys.readouterr()
    assert code == 2
    assert "added 'delta' to envs/py310.yml" in out
    assert err.count("\n") == 1 and "the spec and its locks are written; retry the install with `make env`" in err
    assert "delta" in {p.name for p in read_lock(project.lock_path("py310")).packages}
