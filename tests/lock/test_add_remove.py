"""`bootstrap add` and `remove`: one line of a spec that carries comments, quoting and variants
changed, every variant's lock relocked by what that line needs and nothing else, and all of it or
nothing written. Real rattler and uv over the suite's own channel (a directory mirror of
conda-forge) and wheelhouse, offline; the install step is tested in test_add_install.py."""

from __future__ import annotations

import difflib
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.lock.lockfile import read_lock
from bootstrap.project import Project
from tests.fixtures.conda_channel import PLATFORMS, PackageSpec, build_channel, standard_specs
from tests.fixtures.env_project import offline_sources
from tests.fixtures.project import write_virtual_packages
from tests.fixtures.wheels import WheelSpec, build_wheelhouse, standard_wheels

SPEC = """\
# A team env: every comment, blank line and quote here must survive an edit.
name: py310
channels:
  - conda-forge   # the only channel

platforms:
  - linux-64
  - osx-arm64
  - win-64
dependencies:
  - "python=3.10.*"   # quoted on purpose
  - pip
  - torchlike
  - pip:
      - 'alpha>=1'
      - gamma  # the last pip line
      - torch
# torch builds side by side
variants:
  - name: cpu   # the default: conda-lock.yml
    torch: "==2.10.0+cpu"
  - name: cu128
    torch: "==2.10.0+cu128"
    platforms: [linux-64]
"""
LOCKS = ("conda-lock.yml", "envs/py310.cu128.conda-lock.yml")


def extra_conda() -> list[PackageSpec]:
    """newpkg (needs newdep), and clash, which needs a torchlike the channel does not have."""
    return [
        PackageSpec("newpkg", "1.0", noarch="generic", depends=["newdep >=1"]),
        PackageSpec("newdep", "1.0", noarch="generic"),
        PackageSpec("clash", "1.0", noarch="generic", depends=["torchlike >=2"]),
    ]


def extra_wheels() -> list[WheelSpec]:
    """delta (needs epsilon), clashy (needs a gamma the wheelhouse does not have), two torch builds."""
    return [
        WheelSpec("delta", "1.0", requires=("epsilon",)),
        WheelSpec("epsilon", "1.0"),
        WheelSpec("clashy", "1.0", requires=("gamma>=1",)),
        WheelSpec("torch", "2.10.0+cpu"),
        WheelSpec("torch", "2.10.0+cu128"),
    ]


class Sources:
    def __init__(self, root: Path) -> None:
        self.channel = build_channel(root / "channel", standard_specs() + extra_conda())
        self.wheels = build_wheelhouse(root / "wheels", standard_wheels() + extra_wheels())
        self.repodata = root / "repodata"

    def args(self, project: Project) -> list[str]:
        return offline_sources(project, self.channel, self.wheels)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Sources:
    return Sources(tmp_path_factory.mktemp("add-sources"))


@pytest.fixture(scope="module")
def locked_once(tmp_path_factory, sources: Sources) -> Project:
    root = tmp_path_factory.mktemp("add-project") / "proj"
    (root / "envs").mkdir(parents=True)
    (root / "envs" / "py310.yml").write_text(SPEC)
    write_virtual_packages(root)
    project = Project(root)
    assert main(["lock", *sources.args(project), "--cache-dir", str(sources.repodata), "--quiet"]) == 0
    assert main(["export", "--root", str(root), "-o", str(root / "environment.yml")]) == 0
    return project


@pytest.fixture
def project(locked_once: Project, tmp_path: Path) -> Project:
    shutil.copytree(locked_once.root, tmp_path / "proj")
    return Project(tmp_path / "proj")


def run(capsys, sources: Sources, project: Project, verb: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(
        [verb, *sources.args(project), "--repodata-cache", str(sources.repodata), "--no-install", "--quiet", *argv]
    )
    out, err = capsys.readouterr()
    return code, out, err


def hashes(project: Project) -> dict[str, str]:
    """Every file of the project, by its path: what "nothing written" compares."""
    return {
        p.relative_to(project.root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(project.root.rglob("*"))
        if p.is_file()
    }


def inserted(before: str, after: str) -> list[str]:
    """The lines `after` has that `before` lacks, asserting that nothing else differs."""
    ops = difflib.SequenceMatcher(a=before.splitlines(True), b=after.splitlines(True)).get_opcodes()
    changes = [op for op in ops if op[0] != "equal"]
    assert all(op[0] == "insert" for op in changes), changes
    return [line for _, _, _, j1, j2 in changes for line in after.splitlines(True)[j1:j2]]


def entries(project: Project, lock: str) -> dict[tuple[str, str, str], object]:
    return {(p.platform, p.manager, p.name): p for p in read_lock(project.root / lock).packages}


def test_add_conda_then_pip_then_remove_both_restores_every_byte(project: Project, sources: Sources, capsys) -> None:
    before = {name: (project.root / name).read_bytes() for name in (*LOCKS, "envs/py310.yml", "environment.yml")}
    old = {lock: entries(project, lock) for lock in LOCKS}

    code, out, err = run(capsys, sources, project, "add", "newpkg")
    assert code == 0, err
    assert "added 'newpkg' to envs/py310.yml (conda: conda-forge has it)" in out
    assert out.endswith("py310: the env is left as it was (--no-install); `make env` applies the new lock\n")
    spec = project.spec_path("py310").read_text()
    assert inserted(SPEC, spec) == ["  - newpkg\n"]
    for lock, platforms in zip(LOCKS, (PLATFORMS, ("linux-64",))):
        new = entries(project, lock)
        assert {k: new[k] for k in old[lock]} == old[lock]  # every other record as it was
        assert sorted(set(new) - set(old[lock])) == sorted(
            (p, "conda", n) for p in platforms for n in ("newdep", "newpkg")
        )
    assert "newpkg" in (project.root / "environment.yml").read_text()

    code, out, err = run(capsys, sources, project, "add", "delta>=1")
    assert code == 0, err
    assert "added 'delta>=1' to envs/py310.yml (pip: not on conda-forge)" in out
    assert inserted(spec, project.spec_path("py310").read_text()) == ["      - delta>=1\n"]
    for lock, platforms in zip(LOCKS, (PLATFORMS, ("linux-64",))):
        added = set(entries(project, lock)) - set(old[lock])
        assert {k for k in added if k[1] == "pip"} == {(p, "pip", n) for p in platforms for n in ("delta", "epsilon")}
    assert main(["lock", "--check", "--root", str(project.root)]) == 0

    code, out, err = run(capsys, sources, project, "remove", "newpkg", "Delta")
    assert code == 0, err
    assert "- newdep 1.0 h0_0" in out and "- epsilon 1.0" in out  # what only they needed left too
    after = {name: (project.root / name).read_bytes() for name in before}
    assert after == before


def test_replace_changes_the_line_in_place_and_moves_only_what_it_must(
    project: Project, sources: Sources, capsys
) -> None:
    code, _, err = run(capsys, sources, project, "add", "alpha==1.0")
    assert code == 2 and err.count("\n") == 1
    assert "alpha is listed already as 'alpha>=1' (py310.yml:15, pip:)" in err
    assert "`add --replace alpha==1.0` replaces it" in err
    code, out, err = run(capsys, sources, project, "add", "--replace", "alpha==1.0", "--json")
    assert code == 0, err
    envelope = json.loads(out)
    assert envelope["format"] == "bootstrap.change" and envelope["install"] is None
    assert envelope["edits"] == [
        {
            "action": "replaced",
            "manager": "pip",
            "name": "alpha",
            "text": "alpha==1.0",
            "before": "alpha>=1",
            "why": "listed in pip:",
        }
    ]
    (default, variant) = envelope["locks"]
    assert [(p["platform"], p["removed"], p["changed"]) for p in variant["platforms"]] == [
        ("linux-64", ["beta 2.0"], ["alpha 1.1 -> 1.0"])
    ]
    assert all(p["added"] == [] for p in default["platforms"])
    assert project.spec_path("py310").read_text() == SPEC.replace("'alpha>=1'", "'alpha==1.0'")  # quotes kept

    code, out, _ = run(capsys, sources, project, "add", "alpha==1.0")  # the same requirement: nothing to do
    assert code == 0 and "is listed already" in out and "--no-install" not in out  # nothing to apply


def test_dry_run_writes_nothing(project: Project, sources: Sources, capsys) -> None:
    files = hashes(project)
    code, out, err = run(capsys, sources, project, "add", "newpkg", "--dry-run")
    assert code == 0, err
    assert "would add 'newpkg'" in out and "would write conda-lock.yml" in out
    assert hashes(project) == files


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("add", "clash"), "add 'clash': conflicts with 'torchlike': "),
        (("add", "clashy"), "add 'clashy': conflicts with 'gamma': "),
        (("add", "--replace", "gamma>=1"), "add 'gamma>=1': nothing on the channel or the pip indexes matches gamma"),
        (("add", "--replace", "torchlike>=3"), "add 'torchlike>=3': nothing on the channel or the pip indexes matches"),
    ],
)
def test_a_failed_solve_leaves_every_file_byte_identical(
    project: Project, sources: Sources, capsys, argv: tuple, says: str
) -> None:
    files = hashes(project)
    code, out, err = run(capsys, sources, project, *argv)
    assert (code, out) == (2, ""), err
    assert says in err and err.count("\n") == 1 and err.startswith(f"error: {project.spec_path('py310')}: "), err
    assert "bootstrap-change-" not in err  # the staging copy's paths never show
    assert hashes(project) == files


BAD = [
    (("add", "nosuch"), "neither conda-forge nor the pip find-links (--pip-no-index) have a package 'nosuch'"),
    (("add", "alhpa"), "(nearest: alpha)"),
    (("add", "newpgk"), "(nearest: newpkg, newdep)"),
    (("add", "--conda", "delta"), "conda-forge has no package 'delta' (the pip find-links have it: --pip)"),
    (("add", "--pip", "newpkg"), "have no package 'newpkg' (conda-forge has it: --conda)"),
    (("add", "--pip", "torchlike"), "torchlike is listed in the conda dependencies"),
    (("add", "torchlike>=1"), "torchlike is listed already as 'torchlike' (py310.yml:13, the conda dependencies)"),
    (("add", "GAMMA<1"), "gamma is listed already as 'gamma'"),
    (("add", "newpkg", "newpkg>=1"), "'newpkg' and 'newpkg>=1' name one package"),
    (("add", "alpha >>= 1"), "neither a pip requirement nor a conda match spec (unable to parse"),
    (("add", "-e ."), "is not a requirement"),
    (("add", ""), "is not a requirement"),
    (("add", "--conda", "newpkg; sys_platform == 'linux'"), "add --conda:"),
    (("add", "--pip", "delta=1.0"), "add --pip:"),
    (("add", "--pip", "delta @ file:///x/delta.tar.gz"), "only a wheel over http(s) can be locked"),
    (("remove", "nosuch"), "remove 'nosuch': not listed in the spec (the spec lists alpha, gamma, pip, python"),
    (("remove", "alhpa"), "(nearest: alpha)"),
    (("remove", "beta"), "beta is in the lock as a dependency of what the spec lists"),
    (("remove", "python"), "a pip: section needs `python`"),
    (("add", "--env", "py39", "newpkg"), "unknown env 'py39'"),
]


@pytest.mark.parametrize(("argv", "says"), BAD, ids=[" ".join(argv) for argv, _ in BAD])
def test_bad_input_is_one_line_and_writes_nothing(project: Project, sources: Sources, capsys, argv, says) -> None:
    files = hashes(project)
    code, out, err = run(capsys, sources, project, *argv)
    assert (code, out) == (2, ""), err
    assert says in err and err.count("\n") == 1, err
    assert hashes(project) == files


INVALID_SPECS = [
    ("an unknown key", SPEC + "extra: 1\n", "unknown key 'extra'"),
    ("malformed YAML", SPEC.replace("  - pip\n", "  - pip: [\n"), "malformed YAML"),
    ("flow-style dependencies", SPEC.split("dependencies:")[0] + "dependencies: [python, pip]\n", "flow list"),
    ("a bad match spec", SPEC.replace("  - torchlike\n", "  - torchlike >>= 1\n"), "not a valid conda match spec"),
]


@pytest.mark.parametrize(("text", "says"), [c[1:] for c in INVALID_SPECS], ids=[c[0] for c in INVALID_SPECS])
def test_a_spec_that_is_not_valid_before_the_edit_is_refused(
    project: Project, sources: Sources, capsys, text: str, says: str
) -> None:
    project.spec_path("py310").write_text(text)
    files = hashes(project)
    for verb, item in (("add", "newpkg"), ("remove", "gamma")):
        code, out, err = run(capsys, sources, project, verb, item)
        assert (code, out) == (2, ""), err
        assert says in err and err.count("\n") == 1, err
        assert hashes(project) == files


def test_a_spec_without_a_pip_section_gets_one(project: Project, sources: Sources, capsys) -> None:
    text = SPEC.split("  - pip:\n")[0].replace("  - pip\n", "")  # no variants either: they vary a pip torch
    project.spec_path("py310").write_text(text)
    code, _, err = run(capsys, sources, project, "add", "gamma")
    assert code == 0, err
    assert inserted(text, project.spec_path("py310").read_text()) == ["  - pip\n", "  - pip:\n", "      - gamma\n"]
    code, _, err = run(capsys, sources, project, "remove", "gamma")
    assert code == 0, err
    assert inserted(text, project.spec_path("py310").read_text()) == ["  - pip\n"]


# Requirement strings that are neither a pip requirement nor a conda match spec, made from pieces
# that each break one rule: an operator without a version, a bracket left open, a bare URL, ...
BROKEN = [
    f"{head}{tail}"
    for head in ("alpha", "newpkg")
    for tail in (" ==", "[", " @", ";", "==1.0;;", ">>=1", "(", "[extra", " @ ", "===")
] + ["@", "==1.0", "[x]", "; sys_platform == 'linux'", "-r requirements.txt", "--index-url x"]


def test_many_broken_requirements_are_one_line_each_and_write_nothing(
    project: Project, sources: Sources, capsys
) -> None:
    files = hashes(project)
    for text in BROKEN:
        code, out, err = run(capsys, sources, project, "add", "--", text)
        assert (code, out) == (2, ""), (text, err)
        assert err.startswith("error: ") and err.count("\n") == 1, (text, err)
    assert hashes(project) == files
