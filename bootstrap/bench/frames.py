"""Where in the user's own code an error arose: the frames outside bootstrap, torch, the standard library
and site-packages, which the CLI prints under the error's one line with -v and puts in the --json error
envelope (docs/benchmark.md, "What bench refuses, and when").
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import traceback
from typing import Optional, TypeVar

from bootstrap.errors import BootstrapError, Frame

MAX_FRAMES = 10  # the innermost ones: a recursion's thousand frames say no more than its last ten

E = TypeVar("E", bound=BootstrapError)

# A DataLoader worker's error reaches this process as text: torch quotes the worker's traceback.
_WORKER_TRACEBACK = "Original Traceback (most recent call last):"
_QUOTED_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$', re.MULTILINE)


def with_frames(error: E, cause: Optional[BaseException] = None) -> E:
    """`error`, carrying the user's own frames of `cause`, else of what `error` was raised from or while
    handling, unless it carries some already. Many errors are raised `from None`, which hides the user's
    exception from a traceback but keeps it as `__context__`; the frames are taken now, as plain data,
    and stay with the error whatever a later raise does to its chain."""
    if not error.frames:
        error.frames = own_frames(cause if cause is not None else error)
    return error


def own_frames(exc: BaseException) -> tuple[Frame, ...]:
    """The user's frames (outermost first) of the first error in `exc`'s chain (itself, then its
    `__cause__` or `__context__`, and theirs) that has any."""
    seen: set[int] = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = _frames_of(current)
        if frames:
            return frames[-MAX_FRAMES:]
        current = current.__cause__ or current.__context__
    return ()


def _frames_of(exc: BaseException) -> tuple[Frame, ...]:
    """The user's frames of `exc`: for an error of a DataLoader worker, of the traceback torch quotes (where
    it arose), else of its own traceback; for a SyntaxError, the line that does not parse as well."""
    skip = _not_users()
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 (the user's __str__)
        text = ""
    if _WORKER_TRACEBACK in text:
        quoted = text.rsplit(_WORKER_TRACEBACK, 1)[1].split("\nTraceback (most recent call last):")[-1]
        entries = [(m["file"], int(m["line"]), m["function"].strip()) for m in _QUOTED_FRAME.finditer(quoted)]
    else:
        entries = [(e.filename, e.lineno or 0, e.name) for e in traceback.extract_tb(exc.__traceback__)]
    if isinstance(exc, SyntaxError) and exc.filename:
        entries.append((exc.filename, exc.lineno or 0, "<module>"))
    return tuple(Frame(*entry) for entry in entries if _is_users(entry[0], skip))


def _not_users() -> tuple[str, ...]:
    """The directories whose code is not the user's: bootstrap's, torch's, the standard library's and
    the installed packages'."""
    import bootstrap

    dirs = [os.path.dirname(bootstrap.__file__)]
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        dirs.append(os.path.dirname(torch_file))
    paths = sysconfig.get_paths()
    dirs += [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]
    return tuple(os.path.join(os.path.normcase(os.path.realpath(d)), "") for d in dirs)


def _is_users(filename: str, skip: tuple[str, ...]) -> bool:
    if filename.startswith("<frozen"):  # importlib's own; "<string>" (python -c) is the user's
        return False
    parts = set(re.split(r"[\\/]", filename))
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    return not os.path.normcase(os.path.realpath(filename)).startswith(skip)
