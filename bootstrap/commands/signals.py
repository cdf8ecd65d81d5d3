"""SIGTERM ends a long-running verb as Ctrl-C does.

`kill PID`, `timeout 60 ...`, Slurm, Docker and Kubernetes stop a job with
SIGTERM. Python's default is to die on the spot: no summary, no partial
report, temporary data left behind. Within `sigterm_as_interrupt()` it is
a KeyboardInterrupt instead, which the verbs already handle.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Iterator, List


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[List[int]]:
    """Within the block, the first SIGTERM raises KeyboardInterrupt wherever the program is; any later
    one is noted, not raised, so the clean-up the first one started finishes. Yields the signals
    received (for an exit status of 128 + the signal, as a shell reports it). Outside the main
    thread (a program embedding bootstrap), its signals are left alone."""
    received: List[int] = []

    def interrupt(signum: int, frame: Any) -> None:  # noqa: ARG001 (signal handler signature)
        received.append(signum)
        if len(received) == 1:
            raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield received
        return
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)
