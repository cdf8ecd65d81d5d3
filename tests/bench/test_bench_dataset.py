"""The team's own training input: `bench --dataset MODULE:FACTORY` and `tune_loader(dataset, ...)`.

The dataset is an image folder the test writes into tmp_path (small PNGs in
one subfolder per class) and a module that decodes them with Pillow, run
through real DataLoader workers on this CPU. Bad input is one line on
stderr naming the reference, exit 2, and nothing in --out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures import REPO

BATCH, PER_CLASS, SIDE = 8, 32, 16

DATASET_MODULE = '''
import os

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "images")


class ImageFolder(Dataset):
    """ROOT/CLASS/NAME.png -> (uint8 CHW tensor, class index)."""

    def __init__(self, root=ROOT):
        classes = sorted(os.listdir(root))
        self.items = [(os.path.join(root, name, file), label) for label, name in enumerate(classes)
                      for file in sorted(os.listdir(os.path.join(root, name)))]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        path, label = self.items[index]
        with Image.open(path) as image:
            pixels = np.array(image.convert("RGB"), dtype=np.uint8)
        return torch.from_numpy(pixels).permute(2, 0, 1).contiguous(), label


def make():
    return ImageFolder()


def _touch(name):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".calls"), "a") as handle:
        handle.write(str(os.getpid()) + "\\n")


def collate(samples):
    _touch("collate")
    images = torch.stack([image for image, _ in samples])
    return {"images": images, "labels": torch.tensor([label for _, label in samples])}


def model():
    _touch("model")
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * {side} * {side}, 2))


def step(model, batch, device):
    _touch("step")
    assert batch["images"].device.type == device.type
    logits = model(batch["images"].float() / 255)
    return torch.nn.functional.cross_entropy(logits, batch["labels"])
'''.replace("{side}", str(SIDE))


def write_image_folder(root: Path, module: str = "user_images") -> Path:
    """`root/images/{cat,dog}/N.png` and `root/MODULE.py` (the dataset above); returns root."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        folder = root / "images" / name
        folder.mkdir(parents=True)
        for index in range(PER_CLASS):
            pixels = rng.integers(0, 256, size=(SIDE, SIDE, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{index:03d}.png")
    (root / f"{module}.py").write_text(DATASET_MODULE)
    return root


def bench_cli(argv, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "bootstrap",
            "bench",
            "--device",
            "cpu",
            "--quiet",
            "--no-png",
            "--batch-size",
            str(BATCH),
            *argv,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def bench_here(argv, capsys) -> tuple:
    """(exit code, the JSON report's `extra`) of `bench ARGV --json` run in this process."""
    from bootstrap.cli import main

    code = main(["bench", "--device", "cpu", "--quiet", "--no-png", "--json", "--batch-size", str(BATCH), *argv])
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err
    return code, json.loads(captured.out)["extra"]


@pytest.fixture
def clean_imports(monkeypatch):
    """sys.path and the modules a test imports from tmp_path are put back afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("user_", "bad_inputs")):
            del sys.modules[name]


def calls(root: Path, name: str) -> list:
    """The pids that called the user's `name` (one line per call), [] when it never was."""
    path = root / f"{name}.calls"
    return path.read_text().split() if path.exists() else []


def test_bench_reports_on_the_users_dataset(tmp_path, capsys, clean_imports):
    """`bench --dataset MODULE:FACTORY --path DIR`: the report is about that dataset (its batch, the built-in
    model on it) and bench.json is written."""
    root = write_image_folder(tmp_path / "project", module="user_images")
    out = tmp_path / "out"
    _, report = bench_here(
        ["--path", str(root), "--dataset", "user_images:make", "--budget", "3", "--out", str(out)], capsys
    )
    assert report["workload"]["user"] == {"dataset": "user_images:make", "paths": [str(root)]}
    assert report["workload"]["batch_size"] == BATCH
    assert report["device"]["model"] == "tiny"
    assert (out / "bench.json").is_file()


def test_collate_model_and_step_are_the_users(tmp_path, capsys, clean_imports):
    """--collate, --model and --step: each is called (its call file grows) and the report names them."""
    root = write_image_folder(tmp_path / "lib", module="user_parts")
    _, report = bench_here(
        [
            "--path",
            str(root),
            "--dataset",
            "user_parts:make",
            "--collate",
            "user_parts:collate",
            "--model",
            "user_parts:model",
            "--step",
            "user_parts:step",
            "--budget",
            "3",
            "--out",
            str(tmp_path / "out"),
        ],
        capsys,
    )
    assert report["device"]["model"] == "user_parts:model"
    assert report["workload"]["user"]["collate"] == "user_parts:collate"
    assert calls(root, "collate") and calls(root, "model") and len(calls(root, "step")) >= 2


def test_tune_loader_returns_dataloader_kwargs_for_an_object(tmp_path, clean_imports):
    """Two lines in a training script: the dataset object in, DataLoader keyword arguments and the report
    out; the arguments build a working DataLoader over that dataset."""
    from torch.utils.data import DataLoader

    from bootstrap.bench import tune_loader

    root = write_image_folder(tmp_path, module="user_images_api")
    sys.path.insert(0, str(root))
    import user_images_api

    dataset = user_images_api.make()
    kwargs, report = tune_loader(dataset, batch_size=BATCH, budget=3, device="cpu")
    assert (
        {"num_workers", "pin_memory"}
        <= set(kwargs)
        <= {"num_workers", "pin_memory", "prefetch_factor", "persistent_workers"}
    )
    assert report.workload["user"] == {"dataset": "<ImageFolder object>"}
    images, labels = next(iter(DataLoader(dataset, batch_size=BATCH, **kwargs)))
    assert tuple(images.shape) == (BATCH, 3, SIDE, SIDE) and labels.shape == (BATCH,)


@pytest.mark.slow
def test_the_cli_tunes_the_users_folder_with_real_workers(tmp_path):
    """The module found in the working directory (no --path); with a budget that reaches the tuner, loaders
    with workers are measured, the user's collate runs in those workers, and the snippet is the
    DataLoader call to paste."""
    root = write_image_folder(tmp_path / "project", module="user_parts")
    done = bench_cli(
        [
            "--dataset",
            "user_parts:make",
            "--collate",
            "user_parts:collate",
            "--model",
            "user_parts:model",
            "--step",
            "user_parts:step",
            "--budget",
            "15",
            "--out",
            str(tmp_path / "out"),
            "--json",
        ],
        cwd=root,
    )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)["extra"]
    assert report["workload"]["user"]["dataset"] == "user_parts:make"
    assert any(m["config"] and m["config"]["num_workers"] for m in report["measurements"])
    assert len(set(calls(root, "collate"))) > 1, "the collate function never ran in a worker"
    if report["snippet"]:
        assert "collate_fn=collate_fn," in report["snippet"] and f"batch_size={BATCH}," in report["snippet"]


CHATTY = textwrap.dedent("""
    import torch
    from torch.utils.data import Dataset

    print("chatty: imported")


    class Chatty(Dataset):
        def __init__(self):
            print("chatty: loading 64 samples")

        def __len__(self):
            return 64

        def __getitem__(self, index):
            worker = torch.utils.data.get_worker_info()
            print(f"chatty: sample {index} in {'a worker' if worker else 'the main process'}")
            return torch.zeros(3, 16, 16, dtype=torch.uint8), index % 2


    def make():
        return Chatty()
""")


@pytest.mark.slow
def test_json_stdout_stays_the_report_when_the_dataset_prints(tmp_path):
    """`--json` is for a program to read: what the user's module prints on import, in its factory and in
    __getitem__ (in the main process and in workers, which inherit the descriptor) goes to stderr."""
    (tmp_path / "user_chatty.py").write_text(CHATTY)
    done = bench_cli(
        [
            "--dataset",
            "user_chatty:make",
            "--budget",
            "4",
            "--max-workers",
            "1",
            "--out",
            str(tmp_path / "out"),
            "--json",
        ],
        cwd=tmp_path,
    )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)["extra"]  # nothing but the envelope on stdout
    assert "chatty: imported" in done.stderr and "chatty: loading 64 samples" in done.stderr
    assert "in the main process" in done.stderr
    if any(m["config"] and m["config"]["num_workers"] for m in report["measurements"]):
        assert "chatty: sample" in done.stderr and "in a worker" in done.stderr
    refused = bench_cli(["--dataset", "user_chatty:missing", "--json"], cwd=tmp_path)
    assert refused.returncode == 2 and json.loads(refused.stdout)["error"]["exit_code"] == 2
    assert "chatty: imported" in refused.stderr


@pytest.mark.slow
def test_tune_loader_measures_workers_on_the_dataset_object(tmp_path, clean_imports):
    from bootstrap.bench import tune_loader

    root = write_image_folder(tmp_path, module="user_images_workers")
    sys.path.insert(0, str(root))
    import user_images_workers

    kwargs, report = tune_loader(user_images_workers.make(), batch_size=BATCH, budget=12, device="cpu")
    assert any(m.config is not None and m.config.num_workers for m in report.measurements)
    assert report.best is None or kwargs == report.best.dataloader_kwargs()


BAD_DATASETS = textwrap.dedent('''
    import torch
    from torch.utils.data import Dataset, IterableDataset

    class Empty(Dataset):
        def __len__(self):
            return 0

        def __getitem__(self, index):
            raise IndexError(index)

    class Ragged(Dataset):
        def __len__(self):
            return 32

        def __getitem__(self, index):
            return torch.zeros(index + 1)

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(5))

    class NoLength(Dataset):
        def __getitem__(self, index):
            return torch.zeros(3, 16, 16, dtype=torch.uint8), 0

    class Corrupt(Dataset):
        """Sample 20 is a truncated file, read in the main process (when in_workers is False) or in a
        DataLoader worker only: the first batch loads, a later one does not."""

        def __init__(self, in_workers):
            self.in_workers = in_workers

        def __len__(self):
            return 32

        def __getitem__(self, index):
            in_worker = torch.utils.data.get_worker_info() is not None
            if index == 20 and in_worker == self.in_workers:
                raise OSError("image file is truncated (sample 20)")
            return torch.zeros(3, 16, 16, dtype=torch.uint8), 0

    def empty():
        return Empty()

    def no_length():
        return NoLength()

    def corrupt():
        return Corrupt(in_workers=False)

    def corrupt_in_workers():
        return Corrupt(in_workers=True)

    def ragged():
        return Ragged()

    def stream():
        return Stream()

    def words():
        return [("a sentence", 0)] * 32

    def good():
        return torch.utils.data.TensorDataset(torch.zeros(32, 3, 16, 16, dtype=torch.uint8),
                                              torch.zeros(32, dtype=torch.long))

    def failing_step(model, batch, device):
        raise ValueError("expected a dict batch")

    def collate_none(samples):
        return None

    def str_step(model, batch, device):
        return "loss"

    def oom_step(model, batch, device):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    class Parameterless(torch.nn.Module):
        def forward(self, images):
            return images.float().flatten(1)[:, :10]

    def no_parameters():
        return Parameterless()

    def not_a_module():
        return 5

    def not_a_dataset():
        return 42

    def raises():
        raise FileNotFoundError("no such folder: /data/train\\nsecond line")

    value = 3
''')


@pytest.mark.parametrize(
    "argv, where, problem",
    [
        (
            ["--dataset", "no_such_module:make"],
            "--dataset no_such_module:make",
            "cannot import no_such_module: ModuleNotFoundError: No module named 'no_such_module'",
        ),
        (["--dataset", "bad_inputs:missing"], "--dataset bad_inputs:missing", "bad_inputs has no attribute 'missing'"),
        (
            ["--dataset", "bad_inputs:raises"],
            "--dataset bad_inputs:raises",
            "raised FileNotFoundError: no such folder: /data/train",
        ),
        (
            ["--dataset", "bad_inputs:not_a_dataset"],
            "--dataset bad_inputs:not_a_dataset",
            "returned int, an object without __len__ or __getitem__: bench shuffles the samples by index",
        ),
        (
            ["--dataset", "bad_inputs:no_length"],
            "--dataset bad_inputs:no_length",
            "returned NoLength, a torch.utils.data.Dataset without __len__",
        ),
        (["--dataset", "bad_inputs:value"], "--dataset bad_inputs:value", "is a int, not a callable"),
        (["--dataset", "bad_inputs:empty"], "--dataset bad_inputs:empty", "returned an empty dataset (length 0)"),
        (
            ["--dataset", "bad_inputs:stream"],
            "--dataset bad_inputs:stream",
            "the stream ended before one batch (8 samples) (point it at more data, or give a smaller --batch-size)",
        ),
        (
            ["--dataset", "bad_inputs:ragged"],
            "--dataset bad_inputs:ragged",
            "could not load one batch: RuntimeError: stack expects each tensor to be equal size",
        ),
        (
            ["--dataset", "bad_inputs:ragged", "--collate", "bad_inputs:value"],
            "--collate bad_inputs:value",
            "is a int, not a callable",
        ),
        (
            ["--dataset", "bad_inputs:good", "--collate", "bad_inputs:collate_none"],
            "--collate bad_inputs:collate_none",
            "returned None for the first batch (return the batch: a tensor, ",
        ),
        (
            ["--dataset", "bad_inputs:words"],
            "the built-in step (tiny) on --dataset bad_inputs:words",
            "failed on the first batch: AttributeError: 'tuple' object has no attribute 'to'",
        ),
        (
            ["--dataset", "bad_inputs:good", "--step", "bad_inputs:failing_step"],
            "--step bad_inputs:failing_step",
            "failed on the first batch: ValueError: expected a dict batch",
        ),
        (
            ["--dataset", "bad_inputs:good", "--model", "bad_inputs:not_a_module"],
            "--model bad_inputs:not_a_module",
            "returned int, not a torch.nn.Module",
        ),
        (
            ["--dataset", "bad_inputs:good", "--step", "bad_inputs:str_step"],
            "--step bad_inputs:str_step",
            "failed on the first batch: NotALoss: returned a str, not a loss tensor "
            "(return the loss as a scalar tensor ",
        ),
        (
            ["--dataset", "bad_inputs:good", "--step", "bad_inputs:oom_step"],
            "--step bad_inputs:oom_step",
            "failed on the first batch: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
            "(the step ran out "
            "of memory: give a smaller --batch-size)",
        ),
        (
            ["--dataset", "bad_inputs:good", "--model", "bad_inputs:no_parameters"],
            "--model bad_inputs:no_parameters",
            "failed on the first batch: NoParameters: the model has no parameters to train "
            "(bench's backward pass and SGD "
            "update have nothing to train: ",
        ),
        (["--dataset", "nocolon"], "--dataset nocolon", "is not MODULE:NAME"),
        (["--collate", "bad_inputs:value"], "--collate", "only applies to your own dataset"),
        (["--dataset", "bad_inputs:ragged", "--cpu-ms", "5"], "--cpu-ms", "describes the synthetic images"),
    ],
)
def test_bad_input_is_one_line_naming_it_and_writes_nothing(tmp_path, capsys, clean_imports, argv, where, problem):
    from bootstrap.cli import main

    (tmp_path / "bad_inputs.py").write_text(BAD_DATASETS)
    out = tmp_path / "out"
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
            "5",
            "--out",
            str(out),
            "--path",
            str(tmp_path),
            *argv,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"error: {where}: {problem}"), err
    assert not out.exists() or not any(out.iterdir())


def test_a_collate_that_drops_samples_is_said_and_an_empty_first_batch_refused(tmp_path, capsys, clean_imports):
    """A collate function that drops samples (the ones that failed to load) delivers short batches. The
    rates count the batch size (a tensor's first dimension is no sample count: an image's channels in
    detection batches, a time-major length), and a note says the first batch held fewer."""
    (tmp_path / "user_dropping.py").write_text(
        textwrap.dedent("""
        from torch.utils.data import default_collate

        def keep_half(samples):
            return default_collate(samples[: len(samples) // 2])

        def keep_none(samples):
            return default_collate(samples)[0][:0], default_collate(samples)[1][:0]
    """)
    )
    (tmp_path / "bad_inputs.py").write_text(BAD_DATASETS)
    from bootstrap.bench.config import BenchOptions, WorkloadSpec
    from bootstrap.bench.user import UserWorkload
    from tests.fixtures.bench import run_every_phase

    user = UserWorkload("bad_inputs:good", collate="user_dropping:keep_half", paths=(str(tmp_path),))
    result = run_every_phase(
        BenchOptions(workload=WorkloadSpec(batch_size=BATCH), device="cpu", user=user), last="naive"
    )
    measured = [m for m in result.measurements if m.steps]
    assert {m.phase for m in measured} == {"loader", "ceiling", "naive"}
    assert all(m.samples == m.steps * BATCH for m in measured)
    assert (
        f"the first batch held {BATCH // 2} of its {BATCH} samples (a collate function that drops what failed "
        f"to load?): the rates count {BATCH} a batch, more than were delivered" in result.notes
    )
    # one that drops every sample leaves nothing to measure: refused at set-up, not divided by later
    from bootstrap.cli import main

    code = main(
        [
            "bench",
            "--device",
            "cpu",
            "--quiet",
            "--no-png",
            "--batch-size",
            str(BATCH),
            "--path",
            str(tmp_path),
            "--dataset",
            "bad_inputs:good",
            "--collate",
            "user_dropping:keep_none",
            "--out",
            str(tmp_path / "none"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --dataset bad_inputs:good: its first batch holds no samples"), err


def test_a_synthetic_option_in_a_config_file_is_refused_beside_a_dataset(tmp_path, capsys, clean_imports):
    """As the flag is: applied it would change nothing, recorded it would claim it did."""
    from bootstrap.cli import main

    (tmp_path / "bad_inputs.py").write_text(BAD_DATASETS)
    config = tmp_path / "bench.yml"
    config.write_text("options:\n  cpu_ms: 3\n")
    code = main(
        [
            "bench",
            "--device",
            "cpu",
            "--quiet",
            "--no-png",
            "--out",
            str(tmp_path / "out"),
            "--path",
            str(tmp_path),
            "--dataset",
            "bad_inputs:good",
            "--config",
            str(config),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err == (
        f"error: {config}: options.cpu_ms: describes the synthetic images, not --dataset's "
        "(remove it from the file's options)\n"
    )


@pytest.mark.parametrize("factory, config", [("corrupt", "w=0 nopin"), ("corrupt_in_workers", "w=")])
def test_a_sample_that_fails_mid_run_is_one_line_naming_the_dataset(tmp_path, capsys, clean_imports, factory, config):
    """The first batch loaded, a later sample does not (in the main process, or in a worker, whose error
    torch re-raises with the worker's traceback quoted): one line with the sample's own error, exit 2."""
    from bootstrap.cli import main

    (tmp_path / "bad_inputs.py").write_text(BAD_DATASETS)
    out = tmp_path / "out"
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
            "10",
            "--out",
            str(out),
            "--path",
            str(tmp_path),
            "--dataset",
            f"bad_inputs:{factory}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(
        f"error: --dataset bad_inputs:{factory}: a sample failed to load while bench measured {config}"
    ), err
    assert err.rstrip().endswith(
        "OSError: image file is truncated (sample 20) (fix that sample, or make "
        "__getitem__ (a stream: __iter__) skip what it cannot read)"
    ), err
    assert not out.exists() or not any(out.iterdir())


def test_a_dataset_named_by_reference_travels_to_spawned_workers_as_its_name(tmp_path, clean_imports):
    """Under spawn DataLoader pickles the dataset: a `--dataset` one pickles as MODULE:FACTORY (and its
    --path) and the factory builds it again where it is unpickled, so the object itself never travels."""
    import pickle

    from bootstrap.bench.named import NamedDataset
    from bootstrap.bench.user import import_ref

    root = write_image_folder(tmp_path, module="user_images_pickled")
    built = import_ref("user_images_pickled:make", "--dataset", [str(root)])()
    built.unpicklable = lambda: None  # a closure: pickling the object itself would fail
    named = NamedDataset("user_images_pickled:make", [str(root)], built)
    copy = pickle.loads(pickle.dumps(named))
    assert copy.dataset is None and len(copy) == 2 * PER_CLASS
    image, label = copy[PER_CLASS]
    assert tuple(image.shape) == (3, SIDE, SIDE) and label == 1


class _FailingSample:
    """Every sample raises, as a dataset whose index runs past its file list does."""

    def __len__(self):
        return 32

    def __getitem__(self, index):
        raise IndexError(f"index {index} out of range for 16 files")


class _Ragged:
    def __len__(self):
        return 32

    def __getitem__(self, index):
        import torch

        return torch.zeros(index + 1)


@pytest.mark.parametrize(
    "dataset, fix",
    [
        (_FailingSample(), "(fix that sample, or make __getitem__ (a stream: __iter__) skip what it cannot read)"),
        (_Ragged(), "(make samples tensors of one shape, or pass a collate_fn that makes the batch)"),
    ],
)
def test_a_first_batch_that_fails_is_blamed_on_what_raised(dataset, fix):
    """Only a batch that fails to collate gets the one-shape / collate hint; a sample that raised gets the
    sample's."""
    from bootstrap.bench import tune_loader
    from bootstrap.errors import InputError

    with pytest.raises(InputError) as raised:
        tune_loader(dataset, batch_size=BATCH, budget=1, device="cpu")
    message = str(raised.value)
    assert message.startswith(f"dataset {type(dataset).__name__}: could not load one batch: ") and message.endswith(
        fix
    ), message


class _Tensors:
    def __len__(self):
        return 32

    def __getitem__(self, index):
        import torch

        return torch.zeros(3, 16, 16, dtype=torch.uint8), 0


def _collate(samples):
    return samples


@pytest.mark.parametrize(
    "start_method, defined, keyword, where, name",
    [
        ("spawn", "dataset", "dataset", "dataset _Tensors", "_Tensors"),
        ("forkserver", "collate", "collate_fn", "tune_loader(collate_fn=...)", "_collate"),
    ],
)
def test_a_class_of_a_fileless_main_is_refused_under_spawn(monkeypatch, start_method, defined, keyword, where, name):
    """`python -c` or a notebook: spawned workers cannot import `__main__`, so a dataset or collate_fn
    defined there would kill every worker; refused before anything runs."""
    import types

    from bootstrap.bench import tune_loader
    from bootstrap.compat import host
    from bootstrap.errors import InputError

    monkeypatch.setattr(host, "probe_start_method", lambda: (start_method, True))
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # no __file__
    monkeypatch.setattr(_Tensors if defined == "dataset" else _collate, "__module__", "__main__")
    with pytest.raises(InputError) as raised:
        tune_loader(_Tensors(), batch_size=BATCH, budget=1, device="cpu", collate_fn=_collate)
    assert str(raised.value) == (
        f"{where}: {name} is defined in __main__ (python -c, a notebook), which DataLoader "
        f"workers started by {start_method} cannot import (define it in an importable "
        "module (a .py file next to the notebook) and import it)"
    )


@pytest.mark.slow
def test_a_dataset_of_python_c_is_refused_under_spawn(tmp_path):
    code = textwrap.dedent("""
        import torch
        import torch.multiprocessing as mp
        from bootstrap.bench import tune_loader

        class D(torch.utils.data.Dataset):
            def __len__(self):
                return 32

            def __getitem__(self, index):
                return torch.zeros(3, 16, 16, dtype=torch.uint8), 0

        mp.set_start_method("spawn", force=True)
        tune_loader(D(), batch_size=8, budget=3, device="cpu")
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == (
        "bootstrap.errors.InputError: dataset D: D is defined in __main__ (python -c, a notebook), which DataLoader "
        "workers started by spawn cannot import (define it in an importable module (a .py file next to the "
        "notebook) and import it)"
    ), proc.stderr
    assert "Can't get attribute" not in proc.stderr


@pytest.mark.parametrize("flag", ["--dataset", "--collate", "--model", "--step", "--sampler", "--batch-sampler"])
def test_a_reference_without_a_colon_gets_an_example_of_its_own_kind(flag: str) -> None:
    from bootstrap.bench.user import check_ref
    from bootstrap.errors import InputError

    with pytest.raises(InputError) as caught:
        check_ref("nocolon", flag)
    example = caught.value.fix.removeprefix(f"e.g. {flag} ")
    assert check_ref(example, flag) == example  # the example is itself a good reference
    word = flag.removeprefix("--").replace("-", "_")
    assert word.split("_")[-1] in example, example
