"""The GPU-utilisation acceptance benchmark (`python -m bootstrap bench`; docs/benchmark.md).

`run_bench(BenchOptions(...))` returns a frozen `BenchResult`; `tune_loader(dataset, batch_size=...)`
tunes a training script's own DataLoader and returns its keyword arguments; `tune_training(dataset, model,
effective_batch=...)` tunes its micro-batch, accumulation, precision and memory format as well;
`watch(loader)` reports, from the training loop itself, how much of its time it waits for data.
Importing this package does not import torch, numpy, Pillow or pynvml.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module it lives in, imported on first use (PEP 562): every
# `python -m bootstrap` start imports `bootstrap.bench.config` to build its parser, and must not pay
# for the runner, the tuner and the sampler on the way.
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
    "tune_loader": "run",
    "tune_training": "training",
    "TrainingOptions": "training",
    "TrainingAdvice": "recipe",
    "UserWorkload": "user",
    # not a module `watch`: importing it would set the package's `watch` to the module, over the function
    "Watch": "watcher",
    "watch": "watcher",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
