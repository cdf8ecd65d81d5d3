"""Solve the real conda-forge snapshot in ../shared (skipped when it is absent).

The snapshot is bound to the canonical channel as a directory mirror, so the
records carry the real, downloadable conda-forge URLs and hashes.
"""

from __future__ import annotations

import json

import pytest

from bootstrap.lock.conda import solve_conda, to_locked
from bootstrap.lock.mirrors import Mirror
from bootstrap.lock.spec import read_spec, read_virtual_packages
from tests.fixtures import REPO

SNAPSHOT = REPO.parent / "shared" / "conda-forge-snapshot" / "conda-forge"

pytestmark = pytest.mark.skipif(
    not SNAPSHOT.is_dir(), reason="../shared/conda-forge-snapshot is not beside the repository"
)

# From the snapshot's README: records per (python, platform) closure.
EXPECTED = {
    ("py39", "linux-64"): (28, "3.9.23", "25.2"),
    ("py39", "osx-arm64"): (17, "3.9.23", "25.2"),
    ("py39", "win-64"): (18, "3.9.23", "25.2"),
    ("py310", "linux-64"): (29, "3.10.19", "26.0"),
    ("py310", "osx-arm64"): (18, "3.10.19", "26.0"),
    ("py310", "win-64"): (19, "3.10.19", "26.0"),
}


@pytest.mark.parametrize("env, platform", sorted(EXPECTED))
def test_snapshot_solves(env: str, platform: str) -> None:
    spec = read_spec(REPO / "envs" / f"{env}.yml")
    vpkgs = read_virtual_packages(REPO / "envs" / "virtual-packages.yml")
    mirror = Mirror.parse(f"conda-forge={SNAPSHOT}")
    records = [to_locked(r, platform) for r in solve_conda(spec, platform, vpkgs.for_platform(platform), [mirror])]
    count, python, pip = EXPECTED[(env, platform)]
    versions = {r.name: r.version for r in records}
    assert (len(records), versions["python"], versions["pip"]) == (count, python, pip)
    provenance = json.loads((SNAPSHOT.parent / "provenance.json").read_text())
    known_urls = json.dumps(provenance)
    for record in records:
        assert record.url.startswith("https://conda.anaconda.org/conda-forge/")
        assert record.url in known_urls  # every URL is one the snapshot documents


def test_committed_locks_match_the_snapshot() -> None:
    """The conda part of the committed locks is exactly what the snapshot solves to today."""
    from bootstrap.lock.lockfile import read_lock

    for env, lock_path in (("py310", REPO / "conda-lock.yml"), ("py39", REPO / "envs" / "py39.conda-lock.yml")):
        spec = read_spec(REPO / "envs" / f"{env}.yml")
        vpkgs = read_virtual_packages(REPO / "envs" / "virtual-packages.yml")
        lock = read_lock(lock_path)
        mirror = Mirror.parse(f"conda-forge={SNAPSHOT}")
        for platform in spec.platforms:
            solved = {
                (r.name, r.version, r.build, r.sha256)
                for r in (
                    to_locked(x, platform) for x in solve_conda(spec, platform, vpkgs.for_platform(platform), [mirror])
                )
            }
            locked = {(p.name, p.version, p.build, p.sha256) for p in lock.for_platform(platform, "conda")}
            assert solved == locked, (env, platform)
