"""`bootstrap.watch(loader)`: the wait-for-data diagnosis from inside a training loop, on real DataLoaders.

Timing assertions compare a 20 ms sleep against a step of ~0 (or the reverse) with wide margins: the
machine running them is shared and busy.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bootstrap.bench.watcher import SCHEMA, Watch, batch_size_of, watch
from bootstrap.errors import InputError
from tests.fixtures import REPO

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

SLEEP_S = 0.02


class Sleepy(Dataset):
    """Each sample costs `sleep_s` of waiting, as a slow disk or decoder would."""

    def __init__(self, n: int, sleep_s: float = SLEEP_S) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        time.sleep(self.sleep_s)
        return torch.zeros(3), index


def instant(n: int) -> TensorDataset:
    return TensorDataset(torch.zeros(n, 3), torch.arange(n))


class Lines(list):
    """A `log=` that keeps every line."""

    def __call__(self, line: str) -> None:
        self.append(line)

    def reports(self) -> list[str]:
        return [line for line in self if line.startswith("watch: step")]

    def advice(self) -> list[str]:
        return [line for line in self if "python -m bootstrap bench" in line]


def run(loader, **kwargs):
    lines = Lines()
    watched = watch(loader, log=lines, **kwargs)
    batches = list(watched)
    return watched, batches, lines


# --------------------------------------------------------------------------- what it measures


def test_a_slow_dataset_shows_the_loop_waiting_for_data() -> None:
    watched, batches, lines = run(DataLoader(Sleepy(16), batch_size=2), every=4)
    assert len(batches) == 8 and len(lines.reports()) == 2
    assert watched.last is not None and watched.last.wait_share > 0.5
    assert all("waited for data" in line for line in lines.reports())


def test_a_fast_dataset_and_a_slow_step_show_little_waiting() -> None:
    lines = Lines()
    watched = watch(DataLoader(instant(16), batch_size=2), every=4, log=lines)
    for _ in watched:
        time.sleep(SLEEP_S)  # the training step
    assert len(lines.reports()) == 2 and watched.last is not None and watched.last.wait_share < 0.5
    assert not lines.advice()


def test_the_wait_share_and_rates_are_read_from_the_interval(tmp_path: Path) -> None:
    log = tmp_path / "watch.jsonl"
    lines = Lines()
    for _ in watch(DataLoader(instant(16), batch_size=2), every=4, log=lines, log_path=log):
        time.sleep(SLEEP_S)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for record in records:
        assert record["wait_share"] < 0.5
        assert record["steps_per_s"] < 1 / SLEEP_S * 1.01  # no more steps than the step's sleep allows
        assert record["samples_per_s"] == pytest.approx(2 * record["steps_per_s"], rel=1e-3)
        assert record["wall_s"] >= 4 * SLEEP_S


def test_dataloader_workers_run_as_without_watch() -> None:
    """Only the main process's iterator is wrapped: two workers load, watch times the waits for them."""
    loader = DataLoader(Sleepy(24), batch_size=2, num_workers=2)
    watched, batches, lines = run(loader, every=6)
    assert len(watched) == 12 and len(batches) == 12
    assert sorted(int(i) for _, index in batches for i in index) == list(range(24))
    assert [line.split(":")[1].strip() for line in lines.reports()] == ["steps 1-6", "steps 7-12"]
    assert watched.last is not None and watched.last.wait_share > 0.5


# --------------------------------------------------------------------------- intervals


def test_intervals_are_counted_and_the_tail_is_reported() -> None:
    _, batches, lines = run(DataLoader(instant(500), batch_size=2), every=100)
    assert len(batches) == 250
    assert [line.split(":")[1].strip() for line in lines.reports()] == ["steps 1-100", "steps 101-200", "steps 201-250"]


def test_each_for_is_an_epoch_and_the_steps_count_on(tmp_path: Path) -> None:
    log = tmp_path / "watch.jsonl"
    watched = watch(DataLoader(instant(10), batch_size=2), every=3, log=Lines(), log_path=log)
    assert len(watched) == 5
    for _ in range(2):
        assert len(list(watched)) == 5
    spans = [(r["step_from"], r["step_to"]) for r in map(json.loads, log.read_text().splitlines())]
    assert spans == [(1, 3), (4, 5), (6, 8), (9, 10)]


def test_len_is_the_loader_s_and_missing_where_it_has_none() -> None:
    assert len(watch(DataLoader(instant(7), batch_size=2))) == 4
    with pytest.raises(TypeError):
        len(watch(iter([1, 2])))


def test_an_early_break_still_reports_the_tail() -> None:
    lines = Lines()
    for step, _ in enumerate(watch(DataLoader(instant(100), batch_size=2), every=20, log=lines), start=1):
        if step == 27:
            break
    assert [line.split(":")[1].strip() for line in lines.reports()] == ["steps 1-20", "steps 21-27"]


def test_an_exception_in_the_loop_is_reported_and_raised_again() -> None:
    lines = Lines()
    with pytest.raises(ZeroDivisionError):
        for step, _ in enumerate(watch(DataLoader(instant(100), batch_size=2), every=20, log=lines), start=1):
            if step == 5:
                _ = 1 / 0
    assert [line.split(":")[1].strip() for line in lines.reports()] == ["steps 1-5"]


def test_an_exception_in_the_loader_is_reported_and_raised_again() -> None:
    def batches():
        yield torch.zeros(2)
        raise OSError("disk gone")

    lines = Lines()
    with pytest.raises(OSError, match="disk gone"):
        for _ in watch(Regenerating(batches), every=20, log=lines):
            pass
    assert [line.split(":")[1].strip() for line in lines.reports()] == ["step 1"]


def test_reports_go_to_stderr_by_default(capsys) -> None:
    list(watch(DataLoader(instant(4), batch_size=2), every=1))
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("watch: step 1: ") and err[1].startswith("watch: step 2: ")


# --------------------------------------------------------------------------- the advice


class Regenerating:
    """An iterable whose every iteration calls `make()` afresh, as a DataLoader starts a new epoch."""

    def __init__(self, make) -> None:
        self.make = make

    def __iter__(self):
        return self.make()


def paced(waits: list[float], steps: int):
    """Batches whose loading takes waits[k] seconds in the k-th interval of `steps` batches."""

    def make():
        for wait in waits:
            for _ in range(steps):
                time.sleep(wait)
                yield torch.zeros(2, 3)

    return Regenerating(make)


def test_the_advice_comes_once_after_two_slow_intervals_in_a_row() -> None:
    _, _, lines = run(DataLoader(Sleepy(40), batch_size=2), every=4)
    assert len(lines.reports()) == 5
    (advice,) = lines.advice()
    assert lines.index(advice) == 2  # after the second interval's line
    assert "--dataset MODULE:FACTORY --batch-size 2 " in advice and "tune_loader(dataset, batch_size=2)" in advice
    assert "over 20% of the time 2 intervals in a row" in advice


def drive(watched, step_s: float) -> None:
    for _ in watched:
        time.sleep(step_s)  # the training step


def test_one_slow_interval_at_a_time_gives_no_advice() -> None:
    """Loading takes twice the step in every other interval (waits ~2/3 of the time), nothing in the rest."""
    lines = Lines()
    drive(watch(paced([2 * SLEEP_S, 0, 2 * SLEEP_S, 0, 2 * SLEEP_S], 3), every=3, log=lines), SLEEP_S)
    assert len(lines.reports()) == 5 and lines.advice() == []
    lines = Lines()
    drive(watch(paced([0, 2 * SLEEP_S, 2 * SLEEP_S, 0], 3), every=3, log=lines), SLEEP_S)
    assert len(lines.advice()) == 1 and lines.index(lines.advice()[0]) == 3


def test_the_threshold_is_a_keyword() -> None:
    """Waiting ~2/3 of the time: over the default 20 %, under 90 %."""
    for threshold, advised in ((0.9, 0), (0.2, 1)):
        lines = Lines()
        drive(watch(paced([2 * SLEEP_S] * 3, 2), every=2, threshold=threshold, log=lines), SLEEP_S)
        assert len(lines.advice()) == advised


def test_the_advice_names_the_batch_size_it_can_find() -> None:
    _, _, lines = run(paced([SLEEP_S] * 2, 2), every=2)  # no batch_size attribute: dim 0 of the batches
    assert "--batch-size 2 " in lines.advice()[0]
    _, _, lines = run(paced([SLEEP_S] * 2, 2), every=2, batch_size=8)
    assert "--batch-size 8 " in lines.advice()[0]
    _, _, lines = run(Regenerating(lambda: (time.sleep(SLEEP_S) or "text" for _ in range(4))), every=2)
    assert "--batch-size N " in lines.advice()[0] and "N: your batch size" in lines.advice()[0]


# --------------------------------------------------------------------------- batch sizes


@pytest.mark.parametrize(
    "batch, size",
    [
        (torch.zeros(5, 3), 5),
        ((torch.zeros(4, 3), torch.zeros(4)), 4),
        ([torch.zeros(6, 2), torch.zeros(6)], 6),
        ({"image": torch.zeros(3, 8), "label": torch.zeros(3)}, 3),
        ({"meta": {"ids": torch.arange(7)}, "text": ["a"] * 7}, 7),
        ((torch.tensor(1.0), torch.zeros(9, 2)), 9),  # a scalar has no batch dimension
        (["a", "b"], None),
        (42, None),
    ],
)
def test_the_batch_size_is_dim_0_of_the_first_tensor(batch, size) -> None:
    assert batch_size_of(batch) == size


def test_a_numpy_batch_has_its_size_too() -> None:
    np = pytest.importorskip("numpy")
    assert batch_size_of({"x": np.zeros((11, 2))}) == 11


def test_samples_per_s_is_left_out_where_a_batch_has_no_size(tmp_path: Path) -> None:
    log = tmp_path / "watch.jsonl"
    _, _, lines = run(Regenerating(lambda: iter(["a", "b"])), every=5, log_path=log)
    (record,) = map(json.loads, log.read_text().splitlines())
    assert record["samples_per_s"] is None and record["steps_per_s"] > 0
    assert "samples/s" not in lines.reports()[0] and "steps/s" in lines.reports()[0]


def test_batch_size_overrides_what_the_batch_shows(tmp_path: Path) -> None:
    log = tmp_path / "watch.jsonl"
    run(DataLoader(instant(8), batch_size=2), every=10, batch_size=32, log_path=log)
    (record,) = map(json.loads, log.read_text().splitlines())
    assert record["samples_per_s"] == pytest.approx(32 * record["steps_per_s"], rel=1e-3)


# --------------------------------------------------------------------------- the JSONL log


def test_the_log_holds_one_object_per_interval_in_the_schema(tmp_path: Path) -> None:
    log = tmp_path / "watch.jsonl"
    before = time.time()
    _, _, lines = run(DataLoader(Sleepy(10), batch_size=2), every=2, log_path=log)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == len(lines.reports()) == 3
    keys = {"schema", "step_from", "step_to", "wall_s", "wait_s", "wait_share", "samples_per_s", "steps_per_s"}
    for record in records:
        assert set(record) == keys | {"gpu_util", "time"}
        assert record["schema"] == SCHEMA == "bootstrap.watch/1"
        assert 0 < record["wait_s"] <= record["wall_s"] and record["wait_share"] > 0.5
        assert record["gpu_util"] is None  # no NVIDIA GPU here
        assert before - 0.0005 <= record["time"] <= time.time() + 0.0005  # written to the millisecond, rounded
    assert [(r["step_from"], r["step_to"]) for r in records] == [(1, 2), (3, 4), (5, 5)]


def test_the_log_is_appended_to(tmp_path: Path) -> None:
    log = tmp_path / "watch.jsonl"
    log.write_text('{"schema": "bootstrap.watch/1", "earlier": true}\n')
    run(DataLoader(instant(4), batch_size=2), every=1, log_path=log)
    assert len(log.read_text().splitlines()) == 3


def test_a_log_path_without_its_directory_is_refused_before_the_first_batch(tmp_path: Path) -> None:
    loader = DataLoader(Sleepy(4), batch_size=2)
    missing = tmp_path / "runs" / "watch.jsonl"
    with pytest.raises(InputError) as caught:
        watch(loader, log_path=missing)
    text = str(caught.value)
    assert text.startswith(f"watch(log_path='{missing}'): no directory {missing.parent}")
    assert f"create {missing.parent} first" in text and "\n" not in text
    with pytest.raises(InputError, match="cannot be written: Is a directory"):
        watch(loader, log_path=tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_log_path_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(InputError, match=r"log_path=.*cannot be written: Permission denied"):
            watch([1], log_path=locked / "watch.jsonl")
    finally:
        locked.chmod(0o700)


def test_a_log_that_fails_later_stops_the_log_not_the_training(tmp_path: Path) -> None:
    log = tmp_path / "watch.jsonl"
    lines = Lines()
    watched = watch(DataLoader(instant(8), batch_size=2), every=1, log=lines, log_path=log)
    log.unlink()
    log.mkdir()  # appending now fails
    assert len(list(watched)) == 4
    assert sum("cannot append to" in line for line in lines) == 1 and len(lines.reports()) == 4


class Failing:
    """A log function that raises after `good` lines, as a handler whose file or socket went away does."""

    def __init__(self, good: int) -> None:
        self.good, self.lines = good, []

    def __call__(self, line: str) -> None:
        if len(self.lines) >= self.good:
            raise ConnectionResetError("log server gone\nsecond line")
        self.lines.append(line)


@pytest.mark.parametrize("good", [0, 2])
def test_a_log_function_that_raises_hands_the_report_to_stderr(capsys, good: int) -> None:
    log = Failing(good)
    assert len(list(watch(DataLoader(instant(8), batch_size=2), every=1, log=log))) == 4
    err = capsys.readouterr().err.splitlines()
    assert len(log.lines) == good
    assert (
        err[0]
        == "watch: the log function raised ConnectionResetError: log server gone: the report goes to stderr from here"
    )
    assert len([line for line in err if line.startswith("watch: step")]) == 4 - good


class Broken:
    """sys.stderr once its reader is gone: every write raises."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_stderr_that_fails_stops_the_report_not_the_training(monkeypatch) -> None:
    monkeypatch.setattr(sys, "stderr", Broken())
    assert len(list(watch(DataLoader(instant(8), batch_size=2), every=1))) == 4
    raising = Failing(0)
    assert len(list(watch(DataLoader(instant(8), batch_size=2), every=1, log=raising))) == 4


# --------------------------------------------------------------------------- the GPU


class StampedNvml:
    """A pynvml stand-in: GPU 0 at 40 % utilisation, one buffered sample every 50 ms since it was made."""

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

    def __init__(self, init_error=None) -> None:
        self.init_error = init_error
        self.start_us = int(time.time() * 1e6)
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_error is not None:
            raise self.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetSamples(self, handle: str, kind: int, last_us: int):
        now, period = int(time.time() * 1e6), 50_000
        stamps = range(self.start_us + period, now + 1, period)
        value = SimpleNamespace(uiVal=40)
        return 1, [SimpleNamespace(timeStamp=s, sampleValue=value) for s in stamps if s > last_us]


def test_no_nvidia_gpu_leaves_the_gpu_field_null_and_says_nothing(tmp_path: Path) -> None:
    log = tmp_path / "watch.jsonl"
    _, _, lines = run(DataLoader(instant(4), batch_size=2), every=1, log_path=log)
    assert all(json.loads(line)["gpu_util"] is None for line in log.read_text().splitlines())
    assert len(lines.reports()) == 2 and not any("GPU" in line for line in lines)


def test_the_gpu_s_utilisation_is_read_through_nvml_per_interval(tmp_path: Path) -> None:
    """Interval logic only: NVML's answers are faked, the sampler thread and the timing are real."""
    log, lines, nvml = tmp_path / "watch.jsonl", Lines(), StampedNvml()
    watched = Watch(paced([0.6, 0.6], 1), every=1, log=lines, log_path=log, gpu=0, nvml_module=nvml)
    assert len(list(watched)) == 2
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["gpu_util"] for r in records] == [0.4, 0.4]
    assert all(line.endswith("; GPU 0 util 40%") for line in lines.reports())


def test_nvml_that_cannot_start_is_said_once_and_the_field_stays_null(tmp_path: Path) -> None:
    log, lines = tmp_path / "watch.jsonl", Lines()
    watched = Watch(
        DataLoader(instant(4), batch_size=2),
        every=1,
        log=lines,
        log_path=log,
        gpu=0,
        nvml_module=StampedNvml(init_error=12),
    )
    for _ in range(2):
        assert len(list(watched)) == 2
    notes = [line for line in lines if "no utilisation of GPU 0" in line]
    assert len(notes) == 1 and "NVML library not found" in notes[0]
    assert all(json.loads(line)["gpu_util"] is None for line in log.read_text().splitlines())


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, where",
    [
        ({"every": 0}, "watch(every=0)"),
        ({"every": True}, "watch(every=True)"),
        ({"every": 2.5}, "watch(every=2.5)"),
        ({"threshold": 0}, "watch(threshold=0)"),
        ({"threshold": 1}, "watch(threshold=1)"),
        ({"threshold": math.nan}, "watch(threshold=nan)"),
        ({"threshold": "0.2"}, "watch(threshold='0.2')"),
        ({"batch_size": 0}, "watch(batch_size=0)"),
        ({"log": "stderr"}, "watch(log='stderr')"),
        ({"gpu": -1}, "watch(gpu=-1)"),
        ({"log_path": 3}, "watch(log_path=3)"),
    ],
)
def test_a_bad_keyword_is_one_line_naming_it_and_the_fix(kwargs, where) -> None:
    with pytest.raises(InputError) as caught:
        watch([1, 2], **kwargs)
    text = str(caught.value)
    assert text.startswith(f"{where}: ") and "(" in text[len(where) :] and "\n" not in text


def test_a_loader_that_is_not_iterable_is_refused() -> None:
    with pytest.raises(
        InputError, match=r"^watch\(loader\): an object of type int is not iterable \(pass the DataLoader"
    ):
        watch(5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the package


def test_bootstrap_watch_is_the_function_and_loads_no_torch() -> None:
    code = (
        "import sys; from bootstrap import watch; print('torch' in sys.modules); "
        "import bootstrap.bench.watcher, bootstrap.bench; from bootstrap import watch as again; "
        "print(watch is again is bootstrap.bench.watch is bootstrap.bench.watcher.watch)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.split() == ["False", "True"]
