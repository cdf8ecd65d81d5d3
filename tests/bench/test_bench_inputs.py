"""What bench refuses before it measures anything: option types and ranges, thresholds, paths.

Each bad value is one InputError line (exit 2) naming where it was given: the
flag (`--budget`), or the config file and field (`FILE: options.batch_size`).
"""

from __future__ import annotations

import argparse

import pytest

from bootstrap.bench.config import BenchOptions, ThresholdSet, WorkloadSpec, load_config
from bootstrap.errors import InputError


def build(argv, tmp_path=None, config_text=None):
    from bootstrap.commands.bench import build_options, configure

    parser = argparse.ArgumentParser()
    configure(parser)
    if config_text is not None:
        path = tmp_path / "bench.yaml"
        path.write_text(config_text)
        argv = ["--config", str(path), *argv]
    return build_options(parser.parse_args(argv))


@pytest.mark.parametrize(
    "options, problem",
    [
        ('{batch_size: "128"}', "options.batch_size: expected an integer from 1 to 65,536, got '128' (text)"),
        ("{batch_size: 12.5}", "options.batch_size: expected an integer from 1 to 65,536, got 12.5"),
        ("{batch_size: true}", "options.batch_size: expected an integer from 1 to 65,536, got true"),
        ('{budget_s: "60"}', "options.budget_s: expected a number > 0 and <= 86,400, got '60' (text)"),
        ("{cpu_ms: null}", "options.cpu_ms: expected a number from 0 to 60,000, got null"),
        ("{device: 5}", "options.device: expected text, got 5"),
        ("{data_dir: 5}", "options.data_dir: expected a path, got 5"),
        ('{max_workers: "4"}', "options.max_workers: expected an integer from 0 to 1,024, got '4' (text)"),
        ("{num_classes: 0}", "options.num_classes: expected an integer from 1 to 1,000,000, got 0"),
        ('{seed: "x"}', "options.seed: expected an integer from 0 to 4,294,967,295, got 'x' (text)"),
        ('{cold_cache: "no"}', "options.cold_cache: expected true or false, got 'no' (text)"),
        ("{jpeg_quality: 500}", "options.jpeg_quality: expected an integer from 1 to 100, got 500"),
        ("{storage: tape}", "options.storage: expected one of memory, files, packed, got 'tape' (text)"),
        # valid types, bad values: still named by file and field, not by a flag the user never typed
        ("{batch_size: 0}", "options.batch_size: expected an integer from 1 to 65,536, got 0"),
        ("{budget_s: .nan}", "options.budget_s: expected a number > 0 and <= 86,400, got nan"),
        ("{crop_size: 300}", "options.crop_size: the crop (300) is larger than the image (256)"),
        ("{cold_cache: true}", "options.cold_cache: only applies to files on disk"),
        ("{data_dir: /tmp}", "options.data_dir: only used by --storage files or packed"),
    ],
)
def test_config_options_are_checked_and_named_by_file_and_field(tmp_path, options, problem):
    with pytest.raises(InputError) as info:
        build([], tmp_path, f"options: {options}\n")
    assert str(info.value).startswith(f"{tmp_path / 'bench.yaml'}: {problem}")


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["--budget", "nan"], "--budget: expected a number > 0 and <= 86,400, got nan"),
        (["--budget", "inf"], "--budget: expected a number > 0 and <= 86,400, got inf"),
        (["--budget", "1e30"], "--budget: expected a number > 0 and <= 86,400, got 1e+30"),
        (["--cpu-ms", "nan"], "--cpu-ms: expected a number from 0 to 60,000, got nan"),
        (["--io-ms", "inf"], "--io-ms: expected a number from 0 to 60,000, got inf"),
        (["--target-rate", "-5"], "--target-rate: expected a number > 0 and <= 1,000,000,000,000, got -5.0"),
        (["--crop-size", "1", "--image-size", "1"], "--image-size: expected an integer from 16 to 8,192, got 1"),
        (["--max-workers", "-1"], "--max-workers: expected an integer from 0 to 1,024, got -1"),
        (["--device", "cuda:x"], "--device: 'cuda:x' is not auto, cpu, cuda, cuda:N or mps"),
        (["--cold-cache"], "--cold-cache: only applies to files on disk"),
        (["--storage", "files", "--data-dir", "/etc/passwd"], "--data-dir: /etc/passwd is not a directory"),
        (
            ["--storage", "packed", "--data-dir", "/etc/passwd/x"],
            "--data-dir: cannot create /etc/passwd/x: /etc/passwd is not",
        ),
        (["--threshold", "efficiency_pass=nan"], "--threshold efficiency_pass: expected a number from 0 to 1, got nan"),
        (
            ["--threshold", "efficiency_pass=1e400"],
            "--threshold efficiency_pass: expected a number from 0 to 1, got inf",
        ),
        (
            ["--threshold", "efficiency_warn=0.95"],
            "--threshold efficiency_warn: 0.95 is above efficiency_pass 0.9 (from default)",
        ),
    ],
)
def test_flags_are_finite_and_in_range(argv, problem):
    with pytest.raises(InputError) as info:
        build(argv)
    assert str(info.value).startswith(problem)


def test_a_flag_overrides_a_bad_config_value_only_after_the_file_is_checked(tmp_path):
    """The file is read whole: a bad value there is an error even when a flag would replace it."""
    with pytest.raises(InputError, match=r"options\.batch_size"):
        build(["--batch-size", "8"], tmp_path, "options: {batch_size: -1}\n")
    assert build(["--batch-size", "8"], tmp_path, "options: {batch_size: 16, cpu_ms: 2}\n").workload.cpu_ms == 2.0


def test_a_threshold_flag_against_a_file_value_names_both_sources(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("thresholds: {efficiency_warn: 0.6}\n")
    thresholds, _ = load_config(path)
    with pytest.raises(InputError) as info:
        thresholds.override({"efficiency_pass": "0.5"}, "--threshold")
    assert str(info.value).startswith(f"--threshold efficiency_pass: 0.5 is below efficiency_warn 0.6 (from {path})")
    assert thresholds.override({"efficiency_pass": "0.6"}, "--threshold").values.efficiency_pass == 0.6


def test_duplicate_config_keys_are_refused(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("options:\n  budget_s: 10\n  budget_s: 20\n")
    with pytest.raises(InputError, match="given twice"):
        load_config(path)


def test_run_flags_reach_the_options():
    """The slow-batch budget test (test_bench_budget) sets these in the library; the flags carry them there."""
    options = build(["--max-workers", "1", "--budget", "6", "--io-ms", "40", "--step-ms", "5", "--device", "cpu"])
    assert (options.max_workers, options.budget_s, options.device) == (1, 6.0, "cpu")
    assert (options.workload.io_ms, options.workload.step_ms) == (40.0, 5.0)


def test_library_callers_get_the_same_checks_named_by_flag():
    with pytest.raises(InputError, match="^--num-classes: expected an integer"):
        WorkloadSpec(num_classes=0).validate()
    with pytest.raises(InputError, match="^--budget: expected a number"):
        BenchOptions(budget_s=float("nan")).validate()
    with pytest.raises(InputError, match="^--max-workers: expected an integer"):
        BenchOptions(max_workers=2.5).validate()
    assert ThresholdSet().values.efficiency_pass == 0.9


@pytest.mark.parametrize(
    "keywords, message",
    [
        ({"batch_size": 0}, "tune_loader(batch_size=...): expected an integer from 1 to 65,536, got 0"),
        (
            {"batch_size": 1000},
            "dataset TensorDataset: has 10 samples, fewer than one batch (1000) (give a smaller batch_size)",
        ),
        ({"budget": True}, "tune_loader(budget=...): expected a number > 0 and <= 86,400, got True"),
        (
            {"device": "metal"},
            "tune_loader(device=...): 'metal' is not auto, cpu, cuda, cuda:N or mps (e.g. device='cuda:0')",
        ),
        ({"max_workers": "2"}, "tune_loader(max_workers=...): expected an integer from 0 to 1,024, got '2'"),
        ({"collate_fn": 5}, "tune_loader(collate_fn=...): is a int, not a callable"),
        (
            {"collate_fn": list},
            "the built-in step (tiny): failed on the first batch: AttributeError: 'tuple' object "
            "has no attribute 'to' (the built-in step takes (images, labels) batches, not a "
            "list of 4 items; or pass step=)",
        ),
    ],
)
def test_tune_loader_names_its_keywords_and_python_values(keywords, message):
    """A script's errors name what the script wrote (`batch_size=`, None), not the CLI's flags (null)."""
    import torch

    from bootstrap.bench import tune_loader

    dataset = torch.utils.data.TensorDataset(torch.zeros(10, 3, 16, 16))
    with pytest.raises(InputError) as raised:
        tune_loader(dataset, **{"batch_size": 4, "budget": 1, "device": "cpu", **keywords})
    assert str(raised.value) == message


# --------------------------------------------------------------------------- --data-dir at run time


@pytest.mark.slow
def test_data_dir_gets_a_fresh_directory_that_is_removed(tmp_path):
    """--data-dir DIR: the samples go to a fresh directory of their own inside DIR, removed after the run;
    a user's files in DIR are never overwritten."""
    from tests.fixtures.bench import SMALL, bench

    data = tmp_path / "data"
    (data / "samples").mkdir(parents=True)
    (data / "samples" / "000000.jpg").write_text("mine")
    done = bench(
        "--budget",
        "1",
        "--quiet",
        "--no-png",
        "--storage",
        "files",
        "--data-dir",
        str(data),
        "--out",
        str(tmp_path / "out"),
        *SMALL,
    )
    assert done.returncode in (0, 1), done.stderr
    assert sorted(p.name for p in data.iterdir()) == ["samples"]
    assert [p.read_text() for p in (data / "samples").iterdir()] == ["mine"]


@pytest.mark.slow  # a bench process on a tmpfs made full
def test_data_dir_on_a_full_disk_is_one_line():
    from tests.fixtures.bench import SMALL
    from tests.fixtures.mounts import can_unshare, in_private_mounts

    if not can_unshare():
        pytest.skip("needs root and unshare -m to mount a private tmpfs")
    done = in_private_mounts(
        "mkdir -p /mnt/bench-data && mount -t tmpfs -o size=4k tmpfs /mnt/bench-data\n"
        f"$PY -m bootstrap bench --budget 5 --quiet --out /tmp --no-png {' '.join(SMALL)} "
        "--storage packed --data-dir /mnt/bench-data"
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "error: --data-dir: cannot write the sample files (--storage packed) "
        "in /mnt/bench-data: No space left on device "
        "(give --data-dir a directory with room to write)"
    )


def test_a_gpu_index_this_host_lacks_is_one_line(monkeypatch):
    """`--device cuda:3` on a one-GPU host: before, a traceback from torch (invalid device ordinal) after the
    workload was built, where `--device cuda` without CUDA already said it in one line."""
    import torch

    from bootstrap.bench import run_bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(InputError, match=r"^--device: cuda:3: this torch sees 1 GPU \(cuda:0\)"):
        run_bench(BenchOptions(device="cuda:3", budget_s=5.0))
