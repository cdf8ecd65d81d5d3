"""`monitor`: sample every GPU through one NVML session; rows, running statistics, sample logs.

Per GPU and sample: utilisation, memory used/total, temperature, power and
its limit, SM clock, and the processes with their memory. Shell equivalent
of one sample:

    nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,temperature.gpu,\\
        power.draw,power.limit,clocks.sm --format=csv,nounits
    nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv

but NVML is initialised once and queried in-process (`bootstrap.compat.nvml.Nvml`,
the one chokepoint), never a subprocess per sample. A query a GPU does not
support leaves its field None and is reported once in `notes`.

`utilization.gpu` is NVML's "a kernel ran during the sample period" (1/6 s
to 1 s depending on the GPU): a GPU running one tiny kernel at a time reads
100 %. It shows *whether* a GPU is kept busy, not how well it is used; the
acceptance benchmark measures throughput for that (DESIGN.md).

The core never prints: `bootstrap.commands.monitor` renders.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import re
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

from bootstrap.errors import BootstrapError, EXIT_USAGE, InputError
from bootstrap.fsutil import MIB, check_output, is_special, write_failed
from bootstrap.compat.nvml import Nvml

# nvml.h enums (a stable ABI), so a fake module needs no constants.
TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
CLOCK_SM = 1  # NVML_CLOCK_SM

# The columns of --csv / --jsonl, units in the names.
COLUMNS = (
    "timestamp",
    "elapsed_s",
    "gpu_index",
    "gpu_uuid",
    "gpu_name",
    "gpu_utilization_pct",
    "memory_utilization_pct",
    "memory_used_mib",
    "memory_total_mib",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "process_count",
    "process_memory_used_mib",
    "processes",  # CSV: "pid:name:memory_used_mib" joined by ';'; JSONL: a list of objects
)
SPARK = "▁▂▃▄▅▆▇█"
SPARK_ASCII = " .:-=+*#"


class NvmlUnavailable(BootstrapError):
    """No NVIDIA driver, no NVML library, or no GPU: nothing to monitor."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: Optional[str]
    memory_used_mib: Optional[int]  # None where the driver cannot tell (Windows WDDM)


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    uuid: Optional[str]
    utilization_pct: Optional[int]
    memory_utilization_pct: Optional[int]
    memory_used_mib: Optional[int]
    memory_total_mib: Optional[int]
    temperature_c: Optional[int]
    power_w: Optional[float]
    power_limit_w: Optional[float]
    sm_clock_mhz: Optional[int]
    processes: Tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class Sample:
    """Every GPU at one moment."""

    timestamp: float  # seconds since the epoch (wall clock)
    elapsed_s: float  # since the first sample (monotonic clock)
    gpus: Tuple[GpuSample, ...]


# --------------------------------------------------------------------------- sampling


@dataclass
class _Gpu:
    index: int
    handle: Any
    name: str
    uuid: Optional[str]


class GpuSampler:
    """One NVML session for the whole run: `open()` once, `sample()` many times, `close()`.

    `module` is `pynvml` (None: imported lazily) or a recorded stand-in.
    """

    def __init__(self, module: Any = None) -> None:
        self._nvml = Nvml(module)
        self._gpus: List[_Gpu] = []
        self._notes: Dict[str, str] = {}  # "GPU 0 power_w" -> reason, first failure only
        self._names: Dict[int, Optional[str]] = {}  # pid -> process name, for processes still running
        # NVML calls that have an older fallback: the first variant that answered, per GPU.
        self._variant: Dict[Tuple[int, str], str] = {}

    def __enter__(self) -> "GpuSampler":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def gpu_count(self) -> int:
        return len(self._gpus)

    @property
    def notes(self) -> Tuple[str, ...]:
        return tuple(f"{key}: {reason}" for key, reason in self._notes.items())

    def open(self) -> None:
        """Initialise NVML and find the GPUs; NvmlUnavailable when there is nothing to monitor."""
        reason = self._nvml.init()
        if reason:
            raise NvmlUnavailable(f"no NVIDIA GPU to monitor: {reason}")
        count, reason = self._nvml.device_count()
        if not count:
            self.close()
            raise NvmlUnavailable(f"no NVIDIA GPU to monitor: {reason or 'NVML sees no GPU'}")
        for index in range(count):
            handle, why = self._nvml.query("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                self._notes[f"GPU {index}"] = why
                continue
            name, _ = self._nvml.query("nvmlDeviceGetName", handle)
            uuid, _ = self._nvml.query("nvmlDeviceGetUUID", handle)
            self._gpus.append(_Gpu(index, handle, _decode(name) if name is not None else f"GPU {index}",
                                   None if uuid is None else _decode(uuid)))
        if not self._gpus:
            self.close()
            raise NvmlUnavailable(f"no NVIDIA GPU to monitor: {'; '.join(self.notes)}")

    def close(self) -> None:
        self._nvml.shutdown()

    def sample(self) -> Tuple[GpuSample, ...]:
        seen: set = set()
        out = tuple(self._sample_gpu(gpu, seen) for gpu in self._gpus)
        self._names = {pid: name for pid, name in self._names.items() if pid in seen}
        return out

    def _ask(self, gpu: _Gpu, column: str, *variants: Tuple[str, tuple]) -> Any:
        """The first variant of a query that answers; remembered so later samples call only it."""
        key = (gpu.index, column)
        chosen = self._variant.get(key)
        reason = ""
        for name, args in variants:
            if chosen is not None and name != chosen:
                continue
            value, reason = self._nvml.query(name, gpu.handle, *args)
            if value is not None or not reason:
                self._variant[key] = name
                return value
        self._notes.setdefault(f"GPU {gpu.index} {column}", reason)
        return None

    def _sample_gpu(self, gpu: _Gpu, seen: set) -> GpuSample:
        util = self._ask(gpu, "gpu_utilization_pct", ("nvmlDeviceGetUtilizationRates", ()))
        memory = self._ask(gpu, "memory_used_mib", ("nvmlDeviceGetMemoryInfo", ()))
        temperature = self._ask(gpu, "temperature_c", ("nvmlDeviceGetTemperature", (TEMPERATURE_GPU,)),
                                ("nvmlDeviceGetTemperatureV", (TEMPERATURE_GPU,)))
        power = self._ask(gpu, "power_w", ("nvmlDeviceGetPowerUsage", ()))
        limit = self._ask(gpu, "power_limit_w", ("nvmlDeviceGetEnforcedPowerLimit", ()),
                          ("nvmlDeviceGetPowerManagementLimit", ()))
        clock = self._ask(gpu, "sm_clock_mhz", ("nvmlDeviceGetClockInfo", (CLOCK_SM,)))
        return GpuSample(
            index=gpu.index,
            name=gpu.name,
            uuid=gpu.uuid,
            utilization_pct=None if util is None else int(util.gpu),
            memory_utilization_pct=None if util is None else int(util.memory),
            memory_used_mib=None if memory is None else int(memory.used) // MIB,
            memory_total_mib=None if memory is None else int(memory.total) // MIB,
            temperature_c=None if temperature is None else int(temperature),
            power_w=None if power is None else int(power) / 1000.0,  # NVML answers milliwatts
            power_limit_w=None if limit is None else int(limit) / 1000.0,
            sm_clock_mhz=None if clock is None else int(clock),
            processes=self._processes(gpu, seen),
        )

    def _processes(self, gpu: _Gpu, seen: set) -> Tuple[GpuProcess, ...]:
        by_pid: Dict[int, Optional[int]] = {}
        for kind, variants in (
            ("compute", ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2")),
            ("graphics", ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2")),
        ):
            listed = self._ask(gpu, f"{kind} processes", *((name, ()) for name in variants)) or []
            for proc in listed:
                used = getattr(proc, "usedGpuMemory", None)
                pid = int(proc.pid)
                # A process using the GPU for both is listed twice; keep the larger figure.
                memory = None if used is None else int(used) // MIB
                if pid not in by_pid or (memory or 0) > (by_pid[pid] or 0):
                    by_pid[pid] = memory
        seen.update(by_pid)
        return tuple(
            GpuProcess(pid, self._process_name(pid), memory)
            for pid, memory in sorted(by_pid.items(), key=lambda item: (-(item[1] or 0), item[0]))
        )

    def _process_name(self, pid: int) -> Optional[str]:
        if pid not in self._names:
            # Fails for other users' processes or across a PID namespace (containers).
            name, _ = self._nvml.query("nvmlSystemGetProcessName", pid)
            self._names[pid] = None if name is None else re.split(r"[\\/]", _decode(name).strip())[-1] or None
        return self._names[pid]


def _decode(value: Any) -> str:
    # pynvml returns bytes from some calls (nvmlSystemGetProcessName) and str from others.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def run_samples(
    sampler: GpuSampler,
    interval_s: float,
    count: Optional[int] = None,
    clock: Optional[Callable[[], float]] = None,
    wall: Optional[Callable[[], float]] = None,
    sleep: Optional[Callable[[float], None]] = None,
) -> Iterator[Sample]:
    """Yield `count` samples (None: until interrupted), one every `interval_s` on a fixed schedule.

    A sample that takes longer than the interval shifts the schedule rather
    than firing a burst of catch-up samples. `clock` (monotonic), `wall`
    (epoch seconds) and `sleep` default to the `time` module's.
    """
    clock = clock or time.monotonic
    wall = wall or time.time
    sleep = sleep or time.sleep
    start = clock()
    due = start
    taken = 0
    while count is None or taken < count:
        if taken:
            due += interval_s
            delay = due - clock()
            if delay > 0:
                sleep(delay)
            else:
                due -= delay
        yield Sample(wall(), clock() - start, sampler.sample())
        taken += 1


# --------------------------------------------------------------------------- statistics


class _Series:
    """The whole run's values in at most 2*width points: pairs are averaged when it fills up."""

    def __init__(self, width: int) -> None:
        self._width = width
        self._points: List[float] = []
        self._bucket = 1  # samples per point
        self._pending: List[float] = []

    def add(self, value: float) -> None:
        self._pending.append(value)
        if len(self._pending) < self._bucket:
            return
        self._points.append(sum(self._pending) / len(self._pending))
        self._pending = []
        if len(self._points) >= 2 * self._width:
            self._points = [(a + b) / 2 for a, b in zip(self._points[::2], self._points[1::2])]
            self._bucket *= 2

    def points(self) -> List[float]:
        tail = [sum(self._pending) / len(self._pending)] if self._pending else []
        return self._points + tail


@dataclass(frozen=True)
class GpuStats:
    """Statistics of one GPU over the run so far."""

    index: int
    name: str
    samples: int
    utilization_mean_pct: Optional[float]
    utilization_p95_pct: Optional[int]
    utilization_max_pct: Optional[int]
    memory_used_peak_mib: Optional[int]
    power_mean_w: Optional[float]
    temperature_max_c: Optional[int]
    recent: Tuple[float, ...]  # the last utilisation values, oldest first (the live sparkline)
    overview: Tuple[float, ...]  # the whole run compressed to a few dozen points (the summary sparkline)


class _GpuRunning:
    def __init__(self, index: int, name: str, recent: int, overview: int) -> None:
        self.index, self.name = index, name
        self.samples = 0
        self.histogram = [0] * 101  # utilisation is an integer percentage: exact percentiles in O(1) memory
        self.util_n = 0
        self.util_sum = 0
        self.memory_peak: Optional[int] = None
        self.power_sum, self.power_n = 0.0, 0
        self.temperature_max: Optional[int] = None
        self.recent: Deque[float] = deque(maxlen=recent)
        self.overview = _Series(overview)

    def add(self, gpu: GpuSample) -> None:
        self.samples += 1
        if gpu.utilization_pct is not None:
            value = min(100, max(0, gpu.utilization_pct))
            self.histogram[value] += 1
            self.util_n += 1
            self.util_sum += value
            self.recent.append(value)
            self.overview.add(value)
        if gpu.memory_used_mib is not None:
            self.memory_peak = max(self.memory_peak or 0, gpu.memory_used_mib)
        if gpu.power_w is not None:
            self.power_sum += gpu.power_w
            self.power_n += 1
        if gpu.temperature_c is not None:
            self.temperature_max = gpu.temperature_c if self.temperature_max is None else max(self.temperature_max, gpu.temperature_c)

    def stats(self) -> GpuStats:
        n = self.util_n
        return GpuStats(
            index=self.index,
            name=self.name,
            samples=self.samples,
            utilization_mean_pct=self.util_sum / n if n else None,
            utilization_p95_pct=percentile_from_histogram(self.histogram, 95) if n else None,
            utilization_max_pct=max(v for v, c in enumerate(self.histogram) if c) if n else None,
            memory_used_peak_mib=self.memory_peak,
            power_mean_w=self.power_sum / self.power_n if self.power_n else None,
            temperature_max_c=self.temperature_max,
            recent=tuple(self.recent),
            overview=tuple(self.overview.points()),
        )


class RunningSummary:
    """Mean, p95 and max utilisation, peak memory, mean power, max temperature, per GPU."""

    def __init__(self, recent: int = 30, overview: int = 40) -> None:
        self._recent, self._overview = recent, overview
        self._gpus: Dict[int, _GpuRunning] = {}
        self.samples = 0
        self.first: Optional[Sample] = None
        self.last: Optional[Sample] = None

    def add(self, sample: Sample) -> None:
        self.samples += 1
        self.first = self.first or sample
        self.last = sample
        for gpu in sample.gpus:
            running = self._gpus.get(gpu.index)
            if running is None:
                running = self._gpus[gpu.index] = _GpuRunning(gpu.index, gpu.name, self._recent, self._overview)
            running.add(gpu)

    @property
    def duration_s(self) -> float:
        return self.last.elapsed_s - self.first.elapsed_s if self.first and self.last else 0.0

    def per_gpu(self) -> List[GpuStats]:
        return [self._gpus[i].stats() for i in sorted(self._gpus)]


def percentile_from_histogram(histogram: Sequence[int], q: float) -> int:
    """Nearest-rank percentile: the smallest value with at least q % of the samples at or below it."""
    total = sum(histogram)
    rank = max(1, math.ceil(q / 100.0 * total))
    seen = 0
    for value, count in enumerate(histogram):
        seen += count
        if seen >= rank:
            return value
    raise ValueError("empty histogram")


def sparkline(values: Sequence[Optional[float]], ascii_only: bool = False, top: float = 100.0) -> str:
    """One character per value on a fixed 0..top scale (utilisation is absolute); None is a space."""
    ramp = SPARK_ASCII if ascii_only else SPARK
    out = []
    for value in values:
        if value is None:
            out.append(" ")
            continue
        level = int(round(max(0.0, min(top, value)) / top * (len(ramp) - 1)))
        out.append(ramp[level])
    return "".join(out)


# --------------------------------------------------------------------------- rows and logs


def rows(sample: Sample) -> List[Dict[str, Any]]:
    """One row per GPU, keyed by COLUMNS; missing values are None."""
    stamp = datetime.fromtimestamp(sample.timestamp, tz=timezone.utc).isoformat(timespec="milliseconds")
    stamp = stamp.replace("+00:00", "Z")
    out = []
    for gpu in sample.gpus:
        known = [p.memory_used_mib for p in gpu.processes if p.memory_used_mib is not None]
        out.append({
            "timestamp": stamp,
            "elapsed_s": round(sample.elapsed_s, 3),
            "gpu_index": gpu.index,
            "gpu_uuid": gpu.uuid,
            "gpu_name": gpu.name,
            "gpu_utilization_pct": gpu.utilization_pct,
            "memory_utilization_pct": gpu.memory_utilization_pct,
            "memory_used_mib": gpu.memory_used_mib,
            "memory_total_mib": gpu.memory_total_mib,
            "temperature_c": gpu.temperature_c,
            "power_w": None if gpu.power_w is None else round(gpu.power_w, 3),
            "power_limit_w": None if gpu.power_limit_w is None else round(gpu.power_limit_w, 3),
            "sm_clock_mhz": gpu.sm_clock_mhz,
            "process_count": len(gpu.processes),
            "process_memory_used_mib": sum(known) if known else (0 if not gpu.processes else None),
            "processes": [
                {"pid": p.pid, "name": p.name, "memory_used_mib": p.memory_used_mib} for p in gpu.processes
            ],
        })
    return out


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ";".join(
            f"{p['pid']}:{_safe_name(p['name'])}:{'' if p['memory_used_mib'] is None else p['memory_used_mib']}"
            for p in value
        )
    return str(value)


def _safe_name(name: Optional[str]) -> str:
    return "" if name is None else name.replace(":", "_").replace(";", "_")


class SampleLog:
    """`--csv FILE` / `--jsonl FILE`: rows streamed to `FILE.partial`, renamed to FILE at the end.

    Readers of FILE see a complete log or none (the project's atomic-write
    rule); `FILE.partial` can be followed with `tail -f` meanwhile and keeps
    the data if the process is killed outright.
    """

    def __init__(self, path: Path, fmt: str, flag: str = "--csv") -> None:
        if fmt not in ("csv", "jsonl"):
            raise ValueError(fmt)
        self.path = check_output(path, flag)
        self.fmt = fmt
        self.flag = flag
        self.direct = is_special(self.path)  # a FIFO or /dev/stdout: streamed to, nothing to rename
        self.partial = self.path if self.direct else self.path.with_name(self.path.name + ".partial")
        self.rows_written = 0
        try:
            flags = os.O_WRONLY if self.direct else os.O_WRONLY | os.O_CREAT | os.O_EXCL
            fd = os.open(self.partial, flags, 0o644)
        except FileExistsError:
            raise InputError(self.partial, "exists: another monitor is writing it, or one was killed",
                             "stop the other monitor, or remove the file") from None
        except OSError as exc:
            raise InputError(self.path, f"cannot write: {exc.strerror}", "choose another file") from None
        self._handle = open(fd, "w", encoding="utf-8", newline="")
        self._csv = csv.writer(self._handle, lineterminator="\n") if fmt == "csv" else None
        if self._csv is not None:
            self._csv.writerow(COLUMNS)

    def write(self, sample: Sample) -> None:
        try:
            for row in rows(sample):
                if self._csv is not None:
                    self._csv.writerow([csv_cell(row[c]) for c in COLUMNS])
                else:
                    self._handle.write(json.dumps(row, separators=(",", ":")) + "\n")
                self.rows_written += 1
            self._handle.flush()
        except OSError as exc:
            raise self._failed(exc) from None

    def commit(self) -> None:
        """Close and rename to the final name."""
        try:
            self._handle.flush()
            if self.direct:
                self._handle.close()
                return
            os.fsync(self._handle.fileno())
            self._handle.close()
            os.replace(self.partial, self.path)
        except OSError as exc:
            raise self._failed(exc) from None

    def discard(self) -> None:
        with contextlib.suppress(OSError):  # what is still buffered cannot be written (a full disk): it goes anyway
            self._handle.close()
        if not self.direct and self.partial.exists():
            self.partial.unlink()

    def _failed(self, exc: OSError) -> BootstrapError:
        """The one line for a log that cannot be written any more (a full disk); the partial file is removed
        first, so the free space reported is what is left without it."""
        self.discard()
        return write_failed(exc, self.path, self.flag, "the log is removed" if not self.direct else "logging stopped")
