"""`bootstrap cache`: what the package cache holds, and `--prune` down to what the project's locks install."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from pathlib import Path

from bootstrap.cli import main
from bootstrap.lockfile import read_lock
from bootstrap.project import Project
# The env tests' runnable channel, wheelhouse and locked project.
from tests.test_env import (  # noqa: F401 (channel, wheels, locked_once and project are fixtures)
    CONDA,
    change_lock,
    channel,
    env_args,
    locked_once,
    prefix_of,
    project,
    run_python,
    wheels,
)

REPO = Path(__file__).resolve().parent.parent


def cache_json(project: Project, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["cache", "--root", str(project.root), "--cache-dir", str(project.root / ".cache"), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_prune_keeps_what_the_locks_install_and_drops_the_rest(project: Project, channel: Path, wheels: Path,
                                                                capsys) -> None:
    assert main(env_args(project, str(channel))) == 0
    old = {e.sha256: e for e in read_lock(project.lock_path("py310")).packages}
    change_lock(project, channel, wheels, conda=tuple(c for c in CONDA if c != "torchlike"), pip=("alpha==1.0", "gamma"))
    assert main(env_args(project, str(channel))) == 0
    cache = project.root / ".cache"
    before = cache_json(project, capsys)
    assert before["removed"] is None and before["usage"]["archives"]["entries"] > 0

    report = cache_json(project, capsys, "--prune")
    lock = read_lock(project.lock_path("py310"))
    gone = [e for sha, e in old.items() if sha not in {p.sha256 for p in lock.packages}]
    assert {e.name for e in gone} == {"torchlike", "alpha", "beta"}  # the first lock's, not the second's
    assert report["removed"]["archives"]["entries"] == len(gone)
    assert report["removed"]["pkgs"]["entries"] == 2 and report["removed"]["seals"]["entries"] == 1  # torchlike's
    assert report["removed"]["locks"]["entries"] == 1  # the first lock's parsed form
    assert report["kept_for"] == [str(project.lock_path("py310"))]
    assert {p.name for p in (cache / "archives").iterdir()} == {p.sha256 for p in lock.packages}
    assert not list((cache / "pkgs").glob("torchlike-*")) and (cache / "pkgs" / ".cache.lock").exists()
    assert report["usage"]["archives"]["bytes"] < before["usage"]["archives"]["bytes"]
    # What was kept is all an env of this lock needs: another one builds with no channel at all.
    assert main([*env_args(project, "/nonexistent-mirror"), "--prefix", str(project.root / "second")]) == 0
    assert run_python(prefix_of(project), "import alpha; print(alpha.__version__)") == "1.0"  # envs hold copies


def test_prune_waits_for_a_make_env_of_the_project(project: Project, tmp_path: Path) -> None:
    lock_file = project.root / ".envs" / ".py310.lock"
    lock_file.parent.mkdir(parents=True)
    with open(lock_file, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running `bootstrap env` holds it
        argv = [sys.executable, "-m", "bootstrap", "cache", "--prune", "--root", str(project.root),
                "--cache-dir", str(tmp_path / "cache")]
        proc = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, text=True)
        try:
            assert "waiting for another `bootstrap env`" in proc.stderr.readline()
            assert proc.poll() is None
        finally:
            proc.kill()
            proc.wait()
