"""bootstrap: reproducible conda environments for PyTorch-on-NVIDIA teams.

The package is imported on two sides (see docs/design.md, "Two Pythons"): by the
tools venv on the host (lock, env, doctor) and inside created environments
that may run Python 3.9 (verify, bench, monitor, export). Keep every module
3.9-compatible and import heavy engines (rattler, conda_lock, torch, pynvml)
inside the functions that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"
