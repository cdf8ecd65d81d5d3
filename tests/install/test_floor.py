"""The glibc / macOS floor of a lock and this host against it (bootstrap/install/floor.py): pure, facts as data."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Optional

import pytest

from bootstrap.errors import HostError
from bootstrap.install.floor import (
    Floor,
    HostSystem,
    Need,
    check_host,
    host_problem,
    lock_floor,
    lower_bound,
    probe_host_system,
)
from bootstrap.lock.lockfile import Lock, LockedPackage, read_lock
from bootstrap.lock.spec import read_virtual_packages
from tests.fixtures import REPO

CHANNEL = "https://conda.anaconda.org/conda-forge"


def record(name: str, dependencies: dict, platform: str = "linux-64", version: str = "1.0") -> LockedPackage:
    url = f"{CHANNEL}/{platform}/{name}-{version}-h0_0.conda"
    return LockedPackage(
        name, version, "conda", platform, url, "a" * 64, md5="b" * 32, build="h0_0", dependencies=dependencies
    )


def wheel(name: str, tag: str, platform: str = "linux-64", version: str = "1.0") -> LockedPackage:
    url = f"https://files.example/{name}-{version.replace('+', '%2B')}-cp310-cp310-{tag}.whl"
    return LockedPackage(name, version, "pip", platform, url, "c" * 64)


def lock_of(*entries: LockedPackage, name: str = "conda-lock.yml") -> Lock:
    platforms = tuple(dict.fromkeys(e.platform for e in entries))
    return Lock(Path(name), {p: "x" for p in platforms}, ("conda-forge",), platforms, (), {}, entries)


def version(text: str) -> tuple:
    return tuple(int(n) for n in text.split("."))


def need(entries, system: str) -> Optional[tuple]:
    found = lock_floor(entries).of(system)
    return None if found is None else (found.version_text, found.by)


@pytest.mark.parametrize(
    "tag, system, version, named",
    [
        ("manylinux_2_28_x86_64", "glibc", "2.28", "manylinux_2_28"),
        ("manylinux_2_17_aarch64", "glibc", "2.17", "manylinux_2_17"),
        ("manylinux2014_x86_64", "glibc", "2.17", "manylinux2014"),
        ("manylinux2010_x86_64", "glibc", "2.12", "manylinux2010"),
        ("manylinux1_x86_64", "glibc", "2.5", "manylinux1"),
        ("manylinux2014_x86_64.manylinux_2_17_x86_64", "glibc", "2.17", "manylinux2014"),
        ("manylinux_2_24_x86_64.manylinux_2_28_x86_64", "glibc", "2.24", "manylinux_2_24"),  # where either will do
        ("manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64", "glibc", "2.17", "manylinux2014"),
        ("manylinux2010_x86_64.manylinux_2_12_x86_64", "glibc", "2.12", "manylinux2010"),
        ("macosx_11_0_arm64", "macOS", "11.0", "macosx_11_0"),
        ("macosx_10_9_universal2", "macOS", "10.9", "macosx_10_9"),
        ("macosx_10_13_x86_64.macosx_11_0_arm64", "macOS", "10.13", "macosx_10_13"),
        ("macosx_14_0_arm64", "macOS", "14.0", "macosx_14_0"),
    ],
)
def test_a_wheel_needs_the_lowest_of_its_tags(tag: str, system: str, version: str, named: str) -> None:
    found = lock_floor([wheel("torch", tag, version="2.10.0+cpu")]).of(system)
    assert found is not None and (found.version_text, found.by) == (version, f"torch 2.10.0+cpu wheel {named}")


@pytest.mark.parametrize("tag", ["py3-none-any", "win_amd64", "linux_x86_64", "musllinux_1_2_x86_64", "any"])
def test_a_tag_that_asks_no_minimum(tag: str) -> None:
    assert lock_floor([wheel("alpha", tag)]) == Floor()


@pytest.mark.parametrize(
    "constraint, bound",
    [
        (">=2.17,<3.0.a0", (2, 17)),
        (">=2.28", (2, 28)),
        (">= 2.17", (2, 17)),
        ("<3.0.a0,>=2.17", (2, 17)),
        (">=11.0", (11, 0)),
        ("2.17.*", (2, 17)),
        ("==2.28", (2, 28)),
        (">=2.28|>=2.17", (2, 17)),  # either will do: the lower
        ("*", None),
        ("<3", None),
        (">=2.17|<3", None),  # one alternative allows any old version
        (">=garbage", None),
    ],
)
def test_the_lower_bound_of_a_conda_constraint(constraint: str, bound) -> None:
    assert lower_bound(constraint) == bound


def test_the_floor_is_the_highest_need_and_names_who_asks_it() -> None:
    entries = [
        record("libgcc", {"__glibc": ">=2.17,<3.0.a0", "__unix": "*", "_openmp_mutex": ">=4.5"}),
        record("python", {"__glibc": ">=2.28,<3.0.a0", "libgcc": ">=14"}, version="3.10.19"),
        wheel("numpy", "manylinux_2_17_x86_64.manylinux2014_x86_64"),
        wheel("torch", "manylinux_2_28_x86_64", version="2.10.0"),  # ties python's: the first keeps it
        wheel("alpha", "py3-none-any"),
    ]
    assert need(entries, "glibc") == ("2.28", "python 3.10.19 h0_0: __glibc >=2.28,<3.0.a0")
    newer = wheel("newer", "manylinux_2_34_x86_64")
    assert need([*entries, newer], "glibc") == ("2.34", "newer 1.0 wheel manylinux_2_34")
    assert need(entries, "macOS") is None


def test_no_entries_and_none_that_asks_set_no_floor() -> None:
    assert lock_floor([]) == Floor()
    assert (
        lock_floor(
            [
                record("tzdata", {}),
                record("ca-certificates", {"__unix": "*"}),
                record("python_abi", {"__glibc": "*"}),
                wheel("alpha", "py3-none-any"),
            ]
        )
        == Floor()
    )


@pytest.mark.parametrize("seed", range(25))
def test_generated_floors(seed: int) -> None:
    """Random records and wheels, each asking a random glibc in one of the spellings: the floor is the highest."""
    rng = random.Random(seed)
    legacy = {(2, 5): "manylinux1", (2, 12): "manylinux2010", (2, 17): "manylinux2014"}
    entries, asked = [], []
    for index in range(rng.randint(1, 8)):
        version = rng.choice([(2, 5), (2, 12), (2, 17), (2, 24), (2, 28), (2, 31), (2, 34)])
        asked.append(version)
        spelling = rng.choice(["conda", "capped", "pep600", "legacy"])
        text = f"{version[0]}.{version[1]}"
        if spelling == "conda":
            entries.append(record(f"c{index}", {"__glibc": f">={text}"}))
        elif spelling == "capped":
            entries.append(record(f"c{index}", {"__unix": "*", "__glibc": f">={text},<3.0.a0"}))
        elif spelling == "legacy" and version in legacy:
            entries.append(wheel(f"w{index}", f"{legacy[version]}_x86_64"))
        else:
            entries.append(wheel(f"w{index}", f"manylinux_{version[0]}_{version[1]}_x86_64"))
    rng.shuffle(entries)
    found = lock_floor(entries).glibc
    assert found is not None and found.version == max(asked)
    assert lock_floor(entries).macos is None


# --------------------------------------------------------------------------- the host against the floor

GLIBC_228 = Floor(glibc=Need("glibc", (2, 28), "torch 2.10.0 wheel manylinux_2_28"))
MACOS_14 = Floor(macos=Need("macOS", (14, 0), "torch 2.10.0 wheel macosx_14_0"))


def test_a_glibc_too_old_names_the_lock_the_floor_the_package_and_the_fix() -> None:
    lock = lock_of(wheel("torch", "manylinux_2_28_x86_64", version="2.10.0"), record("python", {"__glibc": ">=2.17"}))
    with pytest.raises(HostError) as caught:
        check_host(lock, "linux-64", HostSystem("linux", glibc="2.17"))
    assert str(caught.value) == (
        "conda-lock.yml: linux-64 needs glibc >= 2.28 (torch 2.10.0 wheel manylinux_2_28), this host has 2.17: "
        "use a machine with a newer OS, or pin torch < 2.7 in the spec and relock for an older __glibc in "
        "envs/virtual-packages.yml"
    )
    assert caught.value.exit_code == 2


def test_a_floor_set_by_another_package_is_relocked_without_pinning_torch() -> None:
    floor = Floor(glibc=Need("glibc", (2, 28), "numpy 2.2.6 wheel manylinux_2_28"))
    problem = host_problem(floor, "linux-64", HostSystem("linux", glibc="2.17"))
    assert problem is not None and problem.endswith(
        "use a machine with a newer OS, or relock for an older __glibc in envs/virtual-packages.yml"
    )


@pytest.mark.parametrize("glibc", ["2.28", "2.36", "2.28.9000", "3.0"])
def test_a_glibc_as_new_or_newer_passes(glibc: str) -> None:
    assert host_problem(GLIBC_228, "linux-64", HostSystem("linux", glibc=glibc)) is None


def test_musl_is_told_the_lock_needs_glibc() -> None:
    problem = host_problem(GLIBC_228, "linux-aarch64", HostSystem("linux", glibc=None))
    assert problem is not None and problem.startswith("linux-aarch64 needs glibc >= 2.28 (torch")
    assert "not glibc (musl?)" in problem


def test_a_macos_too_old() -> None:
    problem = host_problem(MACOS_14, "osx-arm64", HostSystem("macos", macos="12.7.6"))
    assert problem == (
        "osx-arm64 needs macOS >= 14.0 (torch 2.10.0 wheel macosx_14_0), this host has 12.7.6: "
        "use a newer macOS, or relock for an older __osx in envs/virtual-packages.yml"
    )
    assert host_problem(MACOS_14, "osx-arm64", HostSystem("macos", macos="14")) is None
    assert host_problem(MACOS_14, "osx-64", HostSystem("macos", macos="15.1")) is None


@pytest.mark.parametrize(
    "platform, host",
    [
        ("linux-64", HostSystem("macos", macos="12.0")),  # --dry-run --platform of another OS: not this host's floor
        ("osx-arm64", HostSystem("linux", glibc="2.17")),
        ("win-64", HostSystem("windows")),
        ("osx-arm64", HostSystem("macos", macos=None)),  # a Mac that does not say its release: let it try
    ],
)
def test_no_problem_where_the_floor_is_not_this_hosts(platform: str, host: HostSystem) -> None:
    both = Floor(glibc=GLIBC_228.glibc, macos=MACOS_14.macos)
    assert host_problem(both, platform, host) is None


def test_the_committed_locks_need_no_more_than_the_machines_they_were_solved_for() -> None:
    """A record's `__glibc`/`__osx` and a wheel's tag never exceed virtual-packages.yml's (the solver and uv
    were given those): a host that matches it installs the lock."""
    vpkgs = read_virtual_packages(REPO / "envs" / "virtual-packages.yml")
    for path in (REPO / "conda-lock.yml", REPO / "envs" / "py39.conda-lock.yml"):
        lock = read_lock(path)
        for platform in lock.platforms:
            machine = HostSystem(
                "linux" if platform.startswith("linux") else "macos",
                glibc=vpkgs.version_of(platform, "__glibc"),
                macos=vpkgs.version_of(platform, "__osx"),
            )
            check_host(lock, platform, machine)


def test_this_host_passes_for_the_committed_locks() -> None:
    """The real probe, on a Linux host at least as new as the machine linux-64 is solved for."""
    host = probe_host_system()
    solved_for = read_virtual_packages(REPO / "envs" / "virtual-packages.yml").version_of("linux-64", "__glibc")
    if host.os != "linux" or host.glibc is None or version(host.glibc) < version(solved_for):
        pytest.skip(f"not a glibc Linux as new as glibc {solved_for}: {host}")
    for path in (REPO / "conda-lock.yml", REPO / "envs" / "py39.conda-lock.yml"):
        check_host(read_lock(path), "linux-64", host)
