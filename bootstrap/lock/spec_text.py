"""A spec's text as conda-lock reads it, line by line, before its YAML is parsed: platform selectors
that would drop a line, and lines whose blanks and `#` would cost conda-lock's selector pattern
minutes, are refused by line. Docs: docs/lock.md, "Reference: what a spec may not contain".
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from bootstrap.errors import InputError, excerpt

MAX_LINE_CHARS = 1000  # far above any real spec line (a `name @ URL ; marker` requirement is about 250)
# The steps conda-lock's pattern takes over the whole file, as `_selector_steps` counts them: a real
# spec takes under 2,000; this bound is hundreds of times that, and still a moment for conda-lock.
MAX_SELECTOR_STEPS = 1_000_000
_BLANKS = re.compile(r"\s+")  # conda-lock's `\s*`, which it tries again from every position of a run


# The selectors conda-lock's `filter_platform_selectors` keeps a line for, by platform.
_SELECTED_BY = {
    "linux-64": {"linux64", "unix", "linux"},
    "linux-aarch64": {"aarch64", "unix", "linux"},
    "linux-ppc64le": {"ppc64le", "unix", "linux"},
    "osx-64": {"osx64", "osx", "unix"},
    "osx-arm64": {"arm64", "osx", "unix"},
    "win-64": {"win", "win64"},
}


def check_spec_text(path: Path, text: str, platforms: tuple[str, ...]) -> None:
    """Refuse a line longer than MAX_LINE_CHARS that conda-lock's pattern reads (a comment line it
    skips), or one whose selector drops it on some of `platforms` (the spec's)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    steps = 0
    for number, line in enumerate(text.splitlines(), 1):  # conda-lock's own split
        if len(line) > MAX_LINE_CHARS and not line.lstrip().startswith("#"):
            raise InputError(
                path,
                f"line {number}: {len(line)} characters long (at most {MAX_LINE_CHARS})",
                "a spec line holds one dependency: drop the spaces or comment after it",
            )
        steps += _selector_steps(line)
        if steps > MAX_SELECTOR_STEPS:
            raise InputError(
                path,
                f"line {number}: too many spaces in a row or '#' up to here, which "
                "conda-lock's line filter reads in time growing with their square",
                "drop the spaces and comments after the dependencies",
            )
    for number, line in enumerate(text.splitlines(), 1):
        selector = platform_selector(line)
        if selector is not None and not all(selector in _SELECTED_BY.get(p, ()) for p in platforms):
            raise InputError(
                path,
                f"line {number}: conda-lock reads {excerpt('[' + selector + ']')} at its end as a "
                f"platform selector, which drops the line on some of {', '.join(platforms)}",
                "remove it: every dependency is locked for every platform of the spec; a pip "
                'requirement may take a marker instead, `; sys_platform == "linux"`',
            )


def _selector_steps(line: str) -> int:
    """About how many steps conda-lock's selector pattern takes over `line`: from each position it
    tries a run of blanks anew (the square of each run), and at each `#` it scans to the line's end."""
    if line.lstrip().startswith("#"):
        return 0  # conda-lock drops a comment line before its pattern sees it
    return len(line) + sum(len(run) ** 2 for run in _BLANKS.findall(line)) + line.count("#", 1) * len(line)


def platform_selector(line: str) -> Optional[str]:
    """What conda-lock's `filter_platform_selectors` takes as `line`'s selector (`linux` of
    `- cudatoolkit  # [linux]`), or None: the last `[word]` after a `#` that is not the line's
    first non-blank character, with no parenthesis after it. One pass, unlike conda-lock's pattern
    `(.+?)\\s*(#.*)\\[([^\\[\\]]+)\\](?(2)[^\\(\\)]*)$`, which it matches."""
    if line.lstrip().startswith("#"):
        return None  # a comment line: conda-lock drops it whole, as YAML ignores it
    start = line.find("#", 1)
    if start < 0:
        return None
    found, bracket = None, -1  # the last '[' or ']' seen
    for index in range(start + 1, len(line)):
        char = line[index]
        if char in "()":
            found = None
        elif char == "]":
            if bracket >= 0 and line[bracket] == "[" and index - bracket > 1:
                found = line[bracket + 1 : index]
            bracket = index
        elif char == "[":
            bracket = index
    return found
