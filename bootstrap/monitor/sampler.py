"""`monitor`'s core: sample every GPU through one NVML session (`bootstrap.compat.nvml.Nvml`), on a
fixed schedule; `summary` keeps the statistics, `log` the CSV / JSONL rows, and nothing here prints.
Docs: docs/checks.md, "Watching the GPUs: `monitor`".
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from bootstrap.compat.nvml import Nvml
from bootstrap.errors import EXIT_USAGE, BootstrapError
from bootstrap.fsutil import MIB

# nvml.h enums (a stable ABI), so a fake module needs no constants.
TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
CLOCK_SM = 1  # NVML_CLOCK_SM


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
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class Sample:
    """Every GPU at one moment."""

    timestamp: float  # seconds since the epoch (wall clock)
    elapsed_s: float  # since the first sample (monotonic clock)
    gpus: tuple[GpuSample, ...]


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
        self._gpus: list[_Gpu] = []
        self._notes: dict[str, str] = {}  # "GPU 0 power_w" -> reason, first failure only
        self._names: dict[int, Optional[str]] = {}  # pid -> process name, for processes still running
        # NVML calls that have an older fallback: the first variant that answered, per GPU.
        self._variant: dict[tuple[int, str], str] = {}

    def __enter__(self) -> GpuSampler:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def gpu_count(self) -> int:
        return len(self._gpus)

    @property
    def notes(self) -> tuple[str, ...]:
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
            self._gpus.append(
                _Gpu(
                    index,
                    handle,
                    _decode(name) if name is not None else f"GPU {index}",
                    None if uuid is None else _decode(uuid),
                )
            )
        if not self._gpus:
            self.close()
            raise NvmlUnavailable(f"no NVIDIA GPU to monitor: {'; '.join(self.notes)}")

    def close(self) -> None:
        self._nvml.shutdown()

    def sample(self) -> tuple[GpuSample, ...]:
        seen: set[int] = set()
        out = tuple(self._sample_gpu(gpu, seen) for gpu in self._gpus)
        self._names = {pid: name for pid, name in self._names.items() if pid in seen}
        return out

    def _ask(self, gpu: _Gpu, column: str, *variants: tuple[str, tuple[int, ...]]) -> Any:
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

    def _sample_gpu(self, gpu: _Gpu, seen: set[int]) -> GpuSample:
        util = self._ask(gpu, "gpu_utilization_pct", ("nvmlDeviceGetUtilizationRates", ()))
        memory = self._memory(gpu)
        temperature = self._ask(
            gpu,
            "temperature_c",
            ("nvmlDeviceGetTemperature", (TEMPERATURE_GPU,)),
            ("nvmlDeviceGetTemperatureV", (TEMPERATURE_GPU,)),
        )
        power = self._ask(gpu, "power_w", ("nvmlDeviceGetPowerUsage", ()))
        limit = self._ask(
            gpu, "power_limit_w", ("nvmlDeviceGetEnforcedPowerLimit", ()), ("nvmlDeviceGetPowerManagementLimit", ())
        )
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

    def _memory(self, gpu: _Gpu) -> Any:
        memory, reason, v2 = self._nvml.memory_info(gpu.handle)
        if memory is None:
            self._notes.setdefault(f"GPU {gpu.index} memory_used_mib", reason)
        elif not v2:
            self._notes.setdefault(
                f"GPU {gpu.index} memory_used_mib",
                "nvmlDeviceGetMemoryInfo_v2 not in this driver or pynvml: used counts the memory the driver "
                "reserves (nvidia-smi's does not)",
            )
        return memory

    def _processes(self, gpu: _Gpu, seen: set[int]) -> tuple[GpuProcess, ...]:
        by_pid: dict[int, Optional[int]] = {}
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
