"""Version arithmetic and the packaged driver and arch tables: pure functions of their arguments.

Driver numbers compare field by field ('570.124.06' -> (570, 124, 6)), CUDA versions as NVML encodes
them (12.8 -> 12080); the tables come from `bootstrap.compat.data`, generated from cuda_compat.yml.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable, Mapping, Optional

from bootstrap.compat import data

# Jetson / integrated GPUs need code built for exactly their CC (PyTorch's
# DEVICE_REQUIREMENT map encodes the same exclusions).
IGPU_CCS = frozenset({(5, 3), (6, 2), (7, 2), (8, 7), (10, 1), (11, 0)})
# PyTorch: "CUDA 13.2 allows SBSA binaries to run on Jetson devices".
IGPU_RELAXED_FROM_CUDA = 13020
IGPU_RELAXED_CCS = frozenset({(7, 2), (8, 7)})
_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")


# --------------------------------------------------------------------------- versions


def driver_tuple(text: Optional[str]) -> Optional[tuple[int, ...]]:
    """'570.124.06' -> (570, 124, 6): driver numbers compare field by field, not as strings."""
    if not text:
        return None
    try:
        return tuple(int(part) for part in str(text).strip().split("."))
    except ValueError:
        return None


def cuda_to_int(text: str) -> int:
    """'12.8' -> 12080, the encoding cuDriverGetVersion and NVML use."""
    major, minor = str(text).split(".")[:2]
    return int(major) * 1000 + int(minor) * 10


def cuda_from_int(value: int) -> str:
    """12080 -> '12.8'."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def cuda_from_tag(tag: str) -> Optional[str]:
    """'cu126' -> '12.6', 'cu118' -> '11.8'; anything else -> None."""
    match = re.fullmatch(r"cu(\d+)(\d)", tag)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def release_key(text: str) -> tuple[int, ...]:
    """'2.10' -> (2, 10): torch releases compare as numbers."""
    return tuple(int(p) for p in re.findall(r"\d+", text))


def short_source(row: Mapping[str, Any]) -> str:
    """A row's provenance in one short clause: 'high; https://...'."""
    first = str(row.get("source", "")).split(";")[0].strip()
    return f"{row.get('confidence', 'unknown')}; {first}"


# --------------------------------------------------------------------------- driver tables


def driver_column(os_name: str) -> str:
    """The driver tables' column for an OS: Windows has its own driver numbers, every other OS Linux's."""
    return "windows" if os_name == "windows" else "linux"


def minor_version_floor(major: int, os_name: str) -> tuple[Optional[str], Optional[Mapping[str, Any]]]:
    """The lowest driver that runs any CUDA `major`.x binary (Table 2), per OS series.

    Where the exact number is unknown (Windows 13.x) the branch number
    ('580') stands in: '580' < '580.88' compares as intended.
    """
    for row in data.MINOR_VERSION_FLOORS:
        if row["cuda_major"] == major:
            return (row[driver_column(os_name)] or str(row["branch"])), row
    return None, None


def full_support_driver(cuda: int, os_name: str) -> tuple[Optional[str], Optional[Mapping[str, Any]]]:
    """The driver bundled with CUDA major.minor GA (Table 3): the floor for full compatibility."""
    prefix = cuda_from_int(cuda) + "."
    best: Optional[tuple[tuple[int, ...], str, Mapping[str, Any]]] = None
    for row in data.TOOLKIT_DRIVERS:
        number = row[driver_column(os_name)]
        key = driver_tuple(number)
        if not (row["cuda"] + ".").startswith(prefix) or key is None:
            continue
        if best is None or key < best[0]:
            best = (key, number, row)
    return (best[1], best[2]) if best else (None, None)


def cuda_supported_by_driver_number(driver: Optional[str], os_name: str) -> Optional[int]:
    """Highest CUDA a driver number supports, from Table 3 (a lower bound).

    Secondary signal only: NVML's nvmlSystemGetCudaDriverVersion is exact.
    Table 2's floors count too: a Linux driver from 580.65.06 runs 13.x;
    Windows lists N/A for 13.x, so a Windows driver on the >= 580 branch is
    credited with 13.0 from the branch rule.
    """
    number = driver_tuple(driver)
    if number is None:
        return None
    best = 0
    for row in data.TOOLKIT_DRIVERS:
        needed = driver_tuple(row[driver_column(os_name)])
        if needed is not None and needed <= number:
            best = max(best, cuda_to_int(row["cuda"]))
    for row in data.MINOR_VERSION_FLOORS:
        # The exact floor where it is known (Linux 13.x: 580.65.06, not a 580 beta); else the branch
        floor = driver_tuple(row[driver_column(os_name)] or "") or (row["branch"],)
        if floor <= number:
            best = max(best, row["cuda_major"] * 1000)
    return best or None


def driver_older_than_tables(driver: Optional[str], os_name: str) -> bool:
    """Whether a driver number is below every driver the tables list for its OS series (Table 3's oldest
    row and every Table 2 floor): too old for any CUDA 11.0 or newer binary. False when it does not read
    as a driver number, which is unknown rather than too old."""
    return driver_tuple(driver) is not None and cuda_supported_by_driver_number(driver, os_name) is None


def oldest_tabled_cuda() -> int:
    """The oldest CUDA the driver tables cover (11000): below it a driver number tells nothing."""
    return min(int(row["cuda_major"]) for row in data.MINOR_VERSION_FLOORS) * 1000


# --------------------------------------------------------------------------- arch lists


@functools.lru_cache(maxsize=None)  # the entries of a few arch lists, parsed for every GPU x every build
def parse_arch(entry: str) -> Optional[tuple[str, tuple[int, int], str]]:
    """'sm_120' -> ('sm', (12, 0), ''); 'compute_90' -> ('compute', (9, 0), ''); 'sm_90a' -> (..., 'a')."""
    match = _ARCH.match(entry.strip())
    if not match:
        return None
    return match.group(1), (int(match.group(2)), int(match.group(3))), match.group(4)


def sass_runs_on(code: tuple[int, int], suffix: str, cc: tuple[int, int], wheel_cuda: int) -> bool:
    """SASS for X.y runs on X.z with z >= y; 'a' targets and Jetson/iGPU CCs need an exact match."""
    if code == cc:
        return True
    if suffix == "a" or code[0] != cc[0] or code[1] > cc[1]:
        return False
    relaxed = wheel_cuda >= IGPU_RELAXED_FROM_CUDA and cc in IGPU_RELAXED_CCS
    return not ((cc in IGPU_CCS and not relaxed) or code in IGPU_CCS)


def ptx_runs_on(code: tuple[int, int], suffix: str, cc: tuple[int, int]) -> bool:
    """PTX compute_XY JIT-compiles for any CC >= X.Y ('a' PTX only for X.Y itself, 'f' within the major)."""
    if suffix == "a":
        return code == cc
    if suffix == "f":
        return code[0] == cc[0] and code[1] <= cc[1]
    return code <= cc


def kernel_for(cc: tuple[int, int], arch_list: Iterable[str], wheel_cuda: int) -> tuple[Optional[str], Optional[str]]:
    """(best SASS entry, best PTX entry) for a GPU, None where there is none.

    Best = the highest matching target, the one the CUDA loader picks.
    """
    sass: list[tuple[tuple[int, int], str]] = []
    ptx: list[tuple[tuple[int, int], str]] = []
    for entry in arch_list:
        parsed = parse_arch(entry)
        if parsed is None:
            continue
        kind, code, suffix = parsed
        if kind == "sm" and sass_runs_on(code, suffix, cc, wheel_cuda):
            sass.append((code, entry))
        if kind == "compute" and ptx_runs_on(code, suffix, cc):
            ptx.append((code, entry))
    return (max(sass)[1] if sass else None), (max(ptx)[1] if ptx else None)


def architecture_name(cc: tuple[int, int]) -> str:
    for row in data.GPUS:
        if tuple(row["compute_capability"]) == cc:
            return str(row["architecture"])
    return "unknown architecture"


def first_cuda_for(cc: tuple[int, int]) -> Optional[int]:
    """The CUDA release that first targets this GPU's SASS (its own, else the nearest below in its
    major): no driver older than that release's knows the GPU. None for GPUs older than the table."""
    shipped = [(int(row["sm"][3:-1]), int(row["sm"][-1]), cuda_to_int(row["cuda"])) for row in data.SASS_INTRODUCED]
    same_major = [(minor, cuda) for major, minor, cuda in shipped if major == cc[0] and minor <= cc[1]]
    return max(same_major)[1] if same_major else None
