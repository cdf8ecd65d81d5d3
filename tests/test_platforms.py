"""One platform vocabulary: the table converts both ways, and every caller names a machine alike."""

from __future__ import annotations

import platform as stdlib_platform
import re
import sys
from pathlib import Path

import pytest

from bootstrap.compat import data
from bootstrap.platforms import KNOWN_PLATFORMS, PLATFORMS, compat_key, conda_subdir, host_platform, os_of
from tests.fixtures import REPO
from tests.fixtures.fakes import FakeNvml, fake_torch, missing_binary_runner

SYS_PLATFORM = {"linux": "linux", "macos": "darwin", "windows": "win32"}
UNAME_S = {"Linux": "linux", "Darwin": "darwin"}

# (sys.platform, platform.machine()) -> the conda subdir: the machines a team has, and two it may meet.
MACHINES = [
    ("linux", "x86_64", "linux-64"),
    ("linux", "aarch64", "linux-aarch64"),
    ("linux", "arm64", "linux-aarch64"),
    ("linux", "ppc64le", "linux-ppc64le"),
    ("darwin", "arm64", "osx-arm64"),
    ("darwin", "x86_64", "osx-64"),
    ("win32", "AMD64", "win-64"),
    ("win32", "ARM64", "win-arm64"),
    ("linux", "riscv64", "linux-riscv64"),
    ("freebsd14", "amd64", "freebsd14-amd64"),
]


def test_every_subdir_round_trips_through_its_compat_key() -> None:
    assert len(set(KNOWN_PLATFORMS)) == len(KNOWN_PLATFORMS)
    for entry in PLATFORMS:
        assert compat_key(entry.subdir) == entry.compat_key
        assert compat_key(entry.compat_key) == entry.compat_key  # a key is already a key
        assert conda_subdir(entry.compat_key, locked=(entry.subdir,)) == entry.subdir
        assert os_of(entry.subdir) == entry.os
        for machine in entry.machines:
            assert host_platform(SYS_PLATFORM[entry.os], machine) == entry.subdir
    # Only macOS's two subdirs share a key; without a lock to say which, Apple silicon.
    shared = [p.subdir for p in PLATFORMS if [q.compat_key for q in PLATFORMS].count(p.compat_key) > 1]
    assert shared == ["osx-64", "osx-arm64"]
    assert conda_subdir("macos") == conda_subdir("macos", ("osx-64", "osx-arm64")) == "osx-arm64"


def test_names_outside_the_table_pass_through_unchanged() -> None:
    assert compat_key("linux-riscv64") == "linux-riscv64" and conda_subdir("linux-riscv64") == "linux-riscv64"
    assert [compat_key(name) for name in ("linux", "win32", "darwin", "macos", "Linux-64")] == [
        "linux_x86_64",
        "windows_x86_64",
        "macos",
        "macos",
        "linux_x86_64",
    ]
    assert [os_of(name) for name in ("osx-x", "win-x", "linux-riscv64", "freebsd14-amd64")] == [
        "macos",
        "windows",
        "linux",
        "linux",
    ]


def test_the_compat_tables_use_only_keys_of_the_table() -> None:
    keys = {p.compat_key for p in PLATFORMS}
    for release in data.TORCH_RELEASES:
        assert set(release.get("pypi_default", {})) <= keys, release["release"]


@pytest.mark.parametrize("sys_platform, machine, subdir", MACHINES)
def test_every_caller_names_a_machine_alike(
    monkeypatch, tmp_path: Path, sys_platform: str, machine: str, subdir: str
) -> None:
    """`env`/`bundle` (host_platform), the facts doctor and verify record, the torch build they probe,
    doctor's choice of locked platform, and a replay of the recorded facts: one answer per machine."""
    from bootstrap.checks.doctor import DoctorOptions, run_doctor
    from bootstrap.compat.probe import collect_facts, probe_torch

    monkeypatch.setattr(sys, "platform", sys_platform)
    monkeypatch.setattr(stdlib_platform, "machine", lambda: machine)
    assert host_platform() == subdir
    facts = collect_facts(FakeNvml({}, init_error=12), missing_binary_runner)
    assert facts.platform == compat_key(subdir) and facts.nvidia.os == os_of(subdir)
    assert probe_torch(fake_torch())[0].platform == compat_key(subdir)
    doctor = run_doctor(DoctorOptions(root=tmp_path), nvml=FakeNvml({}, init_error=12), runner=missing_binary_runner)
    assert doctor.platform == subdir
    assert conda_subdir(facts.platform, locked=(subdir,)) == subdir  # `--facts FILE` against a lock of it


def test_the_tools_venv_script_maps_uname_as_the_table_does() -> None:
    """scripts/tools-venv.sh picks the bundle's tools wheels by `uname -s`-`uname -m`, in shell."""
    script = (REPO / "scripts" / "tools-venv.sh").read_text()
    cases = re.findall(r"^\s*(\w+)-(\w+)\)\s*platform=([\w-]+)\s*;;", script, re.MULTILINE)
    assert len(cases) >= 4, "the case block of tools-venv.sh changed shape: update this test"
    for system, machine, subdir in cases:
        assert subdir in KNOWN_PLATFORMS
        assert host_platform(UNAME_S[system], machine) == subdir, f"{system}-{machine}"


def test_a_spec_may_name_every_platform_of_the_table(tmp_path: Path) -> None:
    from bootstrap.lock.spec import read_spec

    path = tmp_path / "py310.yml"
    path.write_text(
        "name: py310\nchannels: [conda-forge]\nplatforms: [" + ", ".join(KNOWN_PLATFORMS) + "]\n"
        "dependencies:\n  - python=3.10\n"
    )
    assert read_spec(path).platforms == KNOWN_PLATFORMS
