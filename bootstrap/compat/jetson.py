"""What the rules say on a Jetson: its driver and its torch come with JetPack, not from the tables.
Pure: facts in, checks and texts out. Docs: docs/checks.md, "Unusual hosts".
"""

from __future__ import annotations

from bootstrap.compat.facts import DriverFacts
from bootstrap.compat.versions import IGPU_CCS
from bootstrap.report import Check, Status

_IGPU_CCS = ", ".join("{}.{}".format(*cc) for cc in sorted(IGPU_CCS))


def unlisted(facts: DriverFacts) -> bool:
    """A Jetson whose integrated GPU no driver query lists (no NVML on L4T R35 and older)."""
    return bool(facts.jetson) and not facts.gpus


def torch_remedy(facts: DriverFacts) -> str:
    """Where a Jetson's torch comes from: NVIDIA's wheels for its JetPack, not the lock's PyPI build."""
    return (
        f"install the torch build made for its JetPack ({facts.jetson}; NVIDIA's PyTorch for Jetson "
        "wheels) in a venv of its own: PyPI's aarch64 torch builds are CPU-only or server (SBSA) builds, "
        "without kernels for a Jetson's GPU"
    )


def cpu_build_check(facts: DriverFacts, label: str, source: str) -> Check:
    """torch.cuda_build for a CPU torch on a Jetson: its GPU goes unused, whether NVML lists it or not."""
    return Check(
        "torch.cuda_build",
        Status.FAIL,
        f"torch {label} is a CPU build (torch.version.cuda is None)",
        f"a CUDA build for this Jetson's GPU ({facts.jetson})",
        remedy=torch_remedy(facts),
        detail=source,
    )


def driver_check(facts: DriverFacts, cuda: str) -> Check:
    """cuda.driver on a Jetson without NVML: not CPU mode, but a driver no query here can read."""
    return Check(
        "cuda.driver",
        Status.SKIP,
        f"Jetson ({facts.jetson}): no NVML to read the driver's CUDA from",
        f"a driver for CUDA {cuda}",
        detail=(
            "the driver comes with JetPack (L4T R35 and older have no NVML) and runs the CUDA that "
            "JetPack release ships, which a torch built for it matches; " + (facts.reason or "no driver facts")
        ),
    )


def arch_check(facts: DriverFacts) -> Check:
    """cuda.arch on a Jetson without NVML: its GPU exists, but its compute capability is not listed."""
    return Check(
        "cuda.arch",
        Status.SKIP,
        f"Jetson ({facts.jetson}): its GPU is not listed without NVML",
        "a GPU to match against the arch list",
        detail=(
            f"a Jetson's GPU runs only code built for its own compute capability ({_IGPU_CCS}): "
            "`python -c 'import torch; print(torch.cuda.get_arch_list())'` must list it"
        ),
    )


def fit_check(facts: DriverFacts, observed: str, expected: str, source: str) -> Check:
    """lock.torch on a Jetson without NVML: a CUDA build that cannot be judged here, never 'runs on the CPU'."""
    return Check(
        "lock.torch",
        Status.SKIP,
        observed + ": not judged on this Jetson",
        expected,
        detail=(
            f"no NVML on this Jetson ({facts.jetson}) to judge its GPU and driver by; {torch_remedy(facts)}; {source}"
        ),
    )
