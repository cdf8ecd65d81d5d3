"""Runs of `bootstrap env` on one prefix at once: each waits for the other or finds nothing to do,
none dies of the other's switch, and the env is always one lock's exactly."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bootstrap.install.env as env_module
from bootstrap.cli import main
from bootstrap.lock.lockfile import read_lock
from bootstrap.prefix import conda_records, pip_distributions, read_install_record
from bootstrap.project import Project
from tests.fixtures import REPO
from tests.fixtures.env_project import assert_matches_lock, change_lock, env_args, prefix_of, without_progress


def _raced_once(monkeypatch) -> list:
    """`plan_change` failing once as a read does when another run recycles the generation under it."""
    calls: list = []
    real = env_module.plan_change

    def plan_change(layout, entries, grace_s):
        calls.append(layout.current())
        if len(calls) == 1:
            raise FileNotFoundError(2, "No such file or directory", str(layout.gens_dir / "1/conda-meta/x.json"))
        return real(layout, entries, grace_s)

    monkeypatch.setattr(env_module, "plan_change", plan_change)
    return calls


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_a_read_that_races_a_switch_reads_again(
    project: Project, channel: Path, monkeypatch, capsys, dry_run: bool
) -> None:
    """The lock-free read of an env another run is switching may fail; it must never be the run's
    traceback: the run reads again (under the env's lock) and finds the env up to date."""
    assert main(env_args(project, str(channel))) == 0
    capsys.readouterr()
    calls = _raced_once(monkeypatch)
    assert main(env_args(project, str(channel), *(["--dry-run"] if dry_run else []))) == 0
    out, err = capsys.readouterr()
    assert len(calls) == 2 and err == "", (out, err)
    assert ("plan for" in out and "nothing to do" in out) if dry_run else "is up to date" in out, out


def _env_process(project: Project, channel: Path, lock: Path, link: str = "auto") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bootstrap", *env_args(project, str(channel), "--lock", str(lock), "--link", link)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _assert_is_one_locks_env(project: Project, locks: dict) -> Path:
    """The env holds exactly the packages of the lock its install record names, one of `locks`."""
    prefix = prefix_of(project)
    lock_path = Path(read_install_record(prefix).lock_path)
    assert lock_path in locks.values()
    lock = read_lock(lock_path)
    installed = conda_records(prefix)
    assert {(c.name, c.version, c.sha256) for c in installed} == {
        (p.name, p.version, p.sha256) for p in lock.for_platform("linux-64", "conda")
    }
    names = {c.name for c in installed}
    assert {(d.name, d.version) for d in pip_distributions(prefix) if d.name not in names} == {
        (p.name, p.version) for p in lock.for_platform("linux-64", "pip")
    }
    return lock_path


def _pairs(project: Project, channel: Path, wheels: Path, pairs: int, link: str = "auto") -> None:
    """`pairs` times: two runs on the one prefix, one with each of two locks, in random order and
    staggered so that one often reads the env while the other switches it."""
    locks = {}
    for name, pip in (("a", ("alpha", "gamma")), ("b", ("alpha==1.0", "gamma"))):
        change_lock(project, channel, wheels, pip=pip)
        locks[name] = project.lock_path("py310").with_name(f"{name}.conda-lock.yml")
        shutil.copy(project.lock_path("py310"), locks[name])
    assert main(env_args(project, str(channel), "--lock", str(locks["a"]))) == 0
    rng = random.Random(21)
    for index in range(pairs):
        order = rng.sample(["a", "b"], 2)
        first = _env_process(project, channel, locks[order[0]], link)
        time.sleep(rng.uniform(0.0, 0.6))
        second = _env_process(project, channel, locks[order[1]], link)
        for process in (first, second):
            out, err = process.communicate(timeout=120)
            assert "Traceback" not in err and process.returncode == 0, (index, out, err)
            # The one line a run may print besides its result and its download's size: that it waited for the other.
            assert all("waiting for another `bootstrap env`" in line for line in without_progress(err).splitlines()), (
                index,
                err,
            )
        _assert_is_one_locks_env(project, locks)
    assert main(env_args(project, str(channel), "--lock", str(locks["b"]))) == 0
    assert _assert_is_one_locks_env(project, locks) == locks["b"]


# Each mode links the same files another way; auto (hard links or reflinks here) runs by default.
@pytest.mark.parametrize(
    "link", ["auto", *(pytest.param(mode, marks=pytest.mark.slow) for mode in ("reflink", "hardlink", "copy"))]
)
def test_three_pairs_of_runs_on_one_prefix(project: Project, channel: Path, wheels: Path, link: str) -> None:
    _pairs(project, channel, wheels, 3, link)


@pytest.mark.slow
def test_twenty_pairs_of_runs_on_one_prefix(project: Project, channel: Path, wheels: Path) -> None:
    _pairs(project, channel, wheels, 20)


@pytest.mark.parametrize("errno_name", ["ENOSYS", "ENOLCK", "EOPNOTSUPP"])
def test_a_file_system_without_locks_installs_and_says_nothing_guards_it(
    project: Project, channel: Path, capsys, monkeypatch, errno_name: str
) -> None:
    """Lustre mounted without `-o flock` (ENOSYS), NFS mounted nolock (ENOLCK), some FUSE mounts
    (EOPNOTSUPP): every flock(2) is refused by the file system. Before, a traceback; now the env is
    made, with one note per locked place that nothing keeps a second run out."""
    import errno
    import fcntl

    def refused(fd, operation):
        raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)))

    monkeypatch.setattr(fcntl, "flock", refused)
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 0, capsys.readouterr().err
    err = without_progress(capsys.readouterr().err)
    notes = [line for line in err.splitlines() if line.startswith("note: ") and "has no file locks" in line]
    assert notes and len(notes) == len(set(notes)), err
    assert all(os.strerror(getattr(errno, errno_name)) in note and "run one at a time" in note for note in notes)
    assert "Traceback" not in err
    assert_matches_lock(project)
    assert not list((project.root / ".cache").glob(".extracting-*"))
    assert main(env_args(project, str(channel))) == 0  # and again: a no-op on the same unlocked file system
