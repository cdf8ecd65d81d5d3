"""`make_plan`: the pure diff of a lock's entries against what a prefix holds (bootstrap/install/plan.py)."""

from __future__ import annotations

from pathlib import Path

from bootstrap.install.plan import make_plan
from bootstrap.lock.lockfile import LockedPackage
from bootstrap.prefix import InstalledPip


def wheel(name: str, version: str, sha256: str) -> LockedPackage:
    url = f"https://files.example/{name}-{version}-py3-none-any.whl"
    return LockedPackage(name, version, "pip", "linux-64", url, sha256)


def dist(name: str, version: str, sha256, metadata: str, installer: str = "uv") -> InstalledPip:
    return InstalledPip(name, version, sha256, None, Path("/env/site-packages") / metadata, installer=installer)


def test_a_name_installed_twice_is_removed_in_full_and_installed_again() -> None:
    locked = [wheel("alpha", "1.1", "a" * 64)]
    installed = [
        dist("alpha", "1.1", "a" * 64, "alpha-1.1.dist-info"),
        dist("alpha", "0.9", None, "alpha-0.9-py3.11.egg-info"),
    ]  # a legacy install left behind
    plan = make_plan(locked, [], installed)
    assert [d.dist_info.name for d in plan.pip_remove] == ["alpha-1.1.dist-info", "alpha-0.9-py3.11.egg-info"]
    assert plan.pip_install == tuple(locked)
    assert make_plan(locked, [], installed[:1]).empty


def test_a_distribution_conda_installed_is_never_pip_removed() -> None:
    """conda-forge's pytorch installs `torch-*.dist-info` (INSTALLER: conda): no conda name matches it."""
    plan = make_plan(
        [],
        [],
        [
            dist("torch", "2.10.0", None, "torch-2.10.0.dist-info", installer="conda"),
            dist("legacy", "1.0", None, "legacy-1.0.dist-info", installer=""),
        ],
    )
    assert [d.name for d in plan.pip_remove] == ["legacy"]


def test_a_distribution_the_lock_moves_to_conda_is_pip_removed() -> None:
    """gamma was a wheel, the lock now has it from conda: the wheel's files and metadata go before conda
    links its own."""
    locked = [
        LockedPackage(
            "gamma",
            "0.6",
            "conda",
            "noarch",
            "https://conda.example/noarch/gamma-0.6-h0_0.conda",
            "c" * 64,
            build="h0_0",
        )
    ]
    plan = make_plan(locked, [], [dist("gamma", "0.5", "b" * 64, "gamma-0.5.dist-info")])
    assert [d.dist_info.name for d in plan.pip_remove] == ["gamma-0.5.dist-info"] and plan.link == tuple(locked)
