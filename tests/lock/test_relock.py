"""A relock moves only what it must: locked versions are preferred, `--update PKG` moves some,
`--upgrade` moves all. Real rattler and real uv over a fixture channel and wheelhouse that each
test owns, since it publishes newer versions into them between locks."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pytest

from bootstrap.cli import main
from bootstrap.lock.lockfile import read_lock
from tests.fixtures.conda_channel import (
    PLATFORMS,
    PackageSpec,
    build_channel,
    build_package,
    file_url,
    index_channel,
    pip_spec,
    standard_specs,
    torchlike_specs,
    zlibstub_spec,
)
from tests.fixtures.project import make_project, write_spec
from tests.fixtures.wheels import build_wheel, build_wheelhouse, standard_wheels

CONDA = ("python=3.10.*", "pip", "torchlike")
PIP = ("alpha>=1", "gamma")


class Fixture:
    """A project locked once from its own channel (as a directory mirror of conda-forge, or as a
    file:// channel) and wheelhouse."""

    def __init__(self, root: Path, mirror: bool, pip: Sequence[str] = PIP) -> None:
        self.channel = build_channel(root / "channel", standard_specs())
        self.wheels = build_wheelhouse(root / "wheels", standard_wheels())
        self.mirror = mirror
        channels = ("conda-forge",) if mirror else (file_url(self.channel),)
        self.project = make_project(root / "proj", channels=channels, conda=CONDA, pip=pip)
        self.channels = channels

    def lock(self, capsys, *extra: str) -> dict:
        """`bootstrap lock --json ...`; returns the envelope's env (asserting exit 0)."""
        capsys.readouterr()
        mirror = ("--mirror", f"conda-forge={self.channel}") if self.mirror else ()
        code = main(
            [
                "lock",
                "--root",
                str(self.project.root),
                "--cache-dir",
                str(self.project.root / ".cache"),
                "--pip-find-links",
                str(self.wheels),
                "--pip-no-index",
                "--pip-offline",
                *mirror,
                "--json",
                *extra,
            ]
        )
        out, err = capsys.readouterr()
        assert code == 0, err
        (env,) = json.loads(out)["envs"]
        return env

    def publish_conda(self, specs: Sequence[PackageSpec]) -> None:
        for spec in specs:
            build_package(spec, self.channel)
        index_channel(self.channel)

    def spec(self, conda: Sequence[str] = CONDA, pip: Sequence[str] = PIP) -> None:
        write_spec(self.project.root, channels=self.channels, conda=conda, pip=pip)


@pytest.fixture
def mirrored(tmp_path: Path, capsys) -> Fixture:
    fixture = Fixture(tmp_path, mirror=True)
    assert fixture.lock(capsys)["new"]
    return fixture


def newer_conda() -> list[PackageSpec]:
    """pip 25.1, zlibstub 1.3.2 and torchlike 1.1, which needs zlibstub >=1.3.2."""
    specs = [replace(pip_spec(), version="25.1")]
    for subdir in PLATFORMS:
        specs.append(replace(zlibstub_spec(subdir), version="1.3.2"))
        specs += [replace(t, version="1.1", depends=[*t.depends, "zlibstub >=1.3.2"]) for t in torchlike_specs(subdir)]
    return specs


def new_conda() -> list[PackageSpec]:
    """newpkg 1.0, which needs newdep: in no lock yet."""
    return [
        PackageSpec("newpkg", "1.0", noarch="generic", depends=["newdep >=1"]),
        PackageSpec("newdep", "1.0", noarch="generic"),
    ]


def publish_pip(wheels: Path) -> None:
    """Newer alpha (needs beta 2.1), beta and gamma; and delta, which needs epsilon: in no lock yet."""
    build_wheel(wheels, "alpha", "1.2", requires=["beta>=2.1"])
    build_wheel(wheels, "beta", "2.1")
    build_wheel(wheels, "gamma", "0.6")
    build_wheel(wheels, "delta", "1.0", requires=["epsilon"])
    build_wheel(wheels, "epsilon", "1.0")


def moved(env: dict) -> dict:
    """platform -> (added, removed, changed) of a `lock --json` env."""
    return {p["platform"]: (p["added"], p["removed"], p["changed"]) for p in env["platforms"]}


def torchlike_build(platform: str) -> str:
    return "cuda12_1" if platform == "linux-64" else "cpu_0"


@pytest.mark.slow
def test_a_relock_moves_only_what_the_spec_needs_then_update_then_upgrade(mirrored: Fixture, capsys) -> None:
    path = mirrored.project.lock_path("py310")
    before = {(p.platform, p.manager, p.name): p for p in read_lock(path).packages}
    mirrored.publish_conda(newer_conda() + new_conda())
    publish_pip(mirrored.wheels)
    mirrored.spec(conda=(*CONDA, "newpkg"), pip=(*PIP, "delta"))

    added = ["newdep 1.0 h0_0", "newpkg 1.0 h0_0", "delta 1.0", "epsilon 1.0"]
    assert moved(mirrored.lock(capsys)) == {p: (added, [], []) for p in PLATFORMS}
    after = {(p.platform, p.manager, p.name): p for p in read_lock(path).packages}
    assert {key: after[key] for key in before} == before  # every old entry as it was: url, hash, edges

    updated = mirrored.lock(capsys, "--update", "torchlike", "Alpha")  # pip names compare normalised
    assert moved(updated) == {
        p: (
            [],
            [],
            [
                f"torchlike 1.0 ({torchlike_build(p)}) -> 1.1 ({torchlike_build(p)})",
                "zlibstub 1.3.1 (h0_0) -> 1.3.2 (h0_0)",  # torchlike 1.1 needs it
                "alpha 1.1 -> 1.2",
                "beta 2.0 -> 2.1",  # alpha 1.2 needs it
            ],
        )
        for p in PLATFORMS
    }

    upgraded = mirrored.lock(capsys, "--upgrade")
    assert moved(upgraded) == {
        p: ([], [], ["pip 25.0 (pyh0_0) -> 25.1 (pyh0_0)", "gamma 0.5 -> 0.6"]) for p in PLATFORMS
    }
    assert main(["lock", "--check", "--root", str(mirrored.project.root)]) == 0


@pytest.mark.slow
def test_what_the_channel_or_index_dropped_is_not_preferred(tmp_path: Path, capsys) -> None:
    """Over a file:// channel (rattler's gateway, not the directory mirror's repodata file): the
    rest is still preferred over the newer versions published beside."""
    fixture = Fixture(tmp_path, mirror=False)
    fixture.lock(capsys)
    fixture.publish_conda([replace(zlibstub_spec("linux-64"), version="1.3.2"), replace(pip_spec(), version="25.1")])
    (fixture.channel / "linux-64" / zlibstub_spec("linux-64").fn).unlink()
    index_channel(fixture.channel)
    publish_pip(fixture.wheels)
    next(fixture.wheels.glob("gamma-0.5-*.whl")).unlink()
    assert moved(fixture.lock(capsys)) == {
        "linux-64": ([], [], ["zlibstub 1.3.1 (h0_0) -> 1.3.2 (h0_0)", "gamma 0.5 -> 0.6"]),
        "osx-arm64": ([], [], ["gamma 0.5 -> 0.6"]),
        "win-64": ([], [], ["gamma 0.5 -> 0.6"]),
    }


@pytest.mark.slow
def test_a_kept_wheel_keeps_its_own_dependencies(tmp_path: Path, capsys) -> None:
    """alpha 1.0 needs nothing, the newer 1.1 needs beta: the edges are those of the version kept."""
    fixture = Fixture(tmp_path, mirror=True, pip=("alpha==1.0", "gamma"))
    fixture.lock(capsys)
    fixture.spec(pip=PIP)
    assert moved(fixture.lock(capsys)) == {p: ([], [], []) for p in PLATFORMS}
    alphas = [p for p in read_lock(fixture.project.lock_path("py310")).packages if p.name == "alpha"]
    assert [(p.version, dict(p.dependencies)) for p in alphas] == [("1.0", {})] * len(PLATFORMS)
    assert main(["lock", "--check", "--root", str(fixture.project.root)]) == 0


@pytest.mark.slow  # a real lock first (the fixture's three solves)
def test_update_of_a_name_in_no_lock_writes_nothing(mirrored: Fixture, capsys) -> None:
    root = mirrored.project.root
    write_spec(root, name="py39", conda=("python=3.9.*", "pip"), pip=())
    mirrored.lock(capsys, "py39")
    mirrored.spec(pip=(*PIP, "delta"))  # a relock would write py310's lock
    publish_pip(mirrored.wheels)
    locks = [mirrored.project.lock_path(env) for env in ("py310", "py39")]
    before = [path.read_bytes() for path in locks]
    base = [
        "lock",
        "--root",
        str(root),
        "--mirror",
        f"conda-forge={mirrored.channel}",
        "--pip-find-links",
        str(mirrored.wheels),
        "--pip-no-index",
        "--pip-offline",
    ]
    for extra, named in [
        (("--update", "nosuch"), "'nosuch' is in no lock of py310"),
        (("--update", "gamma"), "'gamma' is in no lock of py39"),  # py310's would move
        (("--update", "gamma", "--upgrade"), "--upgrade already moves every package"),
    ]:
        capsys.readouterr()
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert named in err and err.count("\n") == 1, err
        assert [path.read_bytes() for path in locks] == before
    assert main(["lock", "--check", "--root", str(root), "--update", "gamma"]) == 2
