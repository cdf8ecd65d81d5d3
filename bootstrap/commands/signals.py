"""SIGTERM (and SIGHUP) end a long-running verb as Ctrl-C does. Slurm, Docker, `timeout` and a closed
terminal stop a job with them; within `sigterm_as_interrupt()` each is a KeyboardInterrupt, which the
verbs handle (a summary, a partial report), instead of Python's death on the spot. One the process was
started with ignored (`nohup`) is left ignored.
"""

from __future__ import annotations

import contextlib
import signal
from types import FrameType
from typing import Iterator, Optional


class Received(list[int]):
    """The signals received in the block, in order. After `wind_down()` none raises any more, Ctrl-C
    included: what is left (renaming a finished log into place) is short and must not be cut in half."""

    raising = True

    def wind_down(self) -> None:
        self.raising = False


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[Received]:
    """Within the block, the first SIGTERM or SIGHUP raises KeyboardInterrupt wherever the program is; any
    later one is noted, not raised, so the clean-up the first one started finishes. Yields the signals
    received (for an exit status of 128 + the signal, as a shell reports it). Outside the main
    thread (a program embedding bootstrap), its signals are left alone."""
    received = Received()

    def interrupt(signum: int, frame: Optional[FrameType]) -> None:  # noqa: ARG001 (signal handler signature)
        if signum == signal.SIGINT and received.raising:
            raise KeyboardInterrupt  # Python's own Ctrl-C, until `wind_down`
        received.append(signum)
        if len(received) == 1 and received.raising:
            raise KeyboardInterrupt

    wanted = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])  # no SIGHUP on Windows
    # One ignored on entry stays ignored: `nohup` (SIGHUP) asked to outlive the terminal, and a script's
    # background job (`&`) ignores Ctrl-C.
    signums = [signum for signum in wanted if signal.getsignal(signum) != signal.SIG_IGN]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signums.append(signal.SIGINT)
    try:
        previous = {signum: signal.signal(signum, interrupt) for signum in signums}
    except ValueError:  # not the main thread
        yield received
        return
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
