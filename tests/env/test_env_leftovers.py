"""`bootstrap env` over distributions it did not install: hand or legacy installs left in the env's
site-packages, some with metadata uv cannot uninstall (no RECORD). Each is seen, the run converges, and the summary says what was removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.prefix import pip_distributions, site_packages
from bootstrap.project import Project
from tests.fixtures.env_project import assert_matches_lock, env_args, prefix_of, run_python

PKG_INFO = "Metadata-Version: 1.1\nName: legacy\nVersion: 1.0\n"
LEGACY = {  # a leftover that lists no files -> what makes it up, relative to site-packages
    "dist-info-without-RECORD": {"legacy-1.0.dist-info/METADATA": PKG_INFO},
}
NAMES = "import importlib.metadata as m; print([d.metadata['Name'] for d in m.distributions()])"


def add_files(site: Path, files: dict) -> None:
    for relative, text in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(text)


@pytest.mark.parametrize("kind", sorted(LEGACY))
def test_a_leftover_without_a_file_list_is_removed_and_the_run_converges(project: Project, channel: Path, capsys,
                                                                          kind: str) -> None:
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
        "which lists no files to uninstall; any files it installed are still there"]
