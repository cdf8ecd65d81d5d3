"""One error root, caught once at the CLI.

Core code raises these instead of printing or exiting. Each message is meant
to be read alone on one line: it names the file, the field and the fix.
"""

from __future__ import annotations

import re
import reprlib
from typing import NamedTuple

# Exit codes shared by every verb.
EXIT_OK = 0
EXIT_FAILED = 1  # a check failed / the lock is stale
EXIT_USAGE = 2  # bad input, bad usage, unreachable source
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports it


class Frame(NamedTuple):
    """A frame of the user's own code an error passed through (their dataset, step, ...)."""

    file: str
    line: int
    function: str


class BootstrapError(Exception):
    """Base of every error bootstrap reports without a traceback. `frames`: where in the user's own code
    it arose (outermost first), which `-v` prints under the one line and `--json` adds to the envelope."""

    exit_code = EXIT_USAGE
    frames: tuple[Frame, ...] = ()


class InputError(BootstrapError):
    """A spec, lock or option the user gave is malformed or inconsistent."""

    def __init__(self, where: object, problem: str, fix: str = "") -> None:
        self.where = str(where)
        self.problem = problem
        self.fix = fix
        text = f"{self.where}: {problem}"
        if fix:
            text += f" ({fix})"
        super().__init__(text)


class HostError(BootstrapError):
    """This machine cannot run what the lock installs: its glibc or macOS is older than the lock needs."""


class SolveError(BootstrapError):
    """The conda or pip part cannot be satisfied; carries the solver's explanation."""


class FetchError(BootstrapError):
    """A channel, mirror or index could not be reached or read."""


class ToolError(BootstrapError):
    """An external tool (uv, ...) failed in a way that is not the user's input."""


class MissingModuleError(ToolError, ImportError):
    """A module the command needs cannot be imported by this interpreter (PyYAML in an env whose
    lock lacks it). An ImportError as well, so a caller with a fallback (doctor on a bare host
    python3) keeps it; uncaught, it is one line like any other error."""

    def __init__(self, message: str, module: str, fixed: bool = False) -> None:
        super().__init__(message)
        self.name = module
        self.fixed = fixed  # the message names its fix already: the CLI adds none


class IntegrityError(BootstrapError):
    """An artifact's bytes do not match the lock, or an archive would write outside the prefix."""


class RankLostError(BootstrapError):
    """Another rank of a torchrun job went away (interrupted, or crashed) while this one waited on it."""

    exit_code = EXIT_FAILED


class BusyError(BootstrapError):
    """Another bootstrap process holds the environment's lock."""


class DiskFullError(BootstrapError):
    """A disk or quota filled up, or a file reached the file size limit; what was half-written has been removed."""


def in_variant(exc: BootstrapError, path: object, label: str) -> BootstrapError:
    """`exc` naming the variant it arose in, after the spec's file name: `envs/torch.yml: variants[1]
    (cu126): pip: ...`, since one spec locks several variants and each fails in its own way."""
    if isinstance(exc, InputError):
        return InputError(exc.where, f"{label}: {exc.problem}", exc.fix)
    if type(exc).__init__ is not Exception.__init__:  # a subclass with fields of its own: kept as it is
        return exc
    text, prefix = str(exc), f"{path}: "
    return type(exc)(prefix + label + ": " + (text[len(prefix) :] if text.startswith(prefix) else text))


_TREE = re.compile(r"^[\s×╰─▶│├└┬┼]+")


def one_line(text: object) -> str:
    """A tool's explanation (rattler's solver, uv) as one line: tree glyphs and blank lines dropped,
    the lines joined, a line's own trailing colon kept (`...dependencies: Because ...`)."""
    parts = (_TREE.sub("", line).strip() for line in str(text).splitlines())
    return " ".join(part for part in parts if part)


EXCERPT_CHARS = 60  # of a bad value quoted in a message


def _bounded_repr() -> reprlib.Repr:
    bounded = reprlib.Repr()
    bounded.maxlevel = 2
    bounded.maxtuple = bounded.maxlist = bounded.maxdict = bounded.maxset = bounded.maxfrozenset = 4
    bounded.maxstring = bounded.maxother = bounded.maxlong = 4 * EXCERPT_CHARS  # cut again below
    return bounded


_REPR = _bounded_repr()


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """`repr(value)` cut to `limit` characters, for a bad value quoted in a message. The walk is
    bounded as well as the text: a YAML value built of aliases is a few bytes of file that expand
    to gigabytes under `repr`, and a message quotes enough of a value to find it, never all of it."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
