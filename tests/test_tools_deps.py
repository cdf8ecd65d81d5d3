"""scripts/check-tools-deps.py: the first `make test` says no ERROR when all is well, and fails loudly
when the tools venv really lacks a dependency or holds a conflict."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO

SCRIPT = REPO / "scripts" / "check-tools-deps.py"


def checker():
    spec = importlib.util.spec_from_file_location("check_tools_deps", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_the_dependencies_left_out_on_purpose_are_let_through() -> None:
    check = checker()
    unused = check.left_out()
    assert {"keyring", "gitpython", "markdown-it-py", "setuptools"} <= unused  # names, not comments
    report = "\n".join(
        [
            "rich 15.0.0 requires markdown-it-py, which is not installed.",
            "conda-lock 4.0.3 requires GitPython, which is not installed.",  # another spelling of one name
            "conda-lock 4.0.3 requires crashtest<0.5.0,>=0.4.1, which is not installed.",  # pip install's form
            "conda-lock 4.0.3 requires pydantic, which is not installed.",
            "torch 2.13.0 has requirement sympy>=1.13.3, but you have sympy 1.12.",
            "foo 1.0 is not supported on this platform",
            "",
        ]
    )
    assert check.unexpected(report, unused) == [
        "conda-lock 4.0.3 requires pydantic, which is not installed.",
        "torch 2.13.0 has requirement sympy>=1.13.3, but you have sympy 1.12.",
        "foo 1.0 is not supported on this platform",
    ]


def test_a_missing_dependency_that_is_not_left_out_on_purpose_fails_loudly(monkeypatch, capsys) -> None:
    check = checker()
    real = "conda-lock 4.0.3 requires pydantic, which is not installed.\n"
    deliberate = "rich 15.0.0 requires pygments, which is not installed.\n"
    for said, status in ((real + deliberate, 1), (deliberate, 0), ("No broken requirements found.\n", 0)):
        exit_code = 0 if said.startswith("No") else 1
        monkeypatch.setattr(
            check.subprocess, "run", lambda *a, s=said, e=exit_code, **k: subprocess.CompletedProcess(a, e, s, "")
        )
        assert check.main() == status, said
        err = capsys.readouterr().err
        assert "requires pydantic" in err if status else err == ""


@pytest.mark.skipif(importlib.util.find_spec("conda_lock") is None, reason="runs in the tools venv only")
def test_the_tools_venv_the_tests_run_in_passes_the_check() -> None:
    """requirements-unused.txt names every dependency the venv lacks, and nothing else is missing."""
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_each_pip_install_of_the_test_targets_is_quiet_and_checked(tmp_path: Path) -> None:
    """pip's own check would print the deliberate gaps as an ERROR: off, and the script checks instead,
    before each stamp is written (a failed check installs and checks again next time)."""
    shutil.copy(REPO / "Makefile", tmp_path)
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    (tmp_path / ".tools" / "bin").mkdir(parents=True)
    (tmp_path / ".tools" / "bin" / "python").symlink_to(sys.executable)
    shutil.copy(REPO / "scripts" / "requirements-tools.txt", tmp_path / ".tools" / ".requirements-tools.txt")
    shutil.copy(REPO / "scripts" / "tools-venv.sh", tmp_path / ".tools" / ".tools-venv.sh")
    planned = subprocess.run(
        ["make", "-n", ".tools/.requirements-test.txt", ".tools/.torch-test", "TORCH_TEST=torch==0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    ).stdout
    lines = planned.replace("\\\n", " ").splitlines()
    installs = re.findall(r"pip install [^;\n]*", planned.replace("\\\n", " "))
    assert len(installs) == 3  # the test requirements, torch from the CPU index or from the default one
    assert all("--no-deps" in line or "--no-warn-conflicts" in line for line in installs)
    checked = [i for i, line in enumerate(lines) if "scripts/check-tools-deps.py" in line]
    stamps = [
        i for i, line in enumerate(lines) if line.endswith((" .tools/.requirements-test.txt", "> .tools/.torch-test"))
    ]
    assert len(checked) == 2 and len(stamps) == 2 and all(c < s for c, s in zip(checked, stamps))
