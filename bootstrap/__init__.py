"""bootstrap: reproducible conda environments for PyTorch-on-NVIDIA teams.

Imported on two sides (docs/design.md, "Two Pythons"): the tools venv on the host (lock, env, doctor)
and created envs that may run Python 3.9 (verify, bench, monitor, export). Keep every module
3.9-compatible and import heavy engines (rattler, conda_lock, torch, pynvml) inside the functions
that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"
