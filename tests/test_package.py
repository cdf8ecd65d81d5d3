"""Every module imports, the CLI lists its verbs, and the 3.9 static check bites."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import bootstrap
from bootstrap.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "scripts" / "check-py39.py"


def all_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(bootstrap.__path__, "bootstrap."))


@pytest.mark.parametrize("name", [m for m in all_modules() if m != "bootstrap.__main__"])
def test_module_imports(name: str) -> None:
    importlib.import_module(name)


def test_heavy_engines_are_not_imported_at_startup() -> None:
    """`python -m bootstrap --help` must not pay for rattler, conda-lock, torch or pynvml."""
    code = "import sys, bootstrap.cli; bootstrap.cli.build_parser(); print(sorted(m for m in sys.modules if m.split('.')[0] in {'rattler','conda_lock','torch','pynvml'}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "[]"


def test_cli_verbs() -> None:
    help_text = build_parser().format_help()
    assert "lock" in help_text


def test_package_passes_the_py39_check() -> None:
    done = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize(
    "source, why",
    [
        ("def f(x):\n    match x:\n        case 1:\n            return 1\n", "Pattern matching"),
        ("print(list(zip([1], [2], strict=True)))\n", "zip(strict)"),
        ("import tomllib\n", "tomllib"),
    ],
)
def test_py39_check_rejects_newer_python(tmp_path: Path, source: str, why: str) -> None:
    path = tmp_path / "new.py"
    path.write_text(source)
    done = subprocess.run([sys.executable, str(CHECK), str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert why in done.stdout
