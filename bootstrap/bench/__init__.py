"""The GPU-utilisation acceptance benchmark (`python -m bootstrap bench`).

Library first: `run_bench(BenchOptions(...))` returns a frozen
`BenchResult` (measurements, metrics, tuner record, sampler report,
verdicts as `Check`s, the winning `DataLoader(...)` as code); `report`
renders it as text, JSON (`bench.json`) and PNG (`bench.png`);
`distributed.run_distributed` runs it on every torchrun rank and
aggregates on rank 0. `tune_loader(dataset, batch_size=...)` tunes a
training script's own DataLoader and returns its keyword arguments. Method and thresholds:
../shared/reference/bench_method.md.

Importing this package does not import torch, numpy, Pillow or pynvml.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module it lives in, imported on first use (PEP 562): every
# `python -m bootstrap` start imports `bootstrap.bench.config` to build its parser, and
# must not pay for the runner, the tuner and the sampler on the way (they were a
# noticeable share of a `make env` no-op).
_HOMES = {
    "BenchOptions": "config",
    "Thresholds": "config",
    "ThresholdSet": "config",
    "WorkloadSpec": "config",
    "load_config": "config",
    "BenchResult": "results",
    "LoaderConfig": "results",
    "Measurement": "results",
    "Progress": "state",
    "run_bench": "run",
    "tune_loader": "script",
    "UserWorkload": "user",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
