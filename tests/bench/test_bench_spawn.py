"""What spawned DataLoader workers must import: a reference into a fileless `__main__` (`python -c`, a
notebook) found wherever pickling meets it (a `Subset` from `random_split`, a transform, a collate
function's class), the dataset's own data never copied to look."""

from __future__ import annotations

import functools
import sys
import tracemalloc
import types

import pytest

from tests.bench.test_bench_dataset import BATCH


class Images:
    """A map-style dataset whose class the tests move into `__main__`."""

    def __len__(self):
        return 4 * BATCH

    def __getitem__(self, index):
        import torch

        return torch.zeros(3, 8, 8), 0


def flip(sample):
    return sample


class Transformed:
    def __init__(self, inner, transform):
        self.inner, self.transform = inner, transform

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        return self.transform(self.inner[index])


def _nested(kind: str):
    """A dataset of a library or module class holding, somewhere inside, Images or flip."""
    import torch
    from torch.utils.data import ConcatDataset, random_split

    if kind == "subset":
        return random_split(Images(), [0.75, 0.25], generator=torch.Generator().manual_seed(0))[0]
    if kind == "concat":
        return ConcatDataset([torch.utils.data.TensorDataset(torch.zeros(8, 3)), Images()])
    if kind == "transform":
        return Transformed(torch.utils.data.TensorDataset(torch.zeros(8, 3)), flip)
    return Transformed(torch.utils.data.TensorDataset(torch.zeros(8, 3)), functools.partial(flip))


@pytest.fixture
def fileless_main(monkeypatch):
    """`python -c` under spawn: a `__main__` without a file, Images and flip defined in it."""
    from bootstrap.compat import host

    monkeypatch.setattr(host, "probe_start_method", lambda: ("spawn", True))
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    for defined in (Images, flip):
        monkeypatch.setattr(defined, "__module__", "__main__")


@pytest.mark.parametrize(
    ("kind", "name"), [("subset", "Images"), ("concat", "Images"), ("transform", "flip"), ("partial", "flip")]
)
def test_a_main_class_inside_a_library_dataset_is_refused_naming_it(fileless_main, kind, name) -> None:
    from bootstrap.bench import tune_loader
    from bootstrap.errors import InputError

    dataset = _nested(kind)
    with pytest.raises(InputError) as raised:
        tune_loader(dataset, batch_size=2, budget=1, device="cpu")
    assert str(raised.value).startswith(
        f"dataset {type(dataset).__name__}: {name} is defined in __main__ "
        "(python -c, a notebook), which DataLoader workers started by spawn"
    )


def test_the_same_datasets_pass_when_main_has_a_file_or_workers_fork(monkeypatch) -> None:
    from bootstrap.bench.user import check_workers_can_import
    from bootstrap.compat import host

    monkeypatch.setattr(Images, "__module__", "__main__")
    main = types.ModuleType("__main__")
    main.__file__ = "/tmp/train.py"
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(host, "probe_start_method", lambda: ("spawn", True))
    check_workers_can_import([("dataset", _nested("subset"))])  # the file is imported as __mp_main__
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    monkeypatch.setattr(host, "probe_start_method", lambda: ("fork", False))
    check_workers_can_import([("dataset", _nested("subset"))])  # forked workers inherit __main__


def test_the_probe_finds_nothing_in_importable_datasets_and_copies_no_data() -> None:
    import numpy as np
    import torch

    from bootstrap.bench.user import main_reference

    held = Transformed(torch.utils.data.TensorDataset(torch.zeros(32 << 20, dtype=torch.uint8)), flip)
    held.array = np.zeros(32 << 20, dtype=np.uint8)
    tracemalloc.start()
    try:
        assert main_reference(held) is None and main_reference(_nested("subset")) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < (4 << 20), peak  # neither the tensor's 32 MiB nor the array's was copied


def test_a_dataset_that_does_not_pickle_is_left_to_the_run_to_report() -> None:
    from bootstrap.bench.user import main_reference

    unpicklable = Transformed([1, 2], lambda sample: sample)
    unpicklable.lock = __import__("threading").Lock()
    assert main_reference(unpicklable) is None
