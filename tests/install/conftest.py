"""Fixtures of the env, bundle and cache tests: the runnable channel, a wheelhouse, a locked project,
six-MiB packages and a small file system to fill (helpers: tests/fixtures/env_project.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bootstrap.project import Project
from tests.fixtures.conda_channel import PackageSpec
from tests.fixtures.env_project import CONDA, PIP, relock
from tests.fixtures.project import copy_project, make_project
from tests.fixtures.runnable_env import build_runnable_channel
from tests.fixtures.wheels import WheelSpec, build_wheelhouse, standard_wheels

BLOB = os.urandom(6 << 20)  # incompressible: as big in the archive, the cache and the env


@pytest.fixture(scope="module")
def channel(tmp_path_factory) -> Path:
    return build_runnable_channel(tmp_path_factory.mktemp("runnable") / "channel")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    return build_wheelhouse(tmp_path_factory.mktemp("wheels"), standard_wheels())


@pytest.fixture(scope="module")
def locked_once(tmp_path_factory, channel: Path, wheels: Path) -> Project:
    """The project, locked once per module; tests take a copy (`project`)."""
    project = make_project(tmp_path_factory.mktemp("envproj") / "proj", platforms=("linux-64",), conda=CONDA, pip=PIP)
    relock(project, channel, wheels)
    return project


@pytest.fixture
def project(locked_once: Project, tmp_path: Path) -> Project:
    return copy_project(locked_once, tmp_path / "proj")


@pytest.fixture(scope="module")
def blob_bytes() -> bytes:
    return BLOB


@pytest.fixture(scope="module")
def blob_sources(tmp_path_factory) -> tuple:
    """The runnable channel plus `blobpkg`, the standard wheels plus `blobwheel`: 6 MiB each."""
    root = tmp_path_factory.mktemp("blob")
    channel = build_runnable_channel(
        root / "channel", extra=[PackageSpec("blobpkg", "1.0", noarch="generic", files={"lib/libblob.so": BLOB})]
    )
    wheels = build_wheelhouse(
        root / "wheels", [*standard_wheels(), WheelSpec("blobwheel", "1.0", files={"blobwheel/blob.bin": BLOB})]
    )
    return channel, wheels


@pytest.fixture
def file_size_limit():
    """A function that sets this process's file size limit in bytes (`ulimit -f`), or with None puts
    back the one it had, as the test's end does; Python ignores SIGXFSZ, so a write past it fails with EFBIG."""
    import resource

    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    yield lambda limit: resource.setrlimit(resource.RLIMIT_FSIZE, before if limit is None else (limit, before[1]))
    resource.setrlimit(resource.RLIMIT_FSIZE, before)
