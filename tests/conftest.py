"""Shared fixtures: a real fixture channel (on disk and over loopback HTTP), a wheelhouse,
and an environment scrubbed of every variable that would steer conda, rattler, pip or uv."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.fixtures.conda_channel import ServedUrl, build_channel, serve_directory, standard_specs
from tests.fixtures.wheels import build_wheelhouse, standard_wheels

# Variables a developer's shell or CI may set that change what conda, rattler,
# pip, uv or CUDA do; a test that wants one sets it with monkeypatch.
_SCRUBBED_PREFIXES = ("CONDA_", "PIP_", "UV_", "BOOTSTRAP_")
_SCRUBBED_NAMES = ("CUDA_VISIBLE_DEVICES",)


def pytest_configure(config: pytest.Config) -> None:  # noqa: ARG001 (the hook's signature)
    """The suite takes Ctrl-C and a hang-up as a terminal's job does, however it was started: `nohup`
    (SIGHUP ignored) or a script's background job (SIGINT ignored) would hand those dispositions to
    every process a test starts, and the tests of what bootstrap does on those signals could not send
    them. Each xdist worker runs this too."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.fixture(scope="session")
def fixture_channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The standard fixture channel (`standard_specs()`), built and indexed once per session.

    Read-only: tests that need to alter a channel build their own.
    """
    return build_channel(tmp_path_factory.mktemp("channel"), standard_specs())


@pytest.fixture(scope="session")
def channel_server(fixture_channel: Path) -> Iterator[ServedUrl]:
    """`fixture_channel` served on loopback HTTP; `.requests` lists every path asked for."""
    with serve_directory(fixture_channel) as url:
        yield url


@pytest.fixture(scope="session")
def channel_http(channel_server: ServedUrl) -> str:
    """Base URL (`http://127.0.0.1:PORT`) of the served fixture channel, e.g. for a mirror."""
    return channel_server


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `--find-links` directory holding `standard_wheels()`."""
    return build_wheelhouse(tmp_path_factory.mktemp("wheelhouse"), standard_wheels())


@pytest.fixture(scope="session")
def _tool_cache_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    # rattler.install() defaults to $RATTLER_CACHE_DIR/pkgs, but rattler.Gateway()
    # ignores that variable and caches repodata in $XDG_CACHE_HOME/rattler/cache.
    return {
        "RATTLER_CACHE_DIR": str(tmp_path_factory.mktemp("rattler-cache")),
        "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("xdg-cache")),
        "UV_CACHE_DIR": str(tmp_path_factory.mktemp("uv-cache")),
    }


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, _tool_cache_dirs: dict) -> None:
    """Drop `CONDA_*`, `PIP_*`, `UV_*`, `BOOTSTRAP_*` and `CUDA_VISIBLE_DEVICES`; point
    rattler's, uv's and XDG caches at session temp dirs so no test touches the user's.

    The caches are shared by the whole session: a test that swaps archive bytes or
    serves different repodata under one URL must pass its own `cache_dir`s.
    """
    for name in list(os.environ):
        if name.startswith(_SCRUBBED_PREFIXES) or name in _SCRUBBED_NAMES:
            monkeypatch.delenv(name)
    for name, value in _tool_cache_dirs.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A download's retries without their waits: the tests serve from loopback."""
    from bootstrap.install import download

    monkeypatch.setattr(download, "RETRY_DELAYS_S", (0.0,) * len(download.RETRY_DELAYS_S))


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 4 MiB tmpfs, and a function that resizes it. Needs mount(2): root here."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)]).returncode:
        pytest.skip("a full disk is simulated with a small tmpfs, which needs root to mount")
    try:
        yield mount, lambda size: subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.fixture
def make_read_only():
    """A function that makes a directory read-only: its mode for a user, a read-only bind mount for root
    (whom modes do not stop; needs mount(2))."""
    mounted = []

    def make(path: Path) -> None:
        if os.geteuid() != 0:
            path.chmod(0o555)
            return
        if subprocess.run(["mount", "--bind", str(path), str(path)]).returncode:
            pytest.skip("root ignores modes, and a read-only bind mount needs mount(2)")
        mounted.append(path)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)

    yield make
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=True)
