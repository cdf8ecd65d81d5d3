"""fsutil: the helpers behind atomic writes and the disk-full message."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from bootstrap.errors import InputError, ToolError
from bootstrap.fsutil import MAX_INPUT_BYTES, free_space, out_of_space, read_input_text
from tests.fixtures import REPO


def test_out_of_space_is_read_from_errno_or_from_an_engine_message_anywhere_in_the_chain() -> None:
    assert out_of_space(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert out_of_space(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)))
    rattler = "failed to copy file to destination\nCaused by: No space left on device (os error 28)"
    assert out_of_space(ToolError(f"linking into /x failed: {rattler}"))
    try:
        try:
            raise OSError(errno.ENOSPC, "write")  # our own write, wrapped on the way up
        except OSError as inner:
            raise ToolError("uv pip install failed") from inner
    except ToolError as outer:
        assert out_of_space(outer)
    assert not out_of_space(OSError(errno.EACCES, os.strerror(errno.EACCES)))
    assert not out_of_space(ToolError("linking into /x failed: Permission denied (os error 13)"))


def test_free_space_is_asked_of_the_nearest_existing_directory(tmp_path: Path) -> None:
    mount, free = free_space(tmp_path / "not" / "yet" / "made")
    assert os.path.ismount(mount) and str(tmp_path).startswith(str(mount))
    assert free > 0


REMOVE_AS_USER = """
import os, sys, tempfile
sys.path.insert(0, sys.argv[1])
from bootstrap.fsutil import remove_tree
top = tempfile.mkdtemp()
os.makedirs(os.path.join(top, "pkg", "ro", "deeper"))
for name in ("pkg/ro/file", "pkg/ro/deeper/file", "pkg/file"):
    open(os.path.join(top, name), "w").close()
os.chmod(os.path.join(top, "pkg", "ro", "deeper"), 0o000)  # not even listable
os.chmod(os.path.join(top, "pkg", "ro"), 0o555)
remove_tree(os.path.join(top, "pkg"))
remove_tree(os.path.join(top, "never-there"))
print(sorted(os.listdir(top)))
"""


def readable_copy_of_the_package() -> str:
    """A copy of `bootstrap/` that any user may read, in a new temp directory (the caller removes it).

    The checkout may sit where `nobody` cannot read it (a clone inside `mktemp -d`, mode 0700), and so
    may pytest's temp directories: the copy goes to the system temp directory, its modes set here
    rather than copied from a checkout made under a strict umask."""
    import shutil
    import tempfile

    top = tempfile.mkdtemp(prefix="fsutil-as-nobody-")
    shutil.copytree(REPO / "bootstrap", os.path.join(top, "bootstrap"), ignore=shutil.ignore_patterns("__pycache__"))
    for folder, _, files in os.walk(top):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    return top


def test_remove_tree_goes_through_read_only_directories_as_a_non_root_user() -> None:
    """Root ignores directory modes, so as root the check runs as `nobody`, on a copy of the package it
    can read wherever the checkout is."""
    import shutil
    import subprocess
    import sys
    import tempfile

    if os.geteuid() != 0:
        done = subprocess.run([sys.executable, "-c", REMOVE_AS_USER, str(REPO)], capture_output=True, text=True)
    else:
        python = "/usr/bin/python3"
        if not os.path.exists(python):
            pytest.skip("needs a system python that `nobody` may run")
        temp = Path(tempfile.gettempdir())
        closed = [str(p) for p in (temp, *temp.parents) if not os.stat(p).st_mode & 0o001]
        if closed:  # TMPDIR set to a private directory
            pytest.skip(f"`nobody` cannot reach the temp directory {temp}: {closed[0]} is closed to others")
        copy = readable_copy_of_the_package()
        try:
            done = subprocess.run(
                [python, "-I", "-c", REMOVE_AS_USER, copy], capture_output=True, text=True, user="nobody", cwd=copy
            )
        finally:
            shutil.rmtree(copy)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_write_to_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    """A lock or environment.yml linked from elsewhere stays linked (os.replace alone would put a file in its place)."""
    from bootstrap.fsutil import atomic_write_text

    shared = tmp_path / "shared" / "conda-lock.yml"
    shared.parent.mkdir()
    shared.write_text("old")
    link = tmp_path / "conda-lock.yml"
    link.symlink_to(shared)
    atomic_write_text(link, "new")
    assert link.is_symlink() and shared.read_text() == "new"
    assert sorted(p.name for p in shared.parent.iterdir()) == ["conda-lock.yml"]  # no temp file left


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "too-big", "not-utf8", "missing"])
def test_an_input_file_is_read_bounded_and_only_when_regular(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "demo.yml"
    if kind == "fifo":
        os.mkfifo(path)  # nobody writes: a blocking open or read would wait forever
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")  # endless: a plain read fills memory
    elif kind == "directory":
        path.mkdir()
    elif kind == "too-big":
        path.write_bytes(b"#" * (MAX_INPUT_BYTES + 1))
    elif kind == "not-utf8":
        path.write_bytes(b"name: \xff\n")
    expected = {
        "fifo": "not a regular file",
        "dev-zero": "not a regular file",
        "directory": "is a directory",
        "too-big": "larger than 16 MiB",
        "not-utf8": "not UTF-8 text",
        "missing": "file not found",
    }[kind]
    with pytest.raises(InputError) as info:
        read_input_text(path)
    assert str(info.value).startswith(f"{path}: {expected}")


def test_an_input_file_reads_as_text_mode_would() -> None:
    assert read_input_text(REPO / "envs" / "py39.yml") == (REPO / "envs" / "py39.yml").read_text(encoding="utf-8")


@pytest.mark.parametrize("old", [b"", b"short", b"a much longer old content\n" * 100])
def test_overwrite_unshared_writes_in_place_only_a_file_no_other_name_links(tmp_path: Path, old: bytes) -> None:
    """A file of one name keeps its inode and mode; one hard-linked from elsewhere (a package cache)
    gets a new inode there, and the other name keeps the old bytes."""
    from bootstrap.fsutil import overwrite_unshared

    own, shared, cache = tmp_path / "own", tmp_path / "shared", tmp_path / "cache"
    for path in (own, cache):
        path.write_bytes(old)
        path.chmod(0o755)
    os.link(cache, shared)
    inode = own.stat().st_ino
    for path in (own, shared):
        overwrite_unshared(path, b"new bytes")
        assert path.read_bytes() == b"new bytes" and path.stat().st_mode & 0o777 == 0o755
    assert own.stat().st_ino == inode
    assert cache.read_bytes() == old and shared.stat().st_ino != cache.stat().st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "own", "shared"]  # no temp file left
