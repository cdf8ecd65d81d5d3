"""The DataLoader a measurement reads: built from a config, its batches forever, and why its workers died.

`dmesg` and `df /dev/shm` show what a worker that died of /dev/shm left behind.
"""

from __future__ import annotations

import contextlib
import gc
import re
import signal
import time
import warnings
from typing import Any, Iterator, List, Optional, Tuple

from bootstrap.bench.results import LoaderConfig


class BatchStream:
    """Batches from a DataLoader forever (epoch after epoch); the first batch's latency is kept.

    A stream (IterableDataset) read by several workers is checked first: each worker runs its own
    `__iter__`, so one that does not split itself by `get_worker_info()` gives every worker the same
    batches, which the rates would count as real ones. Its first worker's first batch and the second
    worker's are then the same, while the first worker's next batch differs (a stream of one constant
    batch, placeholder data, proves nothing): that loader counts as failed (`DUPLICATED`), as one whose
    workers died does.

    `samples`: what the batch last returned holds, when a batch sampler made it (the length of its list
    of indices, which `user.Checked` records as DataLoader draws it; batches come back in that
    order); None otherwise."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.samples: Optional[int] = None
        started = time.perf_counter()
        with _quiet_worker_count():
            try:
                self._iterator: Any = iter(loader)
            except OSError as exc:  # the loader's queues and locks live in /dev/shm too: a full one fails here
                if not getattr(loader, "num_workers", 0):
                    raise
                raise RuntimeError(f"DataLoader workers could not start: {exc}") from exc
        try:
            self._queued: List[Any] = [self._next_of_epoch()]
            self.first_batch_s = time.perf_counter() - started
            self._check_the_workers_split_the_stream()
        except BaseException:
            self.close(kill=True)
            raise

    def _check_the_workers_split_the_stream(self) -> None:
        from bootstrap.bench.batch import same_batch
        from bootstrap.bench.user import is_stream

        workers = getattr(self.loader, "num_workers", 0)
        if workers < 2 or not is_stream(self.loader.dataset):
            return
        # DataLoader takes the workers' batches in turn: batch `workers` is the first worker's second.
        for _ in range(workers):
            try:
                self._queued.append(self._pull())
            except StopIteration:
                return
        first, second, again = (self._queued[i][0] for i in (0, 1, workers))
        if same_batch(first, second) and not same_batch(first, again):
            raise RuntimeError(
                f"{DUPLICATED}: with {workers} workers, the first two workers' first batches are the "
                "same: it does not split itself by torch.utils.data.get_worker_info(), so every "
                "worker would yield every sample"
            )

    def __next__(self) -> Any:
        if self._queued:
            batch, self.samples = self._queued.pop(0)
            return batch
        try:
            batch, self.samples = self._pull()
        except StopIteration:
            with _quiet_worker_count():
                self._iterator = iter(self.loader)
            batch, self.samples = self._next_of_epoch()
        return batch

    def _pull(self) -> Tuple[Any, Optional[int]]:
        try:
            batch = next(self._iterator)
        except StopIteration:
            raise
        except Exception as exc:
            death = worker_death(self._iterator)
            if death is None:
                raise
            raise RuntimeError(death) from exc
        lengths = getattr(getattr(self.loader, "batch_sampler", None), "lengths", None)
        return batch, (lengths.popleft() if lengths else None)

    def _next_of_epoch(self) -> Tuple[Any, Optional[int]]:
        """The first batch of an epoch. A stream (IterableDataset) split across workers gives none when
        each worker's share is under one batch (drop_last): a result about that loader, like dead workers."""
        try:
            return self._pull()
        except StopIteration:
            workers = getattr(self.loader, "num_workers", 0)
            raise RuntimeError(
                f"{NO_BATCH}: with {workers} workers, each one's share of the stream is under one batch"
                if workers
                else NO_BATCH
            ) from None

    def close(self, kill: bool = False) -> None:
        """Drop the iterator (and, with persistent workers, the loader holding it): that shuts the workers
        down. `kill` (after a failure) terminates them first: a worker whose batch could not be sent stays
        stuck, and torch's shutdown then waits out its worker-status timeout for each at garbage collection,
        inside whatever is being timed by then."""
        iterator, self._iterator, self.loader = self._iterator, None, None
        if kill:
            for worker in getattr(iterator, "_workers", None) or ():  # torch's own list of processes
                if worker.is_alive():
                    worker.terminate()
        # Shut the workers down now, not when the iterator is collected: an interrupted or failed iterator
        # sits in a reference cycle with its traceback, and a worker that a signal killed (Slurm signals
        # every process of the job) makes torch's SIGCHLD handler raise inside that later shutdown, a
        # traceback after the report. Here it is expected: the workers are gone either way.
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            with contextlib.suppress(RuntimeError):
                shutdown()
        if kill:
            gc.collect()  # the failed iterator sits in a reference cycle with its traceback: collect it now


def make_loader(
    dataset: Any,
    batch_size: Optional[int],
    config: LoaderConfig,
    *,
    seed: int = 0,
    collate_fn: Any = None,
    sampling: Any = None,
) -> Any:
    """The DataLoader `config` describes; `batch_size` None: the dataset yields whole batches; `sampling`:
    the user's sampler or batch sampler (`user.loader_kwargs`)."""
    from torch.utils.data import DataLoader

    from bootstrap.bench.user import loader_kwargs

    with _quiet_worker_count():
        return DataLoader(
            dataset,
            collate_fn=collate_fn,
            **loader_kwargs(dataset, batch_size, seed, sampling),
            **config.dataloader_kwargs(),
        )


@contextlib.contextmanager
def _quiet_worker_count() -> Iterator[None]:
    """Silence DataLoader's 'will create N worker processes' warning: the tuner tries more workers than
    CPUs on purpose for I/O-latency work (sleeping workers do not compete for cores), and reports why.
    And its 'Got pickle error' one: the run reports the pickling error itself, in its one line."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        warnings.filterwarnings(
            "ignore", message="Got pickle error when attempting to start a worker", category=UserWarning
        )
        yield


# --------------------------------------------------------------------------- loaders that die

SHM_FAILURE = "out of /dev/shm"
NO_BATCH = "no batch in an epoch"
DUPLICATED = "the stream is read whole by each worker"
WORKER_EXITED = "a DataLoader worker exited"
# How a worker that ran out of /dev/shm surfaces: torch's allocation error re-raised in the main process,
# or the SIGBUS a write past a full tmpfs gets ("killed by signal: Bus error", PyTorch #5040).
_SHM_SIGNS = ("shared memory", "(shm)", "/dev/shm", "Bus error", "No space left on device")
_STOP_SIGNS = ("killed by signal: Terminated", "killed by signal: Interrupt")


def worker_death(iterator: Any) -> Optional[str]:
    """torch's own words for a worker of `iterator` that has died, from its real exit code; None while
    every worker lives. A worker found dead while the main process waited for a batch is told as 'exited
    unexpectedly' whatever ended it: one a signal killed (the OOM killer's SIGKILL) is a failed config,
    one that exited by itself is the dataset's doing, and only the exit code tells them apart."""
    for worker in getattr(iterator, "_workers", None) or ():  # torch's own list of processes
        code = worker.exitcode  # reaps a dead worker, as torch's own `is_alive` check does
        if code is None:
            continue
        if code < 0:
            try:
                name = signal.strsignal(-code) or f"signal {-code}"
            except ValueError:
                name = f"signal {-code}"
            return f"DataLoader worker (pid {worker.pid}) is killed by signal: {name}."
        return f"DataLoader worker (pid(s) {worker.pid}) exited unexpectedly with exit code {code}"
    return None


def sample_failure(exc: BaseException, workers: int) -> Optional[str]:
    """The dataset's own error in one line ('ValueError: corrupt JPEG') when `exc` came from loading
    samples: raised in the main process, or re-raised from a worker (torch quotes the worker's
    'Original Traceback'), or a worker that exited by itself (torch saw its exit code, not a signal).
    None when the workers died (out of /dev/shm, killed by a signal) or were stopped."""
    text = str(exc)
    if any(sign in text for sign in _SHM_SIGNS + _STOP_SIGNS):
        return None
    if workers and "exited unexpectedly" in text and "killed by signal" not in text:
        code = re.search(r"exit code (-?[0-9]+)", text)
        return (
            f"{WORKER_EXITED}{' with code ' + code.group(1) if code else ''} (a sys.exit or "
            f"os._exit in a sample or collate, or a crash the worker's stderr shows{_spawn_cause()})"
        )
    if workers and "Original Traceback" not in text:
        return None
    from bootstrap.bench.user import clip, describe_error

    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return clip(lines[-1]) if workers and lines else describe_error(exc)


def _spawn_cause() -> str:
    """What else kills a worker started by spawn or forkserver: it imports the main script, and one that
    runs the bench at module level fails there (`run.refuse_in_bootstrapping_child`)."""
    from bootstrap.compat.host import probe_start_method

    method = probe_start_method()[0]
    if method == "fork":
        return ""
    return f'; under {method}, a script that calls tune_loader outside `if __name__ == "__main__":`'


def worker_failure(exc: BaseException) -> str:
    """One line on why a DataLoader's workers died: 'out of /dev/shm: ...', 'terminated' (a signal
    stopped them: the job is being stopped), else the error's own last line (the worker's exception)."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else type(exc).__name__
    if any(sign in text for sign in _STOP_SIGNS):
        return "terminated"
    if any(sign in text for sign in _SHM_SIGNS):
        return f"{SHM_FAILURE}: {last}"
    if "killed by signal: Killed" in text:
        return f"{last} (SIGKILL: the OOM killer's, when memory runs out; `dmesg` names what it killed)"
    return last
