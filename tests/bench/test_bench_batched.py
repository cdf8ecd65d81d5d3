"""A dataset that yields whole batches itself (a vectorised decode, WebDataset's `.batched(n)`): read as
`DataLoader(batch_size=None)` reads it, each batch counted as the length of its first, through
`bench --dataset ... --batched` and `tune_loader(dataset, batch_size=None)`."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.bench.test_bench_dataset import clean_imports  # noqa: F401 (a fixture)
from tests.fixtures.bench import run_every_phase

ROWS = 12  # samples in each of the dataset's own batches

BATCHES = textwrap.dedent(f'''
    import torch
    from torch.utils.data import Dataset, IterableDataset, get_worker_info

    ROWS = {ROWS}

    def batch(index, rows=ROWS):
        images = torch.full((rows, 3, 16, 16), index % 256, dtype=torch.uint8)
        return images, torch.arange(rows) % 10

    class Batches(Dataset):
        """`n` batches of ROWS images, each made at once."""

        def __init__(self, n=24):
            self.n = n

        def __len__(self):
            return self.n

        def __getitem__(self, index):
            return batch(index)

    class Shards(IterableDataset):
        """A stream of batches, each worker reading every num_workers-th one."""

        def __init__(self, n=24):
            self.n = n

        def __iter__(self):
            info = get_worker_info()
            first, step = (0, 1) if info is None else (info.id, info.num_workers)
            for index in range(first, self.n, step):
                yield batch(index)

    class Named(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, index):
            return {{"pixels": batch(index)[0], "label": batch(index)[1]}}

    class Scalars(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, index):
            return torch.tensor(float(index)), index

    def make():
        return Batches()

    def stream():
        return Shards()

    def empty_stream():
        return Shards(n=0)

    def scalars():
        return Scalars()

    class MetaFirst(Batches):
        def __getitem__(self, index):
            return {{"meta": torch.tensor([index, ROWS]), "images": batch(index)[0], "labels": batch(index)[1]}}

    def meta_first():
        return MetaFirst()

    class WithEpoch(Batches):
        """A batch with a plain number and a scalar tensor beside its rows."""

        def __getitem__(self, index):
            images, labels = batch(index)
            return {{"images": images, "labels": labels, "epoch": 3, "weight": torch.tensor(0.5)}}

    def with_epoch():
        return WithEpoch()

    def per_sample(samples):
        if not isinstance(samples, list):
            raise TypeError("expected a list of samples, got " + type(samples).__name__)
        return torch.stack([image for image, _ in samples]), torch.tensor([label for _, label in samples])
''')


def batches_module(root: Path, name: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{name}.py").write_text(BATCHES)
    return root


def bench(argv, capsys) -> tuple:
    """(exit code, stdout, stderr) of `bench ARGV` on this CPU, in this process."""
    from bootstrap.cli import main

    code = main(["bench", "--device", "cpu", "--quiet", "--no-png", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("batch", "own"),
    [
        (lambda t: (t.zeros(16, 3, 8, 8), t.zeros(16)), 16),  # images, labels
        (lambda t: {"ids": t.zeros(16, 40), "mask": t.zeros(16, 40), "labels": t.zeros(16)}, 16),
        (lambda t: {"images": t.zeros(16, 3, 8, 8), "weight": t.tensor(0.5)}, 16),  # a scalar beside
        (
            lambda t: (tuple(t.zeros(3, 9, 9) for _ in range(16)), tuple({"boxes": t.zeros(2, 4)} for _ in range(16))),
            None,
        ),  # torchvision detection
        (lambda t: (t.zeros(40, 16), t.zeros(16)), None),  # pad_sequence's (T, B)
        (lambda t: t.zeros(12, 16), 12),  # one tensor: its rows
        (lambda t: ("text", 3), None),  # no tensor
    ],
    ids=["images", "tokens", "scalar-beside", "detection", "time-major", "one-tensor", "none"],
)
def test_a_batch_it_did_not_size_counts_the_first_dimension_its_tensors_share(batch, own) -> None:
    """The dataset's own batches, or a batch sampler's: the first dimension the tensors share (scalar tensors
    left out), else the first batch's count. (A batch the DataLoader sized counts the batch size.)"""
    import torch

    from bootstrap.bench.batch import own_batch_counter

    assert own_batch_counter(7)(batch(torch)) == (7 if own is None else own)


def test_a_batch_of_the_users_own_class_is_looked_into() -> None:
    """PyTorch's custom-pinning example: a batch class holding the tensors as attributes; its samples and
    bytes (which size /dev/shm) are those tensors', and a batch that refers to itself is walked once."""
    import torch

    from bootstrap.bench.batch import own_batch_counter, tensors

    class SimpleCustomBatch:
        def __init__(self, data):
            transposed = list(zip(*data))
            self.inp = torch.stack(transposed[0], 0)
            self.tgt = torch.stack(transposed[1], 0)
            self.me = self

        def pin_memory(self):
            return self

    batch = SimpleCustomBatch([(torch.zeros(5), torch.zeros(1))] * 6)
    assert [tuple(t.shape) for t in tensors(batch)] == [(6, 5), (6, 1)]
    assert own_batch_counter(1)(batch) == 6


def test_bench_reads_a_dataset_of_batches_and_says_so(tmp_path, capsys, clean_imports):  # noqa: F811
    """`--batched`: the report's workload and a note say the dataset batches itself, ROWS samples a batch."""
    root = batches_module(tmp_path, "user_batches")
    code, stdout, err = bench(
        [
            "--path",
            str(root),
            "--dataset",
            "user_batches:make",
            "--batched",
            "--budget",
            "2",
            "--json",
            "--out",
            str(tmp_path / "out"),
        ],
        capsys,
    )
    assert code in (0, 1), err
    extra = json.loads(stdout)["extra"]
    assert extra["workload"]["batched"] is True and extra["workload"]["batch_size"] == ROWS
    assert any(
        f"each counted by the first dimension its tensors share ({ROWS} in the first)" in note
        for note in extra["notes"]
    )


def test_every_window_counts_each_batch_as_its_rows(tmp_path, clean_imports):  # noqa: F811
    from bootstrap.bench.config import BenchOptions, WorkloadSpec
    from bootstrap.bench.user import UserWorkload

    root = batches_module(tmp_path, "user_batches_counted")
    user = UserWorkload("user_batches_counted:make", paths=(str(root),))
    result = run_every_phase(BenchOptions(workload=WorkloadSpec(batched=True), device="cpu", user=user), last="naive")
    measured = [m for m in result.measurements if m.steps]
    assert {m.phase for m in measured} == {"loader", "ceiling", "naive"}
    assert all(m.samples == m.steps * ROWS for m in measured)


def test_the_snippet_loads_the_datasets_own_batches(tmp_path, clean_imports):  # noqa: F811
    """batch_size=None and no drop_last: the pasted loader yields the dataset's batches as they are."""
    from torch.utils.data import DataLoader

    from bootstrap.bench.config import WorkloadSpec
    from bootstrap.bench.report import dataloader_snippet
    from bootstrap.bench.results import LoaderConfig

    sys.path.insert(0, str(batches_module(tmp_path, "user_batches_snippet")))
    import user_batches_snippet

    snippet = dataloader_snippet(
        LoaderConfig(num_workers=2, prefetch_factor=2),
        WorkloadSpec(batched=True, batch_size=ROWS),
        "cpu",
        user={"dataset": "user_batches_snippet:make"},
    )
    assert "batch_size=None," in snippet and "drop_last" not in snippet
    namespace = {"dataset": user_batches_snippet.make()}
    exec(compile(snippet, "bench-snippet", "exec"), namespace)
    loader = namespace["loader"]
    assert isinstance(loader, DataLoader) and loader.batch_size is None and loader.num_workers == 2
    assert {tuple(images.shape) for images, _ in loader} == {(ROWS, 3, 16, 16)}


@pytest.mark.slow
def test_tune_loader_with_no_batch_size_tunes_a_stream_of_batches(tmp_path, clean_imports):  # noqa: F811
    from torch.utils.data import DataLoader

    from bootstrap.bench import tune_loader

    sys.path.insert(0, str(batches_module(tmp_path, "user_batches_api")))
    import user_batches_api

    kwargs, report = tune_loader(user_batches_api.stream(), batch_size=None, budget=6, device="cpu")
    assert report.workload["batch_size"] == ROWS and report.workload["batched"] is True
    seen = [images[0, 0, 0, 0].item() for images, _ in DataLoader(user_batches_api.stream(), batch_size=None, **kwargs)]
    assert sorted(seen) == list(range(24))  # every batch once, whole: the kwargs work as DataLoader reads it


def test_a_batch_of_dicts_is_counted_by_its_first_tensor(clean_imports, tmp_path) -> None:  # noqa: F811
    from bootstrap.bench.user import UserWorkload, resolve

    sys.path.insert(0, str(batches_module(tmp_path, "user_batches_named")))
    import user_batches_named

    parts = resolve(UserWorkload(dataset=user_batches_named.Named()), None)
    assert parts.samples == ROWS and tuple(parts.first_batch["pixels"].shape) == (ROWS, 3, 16, 16)


class _NoneBatches:
    def __len__(self):
        return 2

    def __getitem__(self, index):
        return None


def test_a_dataset_that_yields_none_as_a_batch_is_told_so_not_that_it_ended() -> None:
    """Read whole, None passes default_convert as it is: a batch of None, not the end of the batches."""
    from bootstrap.bench.user import UserWorkload, resolve
    from bootstrap.errors import InputError

    with pytest.raises(InputError, match=r"^dataset _NoneBatches: yielded None as a whole batch "):
        resolve(UserWorkload(dataset=_NoneBatches()), None)


@pytest.mark.parametrize(
    ("argv", "where", "says"),
    [
        (["--batched"], "--batched:", "only applies to your own dataset"),
        (["--dataset", "user_batches_bad:make", "--batched", "--batch-size", "8"], "--batch-size:", "drop one of them"),
        (
            ["--dataset", "user_batches_bad:scalars", "--batched"],
            "--dataset user_batches_bad:scalars:",
            "hold a plain number beside one tensor, as one sample does",
        ),
        (
            ["--dataset", "user_batches_bad:meta_first", "--batched"],
            "--dataset user_batches_bad:meta_first:",
            "tensors' first dimensions differ (2, 12, 12)",
        ),
        (
            ["--dataset", "user_batches_bad:empty_stream", "--batched"],
            "--dataset user_batches_bad:empty_stream:",
            "ended before its first batch",
        ),
        (
            ["--dataset", "user_batches_bad:make", "--batched", "--collate", "user_batches_bad:per_sample"],
            "--dataset user_batches_bad:make:",
            "the collate function is given one whole batch the dataset made",
        ),
    ],
    ids=["no-dataset", "and-batch-size", "scalar-batches", "meta-first", "empty-stream", "per-sample-collate"],
)
def test_what_cannot_be_read_as_batches_is_one_line(
    tmp_path,
    capsys,
    clean_imports,  # noqa: F811
    argv,
    where,
    says,
) -> None:
    root = batches_module(tmp_path, "user_batches_bad")
    out = tmp_path / "out"
    code, stdout, err = bench(
        ["--path", str(root), *argv, "--budget", "4", "--out", str(out)]
        if "--dataset" in argv
        else [*argv, "--out", str(out)],
        capsys,
    )
    assert code == 2 and stdout == "" and not out.exists()
    assert err.startswith(f"error: {where}") and says in err and err.count("\n") == 1, err


def test_a_config_file_may_say_batched_but_not_with_a_batch_size(tmp_path, capsys, clean_imports) -> None:  # noqa: F811
    root = batches_module(tmp_path, "user_batches_config")
    config = tmp_path / "bench.yml"
    config.write_text("options:\n  batched: true\n  batch_size: 8\n")
    code, _, err = bench(
        [
            "--path",
            str(root),
            "--dataset",
            "user_batches_config:make",
            "--config",
            str(config),
            "--out",
            str(tmp_path / "out"),
        ],
        capsys,
    )
    assert code == 2 and err.startswith(f"error: {config}: options.batch_size:"), err
    config.write_text("options:\n  batched: yes please\n")
    code, _, err = bench(
        [
            "--path",
            str(root),
            "--dataset",
            "user_batches_config:make",
            "--config",
            str(config),
            "--out",
            str(tmp_path / "out"),
        ],
        capsys,
    )
    assert code == 2 and f"{config}: options.batched: expected true or false" in err, err


def test_a_batch_with_a_number_and_a_scalar_beside_its_rows_is_a_batch(tmp_path, clean_imports):  # noqa: F811
    from bootstrap.bench.user import UserWorkload, resolve

    root = batches_module(tmp_path, "user_batches_epoch")
    parts = resolve(UserWorkload("user_batches_epoch:with_epoch", paths=(str(root),)), None)
    assert parts.samples == ROWS
