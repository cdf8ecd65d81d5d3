"""bootstrap: reproducible conda environments for PyTorch-on-NVIDIA teams.

Imported on two sides (docs/design.md, "Two Pythons"): the tools venv on the host (lock, env, doctor)
and created envs that may run Python 3.9 (verify, bench, monitor, export). Keep every module
3.9-compatible and import heavy engines (rattler, conda_lock, torch, pynvml) inside the functions
that need them.

`from bootstrap import tune_loader`, `tune_training` and `watch` are the benchmark's Python API
(docs/benchmark.md), the same functions as in `bootstrap.bench`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# The Python API a training script imports from the package itself, loaded on first use (PEP 562): every
# module imports this package first, and none of them, nor `python -m bootstrap`, should pay for the
# benchmark. The one import that reaches above the shared layer (tests/test_imports.py, FACADE).
_API = ("tune_loader", "tune_training", "watch")


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("bootstrap.bench"), name)
