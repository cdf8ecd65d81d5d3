"""The env side (verify, export, doctor, monitor) run by a real Python 3.9 and 3.10 inside an env
`bootstrap env` built for it: the interpreters the team's locked envs have.

The rest of the suite runs on the tools venv's Python (3.11 here); `scripts/check-py39.py`
reads the source for newer syntax and stdlib names, but only running it shows what reading
misses. Each env's `python` is a shim of an interpreter found on this machine (PATH, or pyenv's
versions); without one, that version's tests skip. Its PyYAML is a wheel of the tools venv's own
pure-Python `yaml` package, as PyYAML falls back to it where its C extension does not load.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from bootstrap.cli import main
from bootstrap.report import Status, from_json
from tests.fixtures import REPO
from tests.fixtures.conda_channel import build_channel, pip_spec, zlibstub_spec
from tests.fixtures.env_project import assert_matches_lock, relock
from tests.fixtures.project import make_project
from tests.fixtures.runnable_env import find_interpreter, runnable_python_spec
from tests.fixtures.wheels import WheelSpec, build_wheelhouse, standard_wheels

ENV_IDS = ("env.prefix", "env.lock", "env.python", "env.conda", "env.pip", "env.extra", "env.files")
H200 = REPO / "tests" / "data" / "verify" / "h200x8-580.95.05.facts.json"


def pure_pyyaml() -> WheelSpec:
    source = Path(yaml.__file__).parent
    return WheelSpec("PyYAML", yaml.__version__, files={f"yaml/{p.name}": p.read_bytes() for p in source.glob("*.py")})


@pytest.fixture(scope="module", params=["3.9", pytest.param("3.10", marks=pytest.mark.slow)])  # 3.9 is the floor
def older(request, tmp_path_factory) -> SimpleNamespace:
    """A project whose env `pyXY` runs Python `request.param`, created by `bootstrap env`."""
    interpreter = find_interpreter(request.param)
    if interpreter is None:
        pytest.skip(f"no Python {request.param} on this machine (PATH or ~/.pyenv/versions)")
    root = tmp_path_factory.mktemp(f"py{request.param}")
    channel = build_channel(
        root / "channel", [runnable_python_spec(interpreter=interpreter), pip_spec(), zlibstub_spec("linux-64")]
    )
    wheels = build_wheelhouse(root / "wheels", [*standard_wheels(), pure_pyyaml()])
    name = "py" + request.param.replace(".", "")
    project = make_project(
        root / "proj",
        name=name,
        platforms=("linux-64",),
        conda=(f"python={request.param}.*", "pip", "zlibstub"),
        pip=("alpha", "gamma", "pyyaml"),
    )
    relock(project, channel, wheels)
    args = [
        "env",
        name,
        "--root",
        str(project.root),
        "--platform",
        "linux-64",
        "--mirror",
        f"conda-forge={channel}",
        "--cache-dir",
        str(root / "cache"),
    ]
    assert main(args) == 0
    return SimpleNamespace(
        interpreter=interpreter,
        name=name,
        project=project,
        prefix=project.root / ".envs" / name,
        make_env=lambda: main(args),
    )


def run(older: SimpleNamespace, *args: str) -> subprocess.CompletedProcess:
    """`python -m bootstrap ARGS` with the env's own python (bootstrap from the checkout, as `make verify` runs it)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(
        [str(older.prefix / "bin" / "python"), "-m", "bootstrap", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**environ, "PYTHONNOUSERSITE": "1"},
        timeout=300,
        check=False,
    )


def verify_json(older: SimpleNamespace, *args: str) -> tuple:
    done = run(older, "verify", "--no-bench", "--json", *args)
    assert "Traceback" not in done.stderr, done.stderr
    envelope = json.loads(done.stdout)
    return done.returncode, envelope, {c.id: c for c in from_json(envelope)}


def test_verify_inside_the_env_passes_then_finds_drift_that_make_env_repairs(older) -> None:
    code, envelope, checks = verify_json(older)
    assert envelope["extra"]["inside"] is True
    assert checks["env.python"].observed == f"python {older.interpreter.version} (this interpreter)"
    assert {cid: checks[cid].status for cid in ENV_IDS} == {cid: Status.OK for cid in ENV_IDS}
    fresh = checks["env.freshness"]  # the solver lives in the tools venv, not in the team's env
    assert fresh.status is Status.SKIP and fresh.observed == "py-rattler is not importable here (env side)"
    assert code == (1 if envelope["summary"]["fail"] else 0)

    next((older.prefix.resolve() / "conda-meta").glob("zlibstub-*.json")).unlink()  # a package's record gone
    code, _, checks = verify_json(older)
    assert code == 1 and checks["env.conda"].status is Status.FAIL and "make env" in checks["env.conda"].remedy
    assert older.make_env() == 0
    _, _, checks = verify_json(older)
    assert checks["env.conda"].status is Status.OK


def test_export_and_doctor_answer_as_on_the_tools_python(older, tmp_path: Path, capsys) -> None:
    ours, theirs = tmp_path / "here.yml", tmp_path / "there.yml"
    assert main(["export", older.name, "--root", str(older.project.root), "-o", str(ours)]) == 0
    done = run(older, "export", older.name, "--root", str(older.project.root), "-o", str(theirs))
    assert done.returncode == 0, done.stderr
    assert theirs.read_text() == ours.read_text() and "python=" in ours.read_text()

    job = json.loads(H200.read_text())  # a job given two of the node's GPUs, by UUID and by index
    job["host"]["cuda_visible_devices"] = (
        "GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b06,GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b07,1"
    )
    (tmp_path / "job.json").write_text(json.dumps(job))
    for facts in (H200, tmp_path / "job.json"):
        capsys.readouterr()
        args = ["doctor", "--json", "--lock", str(REPO / "conda-lock.yml"), "--facts", str(facts)]
        assert main(args) == 0
        here = json.loads(capsys.readouterr().out)
        done = run(older, *args)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == here
    assert {c["id"]: c for c in here["checks"]}["nvidia.p2p"]["observed"].startswith("1 GPU pair peer-to-peer")


def test_monitor_without_nvml_says_so_in_one_line(older) -> None:
    done = run(older, "monitor", "--once")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "no NVIDIA GPU to monitor: pynvml is not installed (`pip install nvidia-ml-py`)\n"


def test_the_env_python_is_the_one_asked_for(older) -> None:
    assert older.project.lock_path(older.name).is_file()
    done = subprocess.run(
        [str(older.prefix / "bin" / "python"), "-c", "import platform, yaml; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == older.interpreter.version


def locked_at_39(tmp_path: Path) -> tuple:
    """A project locked at python 3.9 with `pip` (a noarch: python package) and two wheels, from a channel
    that also has 3.10: (project, channel, wheels, `env` args). Skips without both interpreters."""
    interpreters = [find_interpreter(short) for short in ("3.9", "3.10")]
    if None in interpreters:
        pytest.skip("needs Python 3.9 and 3.10 on this machine (PATH or ~/.pyenv/versions)")
    channel = build_channel(
        tmp_path / "channel",
        [*(runnable_python_spec(interpreter=i) for i in interpreters), pip_spec(), zlibstub_spec("linux-64")],
    )
    wheels = build_wheelhouse(tmp_path / "wheels", standard_wheels())
    project = make_project(
        tmp_path / "proj", platforms=("linux-64",), conda=("python=3.9.*", "pip"), pip=("alpha", "gamma")
    )
    relock(project, channel, wheels)
    args = [
        "env",
        "--root",
        str(project.root),
        "--platform",
        "linux-64",
        "--mirror",
        f"conda-forge={channel}",
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    return project, channel, wheels, args


def relock_at_310(project, channel: Path, wheels: Path) -> None:
    make_project(project.root, platforms=("linux-64",), conda=("python=3.10.*", "pip"), pip=("alpha", "gamma"))
    relock(project, channel, wheels)


@pytest.mark.slow
def test_a_python_minor_upgrade_installs_the_pip_part_into_its_site_packages(tmp_path: Path, capsys) -> None:
    """3.9 -> 3.10: the new python has a site-packages of its own, empty; the old one's stays behind
    with the wheels (and sorts after it: `python3.9` > `python3.10`)."""
    project, channel, wheels, args = locked_at_39(tmp_path)
    assert main(args) == 0
    relock_at_310(project, channel, wheels)
    shutil.rmtree(tmp_path / "cache")  # safe to delete: rattler must not fetch the noarch `pip` it relinks itself
    capsys.readouterr()
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "pip add alpha 1.1" in out and "link    pip 25.0" in out  # the plan shown says so
    assert main(args) == 0
    assert_matches_lock(project)  # conda-meta names the lock's URLs, the relinked pip's too
    prefix = project.root / ".envs" / "py310"
    done = subprocess.run(
        [str(prefix / "bin" / "python"), "-c", "import sys, alpha, gamma; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.strip() == "(3, 10)", done.stderr
    capsys.readouterr()
    assert main(args) == 0
    assert "is up to date" in capsys.readouterr().out  # converged: nothing installed again


@pytest.mark.slow
def test_a_python_minor_upgrade_relinks_noarch_packages_past_a_stray_site_packages(tmp_path: Path) -> None:
    """A `lib/python3.10` made by hand in the 3.9 env hides the move from the plan, which reads the
    site-packages folder; rattler, handed every package when python is linked, sees it from python's
    own record and relinks the noarch: python `pip` into the new site-packages."""
    from bootstrap.prefix import conda_records

    project, channel, wheels, args = locked_at_39(tmp_path)
    assert main(args) == 0
    prefix = project.root / ".envs" / "py310"
    (prefix / "bin" / "python3.10").write_text("#!/bin/sh\n")
    (prefix / "lib" / "python3.10" / "site-packages").mkdir(parents=True)
    relock_at_310(project, channel, wheels)
    assert main(args) == 0
    (pip,) = [r for r in conda_records(prefix) if r.name == "pip"]
    assert {f.split("/")[1] for f in pip.files if f.startswith("lib/")} == {"python3.10"}
    assert_matches_lock(project)
