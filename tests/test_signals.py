"""SIGTERM ends bench and monitor as Ctrl-C does: once raised, later ones noted, the handler put back."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from bootstrap.commands.signals import sigterm_as_interrupt

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name == "nt", reason="POSIX signals")


def test_the_first_sigterm_interrupts_and_a_second_lets_the_clean_up_finish() -> None:
    before = signal.getsignal(signal.SIGTERM)
    cleaned = False
    with sigterm_as_interrupt() as received:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # Python runs the handler between bytecodes, soon after the kill
                pass
            pytest.fail("SIGTERM did not interrupt")
        except KeyboardInterrupt:
            os.kill(os.getpid(), signal.SIGTERM)  # a job's time limit while it winds down
            cleaned = True
    assert cleaned and received == [signal.SIGTERM, signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is before


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
