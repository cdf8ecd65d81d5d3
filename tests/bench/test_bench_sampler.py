"""The NVML utilisation sampler on recorded answers: statistics, fallbacks, GPM, PCIe, its own overhead."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bootstrap.bench.config import Thresholds
from bootstrap.bench.utilization import UtilSampler, percentile, read_proc_stat, summarize
from bootstrap.bench.verdicts import VerdictFacts, sm_active_check, util_check
from bootstrap.report import Status
from tests.fixtures import DATA as ALL_DATA

DATA = ALL_DATA / "bench"


class FakeNVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


class FakeMetricsGet:
    """Stands in for pynvml's ctypes `c_nvmlGpmMetricsGet_t`."""

    def __init__(self):
        self.version = self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(4)]


class FakePynvml:
    """A pynvml stand-in replaying tests/data/bench/nvml-util-h200.json.

    The recorded utilisation samples are stamped from `start_us` on; `cost_s`
    makes every nvmlDeviceGetSamples call burn that much CPU (to check the
    sampler's overhead accounting); `errors` maps a function name to an NVML code.
    """

    NVMLError = FakeNVMLError
    c_nvmlGpmMetricsGet_t = FakeMetricsGet

    def __init__(self, start_us, errors=None, cost_s=0.0, init_error=None):
        self.recorded = json.loads((DATA / "nvml-util-h200.json").read_text())
        self.start_us = start_us
        self.errors = errors or {}
        self.cost_s = cost_s
        self.init_error = init_error
        self.calls = []
        self.allocated = self.freed = 0

    def _check(self, name):
        self.calls.append(name)
        if name in self.errors:
            raise FakeNVMLError(self.errors[name])

    def nvmlInit(self):
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._check("nvmlDeviceGetHandleByUUID")
        return self.recorded["nvmlDeviceGetHandleByUUID"]

    def nvmlDeviceGetHandleByIndex(self, index):
        self._check("nvmlDeviceGetHandleByIndex")
        return self.recorded["nvmlDeviceGetHandleByIndex"]

    def nvmlDeviceGetSamples(self, handle, sampling_type, last_us):
        self._check("nvmlDeviceGetSamples")
        assert sampling_type == 1  # NVML_GPU_UTILIZATION_SAMPLES
        end = time.thread_time() + self.cost_s
        while time.thread_time() < end:
            pass
        answer = self.recorded["nvmlDeviceGetSamples"]
        samples = [
            SimpleNamespace(
                timeStamp=self.start_us + (i + 1) * answer["period_us"], sampleValue=SimpleNamespace(uiVal=v)
            )
            for i, v in enumerate(answer["values"])
        ]
        return answer["value_type"], [s for s in samples if s.timeStamp > last_us]

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._check("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(**self.recorded["nvmlDeviceGetUtilizationRates"])

    def nvmlGpmQueryDeviceSupport(self, handle):
        self._check("nvmlGpmQueryDeviceSupport")
        return SimpleNamespace(**self.recorded["nvmlGpmQueryDeviceSupport"])

    def nvmlGpmSampleAlloc(self):
        self._check("nvmlGpmSampleAlloc")
        self.allocated += 1
        return object()

    def nvmlGpmSampleGet(self, handle, sample):
        self._check("nvmlGpmSampleGet")
        return sample

    def nvmlGpmMetricsGet(self, request):
        self._check("nvmlGpmMetricsGet")
        assert request.version == 1 and request.numMetrics == 1 and request.sample1 is not request.sample2
        request.metrics[0].value = self.recorded["nvmlGpmMetricsGet"][str(request.metrics[0].metricId)]
        return request

    def nvmlGpmSampleFree(self, sample):
        self.freed += 1

    def __getattr__(self, name):
        if name.startswith("nvmlDeviceGet") and name in self.recorded:
            return lambda handle: self.recorded[name]
        raise AttributeError(name)


def recorded_values():
    return json.loads((DATA / "nvml-util-h200.json").read_text())["nvmlDeviceGetSamples"]["values"]


def run_sampler(fake, seconds=0.15, interval=0.02, gpm=False, **kwargs):
    sampler = UtilSampler(nvml_module=fake, device_uuid="GPU-x", device_index=0, interval_s=interval, **kwargs)
    sampler.start()
    if gpm:
        sampler.gpm_begin()
    time.sleep(seconds)
    if gpm:
        sampler.gpm_end()
    return sampler, sampler.stop()


def test_percentile_matches_numpy_linear():
    np = pytest.importorskip("numpy")
    values = [float(v) for v in np.random.default_rng(3).integers(0, 101, size=57)]
    for q in (0, 5, 10, 50, 95, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None


def test_statistics_of_recorded_samples():
    """Mean and percentiles of the driver's buffer, hand-checked in tests/data/bench/README.md."""
    fake = FakePynvml(start_us=int(time.time() * 1e6))
    _, report = run_sampler(fake)
    gpu = report.gpu
    assert gpu.source == "nvmlDeviceGetSamples"
    assert gpu.count == 30
    assert gpu.mean == pytest.approx(85.9333, abs=1e-3)
    assert (gpu.p5, gpu.p10, gpu.p50, gpu.p95) == pytest.approx((5.4, 39.0, 98.0, 100.0))
    # Each buffered sample is read once however often the sampler polls.
    assert len(report.gpu_timeline) == 30
    assert report.polls >= 2


def test_samples_older_than_the_run_are_ignored():
    """The driver's buffer reaches back before the bench started: those samples are not ours."""
    fake = FakePynvml(start_us=int((time.time() - 2.5) * 1e6))  # 2.5 s ago: the first 15 samples predate us
    _, report = run_sampler(fake)
    assert report.gpu.count == 30 - 15


def test_stat_windows_select_the_tuned_samples():
    fake = FakePynvml(start_us=int(time.time() * 1e6))
    sampler = UtilSampler(nvml_module=fake, device_index=0, interval_s=0.02)
    sampler.start()
    sampler.stat_window(0.0, 1.6)  # the first ~9 samples (every 1/6 s from ~0.17 s): all busy
    time.sleep(0.05)
    report = sampler.stop()
    values = recorded_values()
    inside = [v for (t, v) in report.gpu_timeline if t <= 1.6]
    assert report.gpu.count == len(inside) and 8 <= len(inside) <= 10
    assert report.gpu.mean == pytest.approx(sum(inside) / len(inside))
    assert min(inside) >= 96 and len(report.gpu_timeline) == len(values)


def test_falls_back_to_utilization_rates_when_samples_unsupported():
    fake = FakePynvml(start_us=0, errors={"nvmlDeviceGetSamples": 3})
    _, report = run_sampler(fake, seconds=0.1)
    assert report.gpu.source == "nvmlDeviceGetUtilizationRates"
    assert report.gpu.mean == 93.0 and report.gpu.count >= 2
    assert "not supported on this GPU" in report.reason and "polled nvmlDeviceGetUtilizationRates" in report.reason


class IdleAtFirst(FakePynvml):
    """NVML's answer to nvmlDeviceGetSamples with nothing newer than the timestamp asked: NOT_FOUND (6),
    for the first `idle_polls` polls, then the recorded samples."""

    def __init__(self, start_us, idle_polls):
        super().__init__(start_us)
        self.idle_polls = idle_polls

    def nvmlDeviceGetSamples(self, handle, sampling_type, last_us):
        if self.idle_polls:
            self.idle_polls -= 1
            self.calls.append("nvmlDeviceGetSamples")
            raise FakeNVMLError(6)  # NVML_ERROR_NOT_FOUND
        return super().nvmlDeviceGetSamples(handle, sampling_type, last_us)


def test_an_idle_poll_keeps_the_sample_buffer_as_the_source():
    fake = IdleAtFirst(start_us=int(time.time() * 1e6), idle_polls=3)
    _, report = run_sampler(fake, seconds=0.15, interval=0.02)
    assert fake.idle_polls == 0 and "nvmlDeviceGetUtilizationRates" not in fake.calls
    assert report.gpu.source == "nvmlDeviceGetSamples" and report.gpu.count == 30
    assert report.reason == ""


def test_a_run_without_a_new_sample_says_so():
    fake = IdleAtFirst(start_us=0, idle_polls=10**6)
    _, report = run_sampler(fake, seconds=0.08, interval=0.02)
    assert report.gpu is None and "nvmlDeviceGetUtilizationRates" not in fake.calls
    assert report.reason == "nvmlDeviceGetSamples: the driver buffered no sample newer than the run's start"


def test_no_nvml_is_a_reason_and_a_skip():
    fake = FakePynvml(start_us=0, init_error=12)
    _, report = run_sampler(fake, seconds=0.05, gpm=True)
    assert report.gpu is None
    assert "NVML library not found" in report.reason
    check = util_check(report, VerdictFacts(device_type="cuda"), Thresholds())
    assert check.status is Status.SKIP and "NVML library not found" in check.detail


def test_gpm_sm_activity_between_two_samples():
    fake = FakePynvml(start_us=int(time.time() * 1e6))
    _, report = run_sampler(fake, gpm=True)
    assert report.gpm_sm_active == pytest.approx(0.715)
    assert fake.allocated == fake.freed == 2
    assert sm_active_check(report, Thresholds()).status is Status.WARN


def test_gpm_unsupported_is_a_reason():
    fake = FakePynvml(start_us=0, errors={"nvmlGpmQueryDeviceSupport": 3})
    _, report = run_sampler(fake, gpm=True, seconds=0.05)
    assert report.gpm_sm_active is None and "GPM not supported" in report.gpm_reason
    assert sm_active_check(report, Thresholds()).status is Status.SKIP


class SecondAllocFails(FakePynvml):
    def nvmlGpmSampleAlloc(self):
        if self.allocated:
            raise FakeNVMLError(7)  # NVML_ERROR_INSUFFICIENT_SIZE: no room for the second
        return super().nvmlGpmSampleAlloc()


@pytest.mark.parametrize(
    ("fake", "failed"),
    [
        (lambda: FakePynvml(start_us=0, errors={"nvmlGpmSampleGet": 3}), "nvmlGpmSampleGet"),
        (lambda: SecondAllocFails(start_us=0), "nvmlGpmSampleAlloc"),
    ],
    ids=["first-sample-fails", "second-alloc-fails"],
)
def test_gpm_samples_are_freed_when_the_first_sample_fails(fake, failed):
    fake = fake()
    _, report = run_sampler(fake, gpm=True, seconds=0.05)
    assert report.gpm_sm_active is None and report.gpm_reason.startswith(failed)
    assert fake.allocated >= 1 and fake.freed == fake.allocated


class KnowsUuids(FakePynvml):
    """nvmlDeviceGetHandleByUUID answering only the UUIDs in `known` (NVML's NOT_FOUND for the others)."""

    def __init__(self, known):
        super().__init__(start_us=0)
        self.known = known

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.calls.append(("nvmlDeviceGetHandleByUUID", uuid))
        if uuid not in self.known:
            raise FakeNVMLError(6)  # NVML_ERROR_NOT_FOUND
        return self.known[uuid]


MIG_UUID = "MIG-8f0a6e5c-2b1d-5a3e-9c4f-0d1e2f3a4b5c"


def test_a_mig_instance_is_sampled_by_its_mig_uuid_never_by_cuda_index():
    mig = {"mig": True}
    for given in (MIG_UUID, "GPU-" + MIG_UUID[len("MIG-") :]):  # named MIG by torch, or not
        fake = KnowsUuids({MIG_UUID: mig})
        sampler = UtilSampler(nvml_module=fake, device_uuid=given, device_index=0)
        sampler._open_gpu()
        assert sampler._handle is mig and "nvmlDeviceGetHandleByIndex" not in fake.calls
    lost = KnowsUuids({})
    sampler = UtilSampler(nvml_module=lost, device_uuid=MIG_UUID, device_index=0)
    sampler._open_gpu()
    assert sampler._handle is None and "nvmlDeviceGetHandleByIndex" not in lost.calls
    assert sampler.report().gpu is None
    assert sampler.report().reason == (
        f"NVML: no handle for the bench's GPU ({MIG_UUID}: not found; not sampled by CUDA index, "
        "which would read another GPU)"
    )


def test_the_cuda_index_stands_in_only_where_the_uuid_could_not_be_asked():
    fake = FakePynvml(start_us=0, errors={"nvmlDeviceGetHandleByUUID": 2})  # INVALID_ARGUMENT
    sampler = UtilSampler(nvml_module=fake, device_uuid="GPU-x", device_index=0)
    sampler._open_gpu()
    assert sampler._handle == fake.recorded["nvmlDeviceGetHandleByIndex"]


def test_pcie_link_read_through_nvml():
    sampler = UtilSampler(nvml_module=FakePynvml(start_us=0), device_index=0)
    sampler._open_gpu()
    assert sampler.pcie_link() == (5, 16, 5, 16)


def test_overhead_is_the_sampler_threads_cpu_time():
    """A poll that costs 2 ms of CPU shows up as sampler CPU time, and overhead = CPU / wall."""
    fake = FakePynvml(start_us=0, cost_s=0.002)
    _, report = run_sampler(fake, seconds=0.4, interval=0.02)
    calls = fake.calls.count("nvmlDeviceGetSamples")
    thread_polls = report.polls - 1  # the last poll runs in the caller's thread at stop()
    assert report.cpu_s >= 0.8 * 0.002 * thread_polls
    assert report.busy_s >= 0.002 * calls * 0.8
    assert report.overhead_pct == pytest.approx(100.0 * report.cpu_s / report.wall_s)
    assert 0.0 < report.overhead_pct < 50.0


def test_host_cpu_series_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 1 1 1\n")
    assert read_proc_stat(str(stat)) == (200, 1000)
    assert read_proc_stat(str(tmp_path / "missing")) is None
    _, report = run_sampler(FakePynvml(start_us=0), seconds=0.08)
    if Path("/proc/stat").exists():
        assert report.host_cpu is not None and 0.0 <= report.host_cpu.mean <= 100.0


def test_summarize_empty():
    assert summarize([], "x").count == 0 and summarize([], "x").mean is None


def test_samples_taken_are_handed_over_once_and_no_longer_kept():
    """`watch` drains the series as it goes: nothing is handed over twice, and the sampler holds none of it."""
    fake = FakePynvml(start_us=int(time.time() * 1e6))
    sampler = UtilSampler(nvml_module=fake, device_index=0, interval_s=0.02, proc_stat="")
    sampler.start()
    time.sleep(0.1)
    first = sampler.take_gpu()
    report = sampler.stop()
    rest = sampler.take_gpu()
    assert [v for _, v in first + rest] == recorded_values()
    assert report.host_cpu is None and sampler.take_gpu() == []
    assert report.reason == ""
