"""The DataLoader a measurement reads: built from a config, read as batches epoch after epoch, and why its
workers died (docs/benchmark.md, "Your own dataset"; `dmesg` and `df /dev/shm` show what they left)."""

from __future__ import annotations

import contextlib
import gc
import re
import signal
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from bootstrap.bench.results import LoaderConfig

if TYPE_CHECKING:
    from bootstrap.bench.user import Sampling

SHM_FAILURE = "out of /dev/shm"
NO_BATCH = "no batch in an epoch"
DUPLICATED = "the stream is read whole by each worker"
JOIN_S = 2.0  # for a terminated worker to be gone
WORKER_EXITED = "a DataLoader worker exited"
_UNSPLIT = "it does not split itself by torch.utils.data.get_worker_info(), so every worker would yield every sample"
# How a worker that ran out of /dev/shm surfaces: torch's allocation error re-raised in the main process,
# or the SIGBUS a write past a full tmpfs gets ("killed by signal: Bus error", PyTorch #5040).
_SHM_SIGNS = ("shared memory", "(shm)", "/dev/shm", "Bus error", "No space left on device")
_STOP_SIGNS = ("killed by signal: Terminated", "killed by signal: Interrupt")
# DataLoader's warnings of what the run means to do or reports itself: more workers than CPUs (the tuner
# tries them for I/O-bound work), and a worker that cannot be pickled.
_QUIET_WARNINGS = ("This DataLoader will create", "Got pickle error when attempting to start a worker")


class BatchStream:
    """Batches from a DataLoader forever, epoch after epoch; `first_batch_s` is the first one's latency.
    `samples`: the length of the index list a batch sampler made the last batch from (None without one)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.workers: int = getattr(loader, "num_workers", 0)
        self.samples: Optional[int] = None
        started = time.perf_counter()
        with _quiet_warnings():
            try:
                self._iterator: Any = iter(loader)
            except OSError as exc:  # the loader's queues and locks live in /dev/shm too: a full one fails here
                if not self.workers:
                    raise
                raise RuntimeError(f"DataLoader workers could not start: {exc}") from exc
        try:
            self._queued: list[Any] = [self._next_of_epoch()]
            self.first_batch_s = time.perf_counter() - started
            self._check_the_workers_split_the_stream()
        except BaseException:
            self.close(kill=True)
            raise

    def _check_the_workers_split_the_stream(self) -> None:
        """A stream each worker reads whole gives the first two workers the same first batch, while the first
        worker's next one differs (unlike a stream of one constant batch)."""
        from bootstrap.bench.batch import same_batch
        from bootstrap.bench.user import is_stream

        if self.workers < 2 or not is_stream(self.loader.dataset):
            return
        # DataLoader takes the workers' batches in turn: batch `workers` is the first worker's second.
        for _ in range(self.workers):
            try:
                self._queued.append(self._pull())
            except StopIteration:
                return
        batches = [batch for batch, _ in self._queued]
        if same_batch(batches[0], batches[1]) and not same_batch(batches[0], batches[self.workers]):
            same = f"with {self.workers} workers, the first two workers' first batches are the same"
            raise RuntimeError(f"{DUPLICATED}: {same}: {_UNSPLIT}")

    def __next__(self) -> Any:
        if self._queued:
            batch, self.samples = self._queued.pop(0)
            return batch
        try:
            batch, self.samples = self._pull()
        except StopIteration:
            with _quiet_warnings():
                self._iterator = iter(self.loader)
            batch, self.samples = self._next_of_epoch()
        return batch

    def _pull(self) -> tuple[Any, Optional[int]]:
        """The next batch, and the length of the list of indices a batch sampler made it from."""
        try:
            batch = next(self._iterator)
        except StopIteration:
            raise
        except Exception as exc:
            death = worker_death(self._iterator)
            if death is None:
                raise
            raise RuntimeError(death) from exc
        batch_sampler = getattr(self.loader, "batch_sampler", None)
        lengths = getattr(batch_sampler, "lengths", None)  # `user.Checked`'s, in the order DataLoader drew them
        return batch, (lengths.popleft() if lengths else None)

    def _next_of_epoch(self) -> tuple[Any, Optional[int]]:
        """The first batch of an epoch: none (each worker's share of a stream under one batch) fails the loader."""
        try:
            return self._pull()
        except StopIteration:
            if not self.workers:
                raise RuntimeError(NO_BATCH) from None
            share = f"with {self.workers} workers, each one's share of the stream is under one batch"
            raise RuntimeError(f"{NO_BATCH}: {share}") from None

    def close(self, kill: bool = False) -> None:
        """Shut the workers down now; `kill` (after a failure) terminates them first, as one whose batch could
        not be sent stays stuck and torch's shutdown would wait out a timeout for it."""
        iterator = self._iterator
        self._iterator = None
        self.loader = None
        workers = getattr(iterator, "_workers", None) or ()  # torch's own list of processes
        if kill or any(not worker.is_alive() for worker in workers):  # after a failure, or a worker died
            for worker in workers:
                if worker.is_alive():
                    worker.terminate()
            _fresh_done_event(iterator, workers)
        # Now, not at garbage collection: a failed iterator sits in a reference cycle with its traceback, and a
        # worker that a signal killed (Slurm signals the whole job) makes torch's SIGCHLD handler raise there.
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            with contextlib.suppress(RuntimeError):
                shutdown()
        if kill:
            gc.collect()  # that reference cycle


def _fresh_done_event(iterator: Any, workers: Sequence[Any]) -> None:
    """Each worker reads the iterator's done event between samples, under the event's lock; one a signal
    killed there never released it, and torch's shutdown, which sets that event, would wait for it forever.
    Once every worker is gone, a new event takes the old one's place: none is left to be told."""
    import multiprocessing

    for worker in workers:
        worker.join(timeout=JOIN_S)
    if not any(worker.is_alive() for worker in workers) and hasattr(iterator, "_workers_done_event"):
        iterator._workers_done_event = multiprocessing.Event()


def make_loader(
    dataset: Any,
    batch_size: Optional[int],
    config: LoaderConfig,
    *,
    seed: int = 0,
    collate_fn: Optional[Callable[..., Any]] = None,
    sampling: Optional[Sampling] = None,
) -> Any:
    """The DataLoader `config` describes (`batch_size` None: the dataset yields whole batches)."""
    from torch.utils.data import DataLoader

    from bootstrap.bench.user import loader_kwargs

    batching = loader_kwargs(dataset, batch_size, seed, sampling)
    with _quiet_warnings():
        return DataLoader(dataset, collate_fn=collate_fn, **batching, **config.dataloader_kwargs())


@contextlib.contextmanager
def _quiet_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        for message in _QUIET_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        yield


def worker_death(iterator: Any) -> Optional[str]:
    """torch's own words for a worker of `iterator` that has died, from its real exit code (torch calls any
    worker it finds dead 'exited unexpectedly', killed or not); None while every worker lives."""
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
    """The dataset's own error in one line when `exc` came from loading samples (here, in a worker, or a worker
    that exited by itself); None when the workers died (out of /dev/shm, killed by a signal) or were stopped."""
    text = str(exc)
    if any(sign in text for sign in _SHM_SIGNS + _STOP_SIGNS):
        return None
    if workers and "exited unexpectedly" in text and "killed by signal" not in text:
        code = re.search(r"exit code (-?[0-9]+)", text)
        exited = f"{WORKER_EXITED} with code {code.group(1)}" if code else WORKER_EXITED
        causes = "a sys.exit or os._exit in a sample or collate, or a crash the worker's stderr shows"
        return f"{exited} ({causes}{_spawn_cause()})"
    if workers and "Original Traceback" not in text:  # torch quotes a worker's error with its traceback
        return None
    from bootstrap.bench.user import clip, describe_error

    last = _last_line(text)
    return clip(last) if workers and last else describe_error(exc)


def _spawn_cause() -> str:
    """A worker started by spawn or forkserver imports the main script: one that runs the bench at module
    level fails there (`run.refuse_in_bootstrapping_child`)."""
    from bootstrap.compat.host import probe_start_method

    method = probe_start_method()[0]
    if method == "fork":
        return ""
    return f'; under {method}, a script that calls tune_loader outside `if __name__ == "__main__":`'


def worker_failure(exc: BaseException) -> str:
    """One line on why a DataLoader's workers died: 'out of /dev/shm: ...', 'terminated' (the job is being
    stopped), else the error's own last line."""
    text = str(exc)
    last = _last_line(text) or type(exc).__name__
    if any(sign in text for sign in _STOP_SIGNS):
        return "terminated"
    if any(sign in text for sign in _SHM_SIGNS):
        return f"{SHM_FAILURE}: {last}"
    if "killed by signal: Killed" in text:
        return f"{last} (SIGKILL: the OOM killer's, when memory runs out; `dmesg` names what it killed)"
    return last


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
