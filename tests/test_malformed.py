"""A corpus of malformed specs, locks, virtual-packages and facts files, generated from the
committed ones by mutation, run through every reader and through the verbs that take them.

Each input must give exit 2 (InputError), one line on stderr naming the file, no traceback,
nothing written or changed, well within 2 s."""

from __future__ import annotations

import copy
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest
import yaml

from bootstrap.cli import main
from bootstrap.errors import InputError
from bootstrap.lock.lockfile import read_lock
from bootstrap.lock.spec import read_spec, read_virtual_packages
from tests.fixtures import REPO

ENV = "py39"
SPEC = yaml.safe_load((REPO / "envs" / f"{ENV}.yml").read_text(encoding="utf-8"))
LOCK = yaml.safe_load((REPO / "envs" / f"{ENV}.conda-lock.yml").read_text(encoding="utf-8"))
VPKGS = yaml.safe_load((REPO / "envs" / "virtual-packages.yml").read_text(encoding="utf-8"))
WRONG = {"int": 7, "float": 3.1, "bool": True, "null": None, "list": [1, [2]], "map": {"a": {"b": 1}},
         "huge": "x" * 70_000, "nul": "a\x00b"}


def _bomb(levels: int = 8) -> str:
    lines = ["a0: &a0 [xxxxxxxxxx]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


# Raw files: the same for every kind of input.
RAW: Dict[str, Callable[[Path], None]] = {
    "empty": lambda p: p.write_text(""),
    "nul-bytes": lambda p: p.write_bytes(b"\x00" * 64),
    "not-utf8": lambda p: p.write_bytes(b"name: caf\xe9\n"),
    "bomb": lambda p: p.write_text(_bomb(8)),
    "bomb9": lambda p: p.write_text(_bomb(9)),
    "deep-flow": lambda p: p.write_text("[" * 100_000),
    "deep-block": lambda p: p.write_text("- " * 50_000 + "x\n"),
    "many-aliases": lambda p: p.write_text("a: &a x\nb: [" + ", ".join(["*a"] * 500) + "]\n"),
    "many-nodes": lambda p: p.write_text("- x\n" * 250_000),
    "huge-scalar": lambda p: p.write_text("name: " + "x" * 1_000_000 + "\n"),
    "comments-60mb": lambda p: p.write_bytes(b"#" * (60 << 20)),
    "dev-zero": lambda p: p.symlink_to("/dev/zero"),
    "fifo": lambda p: os.mkfifo(p),
    "directory": lambda p: p.mkdir(),
    "missing": lambda p: None,
    "bad-syntax": lambda p: p.write_text("a: [unclosed\n"),
    "tab-indent": lambda p: p.write_text("a:\n\t- b\n"),
    "duplicate-key": lambda p: p.write_text("a: 1\na: 2\n"),
    "bad-date": lambda p: p.write_text("a: 2020-13-45\n"),
    "long-int": lambda p: p.write_text("a: " + "9" * 5000 + "\n"),
    "scalar": lambda p: p.write_text("just a string\n"),
    "list": lambda p: p.write_text("- a\n- b\n"),
    "python-tag": lambda p: p.write_text("a: !!python/object/apply:os.system ['true']\n"),
}


def _mutations(base: Any, prefix: Tuple = (), depth: int = 2) -> List[Tuple[str, Any]]:
    """(name, document) for each key of `base` deleted and set to each WRONG value, `depth` levels down."""
    out = []
    items = base.items() if isinstance(base, dict) else enumerate(base[:1]) if isinstance(base, list) else []
    for key, value in items:
        path = prefix + (key,)
        name = ".".join(map(str, path))
        out.append((f"{name}:deleted", _replaced(path, None, delete=True)))
        for kind, wrong in WRONG.items():
            if wrong != value:
                out.append((f"{name}:{kind}", _replaced(path, wrong)))
        if depth > 1:
            out += _mutations(value, path, depth - 1)
    return out


def _replaced(path: Tuple, value: Any, delete: bool = False) -> Tuple[Tuple, Any, bool]:
    return (path, value, delete)


def _apply(base: Any, change: Tuple[Tuple, Any, bool]) -> Any:
    path, value, delete = change
    doc = copy.deepcopy(base)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


def _cases() -> List[Any]:
    cases = []
    for kind, base, depth in (("spec", SPEC, 3), ("lock", LOCK, 4), ("vpkgs", VPKGS, 3)):
        for index, (name, change) in enumerate(_mutations(base, depth=depth)):
            # Every fifth mutation in the default run keeps `make test` within its minutes; `make test-slow`
            # runs them all.
            marks = () if index % 5 == 0 else (pytest.mark.slow,)
            cases.append(pytest.param(kind, ("doc", base, change), id=f"{kind}-{name}", marks=marks))
        for name in RAW:
            cases.append(pytest.param(kind, ("raw", name), id=f"{kind}-{name}"))
    for name in RAW:
        cases.append(pytest.param("facts", ("raw", name), id=f"facts-{name}"))
    for name, facts in (("facts-wrong-format", {"format": "x" * 100_000, "version": 1}),
                        ("facts-list", [1] * 10_000), ("facts-deep", "[" * 100_000)):
        cases.append(pytest.param("facts", ("text", facts), id=name))
    return cases


CASES = _cases()
READERS = {"spec": read_spec, "lock": read_lock, "vpkgs": read_virtual_packages}


def _write(target: Path, how: Tuple) -> None:
    if how[0] == "raw":
        RAW[how[1]](target)
    elif how[0] == "text":
        target.write_text(how[1] if isinstance(how[1], str) else json.dumps(how[1]))
    else:
        target.write_text(yaml.safe_dump(_apply(how[1], how[2]), sort_keys=False))


def _snapshot(root: Path) -> Dict[str, Tuple[int, int]]:
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "envs").mkdir(parents=True)
    for name in (f"{ENV}.yml", f"{ENV}.conda-lock.yml", "virtual-packages.yml"):
        shutil.copy(REPO / "envs" / name, root / "envs" / name)
    return root


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 300


@pytest.mark.parametrize(("kind", "how"), CASES)
def test_malformed_input_is_one_line_and_exit_2(tmp_path: Path, kind: str, how: Tuple,
                                                capsys: pytest.CaptureFixture) -> None:
    root = _project(tmp_path)
    target = {"spec": root / "envs" / f"{ENV}.yml", "lock": root / "envs" / f"{ENV}.conda-lock.yml",
              "vpkgs": root / "envs" / "virtual-packages.yml", "facts": tmp_path / "bootstrap.facts"}[kind]
    if target.exists():
        target.unlink()
    _write(target, how)
    before = _snapshot(tmp_path)
    started = time.monotonic()
    if kind in READERS:
        try:
            READERS[kind](target)
        except InputError as exc:
            message = str(exc)
        else:
            assert name in VALID, f"{name}: accepted by the reader"
            return
        assert name not in VALID, f"{name}: a valid document refused: {message}"
        assert message.startswith(str(target)) and "\n" not in message
        assert len(message) < 400
        argv = ["lock", "--check", ENV, "--root", str(root)]
    else:
        argv = ["doctor", "--facts", str(target), "--root", str(root)]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    named = str(target.parent) if how == ("raw", "missing") and kind == "spec" else str(target)  # no env at all
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in err, err[:500]
    assert len(lines[0]) < 500
    assert time.monotonic() - started < 2
    assert _snapshot(tmp_path) == before
