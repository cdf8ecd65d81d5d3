"""An empty ENV is bad input for every verb that takes one, never a silent "the default env"
(`bootstrap env "$ENV"` with ENV unset in a script must not install py310); a name that cannot be a
spec's file name is refused in one short line, whatever it holds."""

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


def refused(tmp_path: Path, capsys, verb: str, name: str, problem: str) -> str:
    """The one line `VERB NAME` prints, checked: exit 2, one short line naming `problem` (or --from-prefix
    refusing any ENV), and the project left as it was."""
    root = tmp_path / "proj"
    make_project(root)
    before = tree(root)
    argv = [arg.format(root=root, blank=name) for arg in VERBS[verb]]
    assert main([*argv, "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and len(err) < 300, err
    assert problem in err or "cannot be combined" in err, err
    assert tree(root) == before
    return err


@pytest.mark.parametrize("blank", ["", " "])
@pytest.mark.parametrize("verb", VERBS)
def test_an_empty_env_name_is_bad_input(tmp_path: Path, capsys, verb: str, blank: str) -> None:
    refused(tmp_path, capsys, verb, blank, "empty env name")


ODD_NAMES = [
    "py310 ",
    " py310",
    "py310\n",
    "../py310",
    "envs/py310",
    "a/b",
    "py\x1b[31m310",
    "py310\x00",
    ".hidden",
    "x" * 65,
    "x" * 100_000,
    "py\u202e310",
    "\u03c0y310",
    "py310\t",
    "~py310",
]


@pytest.mark.parametrize("name", ODD_NAMES, ids=lambda n: repr(n[:20]))
@pytest.mark.parametrize("verb", VERBS)
def test_a_name_that_is_no_spec_file_name_is_one_short_line(tmp_path: Path, capsys, verb: str, name: str) -> None:
    err = refused(tmp_path, capsys, verb, name, "is not the name of a spec in envs/")
    assert "\x1b" not in err and "\x00" not in err and "\u202e" not in err


@pytest.mark.parametrize("name", ["py310", "py3.10", "team_gpu-2", "A" * 64])
def test_names_of_letters_digits_dots_dashes_and_underscores_are_names(tmp_path: Path, capsys, name: str) -> None:
    from bootstrap.project import Project

    assert Project(tmp_path).env_or_default(name) == name


@pytest.mark.parametrize("verb", ["lock --check", "export", "env"])
def test_envs_whose_names_differ_only_in_case_are_refused(tmp_path: Path, capsys, verb: str) -> None:
    """Their specs and locks would be one file on macOS and Windows."""
    root = tmp_path / "proj"
    make_project(root)
    (root / "envs" / "PY310.yml").write_text((root / "envs" / "py310.yml").read_text())
    before = tree(root)
    argv = [arg.format(root=root, blank="py310") for arg in VERBS[verb]]
    assert main([*argv, "--root", str(root)]) == 2
    assert capsys.readouterr().err == (
        f"error: {root}/envs/PY310.yml: envs 'py310' and 'PY310' differ only in "
        "case (rename one: macOS and Windows would keep one spec and one lock for "
        "both)\n"
    )
    assert tree(root) == before
