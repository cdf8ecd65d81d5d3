"""`bootstrap monitor` on recorded NVML answers (tests/data/monitor), and the real no-driver path here."""

from __future__ import annotations

import csv
import json
import math
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bootstrap.cli import main
from bootstrap.monitor.log import COLUMNS, rows
from bootstrap.monitor.sampler import GpuProcess, GpuSampler, NvmlUnavailable, run_samples
from bootstrap.monitor.summary import RunningSummary, _Series, percentile_from_histogram, sparkline
from tests.fixtures import DATA as ALL_DATA
from tests.fixtures import REPO
from tests.fixtures.fakes import RecordedNvml
from tests.fixtures.mounts import in_private_mounts, needs_unshare

DATA = ALL_DATA / "monitor"
HAS_DRIVER = shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia").exists()


def utilization_series(name, device):
    recorded = json.loads((DATA / name).read_text())
    return [f["nvmlDeviceGetUtilizationRates"]["gpu"] for f in recorded["devices"][device]["frames"]]


def nearest_rank(values, q):
    ordered = sorted(values)
    return ordered[math.ceil(q / 100 * len(ordered)) - 1]


class FakeTime:
    """A monotonic clock that only moves when slept on (or when a sample 'takes' time)."""

    def __init__(self, sample_cost=0.0):
        self.now = 0.0
        self.sample_cost = sample_cost
        self.sleeps = []

    def clock(self):
        return self.now

    def wall(self):
        return 1_760_000_000.0 + self.now

    def sleep(self, seconds):
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


def record(name, n, **kwargs):
    fake = RecordedNvml.load(name)
    clock = FakeTime()
    with GpuSampler(fake) as sampler:
        samples = list(run_samples(sampler, 1.0, n, clock=clock.clock, wall=clock.wall, sleep=clock.sleep))
        notes = sampler.notes
    return fake, samples, notes


# --------------------------------------------------------------------------- rows


def test_recorded_h200_samples_become_rows():
    fake, samples, notes = record("h200x2-ddp.json", 20)
    assert notes == ()
    first = rows(samples[0])
    assert [r["gpu_index"] for r in first] == [0, 1]
    assert first[0] == {
        "timestamp": "2025-10-09T08:53:20.000Z",
        "elapsed_s": 0.0,
        "gpu_index": 0,
        "gpu_uuid": "GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b00",
        "gpu_name": "NVIDIA H200",
        "gpu_utilization_pct": 0,
        "memory_utilization_pct": 0,
        "memory_used_mib": 4,
        "memory_total_mib": 143771,
        "temperature_c": 34,
        "power_w": 118.0,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 345,
        "process_count": 0,
        "process_memory_used_mib": 0,
        "processes": [],
    }
    twelfth = rows(samples[11])[0]
    assert twelfth["elapsed_s"] == 11.0
    assert twelfth["gpu_utilization_pct"] == 100
    assert twelfth["power_w"] == 668.0
    assert twelfth["memory_used_mib"] == 60123
    # Sorted by memory, names reduced to the executable's base name.
    assert twelfth["processes"] == [
        {"pid": 4242, "name": "python3.10", "memory_used_mib": 59523},
        {"pid": 5150, "name": "nsys", "memory_used_mib": 512},
    ]
    assert twelfth["process_count"] == 2 and twelfth["process_memory_used_mib"] == 60035
    assert rows(samples[11])[1]["processes"] == [{"pid": 4243, "name": "python3.10", "memory_used_mib": 58280}]


def test_one_nvml_session_and_no_subprocess(monkeypatch):
    def no_subprocess(*args, **kwargs):
        raise AssertionError("monitor must not start a process per sample")

    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    fake, samples, _ = record("h200x2-ddp.json", 20)
    assert len(samples) == 20
    assert fake.count("nvmlInit") == 1 and fake.count("nvmlShutdown") == 1
    assert fake.count("nvmlDeviceGetName") == 2  # static facts asked once per GPU, not per sample
    assert fake.count("nvmlDeviceGetUtilizationRates") == 40


def test_process_names_are_asked_once_per_process():
    fake, _, _ = record("h200x2-ddp.json", 20)
    asked = [call[1] for call in fake.calls if call[0] == "nvmlSystemGetProcessName"]
    assert sorted(asked) == [4242, 4243, 5150]


def test_windows_wddm_fallbacks_and_missing_process_memory():
    fake, samples, notes = record("rtx3090-windows-wddm.json", 3)
    assert notes == ()  # every field answered through some variant
    row = rows(samples[2])[0]
    assert row["temperature_c"] == 61  # nvmlDeviceGetTemperatureV: this pynvml lacks the old call
    assert row["power_limit_w"] == 350.0  # the management limit, the enforced one is not supported
    assert row["power_w"] == 341.0
    assert row["processes"] == [
        {"pid": 1044, "name": None, "memory_used_mib": None},  # another user's process: name denied
        {"pid": 7312, "name": "python.exe", "memory_used_mib": None},  # listed as compute and graphics: once
    ]
    assert row["process_memory_used_mib"] is None  # WDDM cannot tell, which is not 0
    # A variant that failed once is not asked again.
    assert fake.count("nvmlDeviceGetEnforcedPowerLimit") == 1
    assert fake.count("nvmlDeviceGetComputeRunningProcesses") == 1
    assert fake.count("nvmlDeviceGetComputeRunningProcesses_v2") == 3


class R470Driver:
    """pynvml's own error classes and version decorator over a driver without the `_v3` process calls
    (R470 era): the unversioned call raises NVMLLibraryMismatchError, a plain Exception."""

    def __init__(self, pynvml):
        self.NVMLError = pynvml.NVMLError
        self.NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError
        self._pynvml = pynvml
        self.calls = []

        def v3(handle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)  # the driver lacks the symbol

        self.nvmlDeviceGetComputeRunningProcesses = pynvml.throwOnVersionMismatch(v3)
        self.nvmlDeviceGetGraphicsRunningProcesses = pynvml.throwOnVersionMismatch(v3)

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return "Tesla V100-SXM2-32GB"

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):
        self.calls.append("compute_v2")
        return [SimpleNamespace(pid=811, usedGpuMemory=2048 * 1024 * 1024)]

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle):
        self.calls.append("graphics_v2")
        return []

    def nvmlSystemGetProcessName(self, pid):
        return "/usr/bin/python3"

    def __getattr__(self, name):
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def not_supported(*args):
            raise self._pynvml.NVMLError(self._pynvml.NVML_ERROR_NOT_SUPPORTED)

        return not_supported


def test_a_driver_without_the_v3_process_calls_lists_processes_through_v2():
    pynvml = pytest.importorskip("pynvml")
    fake = R470Driver(pynvml)
    with GpuSampler(fake) as sampler:
        samples = [sampler.sample() for _ in range(2)]
        notes = sampler.notes
    assert [s[0].processes for s in samples] == [(GpuProcess(811, "python3", 2048),)] * 2
    assert fake.calls == ["compute_v2", "graphics_v2"] * 2  # the _v3 call is not asked again
    assert not any("processes" in note for note in notes)


def with_reserved_memory(v2_error=None):
    """The RTX 3090 recording as a driver answers both memory calls: v1's `used` counts 300 MiB the
    driver reserves, v2 (`nvmlDeviceGetMemoryInfo(handle, nvmlMemory_v2)`) tells them apart."""
    recorded = json.loads((DATA / "rtx3090-windows-wddm.json").read_text())
    reserved = 300 << 20
    for frame in recorded["devices"][0]["frames"]:
        v1 = frame["nvmlDeviceGetMemoryInfo"]
        frame["nvmlDeviceGetMemoryInfo_v2"] = (
            {"error": v2_error}
            if v2_error
            else {
                "version": 0x02000028,
                "total": v1["total"],
                "reserved": reserved,
                "free": v1["free"],
                "used": v1["used"],
            }
        )
        frame["nvmlDeviceGetMemoryInfo"] = {**v1, "used": v1["used"] + reserved, "free": v1["free"] - reserved}
    return RecordedNvml(recorded)


def memory_samples(fake):
    with GpuSampler(fake) as sampler:
        used = [sampler.sample()[0].memory_used_mib for _ in range(3)]
        return used, sampler.notes


def test_memory_used_is_nvidia_smi_s_without_the_reserved_memory():
    used, notes = memory_samples(with_reserved_memory())
    assert used == [3120, 9300, 9310] and notes == ()


def test_memory_from_v1_on_a_driver_without_v2_says_it_counts_the_reserved_memory():
    fake = with_reserved_memory(v2_error=13)  # FUNCTION_NOT_FOUND: a driver before R510
    used, notes = memory_samples(fake)
    assert used == [3420, 9600, 9610]
    assert notes == (
        "GPU 0 memory_used_mib: nvmlDeviceGetMemoryInfo_v2 not in this driver or pynvml: used counts "
        "the memory the driver reserves (nvidia-smi's does not)",
    )
    v2_asked = [call for call in fake.calls if call[0] == "nvmlDeviceGetMemoryInfo" and call[2]]
    assert len(v2_asked) == 1  # not asked again


def test_an_unsupported_field_is_none_and_noted_once():
    recorded = json.loads((DATA / "rtx3090-windows-wddm.json").read_text())
    for frame in recorded["devices"][0]["frames"]:
        frame["nvmlDeviceGetPowerUsage"] = {"error": 3}
    with GpuSampler(RecordedNvml(recorded)) as sampler:
        samples = [sampler.sample() for _ in range(3)]
        notes = sampler.notes
    assert [s[0].power_w for s in samples] == [None, None, None]
    assert notes == ("GPU 0 power_w: not supported on this GPU",)


# --------------------------------------------------------------------------- statistics


def test_summary_statistics_match_a_reference():
    _, samples, _ = record("h200x2-ddp.json", 20)
    summary = RunningSummary(recent=5)
    for sample in samples:
        summary.add(sample)
    busy, starved = summary.per_gpu()
    for stats, device in ((busy, 0), (starved, 1)):
        values = utilization_series("h200x2-ddp.json", device)
        assert stats.samples == 20
        assert stats.utilization_mean_pct == pytest.approx(sum(values) / len(values))
        assert stats.utilization_p95_pct == nearest_rank(values, 95)
        assert stats.utilization_max_pct == max(values)
        assert stats.recent == tuple(values[-5:])
    assert (busy.utilization_mean_pct, busy.utilization_p95_pct, busy.utilization_max_pct) == (85.2, 99, 100)
    assert (starved.utilization_mean_pct, starved.utilization_p95_pct) == (46.0, 100)
    assert busy.memory_used_peak_mib == 60123 and starved.memory_used_peak_mib == 58880
    assert busy.temperature_max_c == 64
    assert busy.power_mean_w == pytest.approx(118 + 5.5 * busy.utilization_mean_pct)
    assert summary.duration_s == 19.0


@pytest.mark.parametrize(
    "values, q, expected",
    [
        (list(range(1, 101)), 95, 95),
        (list(range(1, 101)), 50, 50),
        ([7], 95, 7),
        ([0] * 19 + [100], 95, 0),
        ([0] * 18 + [100, 100], 95, 100),
    ],
)
def test_percentile_is_nearest_rank(values, q, expected):
    histogram = [0] * 101
    for v in values:
        histogram[v] += 1
    assert percentile_from_histogram(histogram, q) == expected == nearest_rank(values, q)


def test_sparkline():
    assert sparkline([0, 50, 100]) == "▁▅█"
    assert sparkline([0, None, 100, 250]) == "▁ ██"
    assert sparkline([0, 50, 100], ascii_only=True) == " =#"


def test_run_overview_stays_small_and_keeps_the_mean():
    series = _Series(width=40)
    values = [i % 101 for i in range(10_000)]
    for v in values:
        series.add(v)
    points = series.points()
    assert 40 <= len(points) <= 80
    assert sum(points) / len(points) == pytest.approx(sum(values) / len(values), rel=0.02)


def test_schedule_keeps_the_interval_and_shifts_when_a_sample_is_slow():
    clock = FakeTime()
    costs = iter([0.2, 1.5, 0.1, 0.1])

    class SlowSampler:
        def sample(self):
            clock.now += next(costs)
            return ()

    samples = list(run_samples(SlowSampler(), 1.0, 4, clock=clock.clock, wall=clock.wall, sleep=clock.sleep))
    assert clock.sleeps == [0.8, 0.9]  # after the 1.5 s sample: no sleep, no burst
    assert [round(s.elapsed_s, 6) for s in samples] == [0.0, 1.0, 2.5, 3.5]  # taken when each sample starts


# --------------------------------------------------------------------------- the command


@pytest.fixture
def h200(monkeypatch):
    fake = RecordedNvml.load("h200x2-ddp.json")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_csv_columns_carry_units(h200, tmp_path, capsys):
    out = tmp_path / "gpu.csv"
    assert main(["monitor", "--count", "3", "--interval", "0.001", "--csv", str(out)]) == 0
    with out.open(newline="") as handle:
        table = list(csv.reader(handle))
    assert tuple(table[0]) == COLUMNS
    units = ("_pct", "_mib", "_c", "_w", "_mhz", "_s")
    unitless = {"timestamp", "gpu_index", "gpu_uuid", "gpu_name", "process_count", "processes"}
    assert all(c.endswith(units) for c in COLUMNS if c not in unitless)
    body = [dict(zip(table[0], row)) for row in table[1:]]
    assert len(body) == 6  # 3 samples x 2 GPUs
    assert [r["gpu_utilization_pct"] for r in body] == ["0", "0", "35", "20", "98", "100"]
    assert body[2]["processes"] == "4242:python3.10:23400"
    assert body[2]["power_limit_w"] == "700.0" and body[0]["process_memory_used_mib"] == "0"
    assert not list(tmp_path.glob("*.partial"))
    printed = capsys.readouterr().out
    assert "summary: 3 samples" in printed and f"wrote {out}" in printed


def test_jsonl_rows(h200, tmp_path):
    out = tmp_path / "gpu.jsonl"
    assert main(["monitor", "--count", "2", "--interval", "0.001", "--jsonl", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 4 and all(tuple(line) == COLUMNS for line in lines)
    assert lines[2]["processes"] == [{"pid": 4242, "name": "python3.10", "memory_used_mib": 23400}]
    assert lines[2]["memory_total_mib"] == 143771 and lines[2]["temperature_c"] == 35
    assert lines[0]["gpu_uuid"].startswith("GPU-")


def test_live_table_and_summary_on_screen(h200, capsys):
    assert main(["monitor", "--count", "12", "--interval", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "60123/143771 MiB" in out and "668/700 W" in out and "1980 MHz" in out
    assert "pid 5150" in out and "nsys" in out
    assert "sample 12 every 0.001 s" in out
    summary = out[out.index("summary:") :]
    assert "summary: 12 samples" in summary
    assert "GPU 0 NVIDIA H200: utilization mean" in summary and "GPU 1 NVIDIA H200" in summary
    assert "utilization over the run: ▁" in summary


def ctrl_c_at_sleep(n, monkeypatch):
    """Ctrl-C as the monitor's `n`th wait between samples begins."""
    import time

    slept = []

    def sleep(seconds):
        slept.append(seconds)
        if len(slept) == n:
            raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", sleep)


def test_ctrl_c_prints_the_summary_and_keeps_the_log(h200, tmp_path, monkeypatch, capsys):
    ctrl_c_at_sleep(4, monkeypatch)
    out = tmp_path / "gpu.csv"
    assert main(["monitor", "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "summary: 4 samples" in printed
    assert len(out.read_text().splitlines()) == 1 + 8
    assert not list(tmp_path.glob("*.partial"))
    assert h200.count("nvmlShutdown") == 1


def test_a_reader_that_goes_away_keeps_the_log(h200, tmp_path, monkeypatch):
    """`monitor --csv F | head` (or a pager quit): the samples taken are logged to F, as after Ctrl-C."""
    import io

    class ClosedAfterTwoFrames(io.StringIO):
        def write(self, text):
            if self.getvalue().count("GPUs") >= 2:
                raise BrokenPipeError(32, "Broken pipe")
            return super().write(text)

    monkeypatch.setattr(sys, "stdout", ClosedAfterTwoFrames())
    out = tmp_path / "gpu.csv"
    assert main(["monitor", "--count", "5", "--interval", "0.001", "--csv", str(out)]) == 141
    assert len(out.read_text().splitlines()) == 1 + 3 * 2  # the third sample was logged before its frame failed
    assert not list(tmp_path.glob("*.partial"))
    assert h200.count("nvmlShutdown") == 1


def test_a_second_signal_while_the_log_is_renamed_does_not_leave_it_half_done(h200, tmp_path, monkeypatch):
    """`timeout` signals the whole process group: a SIGTERM that lands while the log is committed (after
    Ctrl-C or the first SIGTERM) is only noted, so FILE is written and no FILE.partial is left."""
    import os
    import signal

    from bootstrap.monitor.log import SampleLog

    ctrl_c_at_sleep(2, monkeypatch)
    commit = SampleLog.commit

    def commit_under_fire(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs between bytecodes, soon after the kill
            pass
        commit(self)

    monkeypatch.setattr(SampleLog, "commit", commit_under_fire)
    out = tmp_path / "gpu.csv"
    assert main(["monitor", "--csv", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 1 + 4
    assert not list(tmp_path.glob("*.partial"))


class LoggingMonitor:
    """A real `monitor --csv gpu.csv` process in `folder` on the recorded H200s, started with SIGHUP as
    `hangup` says (nohup ignores it before exec)."""

    def __init__(self, folder: Path, hangup=signal.SIG_DFL) -> None:
        script = (
            f"import sys; sys.path[:0] = [{str(REPO)!r}]\n"
            "from tests.fixtures.fakes import RecordedNvml\n"
            "sys.modules['pynvml'] = RecordedNvml.load('h200x2-ddp.json')\n"
            "from bootstrap.cli import main\n"
            "sys.exit(main(['monitor', '--interval', '0.05', '--csv', 'gpu.csv']))\n"
        )
        self.partial = folder / "gpu.csv.partial"
        self.process = subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, hangup),
        )

    def logged_past(self, size: int) -> int:
        """Wait until the log holds more than `size` bytes; its size then."""
        deadline = time.monotonic() + 60
        while not self.partial.exists() or self.partial.stat().st_size <= size:
            assert self.process.poll() is None and time.monotonic() < deadline, self.process.communicate()
            time.sleep(0.05)
        return self.partial.stat().st_size

    def ended_by(self, signum: int) -> str:
        """Send `signum`; what the monitor printed, once it exited 0 with its summary."""
        self.process.send_signal(signum)
        out, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, err
        assert "summary:" in out and "wrote gpu.csv" in out
        return out


@pytest.mark.skipif(sys.platform == "win32", reason="SIGHUP")
def test_a_terminal_that_hangs_up_keeps_the_log(tmp_path):
    """SIGHUP (a closed terminal, a dropped ssh session) ends a real monitor process as Ctrl-C does: the
    summary, FILE written, no FILE.partial, exit 0."""
    monitor = LoggingMonitor(tmp_path)
    monitor.logged_past(400)
    monitor.ended_by(signal.SIGHUP)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.csv"]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGHUP")
def test_a_monitor_started_with_nohup_outlives_the_terminal(tmp_path):
    """`nohup python -m bootstrap monitor --csv gpu.csv &`: SIGHUP ignored on entry stays ignored, so the
    log goes on after the terminal closes; SIGTERM (a job's end) still ends it with the summary."""
    monitor = LoggingMonitor(tmp_path, hangup=signal.SIG_IGN)
    hung_up_at = monitor.logged_past(400)
    monitor.process.send_signal(signal.SIGHUP)
    monitor.logged_past(hung_up_at + 400)  # still logging
    monitor.ended_by(signal.SIGTERM)


def test_a_partial_log_in_the_way_says_whether_a_monitor_is_writing_it(h200, tmp_path, capsys):
    """FILE.partial held by a running monitor, or left by one killed outright: neither is overwritten,
    and the one line tells which it is."""
    from bootstrap.monitor.log import SampleLog

    out = tmp_path / "gpu.csv"
    writing = SampleLog(out, "csv")
    try:
        assert main(["monitor", "--count", "1", "--csv", str(out)]) == 2
        assert "gpu.csv.partial: exists: another monitor is writing it" in capsys.readouterr().err
    finally:
        writing._handle.close()  # as SIGKILL would: the lock goes, the rows stay
    assert main(["monitor", "--count", "1", "--csv", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gpu.csv.partial: was left by a monitor that was killed" in err, err
    assert (tmp_path / "gpu.csv.partial").read_text().startswith("timestamp,") and not out.exists()


def test_a_partial_log_on_a_file_system_without_locks_says_both_causes(h200, tmp_path, capsys, monkeypatch):
    """Lustre without `-o flock`: the lock cannot tell a writer from a killed monitor's leftover, so the
    line names both rather than taking every leftover for a monitor at work."""
    import errno
    import fcntl

    out = tmp_path / "gpu.csv"
    (tmp_path / "gpu.csv.partial").write_text("timestamp,gpu\n")

    def refused(fd, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", refused)
    assert main(["monitor", "--count", "1", "--csv", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gpu.csv.partial: exists: another monitor is writing it, or one was killed" in err


def test_once_prints_one_table_without_statistics(h200, capsys):
    assert main(["monitor", "--once"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "summary" not in out and "MEAN" not in out
    assert h200.count("nvmlDeviceGetUtilizationRates") == 2


def test_json_prints_only_the_envelope_with_the_run_statistics(h200, tmp_path, capsys):
    log = tmp_path / "gpu.csv"
    assert main(["monitor", "--count", "3", "--interval", "0.001", "--csv", str(log), "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)  # stdout is the envelope and nothing else: no table, no summary
    assert (data["format"], data["version"], data["available"], data["reason"]) == ("bootstrap.monitor", 1, True, None)
    assert (data["samples"], data["gpu_count"], data["interval_s"], data["duration_s"]) == (
        3,
        2,
        0.001,
        data["duration_s"],
    )
    first_three = utilization_series("h200x2-ddp.json", 0)[:3]
    busy = data["gpus"][0]
    assert busy == {
        "index": 0,
        "name": "NVIDIA H200",
        "samples": 3,
        "utilization_mean_pct": round(sum(first_three) / 3, 3),
        "utilization_p95_pct": max(first_three),
        "utilization_max_pct": max(first_three),
        "memory_used_peak_mib": busy["memory_used_peak_mib"],
        "power_mean_w": busy["power_mean_w"],
        "temperature_max_c": busy["temperature_max_c"],
    }
    assert busy["power_mean_w"] == pytest.approx(118 + 5.5 * sum(first_three) / 3, abs=0.001)  # the recording's model
    assert [row["gpu_utilization_pct"] for row in data["last_sample"]] == [98, 100]  # the third sample, as --jsonl rows
    assert all(sorted(row) == sorted(COLUMNS) for row in data["last_sample"])
    assert data["log"] == {"path": str(log), "format": "csv", "rows": 6} and len(log.read_text().splitlines()) == 7
    assert data["notes"] == []
    assert err == f"wrote {log} (3 samples)\n"


def test_once_with_json(h200, capsys):
    assert main(["monitor", "--once", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["samples"], data["interval_s"], data["log"]) == (1, None, None)
    assert [row["gpu_name"] for row in data["last_sample"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert h200.count("nvmlDeviceGetUtilizationRates") == 2


def test_no_driver_with_json(monkeypatch, capsys):
    """--once is a probe: no GPU is a result (exit 0); a longer run that cannot monitor is an error envelope."""
    monkeypatch.setitem(sys.modules, "pynvml", RecordedNvml({}, init_error=9))
    assert main(["monitor", "--once", "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert (data["available"], data["samples"], data["gpus"], data["last_sample"]) == (False, 0, [], [])
    assert "driver not loaded" in data["reason"] and err == ""
    assert main(["monitor", "--count", "2", "--json"]) == 2
    out, err = capsys.readouterr()
    error = json.loads(out)
    assert error["format"] == "bootstrap.error" and error["error"]["exit_code"] == 2
    assert "driver not loaded" in error["error"]["message"] and err.count("\n") == 1


def test_ctrl_c_with_json_still_prints_the_envelope(h200, monkeypatch, capsys):
    ctrl_c_at_sleep(2, monkeypatch)
    assert main(["monitor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["samples"] == 2 and data["interval_s"] == 1.0


def test_unwritable_log_fails_before_nvml(h200, tmp_path, capsys):
    assert main(["monitor", "--count", "1", "--csv", str(tmp_path / "missing" / "gpu.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert h200.calls == []
    assert main(["monitor", "--count", "1", "--jsonl", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert h200.calls == [] and list(tmp_path.iterdir()) == []


def test_a_linked_log_stays_linked_and_a_fifo_is_streamed_to(h200, tmp_path):
    import os
    import threading

    target, link, fifo = tmp_path / "logs" / "gpu.jsonl", tmp_path / "gpu.jsonl", tmp_path / "fifo"
    target.parent.mkdir()
    link.symlink_to(target)
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    assert main(["monitor", "--count", "2", "--interval", "0.001", "--jsonl", str(link)]) == 0
    assert main(["monitor", "--count", "2", "--interval", "0.001", "--csv", str(fifo)]) == 0
    reader.join(timeout=10)
    assert link.is_symlink() and len(target.read_text().splitlines()) == 4  # 2 samples x 2 GPUs
    assert fifo.is_fifo() and received[0].startswith(",".join(COLUMNS[:2])) and len(received[0].splitlines()) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "gpu.jsonl", "logs"]  # no .partial left


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_log_that_cannot_be_written_is_one_line(h200, capsys):
    """/dev/full answers every write with ENOSPC: one line and exit 2, no traceback from closing the log."""
    assert main(["monitor", "--count", "3", "--interval", "0.001", "--csv", "/dev/full"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: no space left on device while writing /dev/full")
    assert "--csv" in err and h200.count("nvmlShutdown") == 1


@needs_unshare
def test_a_full_disk_removes_the_partial_log_and_says_so(tmp_path):
    """A full disk under the log: one line, and no FILE.partial left for the next monitor to refuse to start on."""
    small = tmp_path / "small"
    small.mkdir()
    script = (
        "import sys\nfrom tests.fixtures.fakes import RecordedNvml\n"
        "sys.modules['pynvml'] = RecordedNvml.load('h200x2-ddp.json')\nfrom bootstrap.cli import main\n"
        f"sys.exit(main(['monitor', '--count', '500', '--interval', '0.0001', '--csv', '{small}/gpu.csv']))\n"
    )
    done = in_private_mounts(
        f'mount -t tmpfs -o size=8k tmpfs {small}\n$PY -c "{script}" >/dev/null || echo rc=$?\nls -A {small}'
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "no space left on device while writing" in done.stderr, done.stderr
    assert done.stdout == "rc=2\n", done.stdout  # and nothing left in the directory


def test_csv_and_jsonl_are_exclusive(h200, tmp_path):
    # argparse's usage error, returned (a --json run gets its envelope)
    assert main(["monitor", "--csv", str(tmp_path / "a"), "--jsonl", str(tmp_path / "b")]) == 2


@pytest.mark.parametrize("init_error, words", [(12, "NVML library not found"), (9, "driver not loaded")])
def test_no_driver_recorded(monkeypatch, tmp_path, capsys, init_error, words):
    monkeypatch.setitem(sys.modules, "pynvml", RecordedNvml({}, init_error=init_error))
    assert main(["monitor", "--once"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and words in out
    log = tmp_path / "gpu.csv"
    assert main(["monitor", "--count", "2", "--csv", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: no NVIDIA GPU to monitor") and words in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_no_gpu_and_no_pynvml(monkeypatch):
    fake = RecordedNvml({"nvmlDeviceGetCount": 0, "devices": []})
    with pytest.raises(NvmlUnavailable, match="NVML sees no GPU"):
        GpuSampler(fake).open()
    assert fake.count("nvmlShutdown") == 1
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(NvmlUnavailable, match="pynvml is not installed"):
        GpuSampler().open()


@pytest.mark.skipif(HAS_DRIVER, reason="this machine has an NVIDIA driver")
def test_real_run_without_driver(tmp_path):
    """The real pynvml on this machine: one clear line; 0 with --once, 2 otherwise; nothing written."""

    def monitor(*args):
        return subprocess.run(
            [sys.executable, "-m", "bootstrap", "monitor", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        )

    once = monitor("--once")
    assert once.returncode == 0, once.stderr
    assert once.stdout.count("\n") == 1 and "no NVIDIA" in once.stdout and once.stderr == ""
    looping = monitor("--count", "3", "--csv", "gpu.csv")
    assert looping.returncode == 2
    assert looping.stderr.count("\n") == 1 and "no NVIDIA" in looping.stderr and looping.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "inf", "1e9"])
def test_an_interval_sleep_cannot_take_is_refused(h200, interval, capsys):
    assert main(["monitor", "--count", "2", "--interval", interval]) == 2
    assert "--interval: must be > 0 and <= 86400 s" in capsys.readouterr().err
    assert h200.calls == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "banana"], "--interval: must be seconds, > 0 and <= 86400, got 'banana'"),
        (["--count", "2.5"], "--count: must be a whole number >= 1, got '2.5'"),
    ],
)
def test_a_value_that_is_no_number_says_what_was_wanted(h200, args, message, capsys):
    assert main(["monitor", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "_positive" not in err
    assert h200.calls == []
