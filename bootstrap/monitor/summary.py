"""`monitor`'s running statistics per GPU (mean, p95, max utilisation; peak memory; mean power;
max temperature) in constant memory, and the sparklines that show them."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from bootstrap.monitor.sampler import GpuSample, Sample

SPARK = "▁▂▃▄▅▆▇█"
SPARK_ASCII = " .:-=+*#"


class _Series:
    """The whole run's values in at most 2*width points: pairs are averaged when it fills up."""

    def __init__(self, width: int) -> None:
        self._width = width
        self._points: list[float] = []
        self._bucket = 1  # samples per point
        self._pending: list[float] = []

    def add(self, value: float) -> None:
        self._pending.append(value)
        if len(self._pending) < self._bucket:
            return
        self._points.append(sum(self._pending) / len(self._pending))
        self._pending = []
        if len(self._points) >= 2 * self._width:
            self._points = [(a + b) / 2 for a, b in zip(self._points[::2], self._points[1::2])]
            self._bucket *= 2

    def points(self) -> list[float]:
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
    recent: tuple[float, ...]  # the last utilisation values, oldest first (the live sparkline)
    overview: tuple[float, ...]  # the whole run compressed to a few dozen points (the summary sparkline)

    def to_dict(self) -> dict[str, Any]:
        """The figures, units in the names; not the sparklines' points, which only draw them."""
        return {
            "index": self.index,
            "name": self.name,
            "samples": self.samples,
            "utilization_mean_pct": _rounded(self.utilization_mean_pct),
            "utilization_p95_pct": self.utilization_p95_pct,
            "utilization_max_pct": self.utilization_max_pct,
            "memory_used_peak_mib": self.memory_used_peak_mib,
            "power_mean_w": _rounded(self.power_mean_w),
            "temperature_max_c": self.temperature_max_c,
        }


def _rounded(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 3)


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
        self.recent: deque[float] = deque(maxlen=recent)
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
            self.temperature_max = (
                gpu.temperature_c if self.temperature_max is None else max(self.temperature_max, gpu.temperature_c)
            )

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
        self._gpus: dict[int, _GpuRunning] = {}
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

    def per_gpu(self) -> list[GpuStats]:
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
