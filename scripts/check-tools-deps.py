"""Is every dependency of the tools venv there, but those left out on purpose? Fails loudly if not.

    .tools/bin/python scripts/check-tools-deps.py

The tools venv installs scripts/requirements-tools.txt with --no-deps, leaving out the dependencies
the tools never import (scripts/requirements-unused.txt), so `pip check` always lists those as
missing. pip's own check after an install that resolves dependencies (the test torch's) would print
them as an ERROR on every first `make test`, so the Makefile installs torch with --no-warn-conflicts and
runs this after each install instead. Silent when `pip check` finds nothing else;
anything else it finds (a dependency missing that is not listed there, a version conflict, a wheel
for another platform) is printed and exits 1.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

UNUSED = Path(__file__).resolve().parent / "requirements-unused.txt"
# `pip check`'s line for a dependency that is not installed:
# `conda-lock 4.0.3 requires keyring, which is not installed.`
MISSING = re.compile(r"^\S+ \S+ requires (?P<name>[A-Za-z0-9._-]+)\b.*, which is not installed\.$")


def canonical(name: str) -> str:
    """PEP 503: `Markdown_It.py` and `markdown-it-py` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def left_out() -> set[str]:
    """The projects requirements-unused.txt names (one a line; `#` comments)."""
    lines = (line.split("#", 1)[0].strip() for line in UNUSED.read_text(encoding="utf-8").splitlines())
    return {canonical(line) for line in lines if line}


def unexpected(report: str, unused: set[str]) -> list[str]:
    """The lines of `pip check`'s report that are not a dependency left out on purpose."""
    lines = []
    for line in report.splitlines():
        missing = MISSING.match(line.strip())
        if line.strip() and not (missing and canonical(missing.group("name")) in unused):
            lines.append(line.strip())
    return lines


def main() -> int:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "check", "--disable-pip-version-check"], capture_output=True, text=True
    )
    if done.returncode == 0:  # "No broken requirements found."
        return 0
    if done.returncode != 1:  # 1: it found something, read below; anything else: pip itself failed
        print(f"check-tools-deps: `pip check` failed (exit {done.returncode}): {done.stderr.strip()}", file=sys.stderr)
        return 1
    problems = unexpected(done.stdout + done.stderr, left_out())
    if problems:
        print(f"check-tools-deps: the venv of {sys.executable} is not consistent:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        print(
            f"  (dependencies left out on purpose are listed in {UNUSED.name}; add one there only if no tool "
            "imports it, else pin it in requirements-tools.in or requirements-test.in)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
