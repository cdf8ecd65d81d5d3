"""Running py-rattler's coroutines from synchronous code."""

from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, Coroutine, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, closing `coro` when it never got to run.

    A Ctrl-C between making a coroutine and the loop starting it leaves it unawaited, and
    Python then prints a RuntimeWarning under the one line that says "interrupted". One that
    lands inside the event loop's constructor leaves a loop without its `_thread_id`, whose
    `__del__` then fails when it is collected: that report is dropped too (`_quiet_half_built_loops`)."""
    import asyncio  # not at the top: the verbs that never reach rattler do without it

    try:
        return asyncio.run(coro)
    except BaseException as exc:
        coro.close()
        if isinstance(exc, KeyboardInterrupt) and not isinstance(sys.unraisablehook, _QuietHalfBuiltLoops):
            sys.unraisablehook = _QuietHalfBuiltLoops(sys.unraisablehook)
        raise


class _QuietHalfBuiltLoops:
    """An unraisable hook that drops the AttributeError of a half-built event loop's `__del__` and
    passes every other report on to the hook it replaced."""

    def __init__(self, previous: Callable[[sys.UnraisableHookArgs], object]) -> None:
        self.previous = previous

    def __call__(self, unraisable: sys.UnraisableHookArgs) -> None:
        if (
            isinstance(unraisable.exc_value, AttributeError)
            and getattr(unraisable.object, "__qualname__", "") == "BaseEventLoop.__del__"
        ):
            return
        self.previous(unraisable)


def interrupted() -> None:
    """Called where a Ctrl-C is caught to end the process: a coroutine made but never run is then
    the interrupt's doing, so Python's "never awaited" warning would only trail the one line
    that says "interrupted". `run` cannot close one the signal caught before `run` was entered."""
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
