"""The team's own sampler or batch sampler: `--sampler` / `--batch-sampler MODULE:FN` (FN(dataset)) and
`tune_loader(sampler=..., batch_sampler=...)` read the dataset as training does, and the snippet passes
them on; a stream takes neither, and a batch sampler takes the place of the batch size."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.bench.test_bench_dataset import clean_imports  # noqa: F401 (a fixture)
from tests.fixtures.bench import run_every_phase

SAMPLED = textwrap.dedent('''
    import torch
    from torch.utils.data import Dataset, IterableDataset, Sampler

    class EvenOnly(Dataset):
        """Odd samples cannot be read: only a sampler that never draws them gets through a run."""

        def __len__(self):
            return 128

        def __getitem__(self, index):
            if index % 2:
                raise ValueError(f"sample {index} is unreadable")
            return torch.full((3, 8, 8), index % 256, dtype=torch.uint8), index % 10

    class Evens(Sampler):
        def __init__(self, dataset):
            self.n = len(dataset)

        def __iter__(self):
            return iter(torch.randperm(self.n // 2).mul(2).tolist())

        def __len__(self):
            return self.n // 2

    class Uneven(Sampler):
        """Batches of 4 and 12 even indices, in turn."""

        def __init__(self, dataset):
            self.n = len(dataset)

        def __iter__(self):
            evens, start, size = list(range(0, self.n, 2)), 0, 4
            while start + size <= len(evens):
                yield evens[start:start + size]
                start, size = start + size, 16 - size

        def __len__(self):
            return 8

    class Stream(IterableDataset):
        def __iter__(self):
            return iter([(torch.zeros(3, 8, 8, dtype=torch.uint8), 0)] * 64)

    def make():
        return EvenOnly()

    def stream():
        return Stream()

    def evens(dataset):
        return Evens(dataset)

    def uneven(dataset):
        return Uneven(dataset)

    def number(dataset):
        return 5

    def time_major(samples):
        """(5, B) features beside (B,) labels: no first dimension the tensors share."""
        return torch.stack([image.flatten()[:5].float() for image, _ in samples], 1), \
            torch.tensor([label for _, label in samples])

    def model():
        return torch.nn.Linear(5, 2)

    def step(model, batch, device):
        features, labels = batch
        return torch.nn.functional.cross_entropy(model(features.T), labels % 2)
''')


def bench(tmp_path, capsys, *argv) -> tuple:
    from bootstrap.cli import main

    (tmp_path / "user_sampled.py").write_text(SAMPLED)
    path = ["--path", str(tmp_path)] if "--dataset" in argv else []
    code = main(
        [
            "bench",
            "--device",
            "cpu",
            "--quiet",
            "--no-png",
            "--budget",
            "2",
            "--out",
            str(tmp_path / "out"),
            *path,
            *argv,
        ]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_loader_kwargs_shuffle_the_same_way_every_time_unless_the_user_orders() -> None:
    from torch.utils.data import DataLoader, SequentialSampler

    from bootstrap.bench.user import Sampling, loader_kwargs

    def first(**kwargs):
        return next(iter(DataLoader(range(64), **kwargs))).tolist()

    assert first(**loader_kwargs(range(64), 8, seed=3)) == first(**loader_kwargs(range(64), 8, seed=3))
    assert first(**loader_kwargs(range(64), 8, seed=3)) != list(range(8))
    ordered = Sampling(sampler=SequentialSampler(range(64)))
    assert first(**loader_kwargs(range(64), 8, seed=3, sampling=ordered)) == list(range(8))
    assert loader_kwargs(range(64), 8, 0, Sampling(batch_sampler=[[1, 2]])) == {"batch_sampler": [[1, 2]]}


def test_bench_reads_the_dataset_through_the_users_sampler(tmp_path, capsys, clean_imports):  # noqa: F811
    code, out, err = bench(
        tmp_path,
        capsys,
        "--dataset",
        "user_sampled:make",
        "--sampler",
        "user_sampled:evens",
        "--batch-size",
        "8",
        "--json",
    )
    assert code in (0, 1), err  # every odd sample raises: a shuffle would have drawn one
    assert json.loads(out)["extra"]["workload"]["user"]["sampler"] == "user_sampled:evens"


def test_a_batch_sampler_makes_the_batches_and_each_counts_its_samples(tmp_path, clean_imports):  # noqa: F811
    from bootstrap.bench.config import BenchOptions
    from bootstrap.bench.user import UserWorkload

    (tmp_path / "user_sampled.py").write_text(SAMPLED)
    user = UserWorkload("user_sampled:make", batch_sampler="user_sampled:uneven", paths=(str(tmp_path),))
    result = run_every_phase(BenchOptions(device="cpu", user=user), last="naive")
    assert result.workload["batch_size"] == 4  # the first batch's
    assert (
        "the batch sampler makes the batches, each counted by the list of indices it was made from (4 in the "
        "first)" in result.notes
    )
    loaders = [m for m in result.measurements if m.steps >= 2 and m.phase != "ceiling"]
    assert loaders and all(m.samples in (8 * m.steps, 8 * m.steps - 4, 8 * m.steps + 4) for m in loaders), [
        (m.label, m.steps, m.samples) for m in loaders
    ]


def test_a_batch_samplers_batches_count_their_lists_whatever_the_tensors_shapes(tmp_path, clean_imports):  # noqa: F811
    """Batches of 4 and 12 in turn, time-major: their tensors share no first dimension, so each counts the
    list of indices it was made from, as the sampler drew it."""
    from bootstrap.bench.config import BenchOptions
    from bootstrap.bench.user import UserWorkload

    (tmp_path / "user_sampled.py").write_text(SAMPLED)
    user = UserWorkload(
        "user_sampled:make",
        batch_sampler="user_sampled:uneven",
        collate="user_sampled:time_major",
        model="user_sampled:model",
        step="user_sampled:step",
        paths=(str(tmp_path),),
    )
    result = run_every_phase(BenchOptions(device="cpu", user=user), last="naive")
    assert any("share no first dimension" in note for note in result.notes), result.notes
    windows = [m for m in result.measurements if m.steps >= 2]
    assert {m.phase for m in windows} == {"loader", "ceiling", "naive"}
    assert all(m.samples in (8 * m.steps, 8 * m.steps - 4, 8 * m.steps + 4) for m in windows), [
        (m.label, m.steps, m.samples) for m in windows
    ]


def test_the_snippet_passes_the_users_batch_sampler_and_runs() -> None:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

    from bootstrap.bench.config import WorkloadSpec
    from bootstrap.bench.report import dataloader_snippet
    from bootstrap.bench.results import LoaderConfig

    snippet = dataloader_snippet(
        LoaderConfig(num_workers=1), WorkloadSpec(), "cpu", user={"dataset": "m:f", "batch_sampler": "m:b"}
    )
    assert "batch_size" not in snippet and "shuffle" not in snippet and "expects `dataset`, `batch_sampler`" in snippet
    dataset = TensorDataset(torch.arange(10))
    namespace = {"dataset": dataset, "batch_sampler": BatchSampler(SequentialSampler(dataset), 3, False)}
    exec(compile(snippet, "bench-snippet", "exec"), namespace)
    loader = namespace["loader"]
    assert isinstance(loader, DataLoader) and [len(b[0]) for b in loader] == [3, 3, 3, 1]


@pytest.mark.parametrize(
    ("argv", "where", "says"),
    [
        (["--sampler", "user_sampled:evens"], "--sampler", "only applies to your own dataset"),
        (
            ["--dataset", "user_sampled:make", "--batch-sampler", "user_sampled:uneven", "--batch-size", "8"],
            "--batch-size",
            "does not apply with --batch-sampler",
        ),
        (
            ["--dataset", "user_sampled:make", "--batch-sampler", "user_sampled:uneven", "--batched"],
            "--batched",
            "does not apply with --batch-sampler",
        ),
        (
            [
                "--dataset",
                "user_sampled:make",
                "--sampler",
                "user_sampled:evens",
                "--batch-sampler",
                "user_sampled:uneven",
            ],
            "--batch-sampler user_sampled:uneven",
            "takes the place of a sampler",
        ),
        (
            ["--dataset", "user_sampled:stream", "--sampler", "user_sampled:evens"],
            "--sampler user_sampled:evens",
            "a stream (IterableDataset)",
        ),
        (
            ["--dataset", "user_sampled:make", "--sampler", "user_sampled:number"],
            "--sampler user_sampled:number",
            "is a int, not a sampler",
        ),
        (
            ["--dataset", "user_sampled:make", "--sampler", "user_sampled:nowhere"],
            "--sampler user_sampled:nowhere",
            "has no attribute 'nowhere'",
        ),
    ],
    ids=["no-dataset", "and-batch-size", "and-batched", "both", "stream", "not-a-sampler", "missing"],
)
def test_a_sampler_that_cannot_be_used_is_one_line(tmp_path, capsys, clean_imports, argv, where, says):  # noqa: F811
    code, out, err = bench(tmp_path, capsys, *argv)
    assert code == 2 and out == "" and err.startswith(f"error: {where}: ") and says in err, err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_tune_loader_takes_a_batch_sampler_with_no_batch_size() -> None:
    import torch
    from torch.utils.data import BatchSampler, SequentialSampler, TensorDataset

    from bootstrap.bench import tune_loader
    from bootstrap.errors import InputError

    dataset = TensorDataset(torch.zeros(16, 3, 8, 8))
    with pytest.raises(InputError, match=r"^tune_loader\(batch_size=\.\.\.\): does not apply with batch_sampler"):
        tune_loader(dataset, batch_size=8, batch_sampler=BatchSampler(SequentialSampler(dataset), 4, False))


FAULTY = textwrap.dedent("""
    import torch
    from torch.utils.data import Sampler

    class Faulty(Sampler):
        def __init__(self, items, fail_at=None):
            self.items, self.fail_at = items, fail_at

        def __iter__(self):
            for position, item in enumerate(self.items):
                if position == self.fail_at:
                    raise RuntimeError(f"sampler broke at {position}")
                yield item

        def __len__(self):
            return len(self.items)

    def beyond(dataset):
        return Faulty([0, 2, 4, 6, 8, 10, 12, 200] * 4)

    def raises(dataset):
        return Faulty(list(range(0, 128, 2)), fail_at=4)

    def raises_later(dataset):
        return Faulty(list(range(0, 128, 2)), fail_at=20)

    def generator(dataset):
        return (index for index in range(0, 128, 2))

    def short(dataset):
        return Faulty([0, 2])

    def empty_list(dataset):
        return Faulty([[0, 2], [], [4, 6]])

    def ints(dataset):
        return Faulty([0, 2, 4])
""")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["--sampler", "user_faulty:beyond", "--batch-size", "8"],
            "yielded index 200, outside the dataset's 128 samples",
        ),
        (
            ["--sampler", "user_faulty:raises", "--batch-size", "8"],
            "raised RuntimeError: sampler broke at 4 while drawing indices",
        ),
        (["--sampler", "user_faulty:generator", "--batch-size", "8"], "is an iterator (generator), used up after one"),
        (["--sampler", "user_faulty:short", "--batch-size", "8"], "drew fewer indices than one batch (8)"),
        (["--batch-sampler", "user_faulty:empty_list"], "yielded an empty list of indices"),
        (["--batch-sampler", "user_faulty:ints"], "yielded int 0 where a batch sampler yields lists of indices"),
    ],
    ids=["beyond", "raises", "generator", "short", "empty-list", "ints"],
)
def test_a_faulty_sampler_is_named_not_the_dataset(tmp_path, capsys, clean_imports, argv, says):  # noqa: F811
    """What a sampler yields or raises, at set-up or mid-run, is one line naming the sampler, not a sample
    that failed to load with the dataset's fix."""
    (tmp_path / "user_faulty.py").write_text(FAULTY)
    code, out, err = bench(tmp_path, capsys, "--dataset", "user_sampled:make", *argv)
    flag = argv[0]
    assert code == 2 and out == "" and err.startswith(f"error: {flag} {argv[1]}: ") and says in err, err
    assert err.count("\n") == 1


def test_a_sampler_that_fails_mid_run_is_named_too(tmp_path, clean_imports):  # noqa: F811
    """Past set-up's first batch, in the loader phase: the same line, not a sample that failed to load."""
    from bootstrap.bench.config import BenchOptions, WorkloadSpec
    from bootstrap.bench.user import UserWorkload
    from bootstrap.errors import InputError

    (tmp_path / "user_sampled.py").write_text(SAMPLED)
    (tmp_path / "user_faulty.py").write_text(FAULTY)
    user = UserWorkload("user_sampled:make", sampler="user_faulty:raises_later", paths=(str(tmp_path),))
    with pytest.raises(
        InputError,
        match="^--sampler user_faulty:raises_later: raised RuntimeError: sampler broke at 20 while drawing indices",
    ):
        run_every_phase(BenchOptions(workload=WorkloadSpec(batch_size=8), device="cpu", user=user), last="loader")


def test_keys_that_are_not_integers_pass_to_the_dataset_as_they_are() -> None:
    """YOLOX's batch sampler yields (mosaic, index) pairs, a dataset keyed by file name takes names:
    DataLoader hands them to __getitem__, and so does the check."""
    from bootstrap.bench.user import Checked

    pairs = Checked([[(True, 0), (False, 1)], [(True, 2)]], "--batch-sampler m:f", 4, batches=True)
    assert list(pairs) == [[(True, 0), (False, 1)], [(True, 2)]]
    assert list(Checked(["im0", "im1"], "--sampler m:f", 2, batches=False)) == ["im0", "im1"]


def test_a_batch_samplers_first_batch_counts_the_list_it_was_made_from_not_a_second_draw() -> None:
    """A random batch sampler gives another first list each pass: the first batch, whose tensors share no
    first dimension, counts the list it was made from, not one drawn again."""
    import torch
    from torch.utils.data import Dataset

    from bootstrap.bench.user import UserWorkload, resolve

    class Items(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            return index

    class Shifting:
        """Its first list holds 3 indices on the first pass, 5 on the next, 7 on the one after."""

        def __init__(self):
            self.passes = 0

        def __iter__(self):
            self.passes += 1
            size = 1 + 2 * self.passes
            return iter([list(range(size)), list(range(size, 2 * size))])

        def __len__(self):
            return 2

    def time_major(items):  # (T, B) beside (B,): no first dimension shared
        return torch.zeros(7, len(items)), torch.tensor(items)

    parts = resolve(UserWorkload(Items(), collate=time_major, batch_sampler=Shifting()), None)
    assert parts.samples == len(parts.first_batch[1]) > 0
