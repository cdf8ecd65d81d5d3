"""bootstrap.aio: a coroutine the loop never started is closed, not left to warn."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from bootstrap import aio


async def _answer() -> int:
    return 42


def test_runs_the_coroutine() -> None:
    assert aio.run(_answer()) == 42


def test_interrupt_before_the_loop_starts_leaves_no_unawaited_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(_coro):
        raise KeyboardInterrupt  # Ctrl-C landing as asyncio.run is entered

    monkeypatch.setattr(asyncio, "run", interrupted)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            aio.run(_answer())
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
