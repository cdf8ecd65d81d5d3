"""The user's code misbehaving in ways a Dataset should not: exiting the process, exiting a worker,
raising what is no Exception, exceptions that cannot be printed or are a file long, hanging in its
import, its factory or its step, changing directory. Each is one line naming the user's reference,
exit 2, nothing written to --out; `tune_loader` raises rather than returning advice.

Real DataLoaders on this CPU; a hang waits for the watchdog, whose grace past the budget is cut to
a second here.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from bootstrap.bench import watchdog as watchdog_module

BATCH = 8

HOSTILE = textwrap.dedent('''
    import os
    import sys
    import threading
    import time

    import torch
    from torch.utils.data import Dataset, get_worker_info


    class Fails(Dataset):
        """Fine for `good` samples in this process, then `fail()`; with `in_workers`, fails in any worker."""

        def __init__(self, fail, good=0, in_workers=False):
            self.fail, self.good, self.in_workers, self.loaded = fail, good, in_workers, 0

        def __len__(self):
            return 64

        def __getitem__(self, index):
            self.loaded += 1
            if (get_worker_info() is not None) if self.in_workers else self.loaded > self.good:
                self.fail()
            return torch.zeros(3, 8, 8, dtype=torch.uint8), index % 10


    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no text for you")


    def exit_0():
        sys.exit(0)


    def exit_3_hard():
        os._exit(3)


    def generator_exit():
        raise GeneratorExit


    def unprintable():
        raise Unprintable()


    def long_message():
        raise ValueError("x" * 100_000)


    def hang():
        while True:
            time.sleep(3600)


    def sys_exit_at_once():
        return Fails(exit_0)

    def sys_exit_later():
        return Fails(exit_0, good=40)

    def generator_exit_at_once():
        return Fails(generator_exit)

    def unprintable_at_once():
        return Fails(unprintable)

    def long_message_at_once():
        return Fails(long_message)

    def long_message_in_workers():
        return Fails(long_message, in_workers=True)

    def sys_exit_in_workers():
        return Fails(exit_0, in_workers=True)

    def os_exit_in_workers():
        return Fails(exit_3_hard, in_workers=True)

    def good():
        return Fails(None, good=10 ** 9)

    def hanging_factory():
        hang()

    def moving():
        os.chdir("/")
        return good()


    class Everything:
        def __getattr__(self, name):
            raise RuntimeError("getattr " + name)


    def hostile_getattr():
        return Everything()


    def exiting_step(model, batch, device):
        sys.exit(0)


    def hanging_step(model, batch, device):
        hang()


    STEPS = [0]


    def fails_after_set_up(model, batch, device):
        """Set-up's two steps pass; every step after them fails, in whichever loader config it runs."""
        STEPS[0] += 1
        if STEPS[0] > 2:
            raise RuntimeError("the step broke")


    def hanging_model():
        hang()


    def a_string():
        return "/data/train"


    class Named(Fails):
        def __getitem__(self, index):
            return super().__getitem__(index)[0], "cat"


    def string_labels():
        return Named(None, good=10 ** 9)


    collate_lambda = lambda samples: torch.utils.data.default_collate(samples)  # noqa: E731


    class LockedCollate:
        def __init__(self):
            self.lock = threading.Lock()

        def __call__(self, samples):
            return torch.utils.data.default_collate(samples)


    collate_locked = LockedCollate()


    class Endless(Fails):
        def __len__(self):
            return 2 ** 62


    def endless():
        return Endless(None, good=10 ** 9)
''')


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """The module on sys.path (put back afterwards), the watchdog's grace cut to a second."""
    (tmp_path / "hostile.py").write_text(HOSTILE)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.setattr(watchdog_module, "GRACE_MIN_S", 1.0)
    monkeypatch.setattr(watchdog_module, "GRACE_SHARE", 0.0)
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith(("hostile", "syntax_error", "slow_import"))]:
        del sys.modules[name]


def bench(tmp_path: Path, capsys, *argv: str, budget: str = "3") -> tuple:
    """(exit code, stderr) of an in-process `bench ARGV`; asserts --out stayed empty."""
    from bootstrap.cli import main

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
            budget,
            "--out",
            str(out),
            "--path",
            str(tmp_path),
            *argv,
        ]
    )
    err = capsys.readouterr().err
    if code == 2:
        assert not out.exists() or not any(out.iterdir()), err
    return code, err


def refused(result: tuple, start: str, *words: str) -> None:
    """`bench`'s (exit code, stderr) is exit 2 and the one line `one_line` checks."""
    code, err = result
    assert code == 2, err
    one_line(err, start, *words)


def one_line(err: str, start: str, *words: str) -> None:
    assert err.count("\n") == 1 and err.startswith(f"error: {start}") and len(err) < 500, err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize(
    "factory, words",
    [
        ("sys_exit_at_once", "could not load one batch: SystemExit: 0 (a sample must return, not exit)"),
        ("generator_exit_at_once", "could not load one batch: GeneratorExit"),
        ("unprintable_at_once", "could not load one batch: Unprintable"),
        ("long_message_at_once", "could not load one batch: ValueError: xxxx"),
        ("hostile_getattr", "looking up __len__ raised RuntimeError: getattr __len__"),
        ("a_string", "returned a str, not a Dataset"),
        ("endless", "has 4611686018427387904 samples: bench shuffles with torch.randperm"),
    ],
)
def test_what_the_first_batch_raises_is_one_line_whatever_it_is(hostile, capsys, factory, words):
    refused(bench(hostile, capsys, "--dataset", f"hostile:{factory}"), f"--dataset hostile:{factory}: ", words)


@pytest.mark.slow
def test_a_sample_that_exits_the_process_mid_run_stops_the_run_in_one_line(hostile, capsys):
    """sys.exit in a later sample, in this process: not a silent exit 0. The budget is ample so that a busy
    host's slow set-up still leaves the in-process phases time to load the failing sample; the exit ends
    the run long before the budget does."""
    refused(
        bench(hostile, capsys, "--dataset", "hostile:sys_exit_later", budget="60"),
        "--dataset hostile:sys_exit_later: SystemExit: 0 in the ",
        "phase: stopped (a sample, collate or step must return, not exit",
    )


def test_a_step_that_exits_is_named(hostile, capsys):
    refused(
        bench(hostile, capsys, "--dataset", "hostile:good", "--step", "hostile:exiting_step"),
        "--step hostile:exiting_step: failed on the first batch: SystemExit: 0",
    )


def test_a_step_that_raises_mid_run_is_named_not_taken_for_an_exit(hostile, capsys):
    """A step raising after set-up (in the ceiling, or a loader's window) names --step and its error."""
    refused(
        bench(hostile, capsys, "--dataset", "hostile:good", "--step", "hostile:fails_after_set_up"),
        "--step hostile:fails_after_set_up: raised RuntimeError: the step broke ",
        "fix it for this batch",
    )


def test_a_step_raising_runtime_error_beside_workers_is_the_step_s_error_not_dead_workers(hostile):
    """The step runs in this process between two `next(loader)`: its RuntimeError, raised while workers
    run, is not torch's 'DataLoader worker exited' and must not make the config a failed one (exit 0)."""
    from bootstrap.bench.config import BenchOptions, WorkloadSpec
    from bootstrap.bench.measure import measure_loader
    from bootstrap.bench.results import LoaderConfig
    from bootstrap.bench.run import clean_up, set_up
    from bootstrap.bench.state import new_state
    from bootstrap.bench.user import UserWorkload
    from bootstrap.errors import InputError

    user = UserWorkload("hostile:good", step="hostile:fails_after_set_up", paths=(str(hostile),))
    state = new_state(BenchOptions(workload=WorkloadSpec(batch_size=BATCH), budget_s=60, device="cpu", user=user))
    try:
        set_up(state)
        with pytest.raises(
            InputError,
            match=r"^--step hostile:fails_after_set_up: raised RuntimeError: the step "
            r"broke while bench measured w=2 ",
        ):
            measure_loader(state, LoaderConfig(num_workers=2), 0.2, time.perf_counter() + 30, "tune", with_step=True)
        assert state.failures == []
    finally:
        clean_up(state)


@pytest.mark.slow
@pytest.mark.parametrize(
    "factory, lead, words",
    [
        ("sys_exit_in_workers", "a DataLoader worker exited", "(a sys.exit or os._exit in a sample or collate"),
        ("os_exit_in_workers", "a DataLoader worker exited", ", while bench measured w="),  # "with code 3" at times
        ("long_message_in_workers", "a sample failed to load while bench measured w=", "ValueError: xxxx"),
    ],
)
def test_a_worker_that_exits_or_fails_is_the_dataset_s_fault_not_a_failed_config(hostile, capsys, factory, lead, words):
    refused(
        bench(hostile, capsys, "--dataset", f"hostile:{factory}", budget="8"),
        f"--dataset hostile:{factory}: {lead}",
        words,
    )


@pytest.mark.slow
def test_a_factory_that_hangs_is_stopped_with_the_watchdog_s_words(hostile, capsys):
    refused(
        bench(hostile, capsys, "--dataset", "hostile:hanging_factory", budget="1"),
        "--dataset hostile:hanging_factory: still running ",
        "in the setup phase: stopped",
    )


@pytest.mark.slow
def test_a_step_that_hangs_is_named_beside_the_dataset(hostile, capsys):
    refused(
        bench(hostile, capsys, "--dataset", "hostile:good", "--step", "hostile:hanging_step", budget="1"),
        "--dataset hostile:good --step hostile:hanging_step: still running ",
    )


@pytest.mark.slow
def test_a_model_factory_that_hangs_is_named(hostile, capsys):
    refused(
        bench(hostile, capsys, "--dataset", "hostile:good", "--model", "hostile:hanging_model", budget="1"),
        "--dataset hostile:good --model hostile:hanging_model: still running ",
    )


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--dataset", "hostile:good", "--path", "{tmp}/missing"], "--path {tmp}/missing: is not a directory"),
        (
            ["--dataset", "hostile:good", "--threshold", "efficency_pass=0.8"],
            "--threshold: unknown threshold 'efficency_pass' (did you mean efficiency_pass?)",
        ),
        (
            ["--dataset", "hostile:good", "--threshold", "nosuch=1"],
            "--threshold: unknown threshold 'nosuch' (one of 22",
        ),
    ],
)
def test_options_around_the_dataset_are_checked_in_one_short_line(hostile, capsys, tmp_path, argv, words):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    refused(bench(hostile, capsys, *argv), words.replace("{tmp}", str(tmp_path)))


def test_string_labels_for_the_built_in_step_are_told_to_be_indices_not_smaller_numbers(hostile, capsys):
    refused(
        bench(hostile, capsys, "--dataset", "hostile:string_labels"),
        "the built-in step (tiny) on --dataset hostile:string_labels: failed on the first batch: AttributeError: ",
        "(the built-in step takes labels as a tensor of class indices below 100, not a tuple of str: return each "
        "label as an int index from __getitem__, or give --step MODULE:FN)",
    )


def test_a_lambda_collate_under_spawn_is_named_not_blamed_on_the_dataset(hostile, capsys, monkeypatch):
    from bootstrap.compat import host

    monkeypatch.setattr(host, "probe_start_method", lambda: ("spawn", True))
    refused(
        bench(hostile, capsys, "--dataset", "hostile:good", "--collate", "hostile:collate_lambda"),
        "--collate hostile:collate_lambda: cannot be sent to DataLoader workers started by spawn: PicklingError: ",
        "(define it with def at a module's top level: a lambda or a nested function does not pickle)",
    )


def test_a_collate_object_that_does_not_pickle_under_spawn_is_told_what_it_holds(hostile, capsys, monkeypatch):
    from bootstrap.compat import host

    monkeypatch.setattr(host, "probe_start_method", lambda: ("spawn", True))
    refused(
        bench(hostile, capsys, "--dataset", "hostile:good", "--collate", "hostile:collate_locked"),
        "--collate hostile:collate_locked: cannot be sent to DataLoader workers started by spawn: TypeError: ",
        "(the LockedCollate object is sent with what it holds: keep what does not pickle (a lock, ",
    )


def test_torch_s_pickling_warning_does_not_leak_beside_the_one_line(recwarn):
    """What DataLoader warns when a worker's arguments do not pickle is the run's one line already."""
    import torch
    from torch.utils.data import DataLoader

    from bootstrap.bench.loader import BatchStream

    class Holding(torch.utils.data.Dataset):
        def __init__(self):
            self.transform = lambda sample: sample

        def __len__(self):
            return 4

        def __getitem__(self, index):
            return torch.zeros(2)

    with pytest.raises(Exception, match="pickle"):
        BatchStream(DataLoader(Holding(), batch_size=2, num_workers=1, multiprocessing_context="spawn"))
    assert not [w for w in recwarn if "pickle" in str(w.message)], [str(w.message) for w in recwarn]


@pytest.mark.parametrize("exc, exited", [(ValueError("bad"), False), (SystemExit(3), True)])
def test_only_an_exit_mid_run_is_told_to_return_not_exit(exc, exited):
    from bootstrap.bench.config import BenchOptions
    from bootstrap.bench.run import user_code_error
    from bootstrap.bench.state import new_state
    from bootstrap.bench.user import UserWorkload

    state = new_state(BenchOptions(budget_s=5, user=UserWorkload("data:make")))
    state.phase = "tune"
    error = user_code_error(state, exc)
    assert str(error).startswith(f"--dataset data:make: {type(exc).__name__}: ") and "in the tune phase" in str(error)
    assert ("must return, not exit" in error.fix) is exited, error.fix


@pytest.mark.parametrize(
    "samples_in, fix",
    [
        (None, "the step ran out of memory: give a smaller --batch-size"),
        (len, "the step ran out of memory: make the dataset's (or the batch sampler's) batches smaller"),
    ],
)
def test_a_step_out_of_memory_mid_run_is_told_to_shrink_the_batch(samples_in, fix):
    import torch

    from bootstrap.bench.step import StepFailed
    from bootstrap.bench.user import UserWorkload, step_failed

    user = UserWorkload("data:make", step="data:step")
    failed = StepFailed(torch.OutOfMemoryError("CUDA out of memory."))
    error = step_failed(user, failed, "while bench measured w=2", "tiny", samples_in is not None, 10)
    assert str(error).startswith("--step data:step: raised OutOfMemoryError: CUDA out of memory. while bench"), error
    assert error.fix == fix


def test_a_dataset_that_does_not_pickle_for_spawned_workers_is_told_so():
    """Under spawn a DataLoader pickles the dataset; a lambda in it fails in the tune phase, far from any
    exit: the line says what spawn needs, not that a sample exited."""
    from bootstrap.bench.config import BenchOptions
    from bootstrap.bench.run import user_code_error
    from bootstrap.bench.state import new_state
    from bootstrap.bench.user import UserWorkload

    state = new_state(BenchOptions(budget_s=5, user=UserWorkload(object())))
    state.phase = "tune"
    error = user_code_error(state, AttributeError("Can't pickle local object 'Mine.__init__.<locals>.<lambda>'"))
    assert str(error) == (
        "dataset: cannot be sent to DataLoader workers: AttributeError: Can't pickle local object "
        "'Mine.__init__.<locals>.<lambda>' (under spawn (macOS, Windows, or set_start_method) a "
        "dataset must pickle: no lambdas or open handles in its attributes)"
    )


@pytest.mark.slow
def test_an_import_that_hangs_is_stopped_before_the_run(hostile, capsys):
    (hostile / "slow_import.py").write_text("import time\nwhile True:\n    time.sleep(3600)\n")
    started = time.perf_counter()
    code, err = bench(hostile, capsys, "--dataset", "slow_import:make", budget="1")
    assert code == 2 and time.perf_counter() - started < 10
    one_line(err, "--dataset slow_import:make: its import was still running after 2 s: stopped")


def test_an_import_error_inside_the_module_is_not_told_to_add_path(hostile, capsys):
    (hostile / "syntax_error.py").write_text("def make(:\n")
    refused(
        bench(hostile, capsys, "--dataset", "syntax_error:make"),
        "--dataset syntax_error:make: cannot import syntax_error: SyntaxError: ",
        "(the error is in the module (or what it imports))",
    )


@pytest.mark.slow
def test_a_factory_that_changes_directory_does_not_move_the_report(hostile, capsys, monkeypatch):
    from bootstrap.cli import main

    monkeypatch.chdir(hostile)
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
            "2",
            "--out",
            "report",
            "--path",
            str(hostile),
            "--dataset",
            "hostile:moving",
        ]
    )
    assert code in (0, 1), capsys.readouterr().err
    monkeypatch.chdir(hostile)  # the factory moved this process to /
    assert (hostile / "report" / "bench.json").is_file() and not Path("/report").exists()


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="POSIX signals")
def test_tune_loader_lets_ctrl_c_stop_the_script(hostile):
    """Ctrl-C in a training script that tunes its loader stops the script, not just the tuning."""
    import hostile as module

    from bootstrap.bench import tune_loader

    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            tune_loader(module.good(), batch_size=BATCH, budget=30, device="cpu")
    finally:
        timer.cancel()


def test_tune_loader_refuses_a_progress_that_is_no_callable(hostile):
    import hostile as module

    from bootstrap.bench import tune_loader
    from bootstrap.errors import InputError

    with pytest.raises(InputError, match=r"tune_loader\(progress=...\): is a int, not a callable"):
        tune_loader(module.good(), batch_size=BATCH, budget=2, device="cpu", progress=5)


@pytest.mark.slow
def test_a_data_dir_the_run_created_is_gone_afterwards(tmp_path, capsys):
    from bootstrap.cli import main

    kept = tmp_path / "kept"
    kept.mkdir()
    data_dir = kept / "made" / "deeper"
    code = main(
        [
            "bench",
            "--device",
            "cpu",
            "--quiet",
            "--no-png",
            "--budget",
            "2",
            "--storage",
            "files",
            "--samples",
            "64",
            "--out",
            str(tmp_path / "out"),
            "--data-dir",
            str(data_dir),
        ]
    )
    assert code in (0, 1), capsys.readouterr().err
    assert kept.is_dir() and list(kept.iterdir()) == []


def test_tune_loader_in_a_worker_importing_the_main_script_refuses_at_once(monkeypatch):
    """A spawned worker imports the main script under `_inheriting`; a tune_loader there is a second bench."""
    import multiprocessing

    from bootstrap.bench import tune_loader
    from bootstrap.errors import InputError

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(
        InputError,
        match=r"^tune_loader: called while a DataLoader worker .* \(put the call under "
        r'`if __name__ == "__main__":`\)$',
    ):
        tune_loader(object(), batch_size=BATCH)


@pytest.mark.parametrize(
    "method, cause",
    [
        ("fork", ""),
        ("spawn", '; under spawn, a script that calls tune_loader outside `if __name__ == "__main__":`'),
    ],
)
def test_a_worker_that_exited_under_spawn_names_an_unguarded_script(monkeypatch, method, cause):
    from bootstrap.bench.loader import sample_failure
    from bootstrap.compat import host

    monkeypatch.setattr(host, "probe_start_method", lambda: (method, True))
    exc = RuntimeError("DataLoader worker (pid(s) 123) exited unexpectedly with exit code 1")
    assert sample_failure(exc, 2) == (
        "a DataLoader worker exited with code 1 (a sys.exit or os._exit in a sample "
        f"or collate, or a crash the worker's stderr shows{cause})"
    )


UNGUARDED = textwrap.dedent("""
    import torch
    import torch.multiprocessing as mp

    from bootstrap.bench import tune_loader

    mp.set_start_method("spawn", force=True)
    dataset = torch.utils.data.TensorDataset(torch.zeros(64, 3, 16, 16, dtype=torch.uint8),
                                             torch.zeros(64, dtype=torch.long))
    kwargs, report = tune_loader(dataset, batch_size=8, budget=60, device="cpu")
    print("RESULT", kwargs)
""")


@pytest.mark.slow
def test_an_unguarded_script_under_spawn_gets_one_bench_and_the_idiom(tmp_path):
    """Without `if __name__ == "__main__":` each spawned worker imports the script again: the worker refuses
    at once instead of running a second bench, and the parent's error says what likely killed it. The budget
    is ample so that a busy host still reaches the worker configs; their first start-up ends the run."""
    import subprocess

    from tests.fixtures import REPO

    (tmp_path / "train.py").write_text(UNGUARDED)
    proc = subprocess.run(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert "RESULT" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stderr
    assert "InputError: tune_loader: called while a DataLoader worker" in proc.stderr, proc.stderr
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith("bootstrap.errors.InputError: dataset: a DataLoader worker exited"), last
    assert (
        'under spawn, a script that calls tune_loader outside `if __name__ == "__main__":`), while bench measured w='
        in last
        and "fix that sample" not in last
    ), last
