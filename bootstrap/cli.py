"""The thin command line: parse, call one core function, render, exit.

Each verb is `bootstrap/commands/<verb>.py` with `configure(parser)` and `run(args) -> int`; a
`BootstrapError` is caught here, once: one line on stderr, a traceback only with `--debug`.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional, Sequence

from bootstrap import __version__, aio
from bootstrap.errors import EXIT_INTERRUPTED, EXIT_USAGE, BootstrapError, DiskFullError, Frame, MissingModuleError
from bootstrap.urls import scrub_credentials

# verb -> (module under bootstrap.commands, one-line help)
VERBS = {
    "lock": ("lock", "solve the specs in envs/ for every platform and write the lock"),
    "add": ("add", "add requirements to an env's spec, relock only what they need, export, update the env"),
    "remove": ("remove", "take packages out of an env's spec; what only they needed leaves the lock too"),
    "env": ("env", "create or update an environment from its lock, without conda"),
    "shell": ("shell", "the activation of the env's prefix this host picks (eval it), or --exec a command in it"),
    "cache": ("cache", "what the package cache holds; --prune keeps only what this project's locks install"),
    "bundle": ("bundle", "every artifact a lock installs, with the lock, in one tar for nodes without internet"),
    "verify": ("verify", "inside the env: does it match the lock, and does this machine's CUDA stack run it?"),
    "doctor": ("doctor", "host only, no torch: driver, max CUDA, GPUs, and whether the locked torch build fits"),
    "bench": ("bench", "measure how well the input pipeline keeps the GPU busy, tune the DataLoader, give verdicts"),
    "export": ("export", "write the environment.yml to share (portable, or --pinned per platform)"),
    "monitor": ("monitor", "live per-GPU utilisation, memory, power and processes (NVML)"),
}


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The parser of every verb; given `argv`, only its verb's options are set up, so that a no-op
    `make env` does not import every other verb's command module."""
    verb_asked = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    parser = _Parser(
        prog="python -m bootstrap",
        description="Reproducible conda environments for teams that train PyTorch on NVIDIA GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"bootstrap {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for verb, (module_name, help_text) in VERBS.items():
        verb_parser = sub.add_parser(verb, help=help_text, description=help_text)
        verb_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if verb_asked in VERBS and verb != verb_asked:
            continue
        module = importlib.import_module(f"bootstrap.commands.{module_name}")
        module.configure(verb_parser)
        verb_parser.set_defaults(_run=module.run, _parser=verb_parser)
    return parser


USAGE_MESSAGE_CHARS = 200


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is raised (as `_UsageError`) rather than exiting, so that a
    `--json` run still gets its error envelope; and it is one short line, as every other bad input is,
    pointing at `--help` instead of printing the usage above it. Options are spelt out, never
    abbreviated. Subparsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `doctor --s x` must not quietly mean --save-facts x
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if len(message) > USAGE_MESSAGE_CHARS:  # "unrecognized arguments: " quotes every one of them
            message = message[: USAGE_MESSAGE_CHARS - 3] + "..."
        raise _UsageError(f"{message} (see `{self.prog} --help`)")


class _UsageError(Exception):
    pass


# `--json` runs that fail print this envelope on stdout (the one line still goes to stderr),
# so CI parses every outcome: {"format", "version", "verb", "error": {"type", "message", "exit_code"}},
# and "frames" in "error" ([{"file", "line", "function"}]) where the error arose in the user's own code.
ERROR_JSON_FORMAT = "bootstrap.error"
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a C tool whose reader went away


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args, extra = build_parser(argv).parse_known_args(argv)
        if extra:  # the verb's parser says so, pointing at the verb's own --help
            args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except _UsageError as exc:
        message = scrub_credentials(str(exc))  # argparse quotes a rejected value as given
        print(f"error: {message}", file=sys.stderr)
        return _early_error(argv, "UsageError", message, EXIT_USAGE)
    except KeyboardInterrupt:  # while the verb's modules were still loading
        aio.interrupted()
        print("interrupted", file=sys.stderr)
        return _early_error(argv, "KeyboardInterrupt", "interrupted", EXIT_INTERRUPTED)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """The verb's exit code; an error it raises is one line (and the error envelope with --json)."""
    try:
        code = int(args._run(args))
        sys.stdout.flush()
        return code
    except ModuleNotFoundError as exc:
        if args.debug or not exc.name or exc.name.split(".")[0] == "bootstrap":
            raise  # our own module missing is a bug: its traceback is the report
        return _error(args, _missing(args.verb, exc.name.split(".")[0]))
    except BootstrapError as exc:
        if args.debug:
            if exc.frames:  # raised `from None`: the traceback shows the user's error it was raised over too
                exc.__suppress_context__ = False
            raise
        return _error(args, exc)
    except KeyboardInterrupt:
        aio.interrupted()
        print("interrupted", file=sys.stderr)
        _error_envelope(args, "KeyboardInterrupt", "interrupted", EXIT_INTERRUPTED)  # an outcome like any other for CI
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `bootstrap ... | head`: the reader stopped; no traceback, and no second one at exit
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        # What the verbs write themselves they report as DiskFullError; this is the output that
        # could not be written (`> report.json` on a full disk, or /dev/full). Its exit code too:
        # 1 would read as a failed check (`lock --check`: stale).
        if args.debug or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        _stdout_to_devnull()
        print(
            f"error: {exc.filename or 'the output'}: {os.strerror(exc.errno).lower()} "
            "(free space there, or send the output elsewhere)",
            file=sys.stderr,
        )
        return DiskFullError.exit_code


def _error(args: argparse.Namespace, exc: BootstrapError) -> int:
    """One line on stderr (and the error envelope on stdout with --json); the exit code."""
    # The last guard: a message that interpolated a user-given URL must not show its secrets.
    message = scrub_credentials(str(exc))
    if isinstance(exc, MissingModuleError) and not exc.fixed:
        message += f": {_install_fix(args.verb, exc.name or '')}"
    print(f"error: {message}", file=sys.stderr)
    if exc.frames and getattr(args, "verbose", False):
        print("  in your code (most recent call last):", file=sys.stderr)
        for frame in exc.frames:
            print(f"    {frame.file}:{frame.line} in {frame.function}", file=sys.stderr)
    _error_envelope(args, type(exc).__name__, message, exc.exit_code, exc.frames)
    return exc.exit_code


def _early_error(argv: Sequence[str], kind: str, message: str, exit_code: int) -> int:
    """`_error_envelope` before the arguments are parsed: `--json` and the verb as written; the exit code."""
    verb = next((a for a in argv if a in VERBS), None)
    _error_envelope(argparse.Namespace(json="--json" in argv, verb=verb), kind, message, exit_code)
    return exit_code


def _error_envelope(
    args: argparse.Namespace, kind: str, message: str, exit_code: int, frames: Sequence[Frame] = ()
) -> None:
    if getattr(args, "json", False):
        from bootstrap.report import envelope

        error: dict[str, Any] = {"type": kind, "message": message, "exit_code": exit_code}
        if frames:  # the user's own code, where the error arose
            error["frames"] = [frame._asdict() for frame in frames]
        print(json.dumps(envelope(ERROR_JSON_FORMAT, {"verb": args.verb, "error": error})))


# The verbs the tools venv runs (`make lock`, `make env`, ...); the others run in the team's env.
TOOLS_VERBS = ("lock", "add", "remove", "env", "shell", "bundle", "cache")
_PACKAGE_OF = {"yaml": "pyyaml", "pynvml": "nvidia-ml-py", "rattler": "py-rattler", "conda_lock": "conda-lock"}


def _install_fix(verb: str, module: str) -> str:
    """Where the missing module should come from: the tools venv's pinned requirements, or the env's lock."""
    if verb in TOOLS_VERBS:
        return "the tools venv is partial or damaged; `make clean && make tools` rebuilds it (.tools)"
    package = _PACKAGE_OF.get(module, module)
    return (
        f"add `{package}` to the env's spec (envs/*.yml), then `make lock` and `make env`; "
        f"to try it first, `{sys.executable} -m pip install {package}`"
    )


def _missing(verb: str, module: str) -> MissingModuleError:
    """The error for `module`, which this Python lacks and `verb` needs."""
    outside = _outside_env_fix(verb)
    if outside:
        message = f"{module} is missing from this Python ({sys.executable}): {outside}"
        return MissingModuleError(message, module, fixed=True)
    return MissingModuleError(f"{sys.executable} cannot import {module}, which `bootstrap {verb}` needs", module)


# The verbs `make` runs inside an env (`.envs/ENV/bin/python`), on the torch its lock installs.
ENV_VERBS = ("verify", "bench")


def _outside_env_fix(verb: str) -> str:
    """Where `verb` runs, when this Python is not an env `bootstrap env` made (the tools venv, a bare
    python3): a module it lacks belongs to the env, not here. '' inside such an env, or for other verbs."""
    from bootstrap.prefix import INSTALL_RECORD
    from bootstrap.project import DEFAULT_ENV

    if verb not in ENV_VERBS or (Path(sys.prefix) / "conda-meta" / INSTALL_RECORD).is_file():
        return ""
    runs = f"`bootstrap {verb}` runs inside the env, on the torch its lock installs"
    root = Path(__file__).resolve().parent.parent  # the checkout this package is imported from
    if not ((root / "Makefile").is_file() and (root / "envs").is_dir()):
        return f"{runs}: `make {verb}` in the project's checkout, or `.envs/ENV/bin/python -m bootstrap {verb}`"
    envs_dir = root / ".envs"
    made = sorted(
        p.name
        for p in envs_dir.glob("*")
        if not p.name.startswith(".") and ((p / "bin" / "python").exists() or any(p.glob("*/bin/python")))
    )
    env = DEFAULT_ENV if DEFAULT_ENV in made or not made else made[0]
    make = f"make {verb}" + ("" if env == DEFAULT_ENV else f" ENV={env}")
    python = str(envs_dir / env / "bin" / "python")
    if made and not os.path.exists(python):  # a prefix per variant: run in the one this host picks
        python = f"{root / '.tools' / 'bin' / 'python'} -m bootstrap shell {env} --exec python"
    fix = f"{runs}: `{make}` in {root}, or `PYTHONPATH={root} {python} -m bootstrap {verb}` with the same arguments"
    return fix if made else f"{fix} (no env there yet: `make env` creates it)"


def _stdout_to_devnull() -> None:
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # stdout is not a file descriptor (a test's capture): nothing flushes into the pipe again
