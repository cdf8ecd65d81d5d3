"""A small /dev/shm (Docker's 64 MB default, here a 1-2 MiB tmpfs): bench reports it, it does not crash.

Real DataLoader workers against a real tmpfs mounted over /dev/shm in a
private mount namespace (`unshare -m`, root only; skipped elsewhere).
"""

from __future__ import annotations

from bootstrap.bench.measure import SHM_FAILURE, worker_failure

# What torch raises in the main process when a worker could not put its batch in /dev/shm (torch 2.13).
SHM_ERROR = ("Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
             '  File "collate.py", line 273, in collate_tensor_fn\n'
             "RuntimeError: unable to allocate shared memory(shm) for file </torch_7210_4011903256_0>: "
             "No space left on device (28)\n")


def test_worker_deaths_are_told_apart():
    assert worker_failure(RuntimeError(SHM_ERROR)) == (
        f"{SHM_FAILURE}: RuntimeError: unable to allocate shared memory(shm) for file </torch_7210_4011903256_0>: "
        "No space left on device (28)")
    bus = RuntimeError("DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that dataloader's "
                       "workers are out of shared memory. Please try to raise your shared memory limit.")
    assert worker_failure(bus).startswith(SHM_FAILURE)
    assert worker_failure(RuntimeError("DataLoader worker (pid 4242) is killed by signal: Terminated. ")) == "terminated"
    assert worker_failure(RuntimeError("Caught ValueError in DataLoader worker process 1.\nValueError: bad crop")) \
        == "ValueError: bad crop"
