"""The utilisation sampler: a background thread reading NVML and /proc/stat while the bench runs.

How it samples, and what it costs: docs/benchmark.md, "Sampling utilisation". Shell equivalent:
`nvidia-smi --query-gpu=utilization.gpu --format=csv -lms 200` and `dcgmi dmon -e 1002` (SM active).
"""

from __future__ import annotations

import importlib
import math
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from bootstrap.bench.host import CpuTimes, busy_pct, read_proc_stat
from bootstrap.bench.results import SamplerReport, UtilStats
from bootstrap.compat.nvml import NVML_ERROR_NOT_FOUND, Nvml

# nvml.h values (stable ABI): nvmlSamplingType_t, nvmlValueType_t, GPM metric ids and struct version.
NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRICS_GET_VERSION = 1
_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
_PCIE_LINK_QUERIES = (
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
)
_SAMPLES = "nvmlDeviceGetSamples"  # the driver's sample buffer, else polled rates
_RATES = "nvmlDeviceGetUtilizationRates"
_HOST_SOURCE = "/proc/stat (all CPUs)"

Series = list[tuple[float, float]]  # (run-relative seconds, percent)


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """Linear-interpolation percentile (numpy's default method); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def summarize(values: Sequence[float], source: str) -> UtilStats:
    if not values:
        return UtilStats(source=source, count=0)
    return UtilStats(
        source=source,
        count=len(values),
        mean=sum(values) / len(values),
        p5=percentile(values, 5),
        p10=percentile(values, 10),
        p50=percentile(values, 50),
        p95=percentile(values, 95),
    )


class UtilSampler:
    """Start it, run the phases, `stop()` it: a `SamplerReport`.

    `nvml_module` is pynvml or a stand-in (None imports pynvml lazily). `device_uuid` (from torch) picks the
    GPU, else `device_index`; neither means no GPU series. `clock_zero` is the run's `perf_counter()` origin.
    `proc_stat` '' samples no host CPU series.
    """

    def __init__(
        self,
        *,
        nvml_module: Any = None,
        device_index: Optional[int] = None,
        device_uuid: Optional[str] = None,
        interval_s: float = 0.2,
        clock_zero: Optional[float] = None,
        proc_stat: str = "/proc/stat",
    ) -> None:
        self._nvml = Nvml(nvml_module)
        self._nvml_module = nvml_module
        self._device_index = device_index
        self._device_uuid = device_uuid
        self._interval = interval_s
        self._zero = time.perf_counter() if clock_zero is None else clock_zero
        self._epoch_zero = time.time() - (time.perf_counter() - self._zero)
        self._proc_stat = proc_stat if proc_stat and Path(proc_stat).exists() else ""
        self._handle: Any = None
        self._mode = ""  # _SAMPLES | _RATES | '' (no GPU series)
        self._reason = ""
        self._last_us = 0
        self._gpu: Series = []
        self._taken = 0  # GPU samples handed over by take_gpu()
        self._host: Series = []
        self._last_stat: Optional[CpuTimes] = None
        self._windows: list[tuple[float, float]] = []
        self._gpm: Optional[tuple[Any, Any]] = None
        self._gpm_reason = "" if device_index is not None or device_uuid else "no GPU"
        self._gpm_value: Optional[float] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._polls = 0
        self._busy = 0.0
        self._thread_cpu = 0.0
        self._started = 0.0
        self._stopped = 0.0

    def start(self) -> UtilSampler:
        self._open_gpu()
        self._last_stat = read_proc_stat(self._proc_stat) if self._proc_stat else None
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="bootstrap-bench-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> SamplerReport:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._stopped = time.perf_counter()
            self._poll()  # the driver's buffer holds samples newer than our last poll
        self._nvml.shutdown()
        return self.report()

    @property
    def sampling_gpu(self) -> bool:
        """Whether the sampler reads a GPU series (else `report().reason` says why not)."""
        return bool(self._mode)

    def stat_window(self, start_s: float, end_s: float) -> None:
        """Count samples between these run-relative seconds in the statistics (the tuned windows)."""
        self._windows.append((start_s, end_s))

    def _open_gpu(self) -> None:
        if self._device_index is None and not self._device_uuid:
            self._reason = "no GPU: CPU run"
            return
        reason = self._nvml.init()
        if reason:
            self._reason = f"NVML: {reason}"
            return
        handle, why, by_index = self._handle_by_uuid()
        if handle is None and by_index and self._device_index is not None:
            handle, why = self._nvml.query("nvmlDeviceGetHandleByIndex", self._device_index)
        if handle is None:
            self._reason = f"NVML: no handle for the bench's GPU ({why})"
            return
        self._handle = handle
        self._mode = _SAMPLES
        self._last_us = int(self._epoch_zero * 1e6)

    def _handle_by_uuid(self) -> tuple[Any, str, bool]:
        """(handle, why not, whether the CUDA index may stand in). NVML indices ignore CUDA_VISIBLE_DEVICES
        and CUDA's ordering; the UUID does not. A UUID NVML does not know as a GPU's may be a MIG
        instance's, which it knows as 'MIG-...'. The index stands in only where the UUID could not be
        asked: for a MIG instance, or a UUID NVML answered NOT_FOUND, it would name another GPU."""
        uuid = self._device_uuid
        if not uuid:
            return None, "", True
        answer = self._nvml.ask("nvmlDeviceGetHandleByUUID", uuid)
        if answer.value is None and answer.code == NVML_ERROR_NOT_FOUND and uuid.startswith("GPU-"):
            uuid = f"MIG-{uuid[len('GPU-') :]}"
            answer = self._nvml.ask("nvmlDeviceGetHandleByUUID", uuid)
        if answer.value is not None:
            return answer.value, "", False
        if uuid.startswith("MIG-") or answer.code == NVML_ERROR_NOT_FOUND:
            why = f"{uuid}: {answer.reason}; not sampled by CUDA index, which would read another GPU"
            return None, why, False
        return None, answer.reason, True

    def _poll_gpu(self) -> None:
        if self._mode == _SAMPLES:
            answer = self._nvml.ask(_SAMPLES, self._handle, NVML_GPU_UTILIZATION_SAMPLES, self._last_us)
            if answer.value is not None:
                self._append_samples(answer.value)
                return
            # NOT_FOUND: no sample newer than the last one read yet (an idle poll). Any other error after
            # samples arrived is transient. Either way the source stays; this poll is skipped.
            if self._gpu or self._taken or answer.code == NVML_ERROR_NOT_FOUND:
                return
            self._reason = f"{_SAMPLES}: {answer.reason}; polled {_RATES} instead"
            self._mode = _RATES
        rates, why = self._nvml.query(_RATES, self._handle)
        if rates is None:
            self._reason = f"{_RATES}: {why}"
            self._mode = ""
            return
        self._gpu.append((time.perf_counter() - self._zero, float(rates.gpu)))

    def _append_samples(self, answer: Any) -> None:
        """The driver's buffered samples newer than the last one read, on the run's clock."""
        value_type, samples = answer
        field = _VALUE_FIELDS.get(int(value_type), "uiVal")
        for sample in samples:
            stamp = int(sample.timeStamp)
            if stamp <= self._last_us:
                continue
            self._gpu.append((stamp / 1e6 - self._epoch_zero, float(getattr(sample.sampleValue, field))))
            self._last_us = stamp

    def take_gpu(self) -> Series:
        """The GPU samples read since the last call, handed over and no longer kept: a caller that runs
        for days (`watch`) holds what its current interval needs, not every sample since the start.
        Those taken are left out of `report()`."""
        count = len(self._gpu)
        taken = self._gpu[:count]
        # One slice deletion, atomic under the GIL: a sample the thread appends meanwhile stays for the next call.
        del self._gpu[:count]
        self._taken += count
        return taken

    def pcie_link(self) -> Optional[tuple[int, int, int, int]]:
        """(current gen, current width, max gen, max width) of the GPU's PCIe link; read it under load,
        since idle links train down to save power (`nvidia-smi -q -d PCIE`)."""
        if self._handle is None:
            return None
        answers = [self._nvml.query(name, self._handle)[0] for name in _PCIE_LINK_QUERIES]
        if any(answer is None for answer in answers):
            return None
        gen, width, max_gen, max_width = (int(answer) for answer in answers)
        return gen, width, max_gen, max_width

    def gpm_begin(self) -> None:
        """First GPM sample (before the tuned windows); a reason instead where GPM is unsupported."""
        if self._handle is None:
            self._gpm_reason = self._gpm_reason or self._reason or "no GPU"
            return
        support, why = self._nvml.query("nvmlGpmQueryDeviceSupport", self._handle)
        if support is None or not getattr(support, "isSupportedDevice", 0):
            self._gpm_reason = f"GPM not supported on this GPU/driver ({why or 'isSupportedDevice=0'})"
            return
        first, why = self._nvml.query("nvmlGpmSampleAlloc")
        second, why2 = self._nvml.query("nvmlGpmSampleAlloc")
        if first is None or second is None:
            self._gpm_reason = f"nvmlGpmSampleAlloc: {why or why2}"
            self._gpm_free(first, second)
            return
        taken, why = self._nvml.query("nvmlGpmSampleGet", self._handle, first)
        if taken is None:
            self._gpm_reason = f"nvmlGpmSampleGet: {why}"
            self._gpm_free(first, second)
            return
        self._gpm = (first, second)

    def _gpm_free(self, *samples: Any) -> None:
        """Give back what nvmlGpmSampleAlloc allocated (NVML's own memory: nothing else frees it)."""
        for sample in samples:
            if sample is not None:
                self._nvml.query("nvmlGpmSampleFree", sample)

    def gpm_end(self, metrics_get_type: Any = None) -> Optional[float]:
        """Second GPM sample and the SM_UTIL metric between the two, as a 0..1 fraction."""
        if self._gpm is None:
            return None
        first, second = self._gpm
        self._gpm = None
        try:
            taken, why = self._nvml.query("nvmlGpmSampleGet", self._handle, second)
            if taken is None:
                self._gpm_reason = f"nvmlGpmSampleGet: {why}"
                return None
            request = (metrics_get_type or self._metrics_get_type())()
            request.version = NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = 1
            request.sample1 = first
            request.sample2 = second
            request.metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL
            answer, why = self._nvml.query("nvmlGpmMetricsGet", request)
            if answer is None or int(getattr(answer.metrics[0], "nvmlReturn", 0)) != 0:
                self._gpm_reason = f"nvmlGpmMetricsGet: {why or 'metric not returned'}"
                return None
            self._gpm_value = float(answer.metrics[0].value) / 100.0
            return self._gpm_value
        finally:
            self._gpm_free(first, second)

    def _metrics_get_type(self) -> Any:
        # The ctypes struct nvmlGpmMetricsGet fills in lives in the binding module; NVML is initialised
        # by now, so pynvml imports (or the stand-in was given).
        module = self._nvml_module or importlib.import_module("pynvml")
        return module.c_nvmlGpmMetricsGet_t

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._poll()
        self._thread_cpu = time.thread_time()

    def _poll(self) -> None:
        began = time.perf_counter()
        if self._mode:
            self._poll_gpu()
        if self._proc_stat:
            now = read_proc_stat(self._proc_stat)
            busy = busy_pct(self._last_stat, now)
            if busy is not None:
                self._host.append((time.perf_counter() - self._zero, busy))
            self._last_stat = now
        self._polls += 1
        self._busy += time.perf_counter() - began

    def _in_windows(self, series: Series) -> list[float]:
        if not self._windows:
            return [value for _, value in series]
        return [value for t, value in series if any(lo <= t <= hi for lo, hi in self._windows)]

    def _stats(self, series: Series, source: str) -> Optional[UtilStats]:
        return summarize(self._in_windows(series), source) if series else None

    def _empty_reason(self) -> str:
        if self._mode == _SAMPLES and not self._gpu and not self._taken and self._polls:
            return f"{_SAMPLES}: the driver buffered no sample newer than the run's start"
        return ""

    def report(self) -> SamplerReport:
        # A series without a mode is what the rates fallback polled before it failed.
        gpu_source = _SAMPLES if self._mode == _SAMPLES else _RATES
        wall = (self._stopped or time.perf_counter()) - self._started if self._started else 0.0
        return SamplerReport(
            gpu=self._stats(self._gpu, gpu_source),
            host_cpu=self._stats(self._host, _HOST_SOURCE),
            gpm_sm_active=self._gpm_value,
            gpm_reason="" if self._gpm_value is not None else self._gpm_reason,
            reason=self._reason or self._empty_reason(),
            polls=self._polls,
            busy_s=self._busy,
            cpu_s=self._thread_cpu,
            wall_s=wall,
            gpu_timeline=tuple(self._gpu),
            host_timeline=tuple(self._host),
        )
