"""`bootstrap env` over distributions it did not install: hand or legacy installs left in the env's
site-packages, some with metadata uv cannot uninstall (no RECORD, an .egg-info without
top_level.txt). Each is seen, the run converges, and the summary says what was removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bootstrap.checks.verify import VerifyOptions, run_verify
from bootstrap.cli import main
from bootstrap.prefix import pip_distributions, site_packages
from bootstrap.project import Project
from bootstrap.report import Status
from tests.fixtures.conda_channel import PackageSpec
from tests.fixtures.env_project import CONDA, assert_matches_lock, change_lock, env_args, prefix_of, run_python
from tests.fixtures.fakes import FakeNvml
from tests.fixtures.runnable_env import SHORT, build_runnable_channel

PKG_INFO = "Metadata-Version: 1.1\nName: legacy\nVersion: 1.0\n"
LEGACY = {  # a leftover that lists no files -> what makes it up, relative to site-packages
    "dist-info-without-RECORD": {"legacy-1.0.dist-info/METADATA": PKG_INFO},
    "egg-info-dir": {"legacy-1.0-py3.11.egg-info/PKG-INFO": PKG_INFO},
    "egg-info-file": {"legacy-1.0-py3.11.egg-info": PKG_INFO},  # distutils
}
NAMES = "import importlib.metadata as m; print([d.metadata['Name'] for d in m.distributions()])"


def add_files(site: Path, files: dict) -> None:
    for relative, text in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(text)


@pytest.mark.parametrize("kind", sorted(LEGACY))
def test_a_leftover_without_a_file_list_is_removed_and_the_run_converges(
    project: Project, channel: Path, capsys, kind: str
) -> None:
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    add_files(site_packages(prefix), LEGACY[kind])
    assert "legacy" in {d.name for d in pip_distributions(prefix)}
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] and report["plan"]["pip_remove"] == [{"name": "legacy", "version": "1.0"}]
    (note,) = report["notes"]
    assert note.startswith("legacy 1.0: only its metadata was removed (lib/python") and "any files it installed" in note
    assert_matches_lock(project)
    assert "legacy" not in run_python(prefix, NAMES)
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 0
    assert "is up to date" in capsys.readouterr().out


def test_the_summary_names_a_leftover_removed_by_its_metadata(project: Project, channel: Path, capsys) -> None:
    assert main(env_args(project, str(channel))) == 0
    prefix = prefix_of(project)
    site = site_packages(prefix)
    add_files(site, LEGACY["dist-info-without-RECORD"])
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  pip rm  legacy 1.0" in out
    assert [line for line in out if line.startswith("note: ")] == [
        f"note: legacy 1.0: only its metadata was removed ({site.relative_to(prefix)}/legacy-1.0.dist-info), "
        "which lists no files to uninstall; any files it installed are still there"
    ]


def test_an_egg_info_with_top_level_is_uninstalled_by_uv_with_its_package(
    project: Project, channel: Path, capsys
) -> None:
    assert main(env_args(project, str(channel))) == 0
    site = site_packages(prefix_of(project))
    add_files(
        site,
        {
            **LEGACY["egg-info-dir"],
            "legacy-1.0-py3.11.egg-info/top_level.txt": "legacy\n",
            "legacy/__init__.py": "x = 1\n",
        },
    )
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 0
    out = capsys.readouterr().out
    assert "pip rm  legacy 1.0" in out and "note:" not in out
    assert not (site / "legacy").exists() and not (site / "legacy-1.0-py3.11.egg-info").exists()
    assert_matches_lock(project)


def test_a_conda_packages_egg_info_under_another_name_stays(
    project: Project, wheels: Path, tmp_path: Path, capsys
) -> None:
    """pytables ships `tables-*.egg-info`: no conda name matches it, its record's files say whose it is."""
    site = f"lib/python{SHORT}/site-packages"
    egg_info = f"{site}/tables-3.9-py{SHORT}.egg-info"
    pytables = PackageSpec(
        "pytables",
        "3.9",
        noarch="generic",
        files={
            f"{egg_info}/PKG-INFO": "Metadata-Version: 1.1\nName: tables\nVersion: 3.9\n",
            f"{site}/tables/__init__.py": "",
        },
    )
    channel = build_runnable_channel(tmp_path / "channel", extra=[pytables])
    change_lock(project, channel, wheels, conda=(*CONDA, "pytables"))
    assert main(env_args(project, str(channel))) == 0
    capsys.readouterr()
    assert main(env_args(project, str(channel))) == 0
    assert "is up to date" in capsys.readouterr().out
    assert (prefix_of(project) / egg_info / "PKG-INFO").is_file()
    no_driver = FakeNvml({}, init_error=12)
    result = run_verify(VerifyOptions(prefix=prefix_of(project), bench=False), nvml=no_driver)
    checks = {c.id: c for c in result.checks}
    assert checks["env.extra"].status is Status.OK, checks["env.extra"]  # verify knows it is conda's too
