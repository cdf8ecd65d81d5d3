"""The GPU-utilisation acceptance benchmark (`python -m bootstrap bench`).

Library first: `run_bench(BenchOptions(...))` returns a frozen
`BenchResult` (measurements, metrics, tuner record, sampler report,
verdicts as `Check`s, the winning `DataLoader(...)` as code); `report`
renders it as text, JSON (`bench.json`) and PNG (`bench.png`);
`distributed.run_distributed` runs it on every torchrun rank and
aggregates on rank 0. Method and thresholds:
../shared/reference/bench_method.md.

Importing this package does not import torch, numpy, Pillow or pynvml.
"""

from __future__ import annotations

from bootstrap.bench.config import BenchOptions, Thresholds, ThresholdSet, WorkloadSpec, load_config
from bootstrap.bench.results import BenchResult, LoaderConfig, Measurement
from bootstrap.bench.run import Progress, run_bench

__all__ = [
    "BenchOptions", "BenchResult", "LoaderConfig", "Measurement", "Progress", "ThresholdSet", "Thresholds",
    "WorkloadSpec", "load_config", "run_bench",
]
