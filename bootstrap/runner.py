"""The one place that starts subprocesses.

argv lists only (never a shell), a timeout on every call, output decoded once.
Probes and resolvers take a `Runner` so tests can pass one that replays
recorded output.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Mapping, Optional, Protocol, Sequence

from bootstrap.errors import ToolError


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    """`run`, or what a test passes in its place."""

    def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout: float = ...,
        env: Optional[Mapping[str, str]] = ...,
        cwd: Optional[str] = ...,
        pass_fds: Sequence[int] = ...,
    ) -> Completed: ...


def run(
    argv: Sequence[str],
    *,
    timeout: float = 300.0,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    pass_fds: Sequence[int] = (),
) -> Completed:
    """Run `argv`, return its decoded output; raise ToolError if it cannot start or times out.

    A non-zero exit status is returned, not raised: callers know which
    failures are the user's (bad spec) and which are the tool's. The child
    inherits `pass_fds` (every other descriptor is closed in it).
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        # Its own process group, so a timeout ends whatever it started too (a hung nvidia-smi's children).
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except FileNotFoundError as exc:
        raise ToolError(f"{argv[0]}: not found ({exc.strerror}); run `make tools` to install it") from exc
    except OSError as exc:  # not executable, not a program, ...
        raise ToolError(f"{argv[0]}: cannot run it ({exc.strerror or exc})") from exc
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        _kill_group(proc)
        raise ToolError(f"{' '.join(argv[:3])} ...: no answer after {timeout:g} s") from exc
    except BaseException:  # Ctrl-C: the tool and its children go too
        _kill_group(proc)
        raise
    return Completed(
        argv=tuple(argv),
        returncode=proc.returncode,
        stdout=stdout.decode("utf-8", "replace"),
        stderr=stderr.decode("utf-8", "replace"),
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process and everything in its group (POSIX); on Windows, the process."""
    killpg = getattr(os, "killpg", None)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        killpg(proc.pid, signal.SIGKILL) if killpg is not None else proc.kill()
    proc.communicate()
