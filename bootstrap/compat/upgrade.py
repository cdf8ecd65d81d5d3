"""Which driver upgrade a remedy offers: never one past the last driver branch of a GPU the host has
(R470 for Kepler, R580 for Maxwell, Pascal and Volta: cuda_compat.yml caveat r580_last_for_pre_turing).
Pure: facts in, remedy text out. Docs: docs/checks.md, "Driver and CUDA".
"""

from __future__ import annotations

from typing import Optional

from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.versions import (
    architecture_name,
    cuda_from_int,
    cuda_to_int,
    driver_tuple,
    full_support_driver,
    minor_version_floor,
)

# Caveat r580_last_for_pre_turing: the last driver branch of each architecture (as data.GPUS names it;
# a Jetson's Tegra GPU takes its driver from JetPack instead).
LAST_BRANCHES = {"Kepler": 470, "Maxwell": 580, "Pascal": 580, "Volta": 580}


def branch_cuda(branch: int) -> Optional[int]:
    """The newest CUDA a Linux driver of `branch` shipped with (R470: 11.4, R580: 13.0), from Table 3."""
    shipped = [
        cuda_to_int(row["cuda"]) // 10 * 10
        for row in data.TOOLKIT_DRIVERS
        if (driver_tuple(row["linux"]) or (0,))[0] == branch
    ]
    return max(shipped) if shipped else None


def last_branch(facts: DriverFacts) -> Optional[tuple[GpuFacts, str, int, int]]:
    """(the GPU, its architecture, its last driver branch, that branch's CUDA) for the listed GPU whose
    last branch is the oldest; None when every GPU takes current drivers."""
    found = []
    for gpu in facts.gpus:
        arch = architecture_name(gpu.compute_capability) if gpu.compute_capability else ""
        branch = LAST_BRANCHES.get(arch)
        cuda = branch_cuda(branch) if branch else None
        if branch and cuda:
            found.append((branch, gpu.index, (gpu, arch, branch, cuda)))
    return min(found)[2] if found else None


def capped(facts: DriverFacts, wheel: int) -> bool:
    """Whether full support of CUDA `wheel` needs a driver past the last branch of a GPU here."""
    last = None if facts.jetson else last_branch(facts)
    return last is not None and wheel > last[3]


def upgrade_driver(facts: DriverFacts, wheel: int, with_floor: bool = False, needs: str = "") -> str:
    """How to get a driver that fully supports CUDA `wheel` (`with_floor`: first the same-major floor that
    runs it at all; `needs`: what needs it, CUDA `wheel` builds if not said): on a Jetson through JetPack;
    never past the last branch of a GPU the driver lists."""
    if facts.jetson:
        return (
            f"this Jetson's driver comes with JetPack ({facts.jetson}) and cannot be upgraded on its own: "
            f"install the torch build made for this JetPack (NVIDIA's PyTorch for Jetson wheels), or flash a "
            f"newer JetPack (its driver must report CUDA {cuda_from_int(wheel)} or newer)"
        )
    floor, _ = minor_version_floor(wheel // 1000, facts.os)
    full, _ = full_support_driver(wheel, facts.os)
    to = upgrade_text(wheel, floor, full, facts.os) if with_floor else full_text(wheel, full, facts.os)
    how = (
        "upgrade the Windows host's NVIDIA driver (WSL2 uses it; install no Linux driver inside WSL) to"
        if facts.wsl
        else "upgrade the NVIDIA driver to"
    )
    last = last_branch(facts)
    if last is None:
        return f"{how} {to}"
    gpu, arch, branch, cuda = last
    what = f"the {gpu.name} (CC {gpu.cc_text}, {arch})"
    why = f"R{branch} is the last driver branch for {arch}, and its CUDA {cuda_from_int(cuda)}"
    if wheel <= cuda:
        return f"{how} {to}, of R{branch} or older: the last driver branch for {what}"
    if not needs and with_floor and floor and wheel // 1000 * 1000 <= cuda:
        return (
            f"{how} >= {floor} (CUDA {wheel // 1000}.x minor-version floor), of R{branch} or older; no NVIDIA "
            f"driver fully supports CUDA {cuda_from_int(wheel)} and runs {what}: {why} runs CUDA "
            f"{cuda // 1000}.x builds through minor-version compatibility at most"
        )
    if not needs and wheel // 1000 * 1000 <= cuda:  # a GPU needs a driver that knows it, not minor-version compat
        return (
            f"no NVIDIA driver fully supports CUDA {cuda_from_int(wheel)} and runs {what}: {why} runs "
            f"CUDA {cuda // 1000}.x builds through minor-version compatibility at most"
        )
    return (
        f"no NVIDIA driver runs both {what} and {needs or f'CUDA {cuda_from_int(wheel)} builds'}: {why} "
        f"runs CUDA {cuda // 1000}.x builds only (a driver serves every GPU of its host: move the {gpu.name} "
        "to another host to upgrade past it)"
    )


def full_text(wheel: int, full: Optional[str], os_name: str) -> str:
    if full:
        return f">= {full} (the {os_name} driver of CUDA {cuda_from_int(wheel)})"
    return (
        f"one that reports CUDA >= {cuda_from_int(wheel)} (`nvidia-smi` header; NVIDIA publishes no "
        f"{os_name} driver number for it)"
    )


def upgrade_text(wheel: int, floor: Optional[str], full: Optional[str], os_name: str) -> str:
    return (
        f">= {floor} (CUDA {wheel // 1000}.x minor-version floor); "
        f"{full_text(wheel, full, os_name)} for full CUDA {cuda_from_int(wheel)} support"
    )
