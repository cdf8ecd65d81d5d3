"""`bootstrap env` on a host older than the lock needs: refused before anything is fetched or written.

The lock is the env fixture project's plus a wheel tagged `manylinux_2_28_x86_64` (the
fixture's linux-64 is solved for `__glibc 2.28`); its conda records need `__glibc >=2.17`.
The host is given as data (`HostSystem`), so no old OS is needed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.errors import HostError
from bootstrap.install.env import EnvOptions, create_or_update
from bootstrap.install.floor import HostSystem
from bootstrap.lock.mirrors import Mirror
from bootstrap.prefix import read_install_record
from bootstrap.project import Project
from tests.fixtures.conda_channel import serve_directory
from tests.fixtures.env_project import PIP, change_lock, env_args, prefix_of
from tests.fixtures.wheels import WheelSpec, build_wheelhouse, standard_wheels

OLD = HostSystem("linux", glibc="2.17")
REFUSED = (
    "conda-lock.yml: linux-64 needs glibc >= 2.28 (delta 1.0 wheel manylinux_2_28), this host has 2.17: "
    "use a machine with a newer OS, or relock for an older __glibc in envs/virtual-packages.yml"
)


@pytest.fixture(scope="module")
def manylinux_wheels(tmp_path_factory) -> Path:
    return build_wheelhouse(
        tmp_path_factory.mktemp("manylinux"),
        [*standard_wheels(), WheelSpec("delta", "1.0", tag="py3-none-manylinux_2_28_x86_64")],
    )


def options(project: Project, mirror: str, dry_run: bool = False) -> EnvOptions:
    return EnvOptions(
        "py310",
        project.lock_path("py310"),
        prefix_of(project),
        "linux-64",
        project.root / ".cache",
        mirrors=(Mirror.parse(f"conda-forge={mirror}"),),
        dry_run=dry_run,
    )


def tree(root: Path) -> dict:
    """Every path under `root` with its size and mtime: what a run must leave as it was."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


def test_a_new_env_on_an_old_host_fetches_and_creates_nothing(
    project: Project, channel: Path, manylinux_wheels: Path
) -> None:
    change_lock(project, channel, manylinux_wheels, pip=(*PIP, "delta"))
    with serve_directory(channel) as url:
        for dry_run in (True, False):  # --dry-run reports it the same way
            with pytest.raises(HostError) as caught:
                create_or_update(options(project, url, dry_run), host=OLD)
            assert str(caught.value) == REFUSED
        assert url.requests == []  # not even repodata: nothing was asked of the mirror
    assert not os.path.lexists(prefix_of(project)) and not prefix_of(project).parent.exists()
    assert not (project.root / ".cache").exists()


def test_an_env_is_left_as_it_was_when_the_new_lock_needs_a_newer_host(
    project: Project, channel: Path, manylinux_wheels: Path
) -> None:
    with serve_directory(channel) as url:
        create_or_update(options(project, url), host=HostSystem("linux", glibc="2.28"))
        record = read_install_record(prefix_of(project))
        envs, cache = tree(prefix_of(project).parent), tree(project.root / ".cache")
        change_lock(project, channel, manylinux_wheels, pip=(*PIP, "delta"))
        served = len(url.requests)
        with pytest.raises(HostError, match=r"needs glibc >= 2\.28 \(delta 1\.0 wheel manylinux_2_28\)"):
            create_or_update(options(project, url), host=OLD)
        assert len(url.requests) == served
    assert tree(prefix_of(project).parent) == envs and tree(project.root / ".cache") == cache
    assert read_install_record(prefix_of(project)) == record


def test_the_command_line_says_it_in_one_line_and_exits_2(
    project: Project, channel: Path, manylinux_wheels: Path, monkeypatch, capsys
) -> None:
    import bootstrap.install.env as env_module

    change_lock(project, channel, manylinux_wheels, pip=(*PIP, "delta"))
    monkeypatch.setattr(env_module, "probe_host_system", lambda: OLD)
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--dry-run")) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith(REFUSED) and err.count("\n") == 1, err
    assert main(env_args(project, str(channel), "--json")) == 2
    envelope = json.loads(capsys.readouterr().out)
    assert envelope["error"] == {"type": "HostError", "message": REFUSED, "exit_code": 2}
    monkeypatch.setattr(env_module, "probe_host_system", lambda: HostSystem("linux", glibc="2.28"))
    assert main(env_args(project, str(channel), "--dry-run")) == 0  # the same lock, on a host new enough
