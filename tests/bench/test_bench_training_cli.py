"""`bench --effective-batch N`, the training tuner's command line: its bad input (one line naming the flag,
exit 2, before anything is built), the report rendered from a given advice (summary first, snippet last),
training.json's envelope and training.png's marks; then, slow, whole runs in a subprocess on a tiny
dataset and model written to tmp_path: the files, --no-png, a --memory-limit that stops the micro-batch
search at a known size, and a model that never fits. No test depends on a timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap.bench.recipe import GridRow, TrainingAdvice
from bootstrap.bench.training_cli import as_flags
from bootstrap.bench.training_report import envelope_json, render_text
from bootstrap.cli import main
from bootstrap.commands.bench_training import effective_batch, memory_size
from bootstrap.errors import InputError
from bootstrap.report import FORMATS, Check, Status
from tests.fixtures import REPO

MODULE = """\
import torch
from torch import nn
from torch.utils.data import TensorDataset


def make():
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(256, 16, generator=g), torch.randint(0, 4, (256,), generator=g))


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def huge():
    return nn.Sequential(nn.Linear(16, 2048), nn.Linear(2048, 2048), nn.Linear(2048, 4))  # 16 MiB of weights
"""


# --------------------------------------------------------------------------- bad input

# Generated: whole numbers below one, fractions, exponents, words and signs, each as a user might type it.
BAD_EFFECTIVE = [str(n) for n in (0, -1, -256)] + [f"{n}.5" for n in (0, 2, 255)]
BAD_EFFECTIVE += ["1e3", "abc", "", " ", "256x", "0x10", "1_000", "two", "nan", "inf", "-0"]
BAD_MEMORY = [f"12{unit}" for unit in ("XB", "GiBs", "gigs", "iB", "Q")] + ["abc", "", "-1GiB", "0", "0.1B", "1 2GiB"]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["bench", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("value", BAD_EFFECTIVE)
def test_a_bad_effective_batch_is_one_line_naming_the_flag(capsys, value: str) -> None:
    code, out, err = run_cli(capsys, f"--effective-batch={value}")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: --effective-batch {value}: "), err
    assert "e.g. --effective-batch 256" in err


@pytest.mark.parametrize("value", BAD_MEMORY)
def test_a_bad_memory_limit_is_one_line_naming_the_flag(capsys, value: str) -> None:
    code, _, err = run_cli(capsys, "--effective-batch", "64", f"--memory-limit={value}")
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: --memory-limit {value}: "), err
    assert "e.g. --memory-limit 2GiB" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--memory-limit", "2GiB"], "error: --memory-limit: only applies when tuning the training step"),
        (["--precision", "bf16"], "error: --precision: only applies when tuning the training step"),
        (["--effective-batch", "8", "--distributed"], "error: --distributed: does not apply with --effective-batch"),
        (["--effective-batch", "8", "--storage", "files"], "error: --storage: does not apply with --effective-batch"),
        (["--effective-batch", "8", "--max-workers", "2"], "error: --max-workers: does not apply"),
        (["--effective-batch", "8", "--threshold", "a=1"], "error: --threshold: does not apply"),
        (["--effective-batch", "8", "--precision", "fp8"], "error: argument --precision: invalid choice: 'fp8'"),
        (["--effective-batch", "8", "--batch-size", "16"], "error: --batch-size: 16 is above the effective batch, 8"),
    ],
)
def test_flags_of_the_other_mode_are_refused(capsys, argv: list, said: str) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and err.startswith(said), err


def test_bad_input_with_json_is_the_error_envelope(capsys) -> None:
    code, out, err = run_cli(capsys, "--effective-batch", "2.5", "--json")
    assert code == 2 and "--effective-batch 2.5" in err
    envelope = json.loads(out)
    assert envelope["format"] == "bootstrap.error" and envelope["error"]["exit_code"] == 2


def test_a_bad_value_is_refused_by_the_real_command_before_torch_is_imported(tmp_path: Path) -> None:
    probe = "import sys, runpy; sys.argv = ['bootstrap', 'bench', '--effective-batch', '0']\n"
    probe += "try:\n    runpy.run_module('bootstrap', run_name='__main__')\n"
    probe += "except SystemExit as exc:\n    print('torch' in sys.modules, exc.code)\n"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "2"], done.stderr
    assert done.stderr.splitlines() == [
        "error: --effective-batch 0: must be at least 1 sample (the samples one optimizer update sees in your "
        "recipe, e.g. --effective-batch 256)"
    ]


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("1024", 1024), ("2GiB", 2 * 2**30), ("512MiB", 512 * 2**20), ("8GB", 8 * 10**9), ("1.5G", 3 * 2**29)]
    + [("64 KiB", 64 * 2**10), ("3b", 3), (".5TiB", 2**39)],
)
def test_memory_sizes_read_binary_and_decimal_units(text: str, nbytes: int) -> None:
    assert memory_size(text) == nbytes


def test_an_effective_batch_is_a_whole_number() -> None:
    assert effective_batch("256") == 256 and effective_batch(" +8 ") == 8


def test_the_engines_keywords_become_flags_and_parts() -> None:
    names = {"model": "--model my:model", "dataset": "--dataset my:make", "step": "the built-in step"}
    fits = InputError("tune_training(model=...)", "does not fit", "raise memory_limit, or use a smaller model")
    assert str(as_flags(fits, names)) == "--model my:model: does not fit (raise --memory-limit, or use a smaller model)"
    budget = InputError("tune_training(budget=...)", "expected seconds > 0", "e.g. budget=120")
    assert str(as_flags(budget, names)) == "--budget: expected seconds > 0 (e.g. --budget 120)"
    other = InputError("--dataset my:make", "is empty")
    assert as_flags(other, names) is other


def test_a_step_that_calls_backward_itself_and_returns_the_loss_is_told_the_contract() -> None:
    torch = pytest.importorskip("torch")
    from bootstrap.bench.training import TrainingOptions, Workbench

    def step(model, batch, device):
        loss = torch.nn.functional.cross_entropy(model(batch[0]), batch[1])
        loss.backward()
        return loss

    data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    bench = Workbench(data, torch.nn.Linear(4, 2), step, TrainingOptions(effective_batch=8, tune_loader=False))
    model, optimizer = bench.model(False)
    with pytest.raises(InputError) as raised:
        bench.step(model, optimizer, bench.batch(4), "fp32")
    error = raised.value
    assert error.where == "tune_training(step=...)"
    assert "returned a loss it had already called backward() on" in error.problem
    assert error.fix == "return the loss and let bench call backward() and step, or do both yourself and return None"


# --------------------------------------------------------------------------- the report, from a given advice


def advice(**changes) -> TrainingAdvice:
    grid = (
        GridRow(32, "fp32", False, 1000.0, 40 * 2**20, True),
        GridRow(32, "bf16", False, 1500.0, 25 * 2**20, True),
        GridRow(64, "fp32", False, 1100.0, 80 * 2**20, True),
        GridRow(64, "bf16", False, 2000.0, 50 * 2**20, True),
        GridRow(128, "fp32", False, None, None, False),
        GridRow(128, "bf16", False, None, 3 * 2**30, False),
    )
    checks = (
        Check("training.precision", Status.OK, "bf16 losses within 0.10% of fp32's", "within 5%"),
        Check("training.accumulation", Status.WARN, "the model has BatchNorm", "equivalent", "use GroupNorm"),
        Check("training.not_slower", Status.OK, "64 bf16: 2000 samples/s, 2.00x yours", "no slower"),
    )
    values = {
        "micro_batch": 64,
        "accumulation_steps": 4,
        "precision": "bf16",
        "channels_last": False,
        "dataloader_kwargs": {"num_workers": 2, "pin_memory": True},
        "grid": grid,
        "max_micro_batch": 100,
        "effective_batch": 256,
        "device": "cuda",
        "checks": checks,
        "notes": ("a note",),
        "gains": {"over_current": 2.0, "over_fixed_advice": 1.5},
    }
    values.update(changes)
    return TrainingAdvice(**values)


def test_the_text_report_leads_with_the_verdict_and_the_recipe_and_ends_with_the_snippet() -> None:
    text = render_text(advice(), "dataset my:make, model my:model")
    lines = text.splitlines()
    assert lines[0] == "Verdict:    passed, with 1 warning (accumulation)"
    assert lines[1].startswith("Run with:   micro-batch 64 x 4 accumulation steps (effective batch 256), bf16")
    summary = text[: text.index("---- details")]
    assert "DataLoader(num_workers=2, pin_memory=True)" in " ".join(summary.split())
    assert "2.00x your settings (32 fp32)" in " ".join(summary.split())
    assert "1.50x the fixed advice" in " ".join(summary.split())
    assert "To improve: accumulation: use GroupNorm" in summary
    assert all(len(line) < 100 for line in summary.splitlines())
    table = text[text.index("MICRO") :]
    header = ["MICRO", "PRECISION", "LAYOUT", "SAMPLES/S", "TIMED", "PEAK", "MEMORY", "FITS"]
    assert table.splitlines()[0].split() == header
    recommended = [line for line in table.splitlines() if line.endswith("<- recommended")]
    assert len(recommended) == 1 and recommended[0].split()[:6] == ["64", "bf16", "contiguous", "2,000", "1", "50.0"]
    assert "3.0 GiB" in table and "note: a note" in text
    assert text.index("training.accumulation") < text.index("# ---- paste")
    assert text.rstrip().endswith("optimizer.zero_grad(set_to_none=True)")


def test_without_a_batch_size_the_baseline_is_not_called_yours() -> None:
    text = " ".join(render_text(advice(), given=False).split())
    assert "your settings" not in text and "2.00x fp32 at the largest micro-batch timed (32 fp32)" in text


def test_a_failed_check_is_the_verdict_and_the_first_thing_to_fix() -> None:
    failed = Check("training.not_slower", Status.FAIL, "slower", "no slower", "keep yours")
    text = render_text(advice(checks=(failed,)))
    assert text.startswith("Verdict:    FAILED: 1 check failed (not_slower)")
    assert "Fix first:  not_slower: keep yours" in text


def test_the_json_is_the_training_envelope_and_reads_back() -> None:
    data = json.loads(envelope_json(advice()))
    assert data["format"] == "bootstrap.training" and data["version"] == FORMATS["bootstrap.training"]
    assert TrainingAdvice.from_json(data) == advice()


def test_the_png_has_a_line_per_precision_in_each_panel_and_rings_the_recommendation() -> None:
    pytest.importorskip("PIL")
    from bootstrap.bench.training_plot import layout, render_png

    chart = layout(advice())
    roles = chart.roles()
    assert roles.count("rate-line") == 2 and roles.count("memory-line") == 2  # fp32 and bf16
    assert roles.count("recommended") == 2  # its rate and its memory
    assert {t.text for t in chart.texts if t.role == "micro-tick"} == {"32", "64", "128"}
    assert sorted(t.text for t in chart.texts if t.role == "legend")[:2] == ["bf16", "fp32"]
    assert render_png(advice()).startswith(b"\x89PNG")


# --------------------------------------------------------------------------- whole runs (slow)


def bench(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    (tmp_path / "tinymod.py").write_text(MODULE)
    command = [sys.executable, "-m", "bootstrap", "bench", "--path", str(tmp_path), "--dataset", "tinymod:make"]
    command += ["--device", "cpu", "--quiet", *argv]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_a_run_prints_the_report_and_writes_the_json_and_the_png(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = bench(
        tmp_path, "--model", "tinymod:model", "--effective-batch", "32", "--batch-size", "8", "--budget", "3",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    assert done.stdout.startswith("Verdict:") and "Run with:" in done.stdout and "Speed:" in done.stdout
    assert "MICRO  PRECISION" in done.stdout and "# ---- paste" in done.stdout
    data = json.loads((out / "training.json").read_text())
    assert data["format"] == "bootstrap.training" and data["effective_batch"] == 32
    assert data["micro_batch"] * data["accumulation_steps"] == 32
    assert (out / "training.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_json_and_no_png(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ("--model", "tinymod:model", "--effective-batch", "16", "--budget", "3", "--json", "--no-png")
    done = bench(tmp_path, *argv, "--out", str(out))
    assert done.returncode in (0, 1), done.stderr
    envelope = json.loads(done.stdout)  # the whole of stdout
    assert envelope["format"] == "bootstrap.training" and envelope["version"] == 1
    assert envelope == json.loads((out / "training.json").read_text())
    assert not (out / "training.png").exists()


@pytest.mark.slow
def test_the_memory_limit_stops_the_search_at_the_size_it_allows(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from bootstrap.bench.training import TrainingOptions, Workbench

    (tmp_path / "tinymod.py").write_text(MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        import tinymod

        workbench = Workbench(tinymod.make(), tinymod.model(), None, TrainingOptions(effective_batch=64))
        torch.set_num_threads(1)
        peaks = {size: workbench.peak(size) for size in (12, 13)}
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tinymod", None)
    limit = (peaks[12] + peaks[13]) // 2
    done = bench(
        tmp_path, "--model", "tinymod:model", "--effective-batch", "64", "--memory-limit", f"{limit}B",
        "--budget", "6", "--json", "--no-png", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    envelope = json.loads(done.stdout)
    assert envelope["max_micro_batch"] == 12
    assert all(row["micro"] <= 12 or not row["fits"] for row in envelope["grid"])


@pytest.mark.slow
def test_a_model_that_never_fits_is_one_line_naming_it(tmp_path: Path) -> None:
    done = bench(tmp_path, "--model", "tinymod:huge", "--effective-batch", "8", "--memory-limit", "1MiB")
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: --model tinymod:huge: a training step does not fit even one sample")
    assert "raise --memory-limit" in lines[0]


BROKEN = """\
import torch
from torch import nn
from torch.utils.data import TensorDataset


def make():
    return TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        raise ValueError("a shape this model did not expect")


def model():
    return Broken()
"""


def test_an_error_in_the_users_model_names_it_and_its_line(tmp_path: Path, capsys) -> None:
    pytest.importorskip("torch")
    (tmp_path / "training_cli_broken.py").write_text(BROKEN)
    workload = [
        "--path",
        str(tmp_path),
        "--dataset",
        "training_cli_broken:make",
        "--model",
        "training_cli_broken:model",
    ]
    argv = [*workload, "--effective-batch", "8", "--device", "cpu", "--quiet", "--out", str(tmp_path / "out")]
    try:
        code, out, err = run_cli(capsys, *argv, "--json", "-v")
    finally:
        sys.modules.pop("training_cli_broken", None)
    assert code == 2
    message = "--model training_cli_broken:model: raised ValueError: a shape this model did not expect"
    assert err.startswith(f"error: {message} (")
    assert f"{tmp_path / 'training_cli_broken.py'}:16 in forward" in err  # -v: the user's own frame
    frames = json.loads(out)["error"]["frames"]
    assert frames == [{"file": str(tmp_path / "training_cli_broken.py"), "line": 16, "function": "forward"}]
    assert not (tmp_path / "out" / "training.json").exists()


HOSTILE = """\
import torch
from torch import nn
from torch.utils.data import Dataset


class Ragged(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, index):
        return torch.ones(4 + index % 3), index % 2


def ragged():
    return Ragged()


def fixed():
    return torch.utils.data.TensorDataset(torch.ones(32, 4), torch.zeros(32, dtype=torch.long))


def model():
    return nn.Linear(4, 2)


def no_checkpoint():
    raise FileNotFoundError("checkpoint.pt")
"""


@pytest.mark.parametrize(
    ("dataset", "model", "said"),
    [
        # no --batch-size: bench's first batch is read unbatched, and the tuner's own stacking fails
        ("ragged", "model", "error: --dataset training_cli_hostile:ragged: its samples do not batch with "
         "default_collate: RuntimeError: stack expects"),
        ("fixed", "no_checkpoint", "error: --model training_cli_hostile:no_checkpoint: raised FileNotFoundError: "
         "checkpoint.pt\n"),
    ],
)  # fmt: skip
def test_a_dataset_or_model_factory_that_fails_is_one_line_naming_its_flag(
    tmp_path: Path, capsys, dataset: str, model: str, said: str
) -> None:
    pytest.importorskip("torch")
    (tmp_path / "training_cli_hostile.py").write_text(HOSTILE)
    workload = ["--path", str(tmp_path), "--dataset", f"training_cli_hostile:{dataset}"]
    workload += ["--model", f"training_cli_hostile:{model}", "--effective-batch", "8"]
    try:
        code, out, err = run_cli(capsys, *workload, "--device", "cpu", "--quiet", "--out", str(tmp_path / "out"))
    finally:
        sys.modules.pop("training_cli_hostile", None)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(said), err
    assert "collate" not in err or "--collate MODULE:FN" in err
    assert not (tmp_path / "out").exists()


def test_a_device_this_torch_lacks_is_one_line_naming_the_flag(capsys) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    code, out, err = run_cli(capsys, "--effective-batch", "8", "--device", "cuda", "--quiet")
    assert code == 2 and out == ""
    assert err == "error: --device: cuda: CUDA is not available to this torch (use --device 'cpu' or 'auto')\n"


@pytest.mark.parametrize("json_out", [True, False])
def test_a_report_that_cannot_be_written_is_printed_then_one_line(
    tmp_path: Path, monkeypatch, capsys, json_out
) -> None:
    import errno
    import os

    import bootstrap.bench.training_report as training_report
    from bootstrap.commands import bench_training

    def denied(*args, **kwargs):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(bench_training, "tune", lambda args, options, progress: (advice(), "a workload"))
    monkeypatch.setattr(training_report, "write_reports", denied)
    code, out, err = run_cli(
        capsys, "--effective-batch", "256", "--quiet", "--out", str(tmp_path), *["--json"] * json_out
    )
    assert code == 2
    if json_out:
        assert json.loads(out)["format"] == "bootstrap.training"  # one document: the report
    else:
        assert out.startswith("Verdict:") and "# ---- paste" in out
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {tmp_path}: could not write training.json and training.png: Permission denied")
