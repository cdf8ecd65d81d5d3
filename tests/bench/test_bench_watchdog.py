"""A bench run that is stuck, not slow: the watchdog's timer, and what a run that meets it reports.

The timer is tested on its own (it raises in the main thread, puts the
previous SIGALRM handler back, stays out of another thread's way, leaves a
timer the caller armed alone and outlasts a dataset that takes SIGALRM
over); the runs use real DataLoaders on this CPU over a
dataset whose samples hang in the main process or in a worker, with the
grace past the budget shortened so that a test waits seconds, not half a
minute.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time

import pytest

from bootstrap.bench import watchdog as watchdog_module
from bootstrap.bench.watchdog import Stalled, give_up_s, watchdog

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="the watchdog signals a thread")

BATCH = 8

HANGING = '''
import time

import torch
from torch.utils.data import Dataset, get_worker_info


class Hanging(Dataset):
    """Fine for its first `good` samples in this process; then, or in any worker with `in_workers`, it
    never returns."""

    def __init__(self, good, in_workers=False):
        self.good, self.in_workers, self.loaded = good, in_workers, 0

    def __len__(self):
        return 256

    def __getitem__(self, index):
        self.loaded += 1
        if self.loaded > self.good or (self.in_workers and get_worker_info() is not None):
            while True:
                time.sleep(3600)
        return torch.zeros(3, 8, 8), index % 10


def at_once():
    return Hanging(0)


def later():
    return Hanging(120)


def in_workers():
    return Hanging(10**9, in_workers=True)
'''


@pytest.mark.parametrize("budget_s, expected_s", [(10, 40), (60, 90), (100, 150), (600, 900)])
def test_give_up_leaves_the_larger_of_a_floor_and_half_the_budget(budget_s, expected_s):
    assert give_up_s(budget_s) == expected_s


def test_a_block_past_its_time_is_stopped_and_the_handler_put_back():
    def mine(_signum, _frame):
        raise AssertionError("the previous handler must not run")

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        started = time.perf_counter()
        with pytest.raises(Stalled):
            with watchdog(0.2):
                time.sleep(30)
        assert time.perf_counter() - started < 5
        assert signal.getsignal(signal.SIGALRM) is mine
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_block_that_ends_in_time_leaves_no_timer_behind():
    with watchdog(5):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)


def test_outside_the_main_thread_it_arms_nothing():
    outcome = []

    def body():
        try:
            with watchdog(0.05):
                time.sleep(0.3)
            outcome.append(signal.getitimer(signal.ITIMER_REAL))
        except BaseException as exc:  # noqa: BLE001 (the test records whatever escapes)
            outcome.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert outcome == [(0.0, 0.0)]


def test_a_timer_the_caller_armed_is_left_alone_and_the_block_still_stopped():
    """A training script with its own SIGALRM timer keeps it, handler and all: the watchdog stops the
    block with SIGINT instead."""
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        with pytest.raises(Stalled):
            with watchdog(0.1):
                time.sleep(2)
        assert not fired and signal.getitimer(signal.ITIMER_REAL)[0] > 0
        assert signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("meddling", ["alarm(0)", "alarm(60)", "a handler of its own", "SIG_IGN"])
def test_a_dataset_that_takes_sigalrm_over_mid_run_is_still_stopped(meddling):
    """Per-sample timeouts in a dataset (signal.alarm, a handler of their own) must not switch the
    watchdog off: its timer is a thread, and it falls back to SIGINT when SIGALRM is no longer its own."""
    started = time.perf_counter()
    with pytest.raises(Stalled):
        with watchdog(0.2):
            if meddling.startswith("alarm"):
                signal.alarm(int(meddling[6:-1]))
            else:
                signal.signal(signal.SIGALRM, (lambda *_: None) if meddling.startswith("a handler") else signal.SIG_IGN)
            time.sleep(30)
    signal.alarm(0)
    assert time.perf_counter() - started < 5
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)


def test_with_sigalrm_taken_and_ctrl_c_ignored_there_is_no_watchdog():
    """A background job (SIGINT ignored) whose script uses SIGALRM: nothing the watchdog may send."""
    previous_alarm = signal.signal(signal.SIGALRM, lambda *_: None)
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with watchdog(0.05):
            time.sleep(0.3)
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGALRM, previous_alarm)


def bench_stuck(tmp_path, capsys, monkeypatch, factory: str, budget_s: float) -> tuple:
    """(exit code, stderr, seconds) of an in-process `bench --dataset hanging:FACTORY` whose grace past
    the budget is one second."""
    from bootstrap.cli import main

    monkeypatch.setattr(watchdog_module, "GRACE_MIN_S", 1.0)
    monkeypatch.setattr(watchdog_module, "GRACE_SHARE", 0.0)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    (tmp_path / "hanging.py").write_text(HANGING)
    started = time.perf_counter()
    code = main(
        [
            "bench",
            "--device",
            "cpu",
            "--quiet",
            "--no-png",
            "--batch-size",
            str(BATCH),
            "--budget",
            str(budget_s),
            "--out",
            str(tmp_path / "out"),
            "--path",
            str(tmp_path),
            "--dataset",
            f"hanging:{factory}",
        ]
    )
    seconds = time.perf_counter() - started
    __import__("sys").modules.pop("hanging", None)
    return code, capsys.readouterr().err, seconds


def assert_one_line_and_nothing_written(tmp_path, code: int, err: str, factory: str, phase: str) -> None:
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --dataset hanging:{factory}: still running "), err
    assert (
        f"in the {phase} phase: stopped; a __getitem__ (or __iter__), collate, model or step that never returns?"
    ) in err, err
    out = tmp_path / "out"
    assert not out.exists() or not any(out.iterdir())
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_first_batch_that_never_comes_stops_the_run_at_its_give_up_time(tmp_path, capsys, monkeypatch):
    code, err, seconds = bench_stuck(tmp_path, capsys, monkeypatch, "at_once", budget_s=1)
    assert_one_line_and_nothing_written(tmp_path, code, err, "at_once", "setup")
    assert seconds < 1 + 1 + 5


@pytest.mark.slow
def test_a_sample_that_hangs_mid_run_stops_the_run(tmp_path, capsys, monkeypatch):
    code, err, seconds = bench_stuck(tmp_path, capsys, monkeypatch, "later", budget_s=4)
    assert code == 2, err
    assert_one_line_and_nothing_written(tmp_path, code, err, "later", err.split("in the ")[1].split()[0])
    assert seconds < 4 + 1 + 5


@pytest.mark.slow
def test_a_sample_that_hangs_in_the_workers_stops_the_run_and_its_workers(tmp_path, capsys, monkeypatch):
    """The main process waits on the workers' queue: the timer interrupts that wait, and the workers,
    stuck in the sample, are terminated rather than waited for."""
    code, err, seconds = bench_stuck(tmp_path, capsys, monkeypatch, "in_workers", budget_s=8)
    phase = err.split("in the ")[1].split()[0] if "in the " in err else err
    assert phase in ("scaling", "tune"), err  # the first phases with workers
    assert_one_line_and_nothing_written(tmp_path, code, err, "in_workers", phase)
    assert seconds < 8 + 1 + 5
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not multiprocessing.active_children()
