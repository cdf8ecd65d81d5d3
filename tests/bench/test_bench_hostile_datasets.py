"""Generated datasets a team might hand to `bench --dataset`: every one gets a report or one line, never a
traceback.

Each case crosses what a sample is (a uint8 or float tensor, a numpy array,
a PIL image, a string, a dict, None), its shape (fixed, ragged, grayscale),
its label (a class index, one past the built-in model's classes, a string),
the dataset's length (empty, shorter than a batch, enough) and where it
fails (nowhere, in `__len__`, on its first sample, on one sample read
later in the main process, or only in a DataLoader worker). A dataset the
built-in step can train on must be measured (exit 0 or 1, bench.json
written); any other must be refused in one line on stderr naming the
`--dataset` reference or the step that cannot take its batches, exit 2,
nothing in --out. The default run takes every 47th case (a stride that
divides none of the axes, so each axis's values all come up) and a
trainable one; `slow` takes all.
"""

from __future__ import annotations

import itertools
import json
import sys
import textwrap
from pathlib import Path

import pytest

BATCH = 8
SAMPLES = ("uint8", "float", "numpy", "pil", "str", "dict", "none")
SHAPES = ("fixed", "ragged", "gray")
LABELS = ("index", "too_big", "str")
LENGTHS = (0, 5, 32)
FAILS = ("none", "len", "first", "later", "worker")

MODULE = textwrap.dedent("""
    import numpy as np
    import torch
    from PIL import Image
    from torch.utils.data import Dataset


    class Generated(Dataset):
        def __init__(self, sample, shape, label, length, fail):
            self.sample, self.shape, self.label, self.length, self.fail = sample, shape, label, length, fail

        def __len__(self):
            if self.fail == "len":
                raise RuntimeError("index file missing")
            return self.length

        def __getitem__(self, index):
            in_worker = torch.utils.data.get_worker_info() is not None
            if (self.fail == "first") or (self.fail == "later" and index == 20 and not in_worker) \\
                    or (self.fail == "worker" and index == 20 and in_worker):
                raise OSError(f"cannot read sample {index}")
            side = 16 + (index % 3 if self.shape == "ragged" else 0)
            channels = 1 if self.shape == "gray" else 3
            pixels = np.full((channels, side, 16), index % 255, dtype=np.uint8)
            sample = {
                "uint8": lambda: torch.from_numpy(pixels),
                "float": lambda: torch.from_numpy(pixels).float() / 255,
                "numpy": lambda: pixels,
                "pil": lambda: Image.fromarray(pixels.transpose(1, 2, 0).squeeze()),
                "str": lambda: "a sentence",
                "dict": lambda: {"image": torch.from_numpy(pixels)},
                "none": lambda: None,
            }[self.sample]()
            label = {"index": index % 10, "too_big": 100, "str": "cat"}[self.label]
            return sample, label
""")

CASES = list(itertools.product(SAMPLES, SHAPES, LABELS, LENGTHS, FAILS))


def trainable(sample: str, shape: str, label: str, length: int, fail: str = "none") -> bool:
    """Whether the built-in step can train on this dataset for the whole run."""
    return (
        sample in ("uint8", "float", "numpy")
        and shape == "fixed"
        and label == "index"
        and length >= BATCH
        and fail == "none"
    )


def case_id(case: tuple) -> str:
    return "-".join(map(str, case))


def sampled(cases: list, every: int) -> list:
    """Every case, the ones off the default run's stride marked slow, but for one that trains (uint8)."""
    return [
        pytest.param(
            *case,
            id=case_id(case),
            marks=() if index % every == 0 or (trainable(*case) and case[0] == "uint8") else pytest.mark.slow,
        )
        for index, case in enumerate(cases)
    ]


@pytest.fixture(scope="module")
def hostile_module(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    lines = [MODULE]
    for case in CASES:
        lines.append(f"def {factory(case)}():\n    return Generated{case!r}\n")
    (root / "hostile_datasets.py").write_text("\n".join(lines))
    return root


def factory(case: tuple) -> str:
    return "make_" + case_id(case).replace("-", "_")


@pytest.mark.parametrize("sample, shape, label, length, fail", sampled(CASES, every=47))
def test_a_generated_dataset_gets_a_report_or_one_line(
    hostile_module, tmp_path, capsys, monkeypatch, sample, shape, label, length, fail
):
    from bootstrap.cli import main

    monkeypatch.setattr(sys, "path", list(sys.path))
    case = (sample, shape, label, length, fail)
    ref = f"hostile_datasets:{factory(case)}"
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
            "3",
            "--max-workers",
            "2",
            "--out",
            str(out),
            "--path",
            str(hostile_module),
            "--dataset",
            ref,
        ]
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    if trainable(*case) or (fail == "worker" and trainable(*case[:4]) and code != 2):
        assert code in (0, 1) and (out / "bench.json").is_file(), err
        # a sample that fails only in a worker: the run may end before any worker read it, never after
        measured = json.loads((out / "bench.json").read_text())["extra"]["measurements"]
        assert fail == "none" or all(not (m.get("config") or {}).get("num_workers") for m in measured), measured
        return
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith((f"error: --dataset {ref}: ", f"error: the built-in step (tiny) on --dataset {ref}: ")), err
    assert not out.exists() or not any(out.iterdir())
