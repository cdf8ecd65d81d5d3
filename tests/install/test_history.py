"""conda-meta/history: bootstrap's entries replay like conda's, however long the file grows."""

from __future__ import annotations

from pathlib import Path

from bootstrap.install import history
from bootstrap.install.history import append_request, requested_specs

CONDA_ENTRY = """==> 2026-01-01 10:00:00 <==
# cmd: conda create -n x python=3.10 numpy
# conda version: 24.1.0
+conda-forge/linux-64::python-3.10.14-h0_0
# update specs: ['python=3.10', 'numpy']
"""
USER_INSTALL = """==> 2026-01-03 10:00:00 <==
# cmd: conda install scipy
# update specs: ['scipy']
"""


def test_bootstrap_entries_add_and_remove_like_conda(tmp_path: Path) -> None:
    path = tmp_path / "history"
    path.write_text(CONDA_ENTRY)
    append_request(path, ["python=3.10.*", "pip"], "bootstrap env py310 (conda-lock.yml)")
    text = path.read_text()
    assert "# remove specs: ['numpy']" in text  # numpy is no longer requested
    assert requested_specs(path) == {"python": "python=3.10.*", "pip": "pip"}
    path.write_text(path.read_text() + USER_INSTALL)  # someone ran conda in the env since
    append_request(path, ["python=3.10.*"], "bootstrap env py310 (conda-lock.yml)")
    assert "# remove specs: ['pip', 'scipy']" in path.read_text()
    assert requested_specs(path) == {"python": "python=3.10.*"}


def test_appending_replays_from_bootstrap_s_last_entry_only(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "history"
    path.write_text(CONDA_ENTRY)
    for version in range(200):  # a long-lived env: every lock change appended an entry
        append_request(path, ["python=3.10.*", f"pkg{version % 7}", "pip"], "bootstrap env py310 (conda-lock.yml)")
    path.write_text(path.read_text() + USER_INSTALL)
    replayed = []
    real_replay = history._replay
    monkeypatch.setattr(history, "_replay", lambda lines: replayed.append(len(lines)) or real_replay(lines))
    append_request(path, ["python=3.10.*", "pip"], "bootstrap env py310 (conda-lock.yml)")
    assert replayed == [6]  # our last entry (cmd, remove, update lines) and the user's (header, cmd, update)
    monkeypatch.undo()
    # ... and gives what a full replay of all 200 entries gives.
    assert requested_specs(path) == {"python": "python=3.10.*", "pip": "pip"}
    assert path.read_text().splitlines()[-2] == "# remove specs: ['pkg3', 'scipy']"  # 199 % 7 == 3
