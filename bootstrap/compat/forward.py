"""The cuda-compat forward-compatibility package: when NVML's CUDA is its, and which GPUs it refuses
(https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html; cuda_compat.yml caveat
forward_compat_package): data-center GPUs and Jetson run it, GeForce does not, workstation RTX boards
are unsure. Pure: facts in, answers out. Docs: docs/checks.md, "Driver and CUDA".
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional, Sequence

from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.versions import (
    cuda_supported_by_driver_number,
    cuda_to_int,
    driver_column,
    driver_tuple,
    first_cuda_for,
)

REFUSED, UNSURE = "refused", "unsure"
_CONSUMER = re.compile(r"GeForce|TITAN")
# NVIDIA's workstation boards; their "Server Edition" siblings are data-center GPUs in the same table
_WORKSTATION = re.compile(r"Quadro|\bRTX (A\d{3,4}|PRO|\d{4}( SFF)? Ada|[4-8]000)\b|\bT(400|600|1000)\b")


def board_support(name: str) -> Optional[str]:
    """REFUSED for a GeForce or TITAN, UNSURE for a workstation board (only select RTX SKUs are
    supported, unnamed), None for the rest (data-center GPUs): forward compatibility's answer for it."""
    if _CONSUMER.search(name):
        return REFUSED
    if _WORKSTATION.search(name) and "Server" not in name:
        return UNSURE
    return None


def compat_in_use(facts: DriverFacts) -> Optional[int]:
    """The driver's own CUDA when NVML reports a CUDA that only a newer driver branch ships: a cuda-compat
    libcuda is loaded (NVML reports its version). None otherwise. Branches, not driver numbers: a branch
    reports its own CUDA minor before NVIDIA bundles that branch with a toolkit (R550.40 reports 12.4 ahead
    of 550.54.14, R565 reports 12.7, which no toolkit carries), and that is the driver's own CUDA."""
    number = driver_tuple(facts.driver_version) if facts.driver_version else None
    if not facts.cuda_driver_version or number is None or facts.os != "linux" or facts.jetson:
        return None  # cuda-compat is Linux only; a Jetson runs it as a supported board
    column = driver_column(facts.os)
    rows = [(cuda_to_int(row["cuda"]), driver_tuple(row[column])) for row in data.TOOLKIT_DRIVERS]
    shipped = [(cuda, driver[0]) for cuda, driver in rows if driver is not None and cuda <= facts.cuda_driver_version]
    if not shipped:
        return None
    newest = max(cuda for cuda, _ in shipped)  # the CUDA minor reported, or the newest a toolkit shipped below it
    if number[0] >= min(branch for cuda, branch in shipped if cuda == newest):  # its first release's branch
        return None
    return cuda_supported_by_driver_number(facts.driver_version, facts.os)


def own_cuda(facts: DriverFacts) -> Optional[int]:
    """The CUDA of the kernel driver itself: the one NVML reports, except where cuda-compat raised it
    (then the driver number's); the driver number's where none is reported. cuda-compat swaps only the
    user-mode library: which GPUs the driver knows is its branch's."""
    native = compat_in_use(facts)
    return native if native is not None else facts.supported_cuda()[0]


def newer_than_driver(cc: tuple[int, int], facts: DriverFacts) -> Optional[int]:
    """The CUDA that first targets the GPU, when the driver's own CUDA (`own_cuda`) is older: it cannot
    drive the GPU whatever torch carries. None otherwise, and on a Jetson, whose driver comes with its
    JetPack, made for its GPU."""
    needed = first_cuda_for(cc)
    own = None if facts.jetson else own_cuda(facts)
    return needed if needed is not None and own is not None and own < needed else None


def unsupported_board(
    facts: DriverFacts,
    gpus: Optional[Sequence[GpuFacts]] = None,
) -> tuple[Optional[str], Optional[str], Optional[int]]:
    """(a GPU's name, REFUSED or UNSURE, the driver's own CUDA) when cuda-compat is in use beside a GPU
    that it refuses, or may refuse, among `gpus` (the job's; None: every GPU the driver lists); a refused
    GPU is named before an unsure one. (None, None, None) otherwise."""
    native = compat_in_use(facts)
    if native is None:
        return None, None, None
    found = [(board_support(g.name), g.name) for g in (facts.gpus if gpus is None else gpus) if board_support(g.name)]
    if not found:
        return None, None, None
    support, name = min(found, key=lambda item: item[0] != REFUSED)
    return name, support, native


def judged_as(facts: DriverFacts) -> DriverFacts:
    """The facts a build to lock instead is judged by: where cuda-compat is loaded beside a GPU that
    refuses it, no build runs until the cuda.driver remedy takes it off, and the driver's own CUDA decides."""
    _, support, native = unsupported_board(facts)
    return replace(facts, cuda_driver_version=native) if support == REFUSED else facts
