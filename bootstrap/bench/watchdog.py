"""The run's watchdog: a bench run still going well past its budget is stuck, not slow.

Every measurement is sized to end inside the budget, but a single batch
cannot be cut short: a `__getitem__` that never returns (a read from a
hung network mount, a lock that is never released, a bare `sleep`) would
hold the run, in the main process or in a worker it waits on, forever.
`watchdog` raises `Stalled` in the main thread once the block is
`seconds` old; `run_bench` then stops the workers and turns it into one
line naming the dataset.

A timer thread sends the main thread a signal, which also breaks a
blocking wait (a sleep, a worker queue's get). The signal is SIGALRM with
the watchdog's own handler, or SIGINT (raised as KeyboardInterrupt and
turned back into `Stalled` here) where SIGALRM is someone else's: a script
that uses it for its own timeouts, or a dataset that takes it over
mid-run. It repeats every few seconds, as the first may land where it is
swallowed (a DataLoader iterator's `__del__`, a bare `except:`). No
watchdog on Windows (no signals to a thread), outside the main thread,
nor where neither signal is usable (SIGINT ignored, as in some background
jobs, and SIGALRM taken); a sample stuck in C code that holds the GIL is
beyond any Python-level handler.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator, Optional

GRACE_MIN_S = 30.0  # past the budget before giving up: slow first steps (a cold GPU) stay legitimate
GRACE_SHARE = 0.5  # ... or this share of the budget, whichever is longer
REPEAT_S = 5.0


class Stalled(BaseException):
    """The run was still going at its give-up time. A BaseException, like KeyboardInterrupt: the
    handlers that turn a sample's exception into a result (or the user's own `except Exception`)
    must not swallow it."""


def give_up_s(budget_s: float) -> float:
    """Seconds after its start at which a run with `budget_s` is taken to be stuck."""
    return budget_s + max(GRACE_MIN_S, GRACE_SHARE * budget_s)


def _alarm_is_free() -> bool:
    """SIGALRM has no handler and no timer of anyone else's."""
    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None) and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0


def _interrupt_works() -> bool:
    return callable(signal.getsignal(signal.SIGINT))


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise `Stalled` in the main thread if the block is still running after `seconds` (see the module
    docstring); SIGALRM's handler is put back and the timer thread gone when the block ends."""
    if not (
        hasattr(signal, "pthread_kill")
        and hasattr(signal, "SIGALRM")
        and threading.current_thread() is threading.main_thread()
    ):
        yield
        return
    fired = threading.Event()
    stop = threading.Event()

    def raise_stalled(_signum: int, _frame: Any) -> None:
        raise Stalled(seconds)

    previous: Optional[Any] = signal.signal(signal.SIGALRM, raise_stalled) if _alarm_is_free() else None
    main = threading.main_thread().ident

    def bark() -> None:
        waited = seconds
        while not stop.wait(waited):
            if signal.getsignal(signal.SIGALRM) is raise_stalled:
                fired.set()
                signal.pthread_kill(main, signal.SIGALRM)
            elif _interrupt_works():
                fired.set()
                signal.pthread_kill(main, signal.SIGINT)
            waited = REPEAT_S

    barker = threading.Thread(target=bark, name="bench-watchdog", daemon=True)
    barker.start()
    try:
        yield
    except KeyboardInterrupt:
        if fired.is_set():
            raise Stalled(seconds) from None
        raise
    finally:
        stop.set()
        try:
            barker.join()
        finally:
            if previous is not None:
                signal.signal(signal.SIGALRM, previous)
