"""`bootstrap env --link`: files linked from the package cache by reflink, hard link or copy; the mode
falls back where a file system refuses it, and an edit made through a hard link is caught by `verify`
and never reaches an env made after it (the seals of rattler's extracted packages and uv's unpacked
wheels). Also: a failed first create leaves nothing, even while the linker is still writing."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.install import linkmode, store, wheelstore
from bootstrap.lock.lockfile import read_lock
from bootstrap.prefix import read_install_record, site_packages
from bootstrap.project import Project
from tests.fixtures.env_project import (
    assert_matches_lock,
    change_lock,
    env_args,
    prefix_of,
    run_python,
    without_progress,
)
from tests.fixtures.project import copy_project
from tests.fixtures.unpacked import unpacked

CONDA_FILE = "lib/libzstub.so.1"  # zlibstub's, without a prefix placeholder: linked, not rewritten


@pytest.fixture(autouse=True)
def _probe_afresh() -> None:
    linkmode._probed.clear()  # each test's file systems (and fakes) are probed anew


def pip_file(prefix: Path) -> Path:
    site = site_packages(prefix)
    assert site is not None
    return site / "alpha" / "__init__.py"


def env_json(args: list, capsys) -> dict:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def verify_files(prefix: Path, project: Project, capsys) -> dict:
    capsys.readouterr()
    main(["verify", "--prefix", str(prefix), "--lock", str(project.lock_path("py310")), "--no-bench", "--json"])
    checks = json.loads(capsys.readouterr().out)["checks"]
    return next(c for c in checks if c["id"] == "env.files")


def test_auto_links_from_a_cache_on_the_same_file_system(project: Project, channel: Path, capsys) -> None:
    """Same device: reflinks where the file system has them, else hard links, for both parts; the
    mode is in the install record, `--json` and the summary."""
    expected = linkmode.supported(project.root, project.root)
    assert expected in ("reflink", "hardlink")
    result = env_json(env_args(project, str(channel)), capsys)
    assert result["link"] == {"requested": "auto", "used": expected, "fallback": None}
    prefix = prefix_of(project)
    assert read_install_record(prefix).link == {"requested": "auto", "used": expected}
    if expected == "hardlink":
        assert os.stat(prefix / CONDA_FILE).st_nlink > 1 and os.stat(pip_file(prefix)).st_nlink > 1
    # what the install rewrote in its dist-infos (RECORD, direct_url.json, scripts) left uv's cache as unpacked
    cache, installed = project.root / ".cache", read_lock(project.lock_path("py310")).packages
    assert wheelstore.of(cache, installed) and wheelstore.edited(cache, installed) == []
    assert run_python(prefix, "import alpha; print('usable')") == "usable"
    assert_matches_lock(project)


@pytest.mark.parametrize("then", ["hardlink", "copy"])
@pytest.mark.parametrize("keep", [False, True], ids=["appended", "same-size-and-mtime"])
def test_an_edit_through_a_hard_link_is_caught_and_reaches_no_later_env(
    project: Project, channel: Path, capsys, keep: bool, then: str
) -> None:
    """An edit written in place into a hard-linked file of one env (the cache's inode too) fails that
    env's `verify`, naming file and package; an env made after it, linked or copied, gets the files
    as packaged."""
    first, second = project.root / "env-a", project.root / "env-b"
    assert main(env_args(project, str(channel), "--prefix", str(first), "--link", "hardlink")) == 0
    originals = {}
    for path in (first / CONDA_FILE, pip_file(first)):
        assert os.stat(path).st_nlink > 1
        originals[path.relative_to(first)] = data = path.read_bytes()
        info = os.stat(path)
        if keep:
            _after_ctime_of(path)
        with open(path, "r+b") as handle:  # in place: same inode, as an editor may write
            handle.write(b"X" * min(4, len(data)) if keep else data + b"# EDITED\n")
        if keep:  # what `cp -p` or `touch -d` leave: only the inode's ctime shows the edit
            os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))

    check = verify_files(first, project, capsys)
    assert check["status"] == "fail"
    assert f"{CONDA_FILE} (conda:zlibstub" in check["observed"] and "alpha/__init__.py (pip:alpha" in check["observed"]
    assert "hard links" in check["remedy"] and "env" in check["remedy"]

    capsys.readouterr()
    assert main(env_args(project, str(channel), "--prefix", str(second), "--link", then)) == 0
    assert "alpha" in capsys.readouterr().out
    for relative, data in originals.items():
        assert (second / relative).read_bytes() == data, relative
    assert verify_files(second, project, capsys)["status"] == "ok"


def spy_on_hashing(monkeypatch) -> list[Path]:
    """The cached copies and unpacked wheels hashed from now on (their seals did not vouch for them)."""
    from bootstrap.install import store

    hashed: list[Path] = []
    for module, name in ((store, "_matches_paths_json"), (wheelstore, "_matches_record")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda path, real=real: hashed.append(path) or real(path))
    return hashed


def test_linking_again_hashes_nothing_and_an_edit_right_after_is_caught(
    project: Project, channel: Path, capsys, monkeypatch
) -> None:
    """A run that hard-linked from sealed copies seals them again by time, without hashing or
    rewriting them: the next env links from them without hashing either. An edit made at once after
    that run (no clock tick waited for), size and mtime put back, still reaches no later env."""

    first, second, third = (project.root / name for name in ("env-a", "env-b", "env-c"))
    for prefix in (first, second):  # the second run's links change the inodes the first sealed
        assert main(env_args(project, str(channel), "--prefix", str(prefix), "--link", "hardlink")) == 0
    hashed = spy_on_hashing(monkeypatch)
    path = second / CONDA_FILE
    original, info = path.read_bytes(), os.stat(path)
    seals = {p: p.stat().st_ino for p in (project.root / ".cache" / "seals").glob("*.json")}
    assert main(env_args(project, str(channel), "--prefix", str(third), "--link", "hardlink")) == 0
    assert hashed == []
    assert {p: p.stat().st_ino for p in seals} == seals  # moved on by their mtimes, none rewritten
    with open(third / CONDA_FILE, "r+b") as handle:  # the cache's inode, as the two envs' are
        handle.write(b"X")
    os.utime(third / CONDA_FILE, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert main(env_args(project, str(channel), "--prefix", str(project.root / "env-d"), "--link", "hardlink")) == 0
    assert [p.name.split("-")[0] for p in hashed] == ["zlibstub"]  # its ctime alone showed the edit
    assert (project.root / "env-d" / CONDA_FILE).read_bytes() == original


def test_seals_of_another_user_are_written_anew(project: Project, channel: Path, monkeypatch) -> None:
    """In a shared cache only a seal's owner may set its times: a run that links from another user's
    sealed copies writes their seals anew instead, and the run after it hashes nothing."""

    def env(name: str) -> list:
        return env_args(project, str(channel), "--prefix", str(project.root / name), "--link", "hardlink")

    assert main(env("env-a")) == 0
    real = os.utime

    def not_the_owner(path, *args, **kwargs):
        if Path(path).parent.name == "seals" and not Path(path).name.startswith("."):  # not our temp files
            raise PermissionError(errno.EPERM, "Operation not permitted", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "utime", not_the_owner)
    seals = {p: p.stat().st_ino for p in (project.root / ".cache" / "seals").glob("*.json")}
    assert seals and main(env("env-b")) == 0
    assert all(p.stat().st_ino != inode for p, inode in seals.items())
    monkeypatch.setattr(os, "utime", real)
    hashed = spy_on_hashing(monkeypatch)
    assert main(env("env-c")) == 0
    assert hashed == []


def test_an_install_moves_on_only_the_seals_it_checked(project: Project, channel: Path) -> None:
    """An unpacked wheel of another project, not checked by this install, keeps its seal's time: moved
    on, it would hide an edit that only its ctime shows."""
    cache = project.root / ".cache"
    other = unpacked(cache, "other1", "other-project-pkg", "1.0")
    seal = cache / "seals" / f"uv-{other.name}.json"
    store.write_seal(seal, wheelstore.SEAL_HEADER, store.fingerprint(other), at=1)
    assert main(env_args(project, str(channel), "--link", "hardlink")) == 0
    assert os.stat(seal).st_mtime_ns == 1
    assert any(p.name.startswith("uv-") and p != seal for p in seal.parent.iterdir())  # alpha's, sealed


def _after_ctime_of(path: Path) -> None:
    """Wait until the file system's clock has passed `path`'s change time. Inode times come from a
    coarse clock (a scheduler tick): an edit in the same tick as the install's seal leaves ctime as
    sealed, and with size and mtime restored nothing a stat shows has changed."""
    probe = path.parent.parent / ".ctime-probe"
    while True:
        probe.write_bytes(b"")
        if os.stat(probe).st_ctime_ns > os.stat(path).st_ctime_ns:
            break
        time.sleep(0.001)
    probe.unlink()


def _refuse_hard_links(monkeypatch) -> None:
    real = os.link

    def link(source, target, *args, **kwargs):
        if ".link-probe-" in os.fspath(source):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)


@pytest.mark.parametrize(
    ("requested", "no_hard_links", "used"),
    [
        ("reflink", False, "hardlink"),
        ("reflink", True, "copy"),
        ("hardlink", True, "copy"),
        ("auto", True, "copy"),
    ],
)
def test_a_mode_the_file_system_refuses_falls_back(
    project: Project, channel: Path, capsys, monkeypatch, requested: str, no_hard_links: bool, used: str
) -> None:
    """No reflinks here (ext4, tmpfs), or no hard links (EXDEV, faked at the probe): the next cheaper
    mode, said in a note; the env is the lock's."""
    if linkmode.supported(project.root, project.root) == "reflink":
        pytest.skip("this file system has reflinks")
    linkmode._probed.clear()
    if no_hard_links:
        _refuse_hard_links(monkeypatch)
    result = env_json(env_args(project, str(channel), "--link", requested), capsys)
    assert result["link"]["used"] == used
    assert (result["link"]["fallback"] is None) == (requested == "auto")
    if requested != "auto":
        assert any(note.startswith(f"--link {requested}: the file systems refuse") for note in result["notes"])
    prefix = prefix_of(project)
    assert read_install_record(prefix).link == {"requested": requested, "used": used}
    assert (os.stat(prefix / CONDA_FILE).st_nlink > 1) == (used == "hardlink")
    assert_matches_lock(project)


def test_a_cache_on_another_device_is_copied_from(
    locked_once: Project, channel: Path, small_fs: tuple, tmp_path: Path, capsys
) -> None:
    """The env on a tmpfs, the cache on the test's file system: hard links are refused (EXDEV), so
    rattler and uv are told to copy; the env runs."""
    mount, resize = small_fs
    resize("64m")
    project = copy_project(locked_once, mount / "proj")
    args = [*env_args(project, str(channel)), "--cache-dir", str(tmp_path / "cache"), "--link", "hardlink"]
    result = env_json(args, capsys)
    assert result["link"]["used"] == "copy" and "refuse hard links" in result["link"]["fallback"]
    prefix = prefix_of(project)
    assert os.stat(prefix / CONDA_FILE).st_nlink == 1 and os.stat(pip_file(prefix)).st_nlink == 1
    assert run_python(prefix, "import alpha; print('usable')") == "usable"


def test_a_rollback_says_when_files_of_its_generation_were_edited(
    project: Project, channel: Path, wheels: Path, capsys
) -> None:
    """Generations share inodes (hard links from the cache, and the clone of an env's first change): a
    file edited in place in the current one is edited in the previous one too, and the rollback says so."""
    assert main(env_args(project, str(channel), "--link", "hardlink")) == 0
    change_lock(project, channel, wheels, pip=("alpha==1.0", "gamma"))
    assert main(env_args(project, str(channel), "--link", "hardlink")) == 0
    prefix = prefix_of(project)
    with open(prefix / CONDA_FILE, "ab") as handle:
        handle.write(b"EDITED")
    capsys.readouterr()
    assert main(["env", "--root", str(project.root), "--rollback"]) == 0
    out = capsys.readouterr().out
    assert "now points at generation 1" in out
    assert "note: 1 file(s) of generation 1 were edited after it was made" in out and CONDA_FILE in out, out


def test_a_first_create_that_fails_while_the_linker_still_writes_leaves_nothing(
    project: Project, channel: Path, capsys, monkeypatch
) -> None:
    """rattler returns its error (here ENOSPC) while link tasks it started go on writing into the
    generation: the clean-up waits for them, so the message's "nothing was created" is true."""
    from bootstrap.install import link

    writers = []

    def failing_install(conda, to_link, archives, target, full_validation) -> None:
        def keep_writing() -> None:
            for index in range(40):
                directory = target.partial / "lib" / f"late{index % 4}"
                directory.mkdir(parents=True, exist_ok=True)
                (directory / f"f{index}").write_bytes(b"")  # a full disk still takes empty files
                time.sleep(0.02)

        writer = threading.Thread(target=keep_writing)
        writer.start()
        writers.append(writer)
        time.sleep(0.05)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(link, "_rattler_install", failing_install)
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 2
    error = without_progress(capsys.readouterr().err)
    assert error.startswith("error: no space left on device") and "nothing was created" in error, error
    for writer in writers:
        writer.join()
    gens = project.root / ".envs" / ".py310.gens"
    assert not os.path.lexists(prefix_of(project)) and not gens.exists(), list(gens.rglob("*"))
