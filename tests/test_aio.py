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


def test_interrupt_inside_the_loops_constructor_prints_nothing_more(tmp_path) -> None:
    """Ctrl-C landing in BaseEventLoop.__init__, before it sets `_thread_id`: the half-built loop's __del__
    fails when collected; that report must not follow the one "interrupted" line. Other reports still show."""
    import subprocess
    import sys

    from tests.fixtures import REPO

    code = (
        "import asyncio, gc, sys\n"
        "from asyncio import base_events\n"
        "from bootstrap import aio\n"
        "def interrupted(self):\n"
        "    self._closed = False  # as far as the constructor got when the signal landed\n"
        "    raise KeyboardInterrupt\n"
        "base_events.BaseEventLoop.__init__ = interrupted\n"
        "async def answer(): return 42\n"
        "try:\n"
        "    aio.run(answer())\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', file=sys.stderr)\n"
        "gc.collect()\n"
        "class Loud:\n"
        "    def __del__(self): raise ValueError('still reported')\n"
        "Loud()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    lines = done.stderr.splitlines()
    assert lines[0] == "interrupted" and "BaseEventLoop.__del__" not in done.stderr, done.stderr
    assert "ValueError: still reported" in done.stderr


def test_a_coroutine_the_interrupt_caught_before_run_is_not_reported(tmp_path) -> None:
    """Ctrl-C between making the coroutine and entering `aio.run`: `run` never saw it, so the
    handler that ends the process says "interrupted" and nothing follows, while a coroutine
    left unawaited without an interrupt is still reported."""
    import subprocess
    import sys

    from tests.fixtures import REPO

    def stderr_of(code: str) -> str:
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
        return done.stderr

    made = "from bootstrap import aio\nasync def answer(): return 42\nkept = answer()\n"
    assert "never awaited" in stderr_of(made)
    interrupted = made + "try:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n    aio.interrupted()\n"
    assert stderr_of(interrupted) == ""


def test_the_cli_reports_an_interrupt_in_one_line(capsys) -> None:
    import argparse

    from bootstrap import cli

    def verb(_args):
        coro = _answer()  # made, then the signal lands before aio.run starts it
        raise KeyboardInterrupt(coro)

    args = argparse.Namespace(_run=verb, json=False, debug=False, verb="lock")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli._run(args) == cli.EXIT_INTERRUPTED
        gc.collect()
    assert capsys.readouterr().err == "interrupted\n"
    assert not [w for w in caught if "never awaited" in str(w.message)]
