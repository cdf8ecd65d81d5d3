"""Utilisation sampler: a background thread reading NVML (and the host CPU) while the bench runs.

GPU utilisation comes from the driver's own sample buffer,
`nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES)` ("higher frequency data
at lower polling cost"), falling back to polling
`nvmlDeviceGetUtilizationRates`; SM activity comes from NVML GPM
(`nvmlGpmSampleGet` twice, then `nvmlGpmMetricsGet(SM_UTIL)`) on GPUs that
report GPM support (Hopper and newer). All NVML calls go through
`bootstrap.compat.nvml.Nvml`. The host series is machine-wide CPU busy % from
/proc/stat. The sampler measures its own cost: wall time inside polls and
its thread's CPU time.

Shell equivalent: `nvidia-smi --query-gpu=utilization.gpu --format=csv -lms 200`
and `dcgmi dmon -e 1002` (SM active).
"""

from __future__ import annotations

import importlib
import math
import threading
import time
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from bootstrap.bench.results import SamplerReport, UtilStats
from bootstrap.compat.nvml import Nvml

# nvml.h values (stable ABI): nvmlSamplingType_t, nvmlValueType_t, GPM metric ids and struct version.
NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRICS_GET_VERSION = 1
_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


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


def read_proc_stat(path: str = "/proc/stat") -> Optional[Tuple[int, int]]:
    """(busy, total) jiffies over all CPUs from the first line of /proc/stat; None where absent."""
    try:
        with open(path, encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    numbers = [int(x) for x in fields[1:]]
    idle = numbers[3] + (numbers[4] if len(numbers) > 4 else 0)  # idle + iowait
    total = sum(numbers[:8])  # guest time is already inside user/nice
    return total - idle, total


class UtilSampler:
    """Start it, run the phases, `stop()` it: a `SamplerReport`.

    `nvml_module` is pynvml or a stand-in (None imports pynvml lazily);
    `device_uuid` (from torch) picks the GPU the bench runs on, else
    `device_index`; neither means no GPU series. `clock_zero` is the run's
    `time.perf_counter()` origin, so the timeline lines up with the phases.
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
        self._proc_stat = proc_stat if Path(proc_stat).exists() else ""
        self._handle: Any = None
        self._mode = ""  # 'samples' | 'rates' | '' (no GPU series)
        self._reason = ""
        self._last_us = 0
        self._gpu: List[Tuple[float, float]] = []
        self._host: List[Tuple[float, float]] = []
        self._last_stat: Optional[Tuple[int, int]] = None
        self._windows: List[Tuple[float, float]] = []
        self._gpm: Any = None
        self._gpm_reason = "" if device_index is not None or device_uuid else "no GPU"
        self._gpm_value: Optional[float] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._polls = 0
        self._busy = 0.0
        self._thread_cpu = 0.0
        self._started = 0.0
        self._stopped = 0.0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "UtilSampler":
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

    def __enter__(self) -> "UtilSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stat_window(self, start_s: float, end_s: float) -> None:
        """Count samples between these run-relative seconds in the statistics (the tuned windows)."""
        self._windows.append((start_s, end_s))

    # ------------------------------------------------------------------ GPU

    def _ask(self, name: str, *args: Any) -> Tuple[Any, str]:
        # Nvml's generic (value, reason) call; it has no public form yet, and the sampler's
        # queries (samples, GPM) are not facts worth a method of their own there.
        return self._nvml.query(name, *args)

    def _open_gpu(self) -> None:
        if self._device_index is None and not self._device_uuid:
            self._reason = "no GPU: CPU run"
            return
        reason = self._nvml.init()
        if reason:
            self._reason = f"NVML: {reason}"
            return
        handle, why = (None, "")
        if self._device_uuid:
            # NVML indices ignore CUDA_VISIBLE_DEVICES and CUDA's ordering; the UUID does not.
            handle, why = self._ask("nvmlDeviceGetHandleByUUID", self._device_uuid)
        if handle is None and self._device_index is not None:
            handle, why = self._ask("nvmlDeviceGetHandleByIndex", self._device_index)
        if handle is None:
            self._reason = f"NVML: no handle for the bench's GPU ({why})"
            return
        self._handle = handle
        self._mode = "samples"
        self._last_us = int(self._epoch_zero * 1e6)

    def _poll_gpu(self) -> None:
        if self._mode == "samples":
            answer, why = self._ask("nvmlDeviceGetSamples", self._handle, NVML_GPU_UTILIZATION_SAMPLES, self._last_us)
            if answer is not None:
                value_type, samples = answer
                field = _VALUE_FIELDS.get(int(value_type), "uiVal")
                for sample in samples:
                    stamp = int(sample.timeStamp)
                    if stamp <= self._last_us:
                        continue
                    self._gpu.append((stamp / 1e6 - self._epoch_zero, float(getattr(sample.sampleValue, field))))
                    self._last_us = stamp
                return
            if self._gpu:
                return  # a transient error after samples arrived: keep the source, skip this poll
            self._reason = f"nvmlDeviceGetSamples: {why}; polled nvmlDeviceGetUtilizationRates instead"
            self._mode = "rates"
        if self._mode == "rates":
            rates, why = self._ask("nvmlDeviceGetUtilizationRates", self._handle)
            if rates is None:
                self._reason = f"nvmlDeviceGetUtilizationRates: {why}"
                self._mode = ""
                return
            self._gpu.append((time.perf_counter() - self._zero, float(rates.gpu)))

    def pcie_link(self) -> Optional[Tuple[int, int, int, int]]:
        """(current gen, current width, max gen, max width) of the GPU's PCIe link; read it under load,
        since idle links train down to save power (`nvidia-smi -q -d PCIE`)."""
        if self._handle is None:
            return None
        answers = [
            self._ask(name, self._handle)[0]
            for name in (
                "nvmlDeviceGetCurrPcieLinkGeneration",
                "nvmlDeviceGetCurrPcieLinkWidth",
                "nvmlDeviceGetMaxPcieLinkGeneration",
                "nvmlDeviceGetMaxPcieLinkWidth",
            )
        ]
        if any(a is None for a in answers):
            return None
        gen, width, max_gen, max_width = (int(a) for a in answers)
        return gen, width, max_gen, max_width

    def gpm_begin(self) -> None:
        """First GPM sample (before the tuned windows); a reason instead where GPM is unsupported."""
        if self._handle is None:
            self._gpm_reason = self._gpm_reason or self._reason or "no GPU"
            return
        support, why = self._ask("nvmlGpmQueryDeviceSupport", self._handle)
        if support is None or not getattr(support, "isSupportedDevice", 0):
            self._gpm_reason = f"GPM not supported on this GPU/driver ({why or 'isSupportedDevice=0'})"
            return
        first, why = self._ask("nvmlGpmSampleAlloc")
        second, why2 = self._ask("nvmlGpmSampleAlloc")
        if first is None or second is None:
            self._gpm_reason = f"nvmlGpmSampleAlloc: {why or why2}"
            return
        taken, why = self._ask("nvmlGpmSampleGet", self._handle, first)
        if taken is None:
            self._gpm_reason = f"nvmlGpmSampleGet: {why}"
            return
        self._gpm = (first, second)

    def gpm_end(self, metrics_get_type: Any = None) -> Optional[float]:
        """Second GPM sample and the SM_UTIL metric between the two, as a 0..1 fraction."""
        if self._gpm is None:
            return None
        first, second = self._gpm
        self._gpm = None
        try:
            taken, why = self._ask("nvmlGpmSampleGet", self._handle, second)
            if taken is None:
                self._gpm_reason = f"nvmlGpmSampleGet: {why}"
                return None
            request = (metrics_get_type or self._metrics_get_type())()
            request.version = NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = 1
            request.sample1 = first
            request.sample2 = second
            request.metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL
            answer, why = self._ask("nvmlGpmMetricsGet", request)
            if answer is None or int(getattr(answer.metrics[0], "nvmlReturn", 0)) != 0:
                self._gpm_reason = f"nvmlGpmMetricsGet: {why or 'metric not returned'}"
                return None
            self._gpm_value = float(answer.metrics[0].value) / 100.0
            return self._gpm_value
        finally:
            self._ask("nvmlGpmSampleFree", first)
            self._ask("nvmlGpmSampleFree", second)

    def _metrics_get_type(self) -> Any:
        # The ctypes struct nvmlGpmMetricsGet fills in lives in the binding module; NVML is initialised
        # by now, so pynvml imports (or the stand-in was given).
        module = self._nvml_module or importlib.import_module("pynvml")
        return module.c_nvmlGpmMetricsGet_t

    # ------------------------------------------------------------------ thread

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
            if now is not None and self._last_stat is not None and now[1] > self._last_stat[1]:
                busy = 100.0 * (now[0] - self._last_stat[0]) / (now[1] - self._last_stat[1])
                self._host.append((time.perf_counter() - self._zero, busy))
            self._last_stat = now
        self._polls += 1
        self._busy += time.perf_counter() - began

    # ------------------------------------------------------------------ results

    def _in_windows(self, series: List[Tuple[float, float]]) -> List[float]:
        if not self._windows:
            return [v for _, v in series]
        return [v for t, v in series if any(lo <= t <= hi for lo, hi in self._windows)]

    def report(self) -> SamplerReport:
        gpu_source = {"samples": "nvmlDeviceGetSamples", "rates": "nvmlDeviceGetUtilizationRates"}.get(self._mode, "")
        if not gpu_source and self._gpu:
            gpu_source = "nvmlDeviceGetUtilizationRates"
        wall = (self._stopped or time.perf_counter()) - self._started if self._started else 0.0
        return SamplerReport(
            gpu=summarize(self._in_windows(self._gpu), gpu_source) if self._gpu else None,
            host_cpu=summarize(self._in_windows(self._host), "/proc/stat (all CPUs)") if self._host else None,
            gpm_sm_active=self._gpm_value,
            gpm_reason="" if self._gpm_value is not None else self._gpm_reason,
            reason=self._reason,
            polls=self._polls,
            busy_s=self._busy,
            cpu_s=self._thread_cpu,
            wall_s=wall,
            gpu_timeline=tuple(self._gpu),
            host_timeline=tuple(self._host),
        )
