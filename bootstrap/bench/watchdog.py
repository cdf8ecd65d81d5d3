"""The run's watchdog: a bench run still going well past its budget is stuck, not slow.

How it interrupts a sample that never returns, and where it cannot: docs/benchmark.md,
"What bench refuses, and when".
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Iterator, Optional

GRACE_MIN_S = 30.0  # past the budget before giving up: slow first steps (a cold GPU) stay legitimate
GRACE_SHARE = 0.5  # ... or this share of the budget, whichever is longer
REPEAT_S = 5.0  # the first signal may land where it is swallowed (a bare `except:`): signal again


class Stalled(BaseException):
    """The run was still going at its give-up time. Not an Exception, like KeyboardInterrupt, so that
    no handler of a sample's or the user's exceptions swallows it."""


def give_up_s(budget_s: float) -> float:
    """Seconds after its start at which a run with `budget_s` is taken to be stuck."""
    return budget_s + max(GRACE_MIN_S, GRACE_SHARE * budget_s)


def _can_signal_main_thread() -> bool:
    """A POSIX host, and called in the main thread: the one a signal's handler runs in."""
    posix = hasattr(signal, "pthread_kill") and hasattr(signal, "SIGALRM")
    return posix and threading.current_thread() is threading.main_thread()


def _alarm_is_free() -> bool:
    """SIGALRM has no handler and no timer of anyone else's."""
    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None) and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0


def _interrupt_works() -> bool:
    return callable(signal.getsignal(signal.SIGINT))


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise `Stalled` in the main thread if the block is still running after `seconds`; SIGALRM's
    handler is put back and the timer thread gone when the block ends."""
    if not _can_signal_main_thread():
        yield
        return
    fired = threading.Event()
    stop = threading.Event()

    def raise_stalled(_signum: int, _frame: Optional[FrameType]) -> None:
        raise Stalled(seconds)

    previous = signal.signal(signal.SIGALRM, raise_stalled) if _alarm_is_free() else None
    main = threading.get_ident()  # the main thread's, as checked above

    def bark() -> None:
        waited = seconds
        while not stop.wait(waited):
            if signal.getsignal(signal.SIGALRM) is raise_stalled:
                fired.set()
                signal.pthread_kill(main, signal.SIGALRM)
            elif _interrupt_works():
                fired.set()
                signal.pthread_kill(main, signal.SIGINT)  # raised as KeyboardInterrupt, turned back below
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
