"""Which wheel of a package the lock keeps for a target, by the target's tags in pip's order."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bootstrap.lock.pip import PipOptions, resolve_all, resolve_pip, target_for
from bootstrap.lock.pip_wheels import platform_tags
from bootstrap.lock.spec import EnvSpec, VirtualPackage, VirtualPackages
from tests.fixtures.wheels import build_wheel

PYPI = "https://files.pythonhosted.org/packages/ab/cd"
OFFLINE = PipOptions(offline=True)  # recorded uv output: nothing to ask an index for


def target(platform: str, version: str):
    """The target of `platform` whose `__glibc` or `__osx` is `version`."""
    name = "__osx" if platform.startswith("osx-") else "__glibc"
    virtual_packages = VirtualPackages(Path("vp.yml"), {platform: (VirtualPackage(name, version),)})
    return target_for(platform, "3.10.19", virtual_packages)


def numpy_lock(*filenames: str) -> str:
    """uv's PEP 751 output for one numpy whose wheels are `filenames`, in that order."""
    wheels = ",\n".join(
        f'    {{ url = "{PYPI}/{fn}", hashes = {{ sha256 = "{str(i) * 64}" }} }}' for i, fn in enumerate(filenames)
    )
    return (
        'lock-version = "1.0"\ncreated-by = "uv"\nrequires-python = ">=3.10.19"\n\n'
        f'[[packages]]\nname = "numpy"\nversion = "2.2.6"\nwheels = [\n{wheels},\n]\n'
    )


def locked_wheel(lock: str, target) -> str:
    """The file name `resolve_pip` locks for numpy when uv writes `lock`."""

    def uv(argv, env=None, cwd=None, timeout=None):
        if "pylock.toml" in argv:
            Path(cwd, "pylock.toml").write_text(lock)
        return SimpleNamespace(returncode=0, stdout="numpy==2.2.6  # via -r requirements.in\n", stderr="")

    spec = EnvSpec(Path("envs/t.yml"), "t", ("conda-forge",), (target.platform,), ("python", "pip"), ("numpy",))
    (numpy,) = resolve_pip(spec, target, OFFLINE, runner=uv)
    return numpy.filename


MAC = numpy_lock("numpy-2.2.6-cp310-cp310-macosx_11_0_arm64.whl", "numpy-2.2.6-cp310-cp310-macosx_14_0_arm64.whl")
LINUX = numpy_lock(
    "numpy-2.2.6-cp310-cp310-manylinux2014_x86_64.whl",
    "numpy-2.2.6-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "numpy-2.2.6-cp310-cp310-manylinux_2_28_x86_64.whl",
)


@pytest.mark.parametrize("osx, expected", [("14.0", "macosx_14_0_arm64"), ("12.0", "macosx_11_0_arm64")])
def test_the_newest_macos_wheel_the_target_runs(osx: str, expected: str) -> None:
    assert locked_wheel(MAC, target("osx-arm64", osx)) == f"numpy-2.2.6-cp310-cp310-{expected}.whl"


@pytest.mark.parametrize(
    "glibc, expected",
    [
        ("2.28", "manylinux_2_28_x86_64"),
        ("2.17", "manylinux_2_17_x86_64.manylinux2014_x86_64"),  # manylinux_2_28 does not fit; 2_17 ranks before 2014
    ],
)
def test_the_newest_manylinux_wheel_the_target_runs(glibc: str, expected: str) -> None:
    assert locked_wheel(LINUX, target("linux-64", glibc)) == f"numpy-2.2.6-cp310-cp310-{expected}.whl"


def test_a_platform_wheel_before_a_pure_one() -> None:
    lock = numpy_lock(
        "numpy-2.2.6-py3-none-any.whl",
        "numpy-2.2.6-cp310-cp310-macosx_14_0_universal2.whl",
        "numpy-2.2.6-cp310-cp310-macosx_14_0_arm64.whl",
    )
    assert locked_wheel(lock, target("osx-arm64", "14.0")).endswith("-macosx_14_0_arm64.whl")
    assert locked_wheel(lock, target("linux-64", "2.28")) == "numpy-2.2.6-py3-none-any.whl"


def test_the_first_wheel_when_none_ranks() -> None:
    """uv filtered the wheels for the target itself: a tag this ranking lacks keeps uv's first."""
    lock = numpy_lock("numpy-2.2.6-cp310-cp310-musllinux_1_2_x86_64.whl", "numpy-2.2.6-cp311-cp311-win_amd64.whl")
    assert locked_wheel(lock, target("linux-64", "2.28")).endswith("-musllinux_1_2_x86_64.whl")


def test_platform_tags() -> None:
    assert platform_tags(target("linux-aarch64", "2.18")) == [
        "manylinux_2_18_aarch64",
        "manylinux_2_17_aarch64",
        "manylinux2014_aarch64",
        "linux_aarch64",
    ]
    linux = platform_tags(target("linux-64", "2.28"))
    assert linux[:2] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64"]
    assert linux[-4:] == ["manylinux_2_6_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    assert linux.index("manylinux2010_x86_64") == linux.index("manylinux_2_12_x86_64") + 1
    assert platform_tags(target_for("win-64", "3.10.19", VirtualPackages(Path("vp.yml"), {}))) == ["win_amd64"]
    mac = platform_tags(target("osx-arm64", "14.0"))
    assert mac[:3] == ["macosx_14_0_arm64", "macosx_14_0_universal2", "macosx_13_0_arm64"]


@pytest.mark.slow  # a real uv resolution
def test_uv_lists_the_pure_wheel_first_and_the_lock_keeps_the_platform_one(tmp_path: Path) -> None:
    """Real uv, offline, from a wheelhouse: uv's pylock.toml puts `py3-none-any` before the
    macOS and manylinux wheels; the lock keeps the one pip would install on the target."""
    for tag in (
        "py3-none-any",
        "cp310-cp310-macosx_11_0_arm64",
        "cp310-cp310-macosx_14_0_arm64",
        "cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64",
        "cp310-cp310-manylinux_2_28_x86_64",
    ):
        build_wheel(tmp_path, "numpy", "2.2.6", tag=tag)
    options = PipOptions(find_links=(str(tmp_path),), no_index=True, offline=True)
    spec = EnvSpec(Path("envs/t.yml"), "t", ("conda-forge",), ("linux-64", "osx-arm64"), ("python", "pip"), ("numpy",))
    result = resolve_all(spec, [target("osx-arm64", "14.0"), target("linux-64", "2.28")], options)
    (mac,), (linux,) = result["osx-arm64"], result["linux-64"]
    assert (mac.filename, linux.filename) == (
        "numpy-2.2.6-cp310-cp310-macosx_14_0_arm64.whl",
        "numpy-2.2.6-cp310-cp310-manylinux_2_28_x86_64.whl",
    )
