"""The run's watchdog: a bench run still going well past its budget is stuck, not slow.

Every measurement is sized to end inside the budget, but a single batch
cannot be cut short: a `__getitem__` that never returns (a read from a
hung network mount, a lock that is never released, a bare `sleep`) would
hold the run, in the main process or in a worker it waits on, forever.
`watchdog` raises `Stalled` in the main thread once the run is `give_up_s`
old; `run_bench` then stops the workers and turns it into one line naming
the dataset.

It uses SIGALRM, so it is armed only where that exists (not on Windows),
in the main thread, and when the caller has no interval timer of its own
running (`tune_loader` in a training script that uses one). A sample that
hangs inside C code holding the GIL is beyond any Python-level timer.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

GRACE_MIN_S = 30.0      # past the budget before giving up: slow first steps (a cold GPU) stay legitimate
GRACE_SHARE = 0.5       # ... or this share of the budget, whichever is longer
REPEAT_S = 5.0


class Stalled(BaseException):
    """The run was still going at its give-up time. A BaseException, like KeyboardInterrupt: the
    handlers that turn a sample's exception into a result (or the user's own `except Exception`)
    must not swallow it."""


def give_up_s(budget_s: float) -> float:
    """Seconds after its start at which a run with `budget_s` is taken to be stuck."""
    return budget_s + max(GRACE_MIN_S, GRACE_SHARE * budget_s)


def armable() -> bool:
    """Whether `watchdog` can arm a timer here (see the module docstring)."""
    return (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0)


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise `Stalled` in the main thread if the block is still running after `seconds`; the previous
    SIGALRM handler is back, and no timer left armed, when the block ends. A no-op where not `armable`."""
    if not armable():
        yield
        return

    def fire(_signum: int, _frame: Any) -> None:
        raise Stalled(seconds)

    previous = signal.signal(signal.SIGALRM, fire)
    # Again every few seconds until the block ends: the first may land where it is swallowed (a
    # DataLoader iterator's __del__, a user's bare `except:`).
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001), REPEAT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)
