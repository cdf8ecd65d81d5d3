"""A spec's text as conda-lock reads it, line by line, before its YAML is parsed.

conda-lock does not only parse a spec as YAML: for each platform it first
drops the lines that end in a platform selector it does not match
(`- cudatoolkit  # [linux]`, conda-build's preprocessing selectors).
bootstrap solves every dependency for every platform, so a selector would
make conda-lock's content hash disagree with the lock: it is refused here in
one line naming the file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from bootstrap.errors import InputError, excerpt


def check_spec_text(path: Path, text: str) -> None:
    """Refuse a line conda-lock reads as carrying a platform selector."""
    if text.startswith("\ufeff"):
        text = text[1:]
    for number, line in enumerate(text.splitlines(), 1):  # conda-lock's own split
        selector = platform_selector(line)
        if selector is not None:
            raise InputError(path, f"line {number}: conda-lock reads {excerpt('[' + selector + ']')} at its end as a "
                             "platform selector, which bootstrap does not apply",
                             "remove it: every dependency is locked for every platform of the spec; a pip "
                             "requirement may take a marker instead, `; sys_platform == \"linux\"`")


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
                found = line[bracket + 1:index]
            bracket = index
        elif char == "[":
            bracket = index
    return found
