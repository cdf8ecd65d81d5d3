"""A DataLoader worker killed by a signal (the OOM killer's SIGKILL) is a configuration that failed, and
the run goes on; one that exits by itself is the dataset's doing. torch tells both as a worker that
'exited unexpectedly' when the main process finds it dead while waiting for a batch, and raises its
SIGCHLD handler's news in whatever the main process runs at the time, the user's step included.

Real workers on this CPU, really killed.
"""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

BATCH = 4

KILLERS = textwrap.dedent('''
    import os
    import signal
    import time

    import torch
    from torch.utils.data import Dataset, get_worker_info


    class Samples(Dataset):
        """Each sample's label is the pid of the process that loaded it; `kill` SIGKILLs a worker at once."""

        def __init__(self, kill=False):
            self.kill = kill

        def __len__(self):
            return 64

        def __getitem__(self, index):
            if self.kill and get_worker_info() is not None:
                os.kill(os.getpid(), signal.SIGKILL)
            return torch.zeros(3, 8, 8, dtype=torch.uint8), os.getpid()


    def killed_in_workers():
        return Samples(kill=True)


    def samples():
        return Samples()


    def kill_the_worker(model, batch, device):
        """SIGKILLs the worker that loaded `batch`, then waits for the news: the SIGCHLD handler's error
        comes out of this step."""
        pid = int(batch[1][0])
        if pid != os.getpid():
            os.kill(pid, signal.SIGKILL)
            time.sleep(5)
        return None
''')


@pytest.fixture
def killers(tmp_path, monkeypatch):
    (tmp_path / "killers.py").write_text(KILLERS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    yield tmp_path
    sys.modules.pop("killers", None)


def measure_two_workers(dataset: str):
    """(what a 2-worker loader measured, the failures recorded) for `dataset`, with the killing step."""
    from bootstrap.bench.config import BenchOptions, WorkloadSpec
    from bootstrap.bench.measure import measure_loader
    from bootstrap.bench.results import LoaderConfig
    from bootstrap.bench.run import clean_up, set_up
    from bootstrap.bench.state import new_state
    from bootstrap.bench.user import UserWorkload

    user = UserWorkload(dataset, step="killers:kill_the_worker")
    state = new_state(BenchOptions(workload=WorkloadSpec(batch_size=BATCH), budget_s=60, device="cpu", user=user))
    try:
        set_up(state)
        measured = measure_loader(
            state, LoaderConfig(num_workers=2), 0.2, time.perf_counter() + 30, "tune", with_step=True
        )
        return measured, state.failures
    finally:
        clean_up(state)


@pytest.mark.parametrize(
    "dataset",
    [
        "killers:killed_in_workers",  # found dead while the main process waits for a batch
        "killers:samples",  # the step kills it: the SIGCHLD handler raises inside the step
    ],
)
def test_a_worker_killed_by_a_signal_is_a_failed_config_not_the_dataset_s_fault(killers, dataset):
    measured, failures = measure_two_workers(dataset)
    assert measured is None
    assert [f.config.num_workers for f in failures] == [2]
    assert "killed by signal: Killed. (SIGKILL: the OOM killer" in failures[0].why, failures[0].why


def test_a_worker_that_exited_by_itself_keeps_its_exit_code():
    """The real exit code, which torch's 'exited unexpectedly' leaves out, tells a signal from an exit."""
    from bootstrap.bench.loader import worker_death

    class Worker:
        def __init__(self, pid, exitcode):
            self.pid, self.exitcode = pid, exitcode

    class Iterator:
        def __init__(self, *workers):
            self._workers = workers

    assert worker_death(Iterator(Worker(1, None), Worker(2, None))) is None
    assert (
        worker_death(Iterator(Worker(1, None), Worker(2, -9)))
        == "DataLoader worker (pid 2) is killed by signal: Killed."
    )
    assert worker_death(Iterator(Worker(3, 7))) == "DataLoader worker (pid(s) 3) exited unexpectedly with exit code 7"


HOLDS_THE_DONE_EVENT = textwrap.dedent('''
    import gc
    import os
    import signal
    import sys
    import time
    from multiprocessing.synchronize import Event

    import torch
    from torch.utils.data import DataLoader, Dataset, get_worker_info

    from bootstrap.bench.loader import BatchStream

    MARK = sys.argv[1]


    class Locking(Dataset):
        """The worker's second batch takes the lock of the event torch's shutdown sets, and waits: killed
        there, as by the OOM killer while it checks that event between samples, it never releases it."""

        def __len__(self):
            return 64

        def __getitem__(self, index):
            if get_worker_info() is not None and index >= 4:
                for event in [o for o in gc.get_objects() if isinstance(o, Event)]:
                    event._cond.acquire()
                open(MARK, "w").close()
                time.sleep(60)
            return torch.zeros(2)


    stream = BatchStream(DataLoader(Locking(), batch_size=4, num_workers=1))
    worker = stream._iterator._workers[0]
    while not os.path.exists(MARK):
        time.sleep(0.01)
    try:
        os.kill(worker.pid, signal.SIGKILL)
        time.sleep(30)  # torch's SIGCHLD handler raises here
    except RuntimeError:
        print("worker died", flush=True)
    stream.close(kill=True)
    print("closed", flush=True)
''')


def test_a_worker_killed_holding_the_done_event_s_lock_does_not_hang_the_close(tmp_path):
    """torch's shutdown sets the workers' done event, whose lock a killed worker may never release: the
    stream's close goes on all the same (run apart, so that a hang fails the test rather than the suite)."""
    import subprocess

    from tests.fixtures import REPO

    (tmp_path / "holds.py").write_text(HOLDS_THE_DONE_EVENT)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "holds.py"), str(tmp_path / "locked")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
    )
    assert done.stdout.splitlines() == ["worker died", "closed"], done.stderr
