"""A team's IterableDataset (WebDataset shards, a database cursor): tuned in its own order, a worker count
whose shares of the stream hold no batch counted as a failed config, the report's snippet without shuffle."""

from __future__ import annotations

import pickle
import sys
import textwrap
from pathlib import Path

import pytest

from tests.bench.test_bench_dataset import BATCH, bench_here, clean_imports  # noqa: F401 (a fixture)

STREAMS = textwrap.dedent('''
    import torch
    from torch.utils.data import IterableDataset, get_worker_info

    class Shards(IterableDataset):
        """`n` samples, each worker reading every num_workers-th one, as a sharded stream does."""

        def __init__(self, n=256):
            self.n = n

        def __iter__(self):
            info = get_worker_info()
            first, step = (0, 1) if info is None else (info.id, info.num_workers)
            for index in range(first, self.n, step):
                yield torch.full((3, 16, 16), index % 256, dtype=torch.uint8), index % 10

    class Whole(Shards):
        """The same `n` samples in every worker: no get_worker_info()."""

        def __iter__(self):
            for index in range(self.n):
                yield torch.full((3, 16, 16), index % 256, dtype=torch.uint8), index % 10

    def make():
        return Shards()

    def tiny():
        return Shards(n=4 * 8)

    def whole():
        return Whole()

    class Placeholder(Shards):
        """Split by worker, every sample the same: nothing tells it from a stream read whole."""

        def __iter__(self):
            info = get_worker_info()
            first, step = (0, 1) if info is None else (info.id, info.num_workers)
            for _ in range(first, self.n, step):
                yield torch.zeros((3, 16, 16), dtype=torch.uint8), 0

    def placeholder():
        return Placeholder()
''')


def streams(root: Path, module: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(STREAMS)
    return root


def test_a_stream_named_by_reference_travels_to_spawned_workers_as_its_name(tmp_path, clean_imports):  # noqa: F811
    from bootstrap.bench.named import NamedStream
    from bootstrap.bench.user import import_ref

    root = streams(tmp_path, "user_streams_pickled")
    built = import_ref("user_streams_pickled:make", "--dataset", [str(root)])()
    built.unpicklable = lambda: None  # a closure: pickling the object itself would fail
    copy = pickle.loads(pickle.dumps(NamedStream("user_streams_pickled:make", [str(root)], built)))
    assert copy.dataset is None and len(list(copy)) == 256


def test_a_loader_whose_workers_each_hold_less_than_a_batch_is_a_failed_config(tmp_path, clean_imports):  # noqa: F811
    from bootstrap.bench.loader import NO_BATCH, BatchStream, make_loader
    from bootstrap.bench.results import LoaderConfig

    sys.path.insert(0, str(streams(tmp_path, "user_streams_tiny")))
    import user_streams_tiny

    assert BatchStream(make_loader(user_streams_tiny.tiny(), BATCH, LoaderConfig(num_workers=0))).first_batch_s > 0
    with pytest.raises(RuntimeError, match=f"^{NO_BATCH}: with 8 workers, each one's share"):
        BatchStream(make_loader(user_streams_tiny.tiny(), BATCH, LoaderConfig(num_workers=8)))


@pytest.mark.parametrize("workers", [2, 3])
def test_a_stream_every_worker_reads_whole_is_a_failed_config(tmp_path, clean_imports, workers):  # noqa: F811
    """Its first two batches (the first and second worker's) are the same: the rates would count every sample
    once per worker. A stream that splits itself passes, every sample once."""
    from bootstrap.bench.loader import DUPLICATED, BatchStream, make_loader
    from bootstrap.bench.results import LoaderConfig

    sys.path.insert(0, str(streams(tmp_path, "user_streams_whole")))
    import user_streams_whole

    with pytest.raises(RuntimeError, match=f"^{DUPLICATED}: with {workers} workers, the first two workers' first"):
        BatchStream(make_loader(user_streams_whole.whole(), BATCH, LoaderConfig(num_workers=workers)))
    stream = BatchStream(make_loader(user_streams_whole.make(), BATCH, LoaderConfig(num_workers=workers)))
    batches = [set(images[:, 0, 0, 0].tolist()) for images, _ in (next(stream) for _ in range(2 * workers))]
    stream.close()
    assert sum(map(len, batches)) == len(set().union(*batches)) == 2 * workers * BATCH  # no sample twice
    assert BatchStream(make_loader(user_streams_whole.whole(), BATCH, LoaderConfig(num_workers=1))).first_batch_s > 0
    placeholder = BatchStream(make_loader(user_streams_whole.placeholder(), BATCH, LoaderConfig(num_workers=workers)))
    assert [int(next(placeholder)[0].sum()) for _ in range(workers + 2)] == [0] * (workers + 2)
    placeholder.close()


@pytest.mark.slow
def test_bench_tunes_a_stream_and_its_snippet_does_not_shuffle(tmp_path, capsys, clean_imports):  # noqa: F811
    root = streams(tmp_path, "user_streams")
    _, report = bench_here(
        ["--path", str(root), "--dataset", "user_streams:make", "--budget", "4", "--out", str(tmp_path / "out")], capsys
    )
    assert report["workload"]["user"] == {"dataset": "user_streams:make", "paths": [str(root)], "stream": True}
    assert any("is a stream (IterableDataset)" in note and "get_worker_info()" in note for note in report["notes"])


def test_the_snippet_for_a_stream_does_not_shuffle() -> None:
    from bootstrap.bench.config import WorkloadSpec
    from bootstrap.bench.report import dataloader_snippet
    from bootstrap.bench.results import LoaderConfig

    config, spec = LoaderConfig(num_workers=2), WorkloadSpec()
    assert "(shuffle=True, drop_last=True):" in dataloader_snippet(config, spec, "cpu", user={"dataset": "m:f"})
    snippet = dataloader_snippet(config, spec, "cpu", user={"dataset": "m:f", "stream": True})
    assert "shuffle" not in snippet and "num_workers=2" in snippet


@pytest.mark.slow
def test_tune_loader_measures_workers_on_a_stream(tmp_path, clean_imports):  # noqa: F811
    from torch.utils.data import DataLoader

    from bootstrap.bench import tune_loader

    sys.path.insert(0, str(streams(tmp_path, "user_streams_api")))
    import user_streams_api

    kwargs, report = tune_loader(user_streams_api.make(), batch_size=BATCH, budget=12, device="cpu")
    assert any(m.config is not None and m.config.num_workers for m in report.measurements)
    labels = [
        label
        for _, batch in DataLoader(user_streams_api.make(), batch_size=BATCH, **kwargs)
        for label in batch.tolist()
    ]
    assert len(labels) == 256  # every sample once: the kwargs work on the stream as DataLoader reads it


def test_a_slow_to_open_stream_is_priced_by_its_batches_not_its_opening() -> None:
    """A stream that takes a while to open (shards on a network mount) pays that once a run: the bench prices
    a batch from the second one, or it would think every sample slow and leave every phase out."""
    import time

    import torch
    from torch.utils.data import IterableDataset

    from bootstrap.bench.user import UserWorkload, resolve

    class SlowToOpen(IterableDataset):
        def __iter__(self):
            time.sleep(1.0)
            for index in range(4 * BATCH):
                yield torch.zeros(3, 8, 8), index % 10

    parts = resolve(UserWorkload(dataset=SlowToOpen()), BATCH)
    assert parts.batch_s < 0.5 and tuple(parts.first_batch[0].shape) == (BATCH, 3, 8, 8)


@pytest.mark.parametrize("given", [(i for i in range(3)), lambda: iter(())], ids=["generator", "function"])
def test_a_generator_is_told_to_become_an_iterable_dataset(given) -> None:
    from bootstrap.bench.user import check_dataset
    from bootstrap.errors import InputError

    with pytest.raises(InputError) as refused:
        check_dataset(given, "dataset", BATCH, script=True)
    assert str(refused.value).startswith(f"dataset: is {type(given).__name__}, an object without __len__")
    assert "wrap the stream in a torch.utils.data.IterableDataset" in str(refused.value)
