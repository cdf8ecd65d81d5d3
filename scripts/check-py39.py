"""Static check: the package must run on Python 3.9 inside the created envs.

Two independent checks, because neither alone is complete:
  * the 3.9 grammar (`ast.parse(feature_version=(3, 9))`) rejects `match`,
    parenthesised context managers and other new syntax;
  * vermin reports the minimum version each construct and stdlib call needs
    (e.g. `str.removeprefix` is 3.9, `zip(strict=)` is 3.10).

Usage: python scripts/check-py39.py [PATH ...]   (default: bootstrap/)
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TARGET = (3, 9)


def grammar_errors(paths: list[Path]) -> list[str]:
    errors = []
    for path in paths:
        try:
            ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=TARGET)
        except SyntaxError as exc:
            errors.append(f"{path}:{exc.lineno}: not valid Python {TARGET[0]}.{TARGET[1]}: {exc.msg}")
    return errors


def vermin_errors(paths: list[Path]) -> list[str]:
    argv = [
        str(Path(sys.executable).with_name("vermin")),
        "--no-tips",
        "--violations",
        "--backport",
        "dataclasses",
        "-t=3.9-",
        *map(str, paths),
    ]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        print(
            f"check-py39: no vermin beside {sys.executable}: run it with the tools venv's python "
            "(.tools/bin/python scripts/check-py39.py, or `make test`)",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    if proc.returncode == 0:
        return []
    return [line for line in proc.stdout.splitlines() if line.strip()] or [proc.stderr.strip()]


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path(__file__).resolve().parent.parent / "bootstrap"]
    missing = [str(root) for root in roots if not root.exists()]
    if missing:
        print(f"check-py39: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    paths = sorted(p for root in roots for p in ([root] if root.is_file() else root.rglob("*.py")))
    errors = grammar_errors(paths) + vermin_errors(paths)
    for line in errors:
        print(line)
    print(f"py39 check: {len(paths)} files, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
