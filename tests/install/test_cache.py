"""`bootstrap cache`: what the package cache holds, and `--prune` down to what the project's locks install."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.install import wheelstore
from bootstrap.lock.lockfile import read_lock
from bootstrap.project import Project
from tests.fixtures import REPO
from tests.fixtures.env_project import CONDA, change_lock, env_args, prefix_of, run_python
from tests.fixtures.unpacked import unpacked


def cache_json(project: Project, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert (
        main(["cache", "--root", str(project.root), "--cache-dir", str(project.root / ".cache"), "--json", *extra]) == 0
    )
    return json.loads(capsys.readouterr().out)


def test_prune_keeps_what_the_locks_install_and_drops_the_rest(
    project: Project, channel: Path, wheels: Path, capsys
) -> None:
    assert main(env_args(project, str(channel))) == 0
    old = {e.sha256: e for e in read_lock(project.lock_path("py310")).packages}
    change_lock(
        project, channel, wheels, conda=tuple(c for c in CONDA if c != "torchlike"), pip=("alpha==1.0", "gamma")
    )
    assert main(env_args(project, str(channel))) == 0
    cache = project.root / ".cache"
    unpacked(cache, "orphan", "orphan-pkg", "1.0")  # uv's pointer to it gone: no name finds it in uv's cache
    before = cache_json(project, capsys)
    assert before["removed"] is None and before["usage"]["archives"]["entries"] > 0

    report = cache_json(project, capsys, "--prune")
    lock = read_lock(project.lock_path("py310"))
    gone = [e for sha, e in old.items() if sha not in {p.sha256 for p in lock.packages}]
    assert {e.name for e in gone} == {"torchlike", "alpha", "beta"}  # the first lock's, not the second's
    assert report["removed"]["archives"]["entries"] == len(gone)
    assert report["removed"]["pkgs"]["entries"] == 2  # torchlike's copy and rattler's lock file beside it
    # uv's unpacked wheels: alpha's and beta's go by name, alpha 1.0 with them, to be unpacked again when
    # needed, and the orphan as what nothing reaches
    assert report["removed"]["wheels"]["entries"] == 4 and report["left"]["wheels"]["entries"] == 0
    assert {wheelstore.distribution(p)[0] for p in wheelstore.archives(cache)} == {"gamma"}
    assert report["removed"]["seals"]["entries"] == 4  # torchlike's, and the three unpacked wheels'
    assert sorted(p.name for p in (cache / "seals").iterdir() if p.name.startswith("uv-")) == [
        f"uv-{p.name}.json" for p in wheelstore.archives(cache)
    ]
    assert report["kept_for"] == [str(project.lock_path("py310"))]
    assert {p.name for p in (cache / "archives").iterdir()} == {p.sha256 for p in lock.packages}
    assert not list((cache / "pkgs").glob("torchlike-*")) and (cache / "pkgs" / ".cache.lock").exists()
    assert report["usage"]["archives"]["bytes"] < before["usage"]["archives"]["bytes"]
    # What was kept is all an env of this lock needs: another one builds with no channel at all.
    assert main([*env_args(project, "/nonexistent-mirror"), "--prefix", str(project.root / "second")]) == 0
    assert run_python(project.root / "second", "import alpha; print(alpha.__version__)") == "1.0"
    assert {wheelstore.distribution(p)[0] for p in wheelstore.archives(cache)} == {"alpha", "gamma"}  # unpacked again
    assert run_python(prefix_of(project), "import alpha; print(alpha.__version__)") == "1.0"  # envs keep their files


def start_waiting(argv: list) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bootstrap", *argv], cwd=REPO, stderr=subprocess.PIPE, text=True)


def assert_waits(proc: subprocess.Popen, message: str) -> None:
    try:
        assert message in proc.stderr.readline()
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_prune_and_installs_wait_for_each_other(project: Project, channel: Path, tmp_path: Path) -> None:
    """Through the cache's flock: any project's `env` or `bundle` holds it shared, prune exclusive."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with open(cache / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_SH)  # as a running `bootstrap env`, of any project or prefix, holds it
        assert_waits(
            start_waiting(["cache", "--prune", "--root", str(project.root), "--cache-dir", str(cache)]),
            "waiting for the runs of `bootstrap env` or `bundle`",
        )
        fcntl.flock(held, fcntl.LOCK_EX)  # as a prune holds it
        assert_waits(
            start_waiting([*env_args(project, str(channel))[:-2], "--cache-dir", str(cache)]),
            "waiting for `bootstrap cache --prune`",
        )


def test_prune_removes_only_what_is_its_own(project: Project, channel: Path, tmp_path: Path, capsys) -> None:
    cache = project.root / ".cache"
    assert main(env_args(project, str(channel))) == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.json").write_text("{}")
    (cache / "archives" / "deploy.txt").write_text("not an archive's directory")
    shutil.rmtree(cache / "seals")
    (cache / "seals").symlink_to(outside)
    shutil.rmtree(cache / "uv")
    (outside / "archive-v0" / "unpacked" / "other-1.0.dist-info").mkdir(parents=True)  # no lock installs it
    (cache / "uv").symlink_to(outside)
    report = cache_json(project, capsys, "--prune")
    assert (cache / "archives" / "deploy.txt").exists() and (outside / "precious.json").exists()
    assert report["removed"]["seals"]["entries"] == 0 and report["usage"]["seals"]["entries"] == 0
    assert (outside / "archive-v0" / "unpacked").is_dir() and report["usage"]["wheels"]["entries"] == 0


def test_prune_refuses_without_the_locks_it_would_keep(project: Project, tmp_path: Path, capsys) -> None:
    cache = tmp_path / "cache"
    (cache / "archives" / ("0" * 64)).mkdir(parents=True)
    (tmp_path / "not-a-project").mkdir()
    for argv, message in (
        (["--root", str(tmp_path / "not-a-project")], "no env specs (*.yml) found"),
        (["--root", str(project.root)], "conda-lock.yml: missing: pruning now would drop every package of py310"),
    ):
        if "missing" in message:
            project.lock_path("py310").unlink()
        capsys.readouterr()
        assert main(["cache", "--prune", "--cache-dir", str(cache), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
    assert (cache / "archives" / ("0" * 64)).is_dir()
    (tmp_path / "a-file").write_text("")
    assert main(["cache", "--cache-dir", str(tmp_path / "a-file")]) == 2
    assert f"--cache-dir {tmp_path / 'a-file'}: not a directory" in capsys.readouterr().err


def test_prune_refuses_a_conda_installation(project: Project, tmp_path: Path, capsys) -> None:
    """`--cache-dir ~/miniconda3` by mistake: its pkgs/ is conda's cache, which prune must not empty."""
    for marker in ("conda-meta/history", "pkgs/urls.txt"):
        root = tmp_path / marker.split("/")[0] / "miniconda3"
        (root / marker).parent.mkdir(parents=True)
        (root / marker).write_text("")
        extracted = root / "pkgs" / "zlib-1.3.1-hb9d3cd8_2"
        extracted.mkdir(parents=True)
        capsys.readouterr()
        assert main(["cache", "--prune", "--cache-dir", str(root), "--root", str(project.root)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"error: --cache-dir {root}: is a conda installation, not bootstrap's package cache (pass the "
            "--cache-dir that `make env` uses (default ~/.cache/bootstrap))"
        )
        assert extracted.is_dir()


def test_prune_removes_downloads_killed_runs_left(project: Project, channel: Path, capsys) -> None:
    """`archives/<sha256>/.part-*` of a SIGKILLed env or bundle: the next run fetches into a file of its own."""
    cache = project.root / ".cache"
    assert main(env_args(project, str(channel))) == 0
    kept = next((cache / "archives").iterdir())
    part = kept / ".part-killed1"
    part.write_bytes(b"x" * 100_000)
    report = cache_json(project, capsys, "--prune")
    assert not part.exists() and kept.is_dir() and len(list(kept.iterdir())) >= 1
    assert report["removed"]["archives"]["bytes"] >= 100_000


def test_prune_removes_extractions_killed_runs_left(project: Project, channel: Path, capsys) -> None:
    """`pkgs/.<name-version-build><random>/`: rattler's extraction of a SIGKILLed run, never renamed into
    place. `cache` counts it, prune removes it, and a dot-file of another tool stays."""
    cache = project.root / ".cache"
    assert main(env_args(project, str(channel))) == 0
    kept = next(p for p in (cache / "pkgs").iterdir() if (p / "info").is_dir())
    left = cache / "pkgs" / f".{kept.name}Xy12Ab"
    (left / "lib").mkdir(parents=True)
    (left / "lib" / "big.so").write_bytes(b"x" * 200_000)
    (cache / "pkgs" / ".cache.lock").write_text("")
    assert cache_json(project, capsys)["usage"]["pkgs"]["bytes"] >= 200_000
    report = cache_json(project, capsys, "--prune")
    assert not left.exists() and kept.is_dir() and (cache / "pkgs" / ".cache.lock").is_file()
    assert report["removed"]["pkgs"]["bytes"] >= 200_000


@pytest.mark.parametrize("kind", ["archives", "pkgs"])
@pytest.mark.parametrize("stray", ["file", "dangling-link"])
def test_a_part_of_the_cache_that_is_not_a_directory_is_one_line(
    project: Project, channel: Path, capsys, kind: str, stray: str
) -> None:
    """Not a traceback from the fetch (archives) or rattler's vague `File exists` (pkgs)."""
    cache = project.root / ".cache"
    cache.mkdir()
    part = cache / kind
    if stray == "file":
        part.write_text("a stray file")
    else:
        part.symlink_to(project.root / "gone")
    capsys.readouterr()
    for argv in (
        env_args(project, str(channel)),
        [
            "bundle",
            "--root",
            str(project.root),
            "--platform",
            "linux-64",
            "--no-tools",
            "--mirror",
            f"conda-forge={channel}",
            "--cache-dir",
            str(cache),
            "-o",
            str(project.root / "b.tar"),
        ],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err == (
            f"error: --cache-dir {cache}: {part} is not a directory (remove it: what the cache "
            "holds is fetched again; or pass another --cache-dir)\n"
        )
    assert not prefix_of(project).exists() and not (project.root / "b.tar").exists()


def test_a_cache_dir_linked_to_what_is_gone_is_one_line(
    project: Project, channel: Path, tmp_path: Path, capsys
) -> None:
    """`~/.cache/bootstrap -> /scratch/me/cache`, and the scratch purged: a traceback from mkdir, before."""
    link = tmp_path / "cache"
    link.symlink_to(tmp_path / "purged" / "cache")
    capsys.readouterr()
    for cache, argv in (
        (link, [*env_args(project, str(channel))[:-2], "--cache-dir", str(link)]),
        (
            link / "sub",
            [
                "bundle",
                "--root",
                str(project.root),
                "--platform",
                "linux-64",
                "--no-tools",
                "--mirror",
                f"conda-forge={channel}",
                "--cache-dir",
                str(link / "sub"),
                "-o",
                str(tmp_path / "b.tar"),
            ],
        ),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"error: --cache-dir {cache}: {link} is a symlink "
            f"to {tmp_path / 'purged' / 'cache'}, which does not exist "
            "(create what it points to, or "
        )
        assert len(err.splitlines()) == 1
    assert not (tmp_path / "purged").exists() and not prefix_of(project).exists()


def test_a_cache_dir_to_create_on_a_read_only_file_system_is_one_line(
    project: Project, channel: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """mkdir(2) answers EROFS on a read-only mount, for root too: a traceback from cache_lock, before."""
    cache, mkdir = tmp_path / "ro" / "cache", Path.mkdir

    def read_only(self, *args, **kwargs):
        if self == cache or cache in self.parents:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    capsys.readouterr()
    for argv in (
        [*env_args(project, str(channel))[:-2], "--cache-dir", str(cache)],
        [
            "bundle",
            "--root",
            str(project.root),
            "--platform",
            "linux-64",
            "--no-tools",
            "--mirror",
            f"conda-forge={channel}",
            "--cache-dir",
            str(cache),
            "-o",
            str(tmp_path / "b.tar"),
        ],
    ):
        assert main(argv) == 2
        assert capsys.readouterr().err == (
            f"error: --cache-dir {cache}: cannot be used: Read-only file system "
            "(pass a --cache-dir you can write; the default is ~/.cache/bootstrap)\n"
        )
    assert not prefix_of(project).exists() and not (tmp_path / "b.tar").exists()


def test_a_lock_file_that_is_a_directory_is_one_line(project: Project, channel: Path, tmp_path: Path, capsys) -> None:
    """`mkdir -p CACHE/.lock`: the flock's open(2) failed with EISDIR, a traceback before."""
    cache = tmp_path / "cache"
    (cache / ".lock").mkdir(parents=True)
    capsys.readouterr()
    for argv in (
        [*env_args(project, str(channel))[:-2], "--cache-dir", str(cache)],
        [
            "bundle",
            "--root",
            str(project.root),
            "--platform",
            "linux-64",
            "--no-tools",
            "--mirror",
            f"conda-forge={channel}",
            "--cache-dir",
            str(cache),
            "-o",
            str(tmp_path / "b.tar"),
        ],
        ["cache", "--prune", "--root", str(project.root), "--cache-dir", str(cache)],
    ):
        assert main(argv) == 2
        assert capsys.readouterr().err == (
            f"error: --cache-dir {cache}: {cache / '.lock'} is not a file (remove "
            "it: it only holds the cache's flock; or pass another --cache-dir)\n"
        )
    assert not prefix_of(project).exists() and not (tmp_path / "b.tar").exists()
    assert sorted(p.name for p in cache.iterdir()) == [".lock"]  # refused before any fetch


def test_a_uv_that_fails_to_clean_is_one_line_and_nothing_is_pruned(
    project: Project, channel: Path, wheels: Path, capsys, monkeypatch
) -> None:
    from bootstrap.runner import Completed

    assert main(env_args(project, str(channel))) == 0
    change_lock(project, channel, wheels, conda=CONDA, pip=("gamma",))  # alpha's unpacked wheel goes at the prune
    cache = project.root / ".cache"
    before = {part: sorted(cache.joinpath(part).rglob("*")) for part in ("archives", "pkgs", "seals", "uv")}
    monkeypatch.setattr(wheelstore, "run", lambda argv, **_: Completed(tuple(argv), 2, "", "error: cache is locked"))
    capsys.readouterr()
    code = main(["cache", "--root", str(project.root), "--cache-dir", str(cache), "--prune"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "uv cache clean" in err and "alpha" in err and "error: cache is locked" in err
    assert {part: sorted(cache.joinpath(part).rglob("*")) for part in before} == before  # nothing pruned
