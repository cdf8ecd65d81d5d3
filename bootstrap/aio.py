"""Running py-rattler's coroutines from synchronous code."""

from __future__ import annotations

from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, closing `coro` when it never got to run.

    A Ctrl-C between making a coroutine and the loop starting it leaves it unawaited, and
    Python then prints a RuntimeWarning under the one line that says "interrupted"."""
    import asyncio  # not at the top: the verbs that never reach rattler do without it

    try:
        return asyncio.run(coro)
    except BaseException:
        coro.close()
        raise
