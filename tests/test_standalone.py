"""The repository stands alone: what a team clones names no folder beside the checkout (`../shared`)
and no path of the machine a file was written on (a home directory, a developer's work tree, a
random temp directory). Paths any machine has, or that a doc shows as a placeholder (`/usr/...`,
`/dev/shm`, `/proc/...`, `/workspace`, `/tmp/demo`), are fine."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.fixtures import REPO

# What a clone reads: the package, its docs, the specs and the locks.
CHECKED = ("bootstrap", "docs", "envs", "README.md", "conda-lock.yml")
# Not checked yet: the bench rewrite in progress removes the two `../shared` mentions left there.
# Whoever lands that rewrite deletes this entry, so bench/ is checked like the rest.
# Not preceded by what would make it part of a longer word or path (`--root`, `a/root/b`, `x.home`).
_START = r"(?<![\w.~/-])"
FORBIDDEN = {
    "a folder beside the checkout": re.compile(r"\.\./shared\b"),
    "a developer's work tree": re.compile(_START + r"/work(?![\w.-])"),
    "a home directory": re.compile(_START + r"(/home/|/Users/|/root(?![\w.-])|[A-Za-z]:[\\/]+Users[\\/])"),
    "a macOS temp directory": re.compile(_START + r"(/private)?/var/folders/"),
    "pytest's temp directory": re.compile(r"/pytest-of-"),
    # tempfile's names: a prefix (`tmp` by default) and 8 random characters, a digit among them
    # (a placeholder writes them XXXXXXXX).
    "a random temp directory": re.compile(_START + r"/tmp/(tmp|[\w.-]*?[-_.])(?=[a-z_]*\d)[a-z0-9_]{8}(?![\w.-])"),
}


def checked_files() -> list[str]:
    """The tracked files under CHECKED (every file there, outside a git checkout)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--", *CHECKED], capture_output=True, check=True, timeout=30
        )
        names = [name for name in done.stdout.decode().split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        names = [
            path.relative_to(REPO).as_posix()
            for top in CHECKED
            for path in ([REPO / top] if (REPO / top).is_file() else sorted((REPO / top).rglob("*")))
            if path.is_file() and "__pycache__" not in path.parts
        ]
    return names


def offences(text: str) -> list[str]:
    """`what: the text found` for every forbidden path in `text`."""
    return [f"{what}: {found.group(0)}" for what, pattern in FORBIDDEN.items() for found in pattern.finditer(text)]


@pytest.mark.parametrize(
    "text",
    [
        "see ../shared/reference/cuda_compat.yml",
        "verify: /work/main/.envs/py310",
        "disk_path: /work",
        "plan for /home/alice/bootstrap/.envs/py310",
        "/Users/bob/miniforge3",
        "cache in /root/.cache/bootstrap",
        r"C:\Users\ana\miniforge3\python.exe",
        "/private/var/folders/x1/T/tmpab12cd34",
        "/tmp/pytest-of-root/pytest-3/test0",
        "py310: /tmp/bench-verify-vw8bj0lg/proj/.envs/py310",
        "in /tmp/tmpq8x_2kzm",
    ],
)
def test_a_machine_path_is_caught(text: str) -> None:
    assert offences(text), text


@pytest.mark.parametrize(
    "text",
    [
        "/workspace/bootstrap/.envs/py310",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1 and /dev/shm, /proc/driver/nvidia/version",
        "lock --root examples/pytorch-index; project.root/envs; ~/.cache/bootstrap",
        "/tmp/demo/proj/.envs/py310, /tmp/benchdemo, /tmp/bench-verify-XXXXXXXX/proj",
        "https://example.org/home/x and docs/work/notes",
        "/opt/wheels/torch-2.13.0+cpu wheel",
    ],
)
def test_a_path_any_machine_has_or_a_placeholder_is_fine(text: str) -> None:
    assert offences(text) == [], text


def test_no_committed_file_names_a_path_outside_the_repository_or_of_a_developers_machine() -> None:
    files = checked_files()
    assert "conda-lock.yml" in files and "bootstrap/compat/cuda_compat.yml" in files and "README.md" in files
    found = []
    for name in files:
        try:
            text = (REPO / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):  # an image; a file deleted but not yet committed
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{name}:{number}: {offence}" for offence in offences(line)]
    assert found == [], "\n".join(found)
