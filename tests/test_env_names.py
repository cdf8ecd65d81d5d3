"""An empty ENV is bad input for every verb that takes one, never a silent "the default env"
(`bootstrap env "$ENV"` with ENV unset in a script must not install py310)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.cli import main
from tests.fixtures.project import make_project

VERBS = {
    "env": ["env", "{blank}"],
    "env --lock": ["env", "{blank}", "--lock", "{root}/conda-lock.yml", "--dry-run"],
    "export": ["export", "{blank}", "-o", "{root}/out.yml"],
    "export --from-prefix": ["export", "{blank}", "--from-prefix", "{root}", "-o", "{root}/out.yml"],
    "lock": ["lock", "{blank}"],
    "lock --check": ["lock", "--check", "{blank}"],
    "bundle": ["bundle", "{blank}"],
    "doctor --env": ["doctor", "--env", "{blank}"],
}


def tree(root: Path) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("blank", ["", " "])
@pytest.mark.parametrize("verb", VERBS)
def test_an_empty_env_name_is_bad_input(tmp_path: Path, capsys, verb: str, blank: str) -> None:
    root = tmp_path / "proj"
    make_project(root)
    before = tree(root)
    argv = [arg.format(root=root, blank=blank) for arg in VERBS[verb]]
    assert main([*argv, "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "empty env name" in err or "cannot be combined" in err, err  # --from-prefix refuses any ENV
    assert tree(root) == before
