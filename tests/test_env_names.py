"""An empty ENV is bad input for every verb that takes one, never a silent "the default env"
(`bootstrap env "$ENV"` with ENV unset in a script must not install py310); a name that cannot be a
spec's file name is refused in one short line, whatever it holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.errors import InputError
from tests.fixtures.project import make_project

VERBS = {
    "env": ["env", "{blank}"],
    "shell": ["shell", "{blank}"],
    "env --lock": ["env", "{blank}", "--lock", "{root}/conda-lock.yml", "--dry-run"],
    "export": ["export", "{blank}", "-o", "{root}/out.yml"],
    "export --from-prefix": ["export", "{blank}", "--from-prefix", "{root}", "-o", "{root}/out.yml"],
    "lock": ["lock", "{blank}"],
    "lock --check": ["lock", "--check", "{blank}"],
    "bundle": ["bundle", "{blank}"],
    "doctor --env": ["doctor", "--env", "{blank}"],
    "add --env": ["add", "--env", "{blank}", "--no-install", "newpkg"],
    "remove --env": ["remove", "--env", "{blank}", "--no-install", "torchlike"],
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


# Spec files that are in envs/ but whose names break the rule `env NAME` applies: every verb that
# discovers envs by reading envs/*.yml must see them as `env NAME` does, never lock one it would then
# refuse to install, nor advise a command that names one.
_SEED_NAMES = [
    "p\u00fd310",  # the outside testers' unicode name
    "py310 copy",  # what a file manager names a duplicate
    ".hidden",
    "-rf",
    "py$(id)",
    "py;ls",
    "py`id`",
    "py|cat",
    "py&",
    "py'q",
    'py"q',
    "py*",
    "py?",
    "x" * 65,
    "\u03c0",
    "\u4e2d\u6587",
    "py\u202e310",
    "py\u200b310",
    "py\t310",
    "py310\u00a0",
    "e\u0301",
]
_OK_CHARS = "abcXYZ019._-"
_BAD_CHARS = " \u00fd\u00e9\u03c0\u4e2d$;|&*?!'\"`~()[]{}<>=+,@%^\u202e\u200b\t\u00a0"


def generated_names(count: int, seed: int = 36) -> list[str]:
    """Names built at random from characters the rule takes and characters it does not, each at most
    a file name's length: half of them break the rule, most of those in one character only."""
    import random

    rng = random.Random(seed)
    names = []
    for _ in range(count):
        length = rng.choice([1, 2, 5, 12, 63, 64, 65, 200])
        chars = [rng.choice(_OK_CHARS) for _ in range(length)]
        if rng.random() < 0.5:
            chars[rng.randrange(length)] = rng.choice(_BAD_CHARS)
        names.append("".join(chars))
    return names


def spec_file_names() -> list[str]:
    """Every name to try, as a file system takes it (no '/', no NUL, at most 255 bytes with `.yml`)."""
    names = dict.fromkeys([*_SEED_NAMES, *generated_names(120)])
    return [n for n in names if len(f"{n}.yml".encode()) <= 255 and n not in ("py310", "virtual-packages")]


DISCOVERING = {
    "lock": ["lock"],
    "lock --check": ["lock", "--check"],
    "lock NAME": ["lock", "py310"],
    "export": ["export", "-o", "{root}/../out.yml"],
    "env": ["env", "--dry-run"],
    "bundle": ["bundle", "-o", "{root}/../out.bundle"],
    "doctor --env": ["doctor", "--env", "py310"],
}


def project_with_spec_named(root: Path, name: str) -> Path:
    make_project(root)
    spec = root / "envs" / f"{name}.yml"
    spec.write_text((root / "envs" / "py310.yml").read_text())
    return spec


@pytest.mark.slow  # every generated name through every verb: the unicode case below runs by default
def test_every_discovering_verb_agrees_with_the_name_rule(tmp_path: Path, capsys) -> None:
    """A spec file named against the rule is one line naming the file, why and the fix (rename it), exit 2,
    for every verb that walks envs/; one named within it is no verb's complaint. No line advises a
    command naming a refused env."""
    from bootstrap.project import Project

    tried = {"refused": 0, "taken": 0}
    for index, name in enumerate(spec_file_names()):
        valid = True
        try:
            Project(tmp_path).env_or_default(name)
        except InputError:
            valid = False
        root = tmp_path / str(index) / "proj"
        project_with_spec_named(root, name)
        before = tree(root)
        for verb, args in DISCOVERING.items():
            argv = [a.format(root=root) for a in args]
            offline = ["--pip-offline", "--mirror", f"conda-forge={tmp_path}/no-channel"] if verb == "lock" else []
            code = main([*argv, "--root", str(root), *offline])
            err = capsys.readouterr().err
            if valid:
                assert "rename" not in err and "is not the name of a spec" not in err, (verb, name, err)
                continue
            assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), (verb, name, err)
            assert "rename" in err and len(err) < 400, (verb, name, err)
            assert "\x1b" not in err and "\u202e" not in err and "\t" not in err, (verb, name, err)
            assert f"lock {name}" not in err and f"env {name}" not in err, (verb, name, err)
            assert tree(root) == before, (verb, name)
        if valid:  # an env of its own, which `lock --check NAME` finds unlocked, and advises locking
            assert main(["lock", "--check", name, "--root", str(root)]) == 2
            assert f"(bootstrap lock {name})" in capsys.readouterr().err, name
        tried["refused" if not valid else "taken"] += 1
    assert tried["refused"] > 40 and tried["taken"] > 20, tried


def test_the_unicode_spec_name_is_refused_as_env_refuses_it(tmp_path: Path, capsys) -> None:
    root = tmp_path / "proj"
    project_with_spec_named(root, "p\u00fd310")
    assert main(["env", "p\u00fd310", "--root", str(root)]) == 2
    by_name = capsys.readouterr().err
    assert "is not the name of a spec in envs/" in by_name
    assert main(["lock", "--check", "--root", str(root)]) == 2
    assert capsys.readouterr().err == (
        f"error: {root}/envs/p\u00fd310.yml: 'p\u00fd310' is no env name: '\u00fd' is not an ASCII letter, "
        "digit, '.', '_' or '-' (rename the file, e.g. to py310-1.yml, or move it out of envs/)\n"
    )
