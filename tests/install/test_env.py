"""`bootstrap env` end to end: real rattler links, real uv installs, a python that runs.

The fixture project (tests/fixtures/env_project.py, fixtures in conftest.py) is
locked from a channel whose `python` is a venv-style shim of the test
interpreter, so the created env really runs, and uv installs the locked wheels
into its own site-packages.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.lock.lockfile import read_lock
from bootstrap.prefix import INSTALL_RECORD, conda_records, read_install_record
from bootstrap.project import Project
from tests.fixtures import REPO
from tests.fixtures.conda_channel import corrupt_archive_after_index, serve_directory
from tests.fixtures.env_project import (
    CONDA,
    assert_matches_lock,
    change_lock,
    env_args,
    prefix_of,
    relock,
    run_python,
    without_progress,
)
from tests.fixtures.project import copy_project, make_project, write_spec
from tests.fixtures.runnable_env import SHORT, build_runnable_channel


def test_create_from_directory_mirror_then_noop(project: Project, channel: Path, capsys) -> None:
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    assert prefix.is_symlink()
    assert_matches_lock(project)
    import base64
    import hashlib

    direct_urls = list(prefix.glob("lib/python*/site-packages/*.dist-info/direct_url.json"))
    assert len(direct_urls) == 3
    for direct_url in direct_urls:  # rewritten to the lock's URL: the RECORD line follows the bytes
        digest = base64.urlsafe_b64encode(hashlib.sha256(direct_url.read_bytes()).digest()).rstrip(b"=").decode()
        line = f"{direct_url.parent.name}/direct_url.json,sha256={digest},{direct_url.stat().st_size}"
        assert line in (direct_url.parent / "RECORD").read_text().splitlines()
    assert run_python(prefix, "import sys, alpha, beta; print(sys.prefix)") == str(prefix)
    assert (prefix / "share/torchlike/build.txt").read_text().startswith("cuda12")  # the locked CUDA build
    # The pip entry point of the conda pip package points at the stable path, not a generation.
    assert (prefix / "bin" / "pip").read_text().startswith(f"#!{prefix}/bin/python")
    generation = read_install_record(prefix).generation
    (prefix.parent / ".py310.gens" / "2.partial").mkdir()  # a killed change's, whose lock was put back
    capsys.readouterr()
    assert main(env_args(project, "/nonexistent-mirror")) == 0  # nothing to fetch, so no mirror needed
    out = capsys.readouterr().out
    assert "is up to date" in out
    assert generation_dirs(project) == ["1"]  # the killed change's partial removed, nothing made
    assert read_install_record(prefix).generation == generation
    # A no-op starts a fresh interpreter each time (`make env`): it must not load the linker's engines.
    code = (
        "import json, sys; from bootstrap.cli import main; code = main(sys.argv[1:]); "
        "print(json.dumps([code, sorted(m for m in ('asyncio', 'rattler', 'bootstrap.bench.run') "
        "if m in sys.modules)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *env_args(project, "/nonexistent-mirror")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [0, []], done.stderr


def test_create_over_http_mirror(project: Project, channel: Path) -> None:
    with serve_directory(channel) as url:
        assert main(env_args(project, url)) == 0
        assert any(path.endswith(".tar.bz2") for path in url.requests)
    assert_matches_lock(project)


def test_records_that_need_glibc_and_unix_install_and_keep_those_dependencies(project: Project, channel: Path) -> None:
    """zlibstub depends on `__glibc >=2.17,<3.0.a0` and `__unix`: the lock keeps them, nothing tries to
    fetch or link them, and the env's conda-meta record lists them as conda's would."""
    lock = read_lock(project.lock_path("py310"))
    (zlib,) = [p for p in lock.for_platform("linux-64", "conda") if p.name == "zlibstub"]
    assert zlib.virtual_dependencies == {"__glibc": ">=2.17,<3.0.a0", "__unix": ""}
    assert main(env_args(project, str(channel))) == 0
    assert_matches_lock(project)
    (record,) = prefix_of(project).glob("conda-meta/zlibstub-*.json")
    assert {"__glibc >=2.17,<3.0.a0", "__unix"} <= set(json.loads(record.read_text())["depends"])


def test_lock_change_applies_only_the_difference(project: Project, channel: Path, wheels: Path, capsys) -> None:
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    write_spec(
        project.root,
        platforms=("linux-64",),
        conda=tuple(c for c in CONDA if c != "torchlike"),
        pip=("alpha==1.0", "gamma"),
    )
    relock(project, channel, wheels)
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["plan"] == {
        "link": [],
        "unlink": [{"name": "torchlike", "version": "1.0", "build": "cuda12_1"}],
        "pip_install": [{"name": "alpha", "version": "1.0"}],
        "pip_remove": [{"name": "alpha", "version": "1.1"}, {"name": "beta", "version": "2.0"}],
    }
    assert report["generation"] == 2 and report["changed"]
    assert_matches_lock(project)
    from bootstrap.install.history import requested_specs

    # conda's own record of the request, as `conda env export --from-history` reads it.
    assert requested_specs(prefix / "conda-meta" / "history") == {
        "python": f"python={SHORT}.*",
        "pip": "pip",
        "zlibstub": "zlibstub",
        "bigpkg": "bigpkg",
    }
    assert not (prefix / "share/torchlike").exists()
    assert run_python(prefix, "import alpha; print(alpha.__version__)") == "1.0"


def test_a_package_moved_between_pip_and_conda_is_installed_once(
    locked_once: Project, wheels: Path, tmp_path: Path, capsys
) -> None:
    """pip -> conda: the wheel is uninstalled before conda links its files (after, it would take them
    along); conda -> pip: the conda package is unlinked before uv installs the wheel."""
    from tests.fixtures.conda_channel import PackageSpec

    gamma = PackageSpec(
        "gamma",
        "0.6",
        noarch="python",
        files={
            "site-packages/gamma/__init__.py": "source = 'conda'\n",
            "site-packages/gamma-0.6.dist-info/METADATA": "Metadata-Version: 2.1\nName: gamma\nVersion: 0.6\n",
            "site-packages/gamma-0.6.dist-info/INSTALLER": "conda\n",
        },
    )
    channel = build_runnable_channel(tmp_path / "channel", extra=[gamma])
    project = copy_project(locked_once, tmp_path / "proj")
    relock(project, channel, wheels)
    assert main(env_args(project, str(channel))) == 0
    show = (
        "import gamma, importlib.metadata as m; "
        "print(sorted(d.version for d in m.distributions() if d.metadata['Name'] == 'gamma'), gamma.__file__)"
    )
    for conda, pip, versions in (((*CONDA, "gamma"), ("alpha",), "['0.6']"), (CONDA, ("alpha", "gamma"), "['0.5']")):
        change_lock(project, channel, wheels, conda=conda, pip=pip)
        assert main(env_args(project, str(channel))) == 0
        assert run_python(prefix_of(project), show).startswith(f"{versions} "), conda
        assert_matches_lock(project)
        capsys.readouterr()
        assert main(env_args(project, str(channel))) == 0
        assert "is up to date" in capsys.readouterr().out


def env_json(project: Project, channel: Path, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--json", *extra)) == 0
    return json.loads(capsys.readouterr().out)


def test_an_install_from_a_lock_its_spec_has_moved_on_from_says_so(project: Project, channel: Path, capsys) -> None:
    """The lock is what installs (it is what reproduces), but an edited spec it no longer reflects gets a
    note pointing at `make lock`; a comment or a reordered key is no change."""
    spec = project.spec_path("py310")
    spec.write_text("# the team's env\n" + spec.read_text())
    assert main(env_args(project, str(channel))) == 0
    assert "changed since" not in capsys.readouterr().out
    write_spec(project.root, platforms=("linux-64",), conda=CONDA, pip=("alpha", "gamma", "beta"))
    assert main(env_args(project, str(channel), "--json")) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert notes == [
        "py310.yml or virtual-packages.yml changed since conda-lock.yml was locked: this installs "
        "the lock as it is; `make lock` takes the change"
    ]
    assert main(env_args(project, str(channel))) == 0  # up to date with the lock, still behind the spec
    assert "note: py310.yml or virtual-packages.yml changed since conda-lock.yml" in capsys.readouterr().out
    assert main(env_args(project, str(channel), "--lock", str(project.lock_path("py310")))) == 0
    assert "changed since" not in capsys.readouterr().out  # --lock FILE names the lock to install, spec or not


def test_ctrl_c_after_the_switch_reports_the_switch(
    project: Project, channel: Path, wheels: Path, capsys, monkeypatch
) -> None:
    """Removing the older generations comes after the switch: a Ctrl-C there must not report the
    change as interrupted (exit 130) when the env is already the new one."""
    from bootstrap.install import generations

    assert main(env_args(project, str(channel))) == 0
    change_lock(project, channel, wheels, pip=("alpha==1.0", "gamma"))

    def interrupted(layout, keep, grace_s):
        raise KeyboardInterrupt

    monkeypatch.setattr(generations, "collect_garbage", interrupted)
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 0
    out = capsys.readouterr().out
    assert "-> generation 2" in out and "note: interrupted while removing older generations, after the switch" in out
    assert read_install_record(prefix_of(project)).generation == "2"
    assert run_python(prefix_of(project), "import alpha; print(alpha.__version__)") == "1.0"


def generation_dirs(project: Project) -> list[str]:
    return sorted(p.name for p in (prefix_of(project).parent / ".py310.gens").iterdir() if p.is_dir())


def test_later_changes_recycle_the_retired_generation(project: Project, channel: Path, wheels: Path, capsys) -> None:
    """A: create; B: first change (a copy of A); C: built from A itself, two changes behind."""
    no_torch = tuple(c for c in CONDA if c != "torchlike")
    assert env_json(project, channel, capsys)["generation"] == 1
    gens_dir = prefix_of(project).parent / ".py310.gens"
    first_inode = os.stat(gens_dir / "1").st_ino
    change_lock(project, channel, wheels, conda=no_torch, pip=("alpha==1.0", "gamma"))
    second = env_json(project, channel, capsys)
    assert (second["generation"], second["base"], second["recycled"]) == (2, 1, False)
    # conda env config vars set
    (prefix_of(project) / "conda-meta" / "state").write_text('{"env_vars": {"FOO": "1"}}\n')

    change_lock(project, channel, wheels, conda=no_torch, pip=("alpha==1.0",))
    third = env_json(project, channel, capsys)
    assert (third["generation"], third["base"], third["recycled"]) == (3, 1, True)
    # The plan is what was applied: generation 1 brought from A to C in place, same directory, now C.
    assert third["plan"] == {
        "link": [],
        "unlink": [{"name": "torchlike", "version": "1.0", "build": "cuda12_1"}],
        "pip_install": [{"name": "alpha", "version": "1.0"}],
        "pip_remove": [
            {"name": "alpha", "version": "1.1"},
            {"name": "beta", "version": "2.0"},
            {"name": "gamma", "version": "0.5"},
        ],
    }
    assert generation_dirs(project) == ["2", "3"] and os.stat(gens_dir / "3").st_ino == first_inode
    assert_matches_lock(project)
    prefix = prefix_of(project)
    assert not (prefix / "share/torchlike").exists()
    assert run_python(prefix, "import alpha; print(alpha.__version__)") == "1.0"
    assert (prefix / "conda-meta" / "state").read_text() == '{"env_vars": {"FOO": "1"}}\n'  # carried from B
    from bootstrap.install.history import requested_specs

    history = (prefix / "conda-meta" / "history").read_text()
    assert history.count("# cmd: bootstrap env py310") == 3  # A, B and C: the history of B, carried on
    assert "torchlike" not in requested_specs(prefix / "conda-meta" / "history")
    assert main(["env", "--root", str(project.root), "--rollback"]) == 0
    assert os.readlink(prefix).endswith("/2")
    assert run_python(prefix, "import gamma; print('B')") == "B"


def tree_state(root: Path) -> dict:
    """relative path -> (inode, bytes) of every regular file under `root`."""
    return {
        str(path.relative_to(root)): (os.stat(path).st_ino, path.read_bytes())
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink()
    }


def test_a_change_never_writes_into_the_generation_it_starts_from(
    project: Project, channel: Path, wheels: Path, capsys
) -> None:
    """Generations share the files they have in common (hard links); rattler, uv and bootstrap
    replace files rather than write into them, so the generation in use stays as it was."""
    gens_dir = prefix_of(project).parent / ".py310.gens"
    assert main(env_args(project, str(channel))) == 0
    (prefix_of(project) / "conda-meta" / "state").write_text('{"env_vars": {"FOO": "1"}}\n')
    # First change (from a clone of 1): a conda package removed, a wheel swapped for another
    # version with the same paths, a history entry appended, conda's state carried.
    before = tree_state(gens_dir / "1")
    change_lock(
        project, channel, wheels, conda=tuple(c for c in CONDA if c != "torchlike"), pip=("alpha==1.0", "gamma")
    )
    assert env_json(project, channel, capsys)["recycled"] is False
    assert tree_state(gens_dir / "1") == before
    # Later change (1 recycled into 3): both back, while 2 is the one in use.
    before = tree_state(gens_dir / "2")
    change_lock(project, channel, wheels)
    assert env_json(project, channel, capsys)["recycled"] is True
    assert tree_state(gens_dir / "2") == before
    assert_matches_lock(project)

    def inode(gen: str, relative: str) -> int:
        return os.stat(gens_dir / gen / relative).st_ino

    shared = "share/bigpkg/f000002.txt"  # bigpkg never changed: one file on disk for both generations
    assert inode("2", shared) == inode("3", shared)
    for own in ("conda-meta/history", "conda-meta/state", f"conda-meta/{INSTALL_RECORD}"):  # written to in place
        assert os.stat(gens_dir / "3" / own).st_nlink == 1, own
    # The price of sharing: an edit written into a shared file shows in both; one that replaces it does not.
    with open(gens_dir / "3" / shared, "a") as handle:
        handle.write("edited in place\n")
    assert (gens_dir / "2" / shared).read_text().endswith("edited in place\n")
    replaced = "share/bigpkg/f000003.txt"
    text = (gens_dir / "3" / replaced).read_text()
    (gens_dir / "3" / "sed.tmp").write_text(text + "edited by sed -i\n")
    os.replace(gens_dir / "3" / "sed.tmp", gens_dir / "3" / replaced)
    assert (gens_dir / "2" / replaced).read_text() == text


def test_the_plan_a_dry_run_prints_is_the_plan_a_run_applies(
    project: Project, channel: Path, wheels: Path, capsys
) -> None:
    """Create (from nothing), a first change (from a clone of the current generation), and a later
    change that recycles the retired generation, two changes behind: each time the dry run names
    the same generation, start and actions as the run that follows reports."""
    no_torch = tuple(c for c in CONDA if c != "torchlike")
    steps = [
        ("create", None),
        ("clone", dict(conda=no_torch, pip=("alpha==1.0", "gamma"))),
        ("recycled", dict(conda=no_torch, pip=("alpha==1.0",))),
    ]
    for made, lock_change in steps:
        if lock_change is not None:
            change_lock(project, channel, wheels, **lock_change)
        dry = env_json(project, channel, capsys, "--dry-run")
        done = env_json(project, channel, capsys)
        keys = ("generation", "base", "made", "plan")
        assert {k: dry[k] for k in keys} == {k: done[k] for k in keys}, made
        assert (dry["dry_run"], dry["changed"], done["changed"]) == (True, False, True)
        assert done["made"] == ("empty" if made == "create" else made) and any(done["plan"].values())
        assert_matches_lock(project)
    assert (
        env_json(project, channel, capsys, "--dry-run")["plan"]
        == env_json(project, channel, capsys)["plan"]
        == {"link": [], "unlink": [], "pip_install": [], "pip_remove": []}
    )  # up to date: nothing to do either way


def test_a_first_change_starts_from_a_clone_and_leaves_the_first_generation_for_rollback(
    project: Project, channel: Path, wheels: Path, capsys
) -> None:
    gens_dir = prefix_of(project).parent / ".py310.gens"
    assert env_json(project, channel, capsys)["made"] == "empty"
    noop = env_json(project, channel, capsys)
    # a no-op makes nothing
    assert (noop["changed"], noop["generation"]) == (False, 1) and generation_dirs(project) == ["1"]
    before = tree_state(gens_dir / "1")
    change_lock(
        project, channel, wheels, conda=tuple(c for c in CONDA if c != "torchlike"), pip=("alpha==1.0", "gamma")
    )
    assert main(env_args(project, str(channel))) == 0
    out = capsys.readouterr().out
    assert "built from a clone of generation 1;" in out
    assert generation_dirs(project) == ["1", "2"] and tree_state(gens_dir / "1") == before
    assert_matches_lock(project)
    prefix = prefix_of(project)
    assert not (prefix / "share/torchlike").exists()
    assert run_python(prefix, "import alpha, gamma; print(alpha.__version__)") == "1.0"
    assert main(["env", "--root", str(project.root), "--rollback"]) == 0
    assert (prefix / "share/torchlike/build.txt").read_text().startswith("cuda12")


@pytest.mark.parametrize("cached_copies", [True, False], ids=["cached-copies", "cache-emptied"])
def test_a_change_leaves_the_packages_it_keeps_alone(
    project: Project, channel: Path, wheels: Path, capsys, cached_copies: bool
) -> None:
    """rattler is told what each kept package is from its cached copy's index.json, or, with the
    cache emptied, from the env's conda-meta; either way it sees the same sha256 and touches nothing."""
    gens_dir = prefix_of(project).parent / ".py310.gens"
    assert main(env_args(project, str(channel))) == 0
    if not cached_copies:
        shutil.rmtree(project.root / ".cache" / "pkgs")
    change_lock(
        project, channel, wheels, conda=tuple(c for c in CONDA if c != "torchlike"), pip=("alpha==1.0", "gamma")
    )
    assert env_json(project, channel, capsys)["generation"] == 2
    assert_matches_lock(project)
    kept = conda_records(gens_dir / "2")
    assert {r.name for r in kept} == {"python", "pip", "zlibstub", "bigpkg"}
    for record in kept:  # the clone's hard links (symlinks are made anew), not files linked again
        for relative in (f"conda-meta/{record.name}-{record.version}-{record.build}.json", *record.files):
            if not (gens_dir / "2" / relative).is_symlink():
                assert os.stat(gens_dir / "1" / relative).st_ino == os.stat(gens_dir / "2" / relative).st_ino, relative
    assert cached_copies or not any((project.root / ".cache" / "pkgs").glob("*/info"))  # nothing extracted again


def test_a_change_after_rollback_keeps_the_generation_rolled_back_to(
    project: Project, channel: Path, wheels: Path, capsys
) -> None:
    assert main(env_args(project, str(channel))) == 0
    change_lock(project, channel, wheels, pip=("alpha==1.0", "gamma"))
    assert main(env_args(project, str(channel))) == 0
    assert main(["env", "--root", str(project.root), "--rollback"]) == 0  # back on 1; 2 is retired
    change_lock(project, channel, wheels, pip=("alpha==1.0",))
    report = env_json(project, channel, capsys)
    assert (report["generation"], report["base"], report["recycled"]) == (3, 2, True)
    assert generation_dirs(project) == ["1", "3"]  # 1 was in use before this change: it is the one to go back to
    assert_matches_lock(project)
    assert main(["env", "--root", str(project.root), "--rollback"]) == 0
    assert os.readlink(prefix_of(project)).endswith("/1")
    assert run_python(prefix_of(project), "import alpha; print(alpha.__version__)") == "1.1"


def test_planning_reads_the_install_record_until_conda_meta_changes(
    project: Project, channel: Path, monkeypatch
) -> None:
    import bootstrap.prefix as prefix_module

    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    parsed = {(c.name, c.version, c.build, c.sha256) for c in conda_records(prefix)}

    def no_parsing(_prefix):
        raise AssertionError("parsed the records although conda-meta is as bootstrap left it")

    with monkeypatch.context() as patch:
        patch.setattr(prefix_module, "conda_records", no_parsing)
        assert {(c.name, c.version, c.build, c.sha256) for c in prefix_module.conda_packages(prefix)} == parsed
    # Another tool (conda, a hand edit) rewrites a record: the next plan parses, and sees it.
    (record,) = prefix.glob("conda-meta/zlibstub-*.json")
    data = json.loads(record.read_text())
    data["sha256"] = "0" * 64
    record.write_text(json.dumps(data))
    assert ("zlibstub", "0" * 64) in {(c.name, c.sha256) for c in prefix_module.conda_packages(prefix)}
    assert main(env_args(project, str(channel))) == 0  # and the env is repaired
    assert_matches_lock(project)


@pytest.mark.parametrize("first", [False, True], ids=["change", "create"])
def test_a_failed_uv_install_says_the_env_was_left_as_it_was(
    project: Project, channel: Path, wheels: Path, monkeypatch, capsys, first: bool
) -> None:
    """uv's error names paths in the generation being built, which is discarded once the run fails:
    the line names them relative to the env, and says that the env was left as it was (or not created)."""
    from bootstrap.install import pip
    from bootstrap.runner import Completed

    prefix = prefix_of(project)
    if not first:
        assert main(env_args(project, str(channel))) == 0
        change_lock(project, channel, wheels, pip=("alpha==1.0", "gamma"))
        before = os.readlink(prefix)
    real = pip._run_uv

    def failing_install(argv, timeout, held):
        if "install" not in argv:
            return real(argv, timeout, held)
        site = next(Path(argv[argv.index("--python") + 1]).parent.parent.glob("lib/python3*/site-packages"))
        return Completed(
            tuple(argv),
            2,
            "",
            f"Resolved 2 packages in 3ms\nerror: Failed to install: alpha-1.0\n"
            f"  Caused by: failed to create directory `{site}/alpha`: Disk on fire\n",
        )

    monkeypatch.setattr(pip, "_run_uv", failing_install)
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 2
    err = without_progress(capsys.readouterr().err)
    outcome = f"{prefix} was not created" if first else f"{prefix} was left as it was"
    assert err.startswith(
        f"error: uv pip install failed in the next generation of {prefix} (discarded): "
        "Failed to install: alpha-1.0 Caused by: failed to create directory `lib/python3."
    ), err
    assert err.endswith(f"/site-packages/alpha`: Disk on fire; {outcome}\n") and err.count("\n") == 1, err
    assert ".partial" not in err and f"{prefix}/lib" not in err, err  # neither the discarded path nor the env's
    if first:
        assert not os.path.lexists(prefix) and not (prefix.parent / ".py310.gens").exists()
    else:
        assert os.readlink(prefix) == before and generation_dirs(project) == ["1"]


def test_dry_run_prints_the_plan_and_touches_nothing(project: Project, channel: Path, capsys) -> None:
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--dry-run")) == 0
    out = capsys.readouterr().out
    assert f"link    python {SHORT}" in out and "pip add alpha 1.1" in out
    assert not (project.root / ".envs").exists()
    assert not (project.root / ".cache").exists()  # not even the parsed form of the lock is kept


def artifact_bytes(project: Project, channel: Path) -> int:
    """What every archive and wheel of the lock weighs, read from the files the fixture serves."""
    total = 0
    for entry in read_lock(project.lock_path("py310")).for_platform("linux-64"):
        local = entry.url.replace("https://conda.anaconda.org/conda-forge", channel.as_uri())
        total += Path(local.replace("file://", "")).stat().st_size
    return total


def test_every_plan_says_what_it_installs_and_downloads_weigh(project: Project, channel: Path, capsys) -> None:
    """A dry run, a run and --json give the bytes of what the plan installs and of what the package cache
    lacks of it; a second env from the same cache downloads nothing."""
    from bootstrap.commands.cache import size_text

    count = len(read_lock(project.lock_path("py310")).for_platform("linux-64"))
    total = artifact_bytes(project, channel)
    fresh = f"size: {count} packages and wheels, {size_text(total)}; {size_text(total)} of it"
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--dry-run")) == 0
    assert f"\n  {fresh} to download ({count} not in the cache)\n" in capsys.readouterr().out
    dry = env_json(project, channel, capsys, "--dry-run")
    assert dry["size"] == {
        "files": count,
        "bytes": total,
        "download_files": count,
        "download_bytes": total,
        "unknown": 0,
    }
    assert main(env_args(project, str(channel))) == 0
    assert f"\n  {fresh} downloaded ({count} not in the cache)\n" in capsys.readouterr().out
    second = env_json(project, channel, capsys, "--dry-run", "--prefix", str(project.root / ".envs" / "other"))
    assert second["size"] == {**dry["size"], "download_files": 0, "download_bytes": 0}
    assert main(env_args(project, str(channel), "--prefix", str(project.root / ".envs" / "other"))) == 0
    out = capsys.readouterr().out
    assert f"\n  size: {count} packages and wheels, {size_text(total)}; all in the package cache\n" in out
    assert env_json(project, channel, capsys)["size"] is None  # nothing to do, nothing weighed


def test_a_plan_offline_says_which_sizes_it_does_not_know(project: Project, capsys) -> None:
    """A mirror that cannot be reached sizes nothing: the plan says how many it could not size."""
    capsys.readouterr()
    assert main(env_args(project, "http://127.0.0.1:9/nowhere", "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "not in the cache, " in out and " of unknown size)" in out, out


def test_rollback(project: Project, channel: Path, wheels: Path, capsys) -> None:
    assert main(env_args(project, str(channel))) == 0
    write_spec(project.root, platforms=("linux-64",), conda=CONDA, pip=("alpha==1.0",))
    relock(project, channel, wheels)
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    assert run_python(prefix, "import alpha; print(alpha.__version__)") == "1.0"
    capsys.readouterr()
    assert main(["env", "--root", str(project.root), "--rollback", "--dry-run"]) == 0
    assert f"{prefix} would point at generation 1 (now 2); nothing changed" in capsys.readouterr().out
    assert main(["env", "--root", str(project.root), "--rollback", "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "format": "bootstrap.env",
        "version": 2,
        "prefix": str(prefix),
        "rollback": True,
        "dry_run": True,
        "generation": 1,
        "was": 2,
        "changed": False,
        "notes": [],  # files of generation 1 edited since it was made, through a link generation 2 shares
    }
    assert os.readlink(prefix).endswith("/2")
    assert main(["env", "--root", str(project.root), "--rollback"]) == 0
    assert run_python(prefix, "import alpha; print(alpha.__version__)") == "1.1"
    assert os.readlink(prefix).endswith("/1")


def test_rollback_without_an_env_creates_nothing(project: Project, tmp_path: Path, capsys) -> None:
    prefix = tmp_path / "never" / "env"
    capsys.readouterr()
    assert main(["env", "--root", str(project.root), "--prefix", str(prefix), "--rollback"]) == 2
    assert f"--rollback: no env at {prefix} (create it" in capsys.readouterr().err
    assert not prefix.parent.exists()


def test_conda_archive_with_wrong_bytes_is_refused(project: Project, channel: Path, tmp_path: Path, capsys) -> None:
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    before = os.readlink(prefix)
    bad = tmp_path / "bad-channel"
    shutil.copytree(channel, bad)
    corrupt_archive_after_index(bad, "zlibstub-1.3.1-h0_0.tar.bz2", subdir="linux-64")
    # Force a re-link of zlibstub: drop its record so the plan links it again.
    (next(prefix.glob("conda-meta/zlibstub-*.json"))).unlink()
    shutil.rmtree(project.root / ".cache")
    capsys.readouterr()
    assert main(env_args(project, str(bad))) == 2
    assert "sha256" in capsys.readouterr().err
    assert os.readlink(prefix) == before  # still the old generation
    assert run_python(prefix, "import alpha; print('ok')") == "ok"
    assert not list((prefix.parent / ".py310.gens").glob("*.partial"))


def test_pip_wheel_with_wrong_bytes_is_refused(
    project: Project, channel: Path, wheels: Path, tmp_path: Path, capsys
) -> None:
    from tests.fixtures.wheels import build_wheel

    served = tmp_path / "served-wheels"
    shutil.copytree(wheels, served)
    lock_path = project.lock_path("py310")
    lock_path.write_text(lock_path.read_text().replace(str(wheels), str(served)))
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    before = os.readlink(prefix)
    # Same name and version, other bytes: what a tampering mirror would serve.
    gamma = next(served.glob("gamma-*.whl"))
    gamma.unlink()
    build_wheel(served, "gamma", "0.5", files={"gamma/evil.py": "print('evil')\n"})
    write_spec(project.root, platforms=("linux-64",), conda=CONDA, pip=("alpha",))  # force a pip change ...
    (next((prefix / "lib").glob("python*/site-packages/gamma-0.5.dist-info")) / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: gamma\nVersion: 0.4\n"
    )  # ... so gamma is reinstalled from the lock
    shutil.rmtree(project.root / ".cache" / "archives")  # the verified wheel kept there would be used instead
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 2
    err = capsys.readouterr().err
    assert "gamma-0.5-py3-none-any.whl: sha256" in err and "does not match the lock's" in err
    assert os.readlink(prefix) == before
    probe = "import gamma, os; print(os.path.exists(os.path.join(os.path.dirname(gamma.__file__), 'evil.py')))"
    assert run_python(prefix, probe) == "False"


def test_corrupted_cache_is_healed_not_installed(project: Project, channel: Path) -> None:
    assert main(env_args(project, str(channel))) == 0
    cache = project.root / ".cache"
    (archive,) = cache.glob("archives/*/bigpkg-*")
    archive.write_bytes(archive.read_bytes()[:-10] + b"0123456789")  # same size, other bytes
    (extracted,) = cache.glob("pkgs/bigpkg-*/share/bigpkg/f000001.txt")
    original = extracted.read_bytes()
    with open(extracted, "r+b") as handle:  # same size, in place: rattler's "fast" check misses this
        handle.write(b"X" * len(original))
    shutil.rmtree(project.root / ".envs")
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    assert (prefix / "share/bigpkg/f000001.txt").read_text() == f"1\nprefix={prefix}\n"  # placeholder -> stable path
    assert extracted.read_bytes() == original  # re-extracted from the re-fetched archive
    assert_matches_lock(project)


def test_an_edited_cached_copy_is_never_linked(project: Project, channel: Path) -> None:
    """Seals are checked before rattler links from the copies: an edited one is extracted again from its archive."""
    from bootstrap.install.env import EnvOptions, Feedback, create_or_update

    assert main(env_args(project, str(channel))) == 0  # extracts and seals every package
    (extracted,) = (project.root / ".cache").glob("pkgs/torchlike-*/share/torchlike/build.txt")
    original = extracted.read_bytes()
    extracted.write_bytes(b"E" * len(original))  # same size; the mtime tells
    messages = []
    fresh = project.root / "fresh"
    options = EnvOptions("py310", project.lock_path("py310"), fresh, "linux-64", project.root / ".cache")
    result = create_or_update(options, Feedback(notify=messages.append))
    assert any("cached copies of torchlike 1.0" in m and "extracting them again" in m for m in messages), messages
    assert (fresh / "share/torchlike/build.txt").read_bytes() == original
    assert extracted.read_bytes() == original and result.generation == 1
    assert [p.name for p in (project.root / ".fresh.gens").iterdir()] == ["1"]


def test_an_edited_cached_copy_with_its_mtime_put_back_is_found(project: Project, channel: Path) -> None:
    """Same size, mtime restored (`cp -p` of a damaged copy, `rsync -t`): the inode change time tells."""
    from bootstrap.install.env import EnvOptions, Feedback, create_or_update

    assert main(env_args(project, str(channel))) == 0
    (extracted,) = (project.root / ".cache").glob("pkgs/torchlike-*/share/torchlike/build.txt")
    original, info = extracted.read_bytes(), extracted.stat()
    with open(extracted, "r+b") as handle:
        handle.write(b"X")
    os.utime(extracted, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert (extracted.stat().st_size, extracted.stat().st_mtime_ns) == (info.st_size, info.st_mtime_ns)
    messages = []
    fresh = project.root / "fresh"
    options = EnvOptions("py310", project.lock_path("py310"), fresh, "linux-64", project.root / ".cache")
    create_or_update(options, Feedback(notify=messages.append))
    assert any("cached copies of torchlike 1.0" in m for m in messages), messages
    assert (fresh / "share/torchlike/build.txt").read_bytes() == original == extracted.read_bytes()


@pytest.mark.parametrize("older", ["size-and-mtime", "per-file-table", "one-digest", "two-digests"])
def test_a_seal_of_an_older_format_counts_as_none(project: Project, channel: Path, older: str) -> None:
    """Size and mtime only (before the ctime was sealed), version 2's table of every file, version
    3's one digest, or version 4's two (without a seal time): the copy is extracted again from its
    checked archive, and sealed anew."""
    from bootstrap.install import store
    from bootstrap.install.env import EnvOptions, Feedback, create_or_update

    assert main(env_args(project, str(channel))) == 0
    seals = sorted((project.root / ".cache" / "seals").glob("[0-9a-f]*.json"))  # the conda packages'
    older_seals = {
        "size-and-mtime": json.dumps({"share/x": [1, 2]}),
        "per-file-table": "bootstrap-seal 2\n" + json.dumps({"share/x": [1, 2, 3]}),
        "one-digest": "bootstrap-seal 3\n" + json.dumps({"files": 1, "sha256": "0" * 64}),
        "two-digests": "bootstrap-seal 4\n" + json.dumps({"files": 1, "content": "0" * 64, "inodes": "0" * 64}),
    }
    for seal in seals:  # as an older bootstrap wrote them (their contents do not matter: the header does)
        seal.write_text(older_seals[older])
    (extracted,) = (project.root / ".cache").glob("pkgs/torchlike-*/share/torchlike/build.txt")
    extracted.write_text("stale\n")  # what an older seal would no longer vouch for
    messages = []
    fresh = project.root / "fresh"
    create_or_update(
        EnvOptions("py310", project.lock_path("py310"), fresh, "linux-64", project.root / ".cache"),
        Feedback(notify=messages.append),
    )
    assert not any("edited" in m for m in messages), messages  # not taken for an edit: never linked from
    assert (fresh / "share/torchlike/build.txt").read_text().startswith("cuda12")
    assert all(seal.read_text().startswith(store.SEAL_HEADER) for seal in seals)


def test_a_sealed_copy_that_vanishes_before_linking_is_extracted_again(
    project: Project, channel: Path, monkeypatch
) -> None:
    """Two envs share a cache: another run may drop an extracted package between our seal check and rattler."""
    from bootstrap.install import store

    assert main(env_args(project, str(channel))) == 0
    shutil.rmtree(project.root / ".envs")
    sealed_copies = store.sealed_copies

    def check_then_lose_it(cache_dir: Path, entries, drop: bool):
        found = sealed_copies(cache_dir, entries, drop)
        for entry in entries:
            if entry.name == "bigpkg" and entry.name in found[0]:
                shutil.rmtree(store.extracted_dir(cache_dir, entry))
        return found

    monkeypatch.setattr(store, "sealed_copies", check_then_lose_it)
    (archive,) = (project.root / ".cache").glob("archives/*/bigpkg-*")
    archive.write_bytes(archive.read_bytes()[:-10] + b"0123456789")  # unread while the sealed copy stands in
    assert main(env_args(project, str(channel))) == 0
    assert_matches_lock(project)  # canonical URLs in conda-meta, whichever way each package was linked
    (entry,) = [
        e for e in read_lock(project.lock_path("py310")).for_platform("linux-64", "conda") if e.name == "bigpkg"
    ]
    assert store.seal_holds(project.root / ".cache", entry)  # extracted and sealed again
    from bootstrap.fsutil import sha256_file

    assert sha256_file(archive) == entry.sha256  # checked before the second link, and fetched again


@pytest.mark.parametrize("credentials", ["", "user:secret@"], ids=["public", "with-credentials"])
@pytest.mark.parametrize("offline", [True, False], ids=["link_config", "rattler-default"])
def test_the_link_step_never_downloads(tmp_path: Path, channel: Path, offline: bool, credentials: str) -> None:
    """rattler downloads a package missing from its cache; in bootstrap's link step that is a sealed copy
    another run dropped under us, which `_link` fetches itself. With `link_config` rattler's client refuses
    before any request (and needs no TLS set up); with rattler's defaults it goes online. Credentials in the
    channel's URL reach rattler's mirror table as a header, not in the URL it matches."""
    import asyncio

    import rattler

    from bootstrap.install.link import link_config

    archive = next(p for p in (channel / "noarch").iterdir() if p.name.startswith("bigpkg-"))
    record = asyncio.run(rattler.RepoDataRecord.from_package_archive(archive))
    with serve_directory(channel) as url:
        record.url = f"{url}/noarch/{archive.name}".replace("http://", f"http://{credentials}")
        config = link_config([record.url]) if offline else rattler.Config.from_toml("allow-hard-links = false\n")
        install = rattler.install([record], tmp_path / "prefix", cache_dir=tmp_path / "pkgs", config=config)
        if offline:
            with pytest.raises(Exception, match="scheme is not allowed"):
                asyncio.run(install)
            assert url.requests == []
        else:
            asyncio.run(install)
            assert url.requests == [f"/noarch/{archive.name}"]


@pytest.mark.parametrize(
    "url",
    [
        "https://example.org/ch\U0001f600/noarch/a-1-0.conda",  # outside the BMP: JSON would write a surrogate pair
        "https://example.org/a-1-0.conda",  # no channel path
        'https://example.org/ch"\x7f/noarch/a-1-0.conda',  # a quote and DEL, which TOML wants escaped
        "https://exa mple.org/ch/noarch/a-1-0.conda",  # a host rattler's URL parser refuses
        "file:///srv/channel/noarch/a-1-0.conda",  # read by rattler itself: no mirror needed
    ],
    ids=["non-BMP", "no-channel-path", "quote-and-DEL", "bad-host", "file"],
)
def test_link_config_takes_any_url_a_lock_holds(url: str) -> None:
    """Each URL the lock accepts gives a config rattler reads; the offline client wherever it can name the host."""
    from bootstrap.install.link import link_config
    from bootstrap.lock.lockfile import LockedPackage, _entry_problem

    assert _entry_problem(LockedPackage("a", "1", "conda", "linux-64", url, "0" * 64, build="0")) is None
    config = link_config([url])
    assert config.allow_hard_links is False
    assert bool(config.tls_no_verify) is (url != "https://exa mple.org/ch/noarch/a-1-0.conda")


def test_a_warm_cache_links_sealed_copies_without_reading_their_archives(
    project: Project, channel: Path, monkeypatch
) -> None:
    import bootstrap.install.fetch as fetch_module

    assert main(env_args(project, str(channel))) == 0
    hashed = []
    real_sha256 = fetch_module.sha256_file
    monkeypatch.setattr(fetch_module, "sha256_file", lambda path: hashed.append(Path(path).name) or real_sha256(path))
    assert main(env_args(project, str(channel), "--prefix", str(project.root / "second"))) == 0
    assert hashed == []  # every conda package came from its sealed extracted copy, every wheel is as verified
    (extracted,) = (project.root / ".cache").glob("pkgs/bigpkg-*/share/bigpkg/f000001.txt")
    extracted.write_text("edited\n")  # breaks bigpkg's seal: its archive is checked and extracted again
    assert main(env_args(project, str(channel), "--prefix", str(project.root / "third"))) == 0
    assert [name.split("-")[0] for name in hashed] == ["bigpkg"]
    assert (project.root / "third" / "share/bigpkg/f000001.txt").read_text() != "edited\n"


def seal_of(project: Project, name: str) -> Path:
    """The seal of the extracted copy of the locked package `name` (seals are named by the archive's sha256)."""
    (entry,) = [e for e in read_lock(project.lock_path("py310")).packages if e.name == name and e.manager == "conda"]
    path = project.root / ".cache" / "seals" / f"{entry.sha256}.json"
    assert path.is_file()
    return path


def test_an_unsealed_copy_is_left_alone_while_another_run_may_be_linking_from_it(
    project: Project, channel: Path
) -> None:
    """Two envs made at once on one cache: a copy the other run extracted is unsealed until it has linked
    from it; dropped as stale, that run failed with 'No such file or directory' under pkgs/."""
    import fcntl

    cache = project.root / ".cache"
    assert main(env_args(project, str(channel))) == 0
    (extracted,) = cache.glob("pkgs/bigpkg-*/")
    seal = seal_of(project, "bigpkg")
    seal.unlink()  # as it is between the other run's extraction and its seal
    marker = extracted / "marker"
    marker.write_text("the other run's copy\n")
    other = cache / ".extracting-other"
    with open(other, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the other run, alive
        assert main(env_args(project, str(channel), "--prefix", str(project.root / "second"))) == 0
        assert marker.is_file()  # not dropped: rattler linked from it, and it is sealed now
    seal.unlink()
    assert main(env_args(project, str(channel), "--prefix", str(project.root / "third"))) == 0
    assert not marker.exists() and not other.exists()  # a killed run's file: an unsealed copy is stale again
    assert not list(cache.glob(".extracting-*"))
    assert (project.root / "third" / "share/bigpkg/f000001.txt").is_file()


def test_an_unsealed_copy_kept_for_another_run_is_checked_before_it_is_linked(project: Project, channel: Path) -> None:
    """Left alone because another run is extracting, an unsealed copy may still be a killed run's
    half-extracted one or an edited one: rattler checks it in full then, and extracts it again."""
    import fcntl

    cache = project.root / ".cache"
    assert main(env_args(project, str(channel))) == 0
    (extracted,) = cache.glob("pkgs/bigpkg-*/")
    seal = seal_of(project, "bigpkg")
    seal.unlink()
    (extracted / "share/bigpkg/f000001.txt").write_text("damaged\n")
    (extracted / "share/bigpkg/f000002.txt").unlink()
    with open(cache / ".extracting-other", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another run, alive
        assert main(env_args(project, str(channel), "--prefix", str(project.root / "second"))) == 0
    second = project.root / "second" / "share/bigpkg"
    assert (second / "f000001.txt").read_text() != "damaged\n" and (second / "f000002.txt").is_file()


def test_an_extracting_file_taken_for_a_killed_runs_is_made_again(tmp_path: Path, monkeypatch) -> None:
    """Between creating its file and locking it, a run's file looks like a killed run's to another
    run, which removes it: the run must not go on holding a lock nobody can see."""
    import fcntl

    from bootstrap.install import store

    real_flock, removed = fcntl.flock, []

    def flock_after_another_run_looked(fd, operation):
        if not removed:  # the other run's `others_extracting`, in that instant
            (found,) = tmp_path.glob(".extracting-*")
            found.unlink()
            removed.append(found.name)
        return real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_another_run_looked)
    with store.extracting(tmp_path):
        (held,) = tmp_path.glob(".extracting-*")
        assert held.name != removed[0]
        assert oct(held.stat().st_mode & 0o777) == "0o644"  # another user's run on a shared cache can open it
        monkeypatch.setattr(store, "_HELD", set())  # as another process sees it
        assert store.others_extracting(tmp_path)
    assert not list(tmp_path.glob(".extracting-*"))


def test_a_stored_wheel_is_hashed_again_once_it_changed(project: Project, channel: Path, capsys) -> None:
    """A wheel in the store is trusted while its size and mtime are as verified (uv checks its hash
    as it installs). An edit that shows in them is caught by hashing and refetched; damage that does
    not fails uv's install, and the run after that hashes again and heals."""
    assert main(env_args(project, str(channel))) == 0
    (gamma,) = (project.root / ".cache").glob("archives/*/gamma-*.whl")
    original = gamma.read_bytes()
    gamma.write_bytes(original + b"appended")
    assert main(env_args(project, str(channel), "--prefix", str(project.root / "second"))) == 0
    assert gamma.read_bytes() == original  # hashed, found wrong, fetched again

    info = gamma.stat()
    middle = len(original) // 2
    gamma.write_bytes(original[:middle] + bytes([original[middle] ^ 0xFF]) + original[middle + 1 :])
    os.utime(gamma, ns=(info.st_atime_ns, info.st_mtime_ns))  # same size, same mtime: the stamp still holds
    third = project.root / "third"
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--prefix", str(third))) != 0
    err = capsys.readouterr().err
    assert "gamma" in err and not os.path.lexists(third)
    assert len(err.splitlines()) == 1 and ".partial" not in err
    assert main(env_args(project, str(channel), "--prefix", str(third))) == 0
    assert gamma.read_bytes() == original
    assert_matches_lock(project)


def test_editing_one_env_leaves_cache_and_sibling_alone(project: Project, channel: Path) -> None:
    """With `--link copy`, an edit in place inside one env reaches neither the cache nor another env."""
    from bootstrap.fsutil import sha256_file

    first, second = project.root / "envs-a", project.root / "envs-b"
    for prefix in (first, second):
        assert main(env_args(project, str(channel), "--prefix", str(prefix), "--link", "copy")) == 0
    targets = ["share/bigpkg/f000002.txt", "share/torchlike/build.txt"]  # with and without a placeholder
    for target in targets:
        assert os.stat(first / target).st_nlink == 1  # no other path shares the inode
        original = (second / target).read_text()
        with open(first / target, "r+") as handle:  # in place: same inode, as an editor might
            handle.write("EDITED")
        assert (second / target).read_text() == original
    for archive in (project.root / ".cache").glob("archives/*/[!.]*"):
        assert sha256_file(archive) == archive.parent.name
    for target in targets:
        for cached in (project.root / ".cache").glob(f"pkgs/*/{target}"):
            assert "EDITED" not in cached.read_text()


def test_escaping_archives_are_refused(tmp_path: Path, wheels: Path) -> None:
    from tests.fixtures.conda_channel import escaping_specs

    outside = tmp_path / "outside-target.txt"
    channel = build_runnable_channel(tmp_path / "channel", extra=escaping_specs(absolute_target=outside))
    for evil in ("evil-dotdot", "evil-abspath", "evil-symlink"):
        project = make_project(tmp_path / evil, platforms=("linux-64",), conda=(f"python={SHORT}.*", evil), pip=())
        relock(project, channel, wheels)
        done = subprocess.run(
            [sys.executable, "-m", "bootstrap", *env_args(project, str(channel))],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "refused" in done.stderr and "outside the prefix" in done.stderr
        assert not (project.root / ".envs" / "py310").exists()
        assert not outside.exists() and not (project.root / ".envs" / ".py310.gens" / "evil.txt").exists()


@pytest.mark.parametrize("fmt", [".conda", ".tar.bz2"])
def test_another_package_under_the_right_hash_is_refused(tmp_path: Path, wheels: Path, capsys, fmt: str) -> None:
    """A lock written from a mirror that served another package's archive under a package's name: the
    hash matches, but its info/index.json names the other one. Refused before anything is linked."""
    from tests.fixtures.conda_channel import PackageSpec, impostor_after_index

    victim = PackageSpec("victim", "1.0", noarch="generic", files={"victim.txt": "v\n"}, fmt=fmt)
    impostor = PackageSpec("impostor", "1.0", noarch="generic", files={"impostor.txt": "i\n"}, fmt=fmt)
    channel = build_runnable_channel(tmp_path / "channel", extra=[victim, impostor])
    impostor_after_index(channel, victim, impostor)
    project = make_project(tmp_path / "proj", platforms=("linux-64",), conda=(f"python={SHORT}.*", "victim"), pip=())
    relock(project, channel, wheels)
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # after the download progress
    assert err.startswith(f"error: victim-1.0-h0_0{fmt}: "), err
    assert "another package" in err and "nothing was installed" in err, err
    assert not (project.root / ".envs" / "py310").exists()
    assert not list((project.root / ".envs").glob(".py310.gens/*"))


def test_a_path_two_packages_ship_is_kept_once_and_said(tmp_path: Path, wheels: Path, capsys) -> None:
    """Two packages ship share/same.txt: the env keeps one copy, and the run says where the other went."""
    from tests.fixtures.conda_channel import PackageSpec

    clashing = [
        PackageSpec(name, "1.0", noarch="generic", files={"share/same.txt": f"{name}\n"})
        for name in ("clob-a", "clob-b")
    ]
    channel = build_runnable_channel(tmp_path / "channel", extra=clashing)
    project = make_project(
        tmp_path / "proj", platforms=("linux-64",), conda=(f"python={SHORT}.*", "clob-a", "clob-b"), pip=()
    )
    relock(project, channel, wheels)
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--json")) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    prefix = prefix_of(project)
    assert [n for n in notes if n.startswith("1 file(s) are shipped by more than one package")] == [
        f"1 file(s) are shipped by more than one package: the env keeps one copy of each path, the others are in "
        f"{prefix / '__clobbers__'} (clob-b/share/same.txt)"
    ], notes
    assert (prefix / "share" / "same.txt").read_text() == "clob-a\n"


def test_unreachable_channel_leaves_the_env_alone(project: Project, channel: Path, wheels: Path, capsys) -> None:
    """The env and its rollback generation: archives are fetched before the retired generation is recycled."""
    without_zlib = tuple(c for c in CONDA if c != "zlibstub")
    change_lock(project, channel, wheels, conda=without_zlib)
    assert main(env_args(project, str(channel))) == 0
    change_lock(project, channel, wheels, conda=without_zlib, pip=("alpha==1.0", "gamma"))
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    before = os.readlink(prefix)
    change_lock(project, channel, wheels)  # zlibstub back: a download, and the change would recycle generation 1
    shutil.rmtree(project.root / ".cache")
    capsys.readouterr()
    assert main(env_args(project, "http://127.0.0.1:9/conda-forge")) == 2
    err = capsys.readouterr().err
    assert "http://127.0.0.1:9/conda-forge/linux-64/zlibstub" in err
    assert (
        "(the mirror lacks it or is down: sync it from https://conda.anaconda.org/conda-forge, or fix --mirror "
        "https://conda.anaconda.org/conda-forge=http://127.0.0.1:9/conda-forge)" in err
    )
    assert os.readlink(prefix) == before
    assert generation_dirs(project) == ["1", "2"]
    assert main(["env", "--root", str(project.root), "--rollback"]) == 0
    assert run_python(prefix, "import alpha; print(alpha.__version__)") == "1.1"


def test_unreachable_wheel_leaves_the_env_and_its_rollback_alone(
    project: Project, channel: Path, wheels: Path, tmp_path: Path, capsys
) -> None:
    """Wheels are fetched before the retired generation is recycled too (uv fetched them mid-install)."""
    from tests.fixtures.wheels import build_wheel

    served = tmp_path / "served-wheels"
    shutil.copytree(wheels, served)
    delta = build_wheel(served, "delta", "1.0")
    relock(project, channel, served)
    assert main(env_args(project, str(channel))) == 0
    change_lock(project, channel, served, pip=("alpha==1.0", "gamma"))
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    before = os.readlink(prefix)
    change_lock(project, channel, served, pip=("alpha==1.0", "gamma", "delta"))  # would recycle generation 1
    delta.unlink()
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 2
    err = capsys.readouterr().err
    assert "cannot fetch delta-1.0-py3-none-any.whl" in err and f"--mirror {served.as_uri()}=" in err
    assert os.readlink(prefix) == before
    assert generation_dirs(project) == ["1", "2"]
    assert main(["env", "--root", str(project.root), "--rollback"]) == 0
    assert run_python(prefix, "import alpha; print(alpha.__version__)") == "1.1"


def test_platform_not_in_lock(project: Project, channel: Path, capsys) -> None:
    capsys.readouterr()
    assert main(["env", "--root", str(project.root), "--platform", "osx-arm64"]) == 2
    assert "platform osx-arm64 is not locked (locked: linux-64)" in capsys.readouterr().err


def test_an_env_for_another_os_is_refused_before_fetching(project: Project, channel: Path, monkeypatch, capsys) -> None:
    """Its python cannot run here to install the pip part: said before the downloads, not by uv after them."""
    import bootstrap.platforms

    monkeypatch.setattr(bootstrap.platforms, "host_platform", lambda: "osx-arm64")
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 2
    assert capsys.readouterr().err.startswith(
        "error: --platform linux-64: an env for linux-64 cannot be built on this osx-arm64 machine"
    )
    assert not (project.root / ".cache" / "archives").exists() and not prefix_of(project).parent.exists()
    assert main(env_args(project, str(channel), "--dry-run")) == 0  # the plan is still shown


def test_refuses_to_take_over_a_directory(project: Project, channel: Path, capsys) -> None:
    prefix = prefix_of(project)
    prefix.mkdir(parents=True)
    (prefix / "precious.txt").write_text("mine")
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 2
    assert "not an environment managed by bootstrap" in capsys.readouterr().err
    assert (prefix / "precious.txt").read_text() == "mine"


def test_the_activate_hint_quotes_a_path_with_spaces(project: Project, channel: Path, tmp_path: Path, capsys) -> None:
    prefix = tmp_path / "with space" / "env"
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--prefix", str(prefix))) == 0
    assert f"activate: conda activate '{prefix}'   or run '{prefix}/bin/python'\n" in capsys.readouterr().out
    assert run_python(prefix, "import alpha; print('runs')") == "runs"


def test_a_prefix_too_long_for_a_binary_placeholder_says_to_shorten_it(
    locked_once: Project, wheels: Path, tmp_path: Path, capsys
) -> None:
    import hashlib

    from tests.fixtures.conda_channel import PackageSpec

    # An older package's shorter placeholder: a prefix under the 255 bytes refused up front can still be too long.
    placeholder = ("/home/conda/feedstock_root/build_artifacts/binpkg_1700000000000/_h_env" + "_placehold" * 25)[:100]
    data = b"\x7fELF\x00" + placeholder.encode() + b"/lib\x00" + b"\x00" * 32
    paths = [
        {
            "_path": "lib/libbin.so",
            "path_type": "hardlink",
            "sha256": hashlib.sha256(data).hexdigest(),
            "size_in_bytes": len(data),
            "prefix_placeholder": placeholder,
            "file_mode": "binary",
        }
    ]
    channel = build_runnable_channel(
        tmp_path / "channel",
        extra=[
            PackageSpec("binpkg", "1.0", subdir="linux-64", files={"lib/libbin.so": data}, raw_paths_override=paths)
        ],
    )
    project = copy_project(locked_once, tmp_path / "proj")
    change_lock(project, channel, tmp_path, conda=(*CONDA, "binpkg"), pip=())
    prefix = tmp_path / ("d" * 60) / ("e" * 40) / "env"
    assert 100 < len(str(prefix)) <= 255
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--prefix", str(prefix))) == 2
    err = without_progress(capsys.readouterr().err)
    assert err.startswith(
        f"error: --prefix {prefix}: is {len(str(prefix))} bytes long, "
        "longer than a package's binary files leave room for: failed to link binpkg-1.0"
    ) and err.endswith("choose a shorter --prefix; conda-forge's packages have room for 255 bytes)\n")
    assert not prefix.exists()
    assert main(env_args(project, str(channel), "--prefix", str(tmp_path / "short"))) == 0


def test_a_relative_prefix_with_dotdot_is_embedded_normalised(
    project: Project, channel: Path, tmp_path: Path, monkeypatch
) -> None:
    """`<cwd>/../env` in shebangs and placeholders would stop resolving once the directory run from is gone."""
    (tmp_path / "scratch").mkdir()
    monkeypatch.chdir(tmp_path / "scratch")
    assert main(env_args(project, str(channel), "--prefix", "../envs/./env")) == 0
    prefix = tmp_path / "envs" / "env"
    (tmp_path / "scratch").rmdir()
    assert (prefix / "share" / "bigpkg" / "f000000.txt").read_text().endswith(f"prefix={prefix}\n")
    assert (prefix / "bin" / "pip").read_text().startswith(f"#!{prefix}/bin/python")
    assert subprocess.run([str(prefix / "bin" / "pip")], check=False).returncode == 0


def test_the_activate_hint_of_a_windows_env_names_its_python_exe(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from bootstrap.commands.env import _summary
    from bootstrap.install.env import EnvResult
    from bootstrap.install.plan import Plan

    result = EnvResult(
        prefix=tmp_path / "env", platform="win-64", plan=Plan(), generation=1, changed=True, dry_run=False
    )
    assert _summary("py310", result, SimpleNamespace(lock_path=Path("conda-lock.yml"))).endswith(
        f"or run {tmp_path / 'env' / 'python.exe'}"
    )


def test_a_symlink_bootstrap_did_not_make_is_refused_on_every_path(
    project: Project, channel: Path, wheels: Path, capsys
) -> None:
    """A stable path linked by hand to another env is neither read through nor replaced, and a stable
    link re-pointed by hand costs no generation."""
    scratch = project.root / "scratch" / "py310"
    assert main(env_args(project, str(channel), "--prefix", str(scratch))) == 0
    scratch_target = os.readlink(scratch)
    prefix = prefix_of(project)
    prefix.parent.mkdir()
    prefix.symlink_to(scratch)
    capsys.readouterr()
    for change in (False, True):  # the no-op path, then a change
        if change:
            change_lock(project, channel, wheels, pip=("alpha",))
        assert main(env_args(project, str(channel))) == 2
        err = capsys.readouterr().err
        assert f"{prefix}: is a symlink to {scratch}" in err and f"pass --prefix {scratch}" in err
        assert os.readlink(prefix) == str(scratch) and os.readlink(scratch) == scratch_target
    assert main(["env", "--root", str(project.root), "--rollback"]) == 2
    assert not (prefix.parent / ".py310.gens").exists() and run_python(scratch, "import gamma; print('ok')") == "ok"

    prefix.unlink()
    assert main(env_args(project, str(channel))) == 0
    change_lock(project, channel, wheels)
    assert main(env_args(project, str(channel))) == 0
    prefix.unlink()
    prefix.symlink_to("/mnt/not-mounted/py310")  # re-pointed by hand
    change_lock(project, channel, wheels, pip=("alpha==1.0",))
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 2
    assert "ln -sfn .py310.gens/2" in capsys.readouterr().err
    assert main(["env", "--root", str(project.root), "--rollback"]) == 2
    assert generation_dirs(project) == ["1", "2"]


def test_a_cache_dir_that_is_a_file_is_refused_before_anything_is_created(
    project: Project, channel: Path, capsys
) -> None:
    cache = project.root / "cache-file"
    cache.write_text("x\n")
    capsys.readouterr()
    assert main([*env_args(project, str(channel)), "--cache-dir", str(cache)]) == 2
    assert (
        capsys.readouterr().err == f"error: --cache-dir {cache}: not a directory "
        "(pass a directory as --cache-dir; the default is ~/.cache/bootstrap)\n"
    )
    assert not (project.root / ".envs").exists()


@pytest.mark.parametrize("length", [256, 4000])
def test_a_prefix_too_long_for_conda_binaries_is_refused_before_anything_is_fetched(
    project: Project, channel: Path, capsys, length: int
) -> None:
    prefix = project.root / "envs-here"
    prefix = prefix / ("d" * (length - len(str(prefix)) - 1))
    capsys.readouterr()
    assert main([*env_args(project, str(channel)), "--prefix", str(prefix)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 300, err
    assert err.startswith("error: --prefix ") and f"is {length} bytes long, longer than the 255 " in err, err
    assert not (project.root / ".cache").exists() and not (project.root / "envs-here").exists()


def test_a_read_only_package_cache_is_named_with_the_flag(
    project: Project, channel: Path, make_read_only, capsys
) -> None:
    """Found before a generation is started: rattler would fail to lock its cache halfway, naming neither."""
    assert main(env_args(project, str(channel))) == 0
    cache = project.root / ".cache"
    make_read_only(cache / "pkgs")
    second = project.root / "second" / "env"
    capsys.readouterr()
    assert main([*env_args(project, str(channel)), "--prefix", str(second)]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"error: --cache-dir {cache}: {cache / 'pkgs'} cannot be written (a read-only file system, or not "
        "yours) (pass a --cache-dir you can write; the default is ~/.cache/bootstrap)\n"
    )
    assert sorted(p.name for p in second.parent.iterdir()) == [".env.lock"]


def test_an_env_directory_that_cannot_be_written_is_one_line(
    project: Project, channel: Path, wheels: Path, make_read_only, capsys
) -> None:
    """Found before fetching, on a change and a rollback: it was an OSError traceback from renaming a generation."""
    assert main(env_args(project, str(channel))) == 0
    change_lock(project, channel, wheels, pip=("alpha==1.0", "gamma"))
    assert main(env_args(project, str(channel))) == 0
    change_lock(project, channel, wheels, pip=("alpha==1.0",))
    prefix = prefix_of(project)
    make_read_only(prefix.parent)
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 2
    assert (
        capsys.readouterr().err == f"error: {prefix}: {prefix.parent} cannot be written "
        "(a read-only file system, or not yours) "
        "(make it writable, or choose a --prefix you can write)\n"
    )
    assert main(["env", "--root", str(project.root), "--rollback"]) == 2
    assert f"error: {prefix}: {prefix.parent} cannot be written" in capsys.readouterr().err
    assert os.readlink(prefix).endswith("/2") and generation_dirs(project) == ["1", "2"]


@pytest.fixture(scope="module")
def big_channel(tmp_path_factory) -> Path:
    """The runnable channel plus `hugepkg`: enough files that an install takes a while."""
    from tests.fixtures.conda_channel import big_spec

    return build_runnable_channel(tmp_path_factory.mktemp("big") / "channel", extra=[big_spec(4000, name="hugepkg")])


def env_process(project: Project, channel: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bootstrap", *env_args(project, str(channel), *extra)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow  # test_env_concurrency and the full-disk tests keep the previous env by default
@pytest.mark.parametrize("link", ["auto", "reflink", "hardlink", "copy"])
@pytest.mark.parametrize(
    "recycled", [pytest.param(False, id="first-change"), pytest.param(True, id="recycled-generation")]
)
def test_sigkill_mid_install_keeps_the_previous_generation(
    project: Project, big_channel: Path, wheels: Path, recycled: bool, link: str
) -> None:
    import signal
    import time

    relock(project, big_channel, wheels)
    assert main(env_args(project, str(big_channel), "--link", link)) == 0
    if recycled:  # a second generation, so the change below starts from the retired first one
        change_lock(project, big_channel, wheels, pip=("alpha==1.0", "gamma"))
        assert main(env_args(project, str(big_channel), "--link", link)) == 0
    prefix = prefix_of(project)
    before = os.readlink(prefix)
    change_lock(project, big_channel, wheels, conda=(*CONDA, "hugepkg"))
    process = env_process(project, big_channel, "--link", link)
    partial = prefix.parent / ".py310.gens" / ("3.partial" if recycled else "2.partial")
    deadline = time.monotonic() + 60
    while not ((partial / "share" / "hugepkg").is_dir() and any((partial / "share" / "hugepkg").iterdir())):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert os.readlink(prefix) == before  # the switch never happened
    assert run_python(prefix, "import alpha; print('usable')") == "usable"
    assert not (prefix / "share" / "hugepkg").exists()
    assert partial.exists()  # what the kill left behind
    assert main(env_args(project, str(big_channel), "--link", link)) == 0  # the next run converges
    assert not list((prefix.parent / ".py310.gens").glob("*.partial"))
    assert_matches_lock(project)
    assert len(list((prefix / "share" / "hugepkg").iterdir())) == 4000
    assert main(["env", "--root", str(project.root), "--rollback"]) == 0
    assert os.readlink(prefix) == before


@pytest.mark.slow  # test_env_concurrency's three staggered pairs run by default
def test_two_concurrent_runs(project: Project, big_channel: Path, wheels: Path) -> None:
    write_spec(project.root, platforms=("linux-64",), conda=(*CONDA, "hugepkg"), pip=("alpha", "gamma"))
    relock(project, big_channel, wheels)
    first, second = env_process(project, big_channel), env_process(project, big_channel)
    results = [p.communicate(timeout=120) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], results
    stderr = "".join(err for _, err in results)
    assert "waiting for another `bootstrap env`" in stderr
    outputs = "".join(out for out, _ in results)
    assert outputs.count("-> generation 1") == 1 and "is up to date" in outputs  # one did the work
    assert_matches_lock(project)
    assert [p.name for p in (prefix_of(project).parent / ".py310.gens").iterdir()] == ["1"]


@pytest.mark.slow  # two env runs and a uv left behind
def test_uv_outliving_a_killed_run_keeps_the_next_run_waiting(
    project: Project, channel: Path, wheels: Path, tmp_path: Path
) -> None:
    """uv runs in a session of its own: SIGKILL of bootstrap's process group (a cancelled CI job) leaves it
    installing into the partial generation. It holds the env's lock until it is done, so the next run waits
    rather than build a generation of the same number for it to write into; then it converges."""
    import signal
    import time

    from bootstrap.lock.pip import PipOptions, uv_binary

    assert main(env_args(project, str(channel))) == 0
    change_lock(project, channel, wheels, pip=("alpha==1.0", "gamma"))
    started, go_on = tmp_path / "uv-started", tmp_path / "uv-go-on"
    uv = tmp_path / "uv"  # the real uv, held at its install until the test says
    uv.write_text(
        f'#!/bin/sh\nif [ "$2" = install ]; then : > {started}; '
        f"while [ ! -e {go_on} ]; do sleep 0.05; done; fi\n"
        f'exec {uv_binary(PipOptions())} "$@"\n'
    )
    uv.chmod(0o755)
    code = (
        f"import sys, bootstrap.install.pip as p; p.uv_binary = lambda _: {str(uv)!r}; "
        "from bootstrap.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    killed = subprocess.Popen(
        [sys.executable, "-c", code, *env_args(project, str(channel))],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not started.exists():
        assert killed.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    following = env_process(project, channel)
    try:
        assert "waiting for another `bootstrap env`" in following.stderr.readline()
    finally:
        go_on.touch()
    out, err = following.communicate(timeout=120)
    assert following.returncode == 0, err
    assert_matches_lock(project)
    assert not list((prefix_of(project).parent / ".py310.gens").glob("*.partial"))


def test_export_from_prefix_reads_the_request_bootstrap_recorded(project: Project, channel: Path) -> None:
    from bootstrap.export.from_prefix import portable_from_prefix

    assert main(env_args(project, str(channel))) == 0
    portable = portable_from_prefix(prefix_of(project))
    conda = sorted(line.text for line in portable.conda)
    assert conda == sorted(
        [
            "bigpkg=1.0",
            "pip=25.0",
            f"python={sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}",
            "torchlike=1.0",
            "zlibstub=1.3.1",
        ]
    )
    # The fixture wheels were installed from file:// URLs, which export does not pass on as PyPI pins.
    assert portable.pip == () and any("alpha" in note for note in portable.notes), portable.notes


def test_a_new_lock_with_the_same_packages_does_not_copy_the_env(project: Project, channel: Path, wheels: Path) -> None:
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    write_spec(project.root, platforms=("linux-64",), conda=CONDA, pip=("alpha>=1.1", "gamma"))  # resolves the same
    relock(project, channel, wheels)
    new_hash = read_lock(project.lock_path("py310")).content_hash["linux-64"]
    assert read_install_record(prefix).content_hash != new_hash
    assert main(env_args(project, str(channel))) == 0
    assert os.readlink(prefix).endswith("/1")  # still the first generation
    assert read_install_record(prefix).content_hash == new_hash


def test_the_same_lock_at_another_path_refreshes_the_record(project: Project, channel: Path) -> None:
    """A relock that deletes the lock a record names (a variant made the default) leaves its records
    in another lock: the env is up to date, and its record names the lock it is now installed from."""
    assert main(env_args(project, str(channel))) == 0
    prefix, moved = prefix_of(project), project.root / "moved.conda-lock.yml"
    shutil.copy(project.lock_path("py310"), moved)
    assert main(env_args(project, str(channel), "--lock", str(moved))) == 0
    assert os.readlink(prefix).endswith("/1") and read_install_record(prefix).lock_path == str(moved)


@pytest.mark.parametrize("long_path", [False, True], ids=["short-shebang", "sh-exec-shebang"])
def test_pip_entry_points_run_through_the_stable_path(tmp_path: Path, channel: Path, long_path: bool) -> None:
    """uv writes the generation's python into scripts; they must name the stable path.

    Past 127 characters uv writes a `#!/bin/sh` + `exec` header instead of a plain shebang.
    """
    import base64
    import hashlib

    from tests.fixtures.wheels import build_wheel

    wheels = tmp_path / "wheels"
    build_wheel(
        wheels,
        "delta",
        "1.0",
        files={
            "delta/__init__.py": "def main():\n    print('delta ok')\n",
            "delta-1.0.dist-info/entry_points.txt": "[console_scripts]\ndelta = delta:main\n",
        },
    )
    project = make_project(
        tmp_path / "proj", platforms=("linux-64",), conda=(f"python={SHORT}.*", "pip"), pip=("delta",)
    )
    relock(project, channel, wheels)
    prefix = project.root / ("p" * 120 if long_path else "short") / "py310"
    assert main(env_args(project, str(channel), "--prefix", str(prefix))) == 0
    script = prefix / "bin" / "delta"
    header = script.read_text().splitlines()[:3]
    assert any(str(prefix / "bin") in line for line in header), header
    assert not any(".gens" in line for line in header), header
    assert header[0] == ("#!/bin/sh" if long_path else f"#!{prefix}/bin/python")
    done = subprocess.run([str(script)], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "delta ok"
    (record,) = prefix.glob("lib/python*/site-packages/delta-1.0.dist-info/RECORD")
    line = next(x for x in record.read_text().splitlines() if x.startswith("../../../bin/delta,"))
    digest = base64.urlsafe_b64encode(hashlib.sha256(script.read_bytes()).digest()).rstrip(b"=").decode()
    assert line == f"../../../bin/delta,sha256={digest},{script.stat().st_size}"


# --------------------------------------------------------------------------- disk full


# The fetches fill the disk through the same download path; `make test-slow` runs them.
@pytest.mark.parametrize(
    "where",
    [
        pytest.param("conda-fetch", marks=pytest.mark.slow),
        "conda-extract",
        "conda-link",
        pytest.param("pip-fetch", marks=pytest.mark.slow),
        "pip-install",
    ],
)
def test_a_full_disk_leaves_the_env_as_it_was(
    locked_once: Project, blob_sources: tuple, blob_bytes: bytes, small_fs: tuple, tmp_path: Path, capsys, where: str
) -> None:
    """ENOSPC while fetching into the package cache, from rattler extracting into it or linking, or
    from uv: one line naming the file system, the env unchanged, no half-built generation left; with
    space, the next run converges."""
    channel, wheels = blob_sources
    mount, resize = small_fs
    project = copy_project(locked_once, mount / "proj")
    cache = mount / "cache" if where in ("conda-fetch", "conda-extract", "pip-fetch") else tmp_path / "cache"
    args = [*env_args(project, str(channel)), "--cache-dir", str(cache)]
    relock(project, channel, wheels)
    assert main(args) == 0
    prefix = prefix_of(project)
    before = os.readlink(prefix)
    if where.startswith("pip"):
        change_lock(project, channel, wheels, pip=("alpha", "gamma", "blobwheel"))
    else:
        change_lock(project, channel, wheels, conda=(*CONDA, "blobpkg"))
    if where == "conda-extract":
        resize("9m")  # the archive fits in the cache, its extracted copy beside it does not
    capsys.readouterr()

    assert main(args) == 2
    error = without_progress(capsys.readouterr().err)
    assert error.startswith("error: no space left on device") and error.count("\n") == 1, error
    assert f"{mount} (env" in error and "the env is unchanged" in error, error
    assert os.readlink(prefix) == before
    assert run_python(prefix, "import alpha; print('usable')") == "usable"
    assert generation_dirs(project) == ["1"]  # no partial left holding the space

    resize("64m")
    assert main(args) == 0
    assert_matches_lock(project)
    blob = (
        next(prefix.glob("lib/python*/site-packages/blobwheel/blob.bin"))
        if where.startswith("pip")
        else prefix / "lib/libblob.so"
    )
    assert blob.read_bytes() == blob_bytes


@pytest.mark.parametrize("served", [False, True], ids=["file", "http"])
def test_a_file_size_limit_is_reported_like_a_full_disk(
    project: Project, blob_sources: tuple, file_size_limit, capsys, served: bool
) -> None:
    """EFBIG (`ulimit -f`) while fetching, from a directory or over HTTP (small reads, so what is
    buffered fails again when the partial is closed): one line saying so and what to raise, the env
    as it was; the mirror is not blamed, and nothing is retried."""
    channel, wheels = blob_sources
    relock(project, channel, wheels)
    change_lock(project, channel, wheels)
    with contextlib.ExitStack() as stack:
        mirror = stack.enter_context(serve_directory(channel)) if served else str(channel)
        args = env_args(project, mirror)
        assert main(args) == 0
        prefix = prefix_of(project)
        before = os.readlink(prefix)
        change_lock(project, channel, wheels, conda=(*CONDA, "blobpkg"))  # a 6 MiB archive to fetch
        capsys.readouterr()
        file_size_limit(1 << 20)
        assert main(args) == 2
        file_size_limit(None)
        error = without_progress(capsys.readouterr().err)
        ours = [
            line
            for line in error.splitlines()
            if "Exception occurred during processing" not in line
            and not line.startswith(("-" * 40, " ", "Traceback", "ConnectionResetError", "BrokenPipeError"))
        ]
        assert ours == [
            f"error: a file reached the file size limit (ulimit -f: {1 << 20} bytes) while building "
            f"{prefix}; the env is unchanged (raise the limit, e.g. `ulimit -f unlimited`, and run "
            "again)"
        ], error  # the lines dropped are the test server's, on the connection cut
        assert os.readlink(prefix) == before and generation_dirs(project) == ["1"]
        assert main(args) == 0
    assert_matches_lock(project)


def test_a_full_disk_on_a_fresh_create_leaves_nothing_half_built(
    locked_once: Project, blob_sources: tuple, small_fs: tuple, capsys
) -> None:
    channel, wheels = blob_sources
    mount, resize = small_fs
    project = copy_project(locked_once, mount / "proj")
    write_spec(project.root, platforms=("linux-64",), conda=(*CONDA, "blobpkg"), pip=("alpha", "gamma"))
    relock(project, channel, wheels)
    args = [*env_args(project, str(channel)), "--cache-dir", str(mount.parent / "cache")]
    capsys.readouterr()
    assert main(args) == 2
    error = without_progress(capsys.readouterr().err)
    assert error.startswith("error: no space left on device") and "nothing was created" in error, error
    assert not os.path.lexists(prefix_of(project)) and not (project.root / ".envs" / ".py310.gens").exists()
    resize("64m")
    assert main(args) == 0
    assert_matches_lock(project)
