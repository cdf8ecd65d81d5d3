"""SIGTERM and SIGHUP end bench and monitor as Ctrl-C does: once raised, later ones noted, the handlers
put back."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from bootstrap.commands.signals import sigterm_as_interrupt

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name == "nt", reason="POSIX signals")


@pytest.mark.parametrize("first, second", [("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGTERM"), ("SIGTERM", "SIGHUP")])
def test_the_first_signal_interrupts_and_a_second_lets_the_clean_up_finish(first, second) -> None:
    first, second = getattr(signal, first), getattr(signal, second)
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    cleaned = False
    with sigterm_as_interrupt() as received:
        try:
            os.kill(os.getpid(), first)
            for _ in range(1000):  # Python runs the handler between bytecodes, soon after the kill
                pass
            pytest.fail(f"{first!r} did not interrupt")
        except KeyboardInterrupt:
            os.kill(os.getpid(), second)  # a job's time limit, or the terminal closing, while it winds down
            cleaned = True
    assert cleaned and received == [first, second]
    assert {signum: signal.getsignal(signum) for signum in before} == before


def test_outside_the_main_thread_signals_are_left_alone() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def worker() -> None:
        with sigterm_as_interrupt() as received:
            seen.append((received, signal.getsignal(signal.SIGTERM)))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [([], before)]


def test_after_wind_down_every_signal_is_noted_ctrl_c_included() -> None:
    """What is left after `wind_down` (a log renamed into place) finishes whatever arrives."""
    before = signal.getsignal(signal.SIGINT)
    with sigterm_as_interrupt() as received:
        received.wind_down()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(os.getpid(), signum)
            for _ in range(1000):  # the handler runs between bytecodes, soon after the kill
                pass
    assert received == [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    assert signal.getsignal(signal.SIGINT) is before


def test_before_wind_down_every_ctrl_c_raises_as_python_s_own_does() -> None:
    with sigterm_as_interrupt() as received:
        for _ in range(2):
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):
                    pass
    assert received == []


@pytest.mark.parametrize("name", ["SIGHUP", "SIGTERM"])
def test_a_signal_ignored_on_entry_stays_ignored(name: str) -> None:
    """`nohup bootstrap monitor ... &`: the terminal closing must not end what nohup started."""
    signum = getattr(signal, name)
    before = signal.signal(signum, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt() as received:
            assert signal.getsignal(signum) is signal.SIG_IGN
            os.kill(os.getpid(), signum)
            for _ in range(1000):  # where the handler would run
                pass
        assert received == [] and signal.getsignal(signum) is signal.SIG_IGN
    finally:
        signal.signal(signum, before)
