"""The seals of uv's unpacked wheels: which of them an install's check walks."""

from __future__ import annotations

from pathlib import Path

from bootstrap.install import wheelstore
from bootstrap.lock.lockfile import LockedPackage
from tests.fixtures.unpacked import unpacked


def pip_entry(name: str, version: str) -> LockedPackage:
    return LockedPackage(name, version, "pip", "linux-64", f"https://example.org/{name}-{version}.whl", "0" * 64)


def test_an_install_checks_every_version_of_what_it_links_and_nothing_else(tmp_path: Path) -> None:
    """Other projects' wheels are not walked; the same name at another version is (its version may
    be written otherwise than the lock's), and so is a wheel whose RECORD is gone."""
    linked = unpacked(tmp_path, "a1", "my-pkg", "1.0")
    other_version = unpacked(tmp_path, "a2", "my-pkg", "0.9")
    unrelated = unpacked(tmp_path, "o1", "other", "1.0")
    nameless = unpacked(tmp_path, "n1", "gone", "1.0")
    next(nameless.glob("*.dist-info/RECORD")).unlink()

    found = wheelstore.edited(tmp_path, [pip_entry("My_Pkg", "1.0")])
    assert sorted(archive for archive, _ in found) == sorted([linked, other_version, nameless])
    assert {name for _, name in found} == {"my-pkg", ""}
    assert wheelstore.of(tmp_path, [pip_entry("other", "2.0")]) == [nameless, unrelated]
