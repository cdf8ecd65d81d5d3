"""A small /dev/shm (Docker's 64 MB default, here a 1-2 MiB tmpfs): bench reports it, it does not crash.

Real DataLoader workers against a real tmpfs mounted over /dev/shm in a
private mount namespace (`unshare -m`, root only; skipped elsewhere). Which
phases a budgeted run reaches depends on the host's load; the tests of what
the scaling and tune phases do with loaders that die run every phase
(`run_every_phase`).
"""

from __future__ import annotations

import json
import textwrap

import pytest

from bootstrap.bench.config import BenchOptions, Thresholds
from bootstrap.bench.loader import SHM_FAILURE, worker_failure
from bootstrap.bench.outcome import shm_need_mib
from bootstrap.bench.state import new_state
from bootstrap.bench.verdicts import VerdictFacts, shm_check
from bootstrap.compat.facts import HostFacts
from bootstrap.fsutil import MIB
from bootstrap.report import Status
from tests.fixtures.mounts import in_private_mounts, needs_unshare

# What torch raises in the main process when a worker could not put its batch in /dev/shm (torch 2.13).
SHM_ERROR = (
    "Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
    '  File "collate.py", line 273, in collate_tensor_fn\n'
    "RuntimeError: unable to allocate shared memory(shm) for file </torch_7210_4011903256_0>: "
    "No space left on device (28)\n"
)


def test_worker_deaths_are_told_apart():
    assert worker_failure(RuntimeError(SHM_ERROR)) == (
        f"{SHM_FAILURE}: RuntimeError: unable to allocate shared memory(shm) for file </torch_7210_4011903256_0>: "
        "No space left on device (28)"
    )
    bus = RuntimeError(
        "DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that dataloader's "
        "workers are out of shared memory. Please try to raise your shared memory limit."
    )
    assert worker_failure(bus).startswith(SHM_FAILURE)
    assert (
        worker_failure(RuntimeError("DataLoader worker (pid 4242) is killed by signal: Terminated. ")) == "terminated"
    )
    assert (
        worker_failure(RuntimeError("Caught ValueError in DataLoader worker process 1.\nValueError: bad crop"))
        == "ValueError: bad crop"
    )


class _LoaderWithoutShm:
    """A DataLoader whose queues cannot be made: /dev/shm is full before any worker starts."""

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers

    def __iter__(self):
        raise OSError(28, "No space left on device")


def test_a_loader_whose_queues_find_no_shm_is_a_worker_failure_not_a_traceback():
    from bootstrap.bench.loader import BatchStream

    with pytest.raises(RuntimeError) as caught:
        BatchStream(_LoaderWithoutShm(num_workers=2))
    assert worker_failure(caught.value).startswith(f"{SHM_FAILURE}: DataLoader workers could not start")
    with pytest.raises(OSError):  # without workers nothing is in /dev/shm: a real error, not a config's failure
        BatchStream(_LoaderWithoutShm(num_workers=0))


def test_a_loader_that_died_of_shm_fails_the_shm_check_with_the_remedy():
    t = Thresholds()
    died = shm_check(
        VerdictFacts(
            device_type="cpu",
            shm_free_mib=2.0,
            shm_need_mib=37.0,
            shm_failure=f"{SHM_FAILURE}: No space left on device",
        ),
        t,
    )
    assert died.status is Status.FAIL and "a loader died" in died.observed
    assert "--shm-size=128m" in died.remedy and "mount -o remount,size=128m /dev/shm" in died.remedy
    assert "--max-workers" in died.remedy
    unknown = shm_check(VerdictFacts(device_type="cpu", shm_failure=f"{SHM_FAILURE}: x"), t)
    assert unknown.status is Status.FAIL  # /dev/shm unreadable, yet a loader died of it


def test_a_dev_shm_too_small_for_one_worker_is_a_need_before_anything_was_measured():
    """On a busy host the budget can end before the loader and ceiling phases predict the workers; a
    /dev/shm that cannot hold one worker's batches is still a need the run reports (before: 0 MiB, ok)."""
    state = new_state(BenchOptions(device="cpu", budget_s=5.0))
    state.host, state.cpus, state.batch_bytes = HostFacts(shm_free_mib=2, memory_available_mib=4096), 2, 9 * MIB
    assert state.prediction is None and state.best is None
    assert shm_need_mib(state) == 1 * 2 * 9  # one worker, prefetch 2, a 9 MiB batch
    state.host = HostFacts(shm_free_mib=1024, memory_available_mib=4096)
    assert shm_need_mib(state) == 0.0  # room for workers: the need is the winner's, and none was chosen
    state.host = HostFacts(shm_free_mib=2, memory_available_mib=4096)
    state.options = BenchOptions(device="cpu", budget_s=5.0, max_workers=0)
    assert shm_need_mib(state) == 0.0  # --max-workers 0: the run never wanted a worker


@pytest.mark.slow
@needs_unshare
def test_a_tiny_dev_shm_is_a_failed_check_not_a_traceback():
    """A /dev/shm too small for the workers is a failed bench.shm check in a full report, not a RuntimeError."""
    done = in_private_mounts(
        "mount -t tmpfs -o size=2m tmpfs /dev/shm\n"
        "$PY -m bootstrap bench --budget 8 --quiet --no-png --json --out /tmp "
        "--device cpu --samples 16 --image-size 256 --crop-size 224 --batch-size 64 --model tiny"
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    shm = next(c for c in report["checks"] if c["id"] == "bench.shm")
    assert shm["status"] == "fail" and "2.00 MiB free" in shm["observed"] and "--shm-size=" in shm["remedy"]
    extra = report["extra"]
    assert all(m["config"]["num_workers"] == 0 for m in extra["measurements"] if m["config"])
    tune = next(p for p in extra["phases"] if p["name"] == "tune")
    if tune["status"] == "done":  # /dev/shm capped the search: no worker config ran
        assert extra["best"]["num_workers"] == 0 and extra["tuning"]["cap"] == 0
        assert extra["tuning"]["cap_reason"].startswith("/dev/shm")
    else:  # a busy host: set-up took the budget before the tune; nothing was chosen
        assert extra["best"] is None and tune["note"].startswith("skipped")


# /dev/shm unreadable, so nothing caps the workers: they run and die of it.
DYING_LOADERS = textwrap.dedent("""
    import dataclasses, json, sys
    import bootstrap.compat.host as probe
    real = probe.collect_host_facts
    probe.collect_host_facts = lambda *a, **k: dataclasses.replace(real(*a, **k), shm_free_mib=None,
                                                                   shm_total_mib=None)
    from bootstrap.bench import BenchOptions, WorkloadSpec, run_bench
    from bootstrap.bench.report import envelope_json
    from tests.fixtures.bench import run_every_phase
    spec = WorkloadSpec(samples=16, image_size=64, crop_size=64, batch_size=64, model="tiny")
    options = BenchOptions(workload=spec, budget_s=8.0, device="cpu")
    print(envelope_json(run_every_phase(options) if sys.argv[1] == "every-phase" else run_bench(options)))
""")


def run_with_dying_loaders(how: str) -> dict:
    done = in_private_mounts(f"mount -t tmpfs -o size=1m tmpfs /dev/shm\n$PY - {how} <<'EOF'\n{DYING_LOADERS}EOF")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def died_of_shm(extra: dict) -> list:
    return [note for note in extra["notes"] if "the loader's workers died (out of /dev/shm" in note]


@pytest.mark.slow
@needs_unshare
def test_loaders_that_die_of_shm_are_recorded_as_failed_and_the_run_goes_on():
    """Each config whose workers died is a failed result and the run goes on; the dead loader's workers are
    killed, not waited for."""
    report = run_with_dying_loaders("every-phase")
    extra = report["extra"]
    died = died_of_shm(extra)
    assert died and any(note.startswith("scaling ") for note in died) and any(note.startswith("tune ") for note in died)
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["bench.shm"]["status"] == "fail" and "a loader died" in checks["bench.shm"]["observed"]
    assert "failed" in checks["bench.tuned"]["observed"]
    assert extra["best"]["num_workers"] == 0 and len([m for m in extra["measurements"] if m["phase"] == "tuned"]) == 3
    # Killed, not waited for: torch's shutdown waits MP_STATUS_CHECK_INTERVAL for a stuck worker, and every
    # loader the scaling phase starts dies, so it must end before one such wait per loader.
    from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL

    scaling = next(phase for phase in extra["phases"] if phase["name"] == "scaling")
    dead = len([note for note in died if note.startswith("scaling ")])
    assert scaling["note"] == "no worker count measured" and scaling["seconds"] < dead * MP_STATUS_CHECK_INTERVAL


@pytest.mark.slow  # what a dying loader does is the test above; the budget holding is test_bench_budget's too
@needs_unshare
def test_a_budgeted_run_whose_loaders_die_ends_within_its_budget():
    """A budgeted run reaches as many of those deaths as its budget pays for (on a busy host, maybe none);
    each is reported the same way, and the run ends within its budget."""
    report = run_with_dying_loaders("budgeted")
    extra = report["extra"]
    assert extra["seconds"] <= max(8.0, extra["phases"][0]["started_s"]) + 1.0
    died = died_of_shm(extra)
    assert all(note.split()[0] in ("scaling", "tune", "knob", "tuned") for note in died)
    checks = {c["id"]: c for c in report["checks"]}
    assert ("a loader died" in checks["bench.shm"]["observed"]) == bool(died)
