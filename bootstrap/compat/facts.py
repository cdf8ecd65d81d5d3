"""Facts about the host and its NVIDIA stack, as plain values (absence is data: None and a reason),
filled in by the probes or read back from a `--save-facts` file (`bootstrap.compat.typed`); the rules
never ask the machine themselves. Docs: docs/checks.md, "Facts files: a diagnosis that travels".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Mapping, Optional, TypeVar

from bootstrap.compat.typed import MAX_ITEMS, FieldError, from_mapping
from bootstrap.compat.versions import cuda_supported_by_driver_number, driver_column
from bootstrap.errors import excerpt
from bootstrap.platforms import PLATFORMS

H = TypeVar("H", bound=Hashable)

# --------------------------------------------------------------------------- platform

# The compat tables' keys (bootstrap.platforms), the vocabulary a facts file's `platform` is in.
COMPAT_KEYS = tuple(dict.fromkeys(p.compat_key for p in PLATFORMS))
_OS_OF_KEY = {p.compat_key: p.os for p in PLATFORMS}  # 'linux_x86_64' -> 'linux': the driver series there


def checked_platform(value: str, path: str) -> str:
    """`value` if it is one of the compat keys ('linux_x86_64', ...); a FieldError naming `path` if not."""
    if value not in COMPAT_KEYS:
        raise FieldError(
            f"{path}: {excerpt(value, 40)} is not a platform this project knows ({', '.join(COMPAT_KEYS)})"
        )
    return value


# --------------------------------------------------------------------------- NVIDIA


@dataclass(frozen=True)
class GpuFacts:
    """One GPU as NVML (or `nvidia-smi --query-gpu=...`) reports it. None = not reported."""

    index: int
    name: str
    compute_capability: Optional[tuple[int, int]] = None
    memory_total_mib: Optional[int] = None
    memory_used_mib: Optional[int] = None
    uuid: Optional[str] = None
    persistence_mode: Optional[bool] = None
    ecc_enabled: Optional[bool] = None
    retired_pages: Optional[int] = None
    retired_pages_pending: Optional[bool] = None
    remapped_rows_pending: Optional[bool] = None
    remapped_rows_failed: Optional[bool] = None
    missing: tuple[str, ...] = ()  # "field: why it is None", e.g. "ecc_enabled: not supported on this GPU"
    mig_uuids: tuple[str, ...] = ()  # its MIG instances (`nvidia-smi -L`), so CUDA_VISIBLE_DEVICES=MIG-... finds it

    FREE_TEXT = ("name", "missing")  # what the driver says: a control character in it is shown escaped
    # nvml.h's NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE, NUL included
    NAME_CHARS = UUID_CHARS = 95

    @property
    def cc_text(self) -> str:
        return "unknown" if self.compute_capability is None else "{}.{}".format(*self.compute_capability)

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["compute_capability"] = None if self.compute_capability is None else list(self.compute_capability)
        out["missing"] = list(self.missing)
        if self.mig_uuids:
            out["mig_uuids"] = list(self.mig_uuids)
        else:  # files without MIG stay as they were written before the field existed
            del out["mig_uuids"]
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: str = "gpu") -> GpuFacts:
        """Read back `to_dict()`; a field of the wrong type or range is a FieldError naming `path`."""
        return cls(**from_mapping(cls, raw, path)).checked(path)

    def checked(self, path: str) -> GpuFacts:
        """Itself, if its values are possible (as read back from a file: a FieldError if not)."""
        if self.compute_capability is not None and not (
            1 <= self.compute_capability[0] <= 99 and self.compute_capability[1] <= 9
        ):
            raise FieldError(
                f"{path}.compute_capability: {excerpt(self.cc_text)} is not a compute capability "
                "(major 1-99, minor 0-9)"
            )
        for name, limit in (("name", self.NAME_CHARS), ("uuid", self.UUID_CHARS)):
            value = getattr(self, name) or ""
            if len(value) > limit:
                raise FieldError(
                    f"{path}.{name}: {len(value)} characters, more than NVML's {limit} ({excerpt(value, 40)})"
                )
        if self.uuid is not None and not self.uuid.startswith("GPU-"):
            raise FieldError(f"{path}.uuid: {excerpt(self.uuid, 40)} is not a GPU UUID (NVML's start with 'GPU-')")
        for number, uuid in enumerate(self.mig_uuids):
            if not uuid.startswith("MIG-"):
                raise FieldError(
                    f"{path}.mig_uuids[{number}]: {excerpt(uuid, 40)} is not a MIG UUID (NVML's start with 'MIG-')"
                )
        used, total = self.memory_used_mib, self.memory_total_mib
        if used is not None and total is not None and used > total:
            raise FieldError(
                f"{path}.memory_used_mib: {used} MiB used of {total} MiB in total "
                "(NVML never reports more used than there is)"
            )
        return self


# nvml.h's nvmlGpuP2PStatus_t and nvmlGpuTopologyLevel_t (a stable ABI, as NVML's return codes).
P2P_OK = 0
P2P_STATUS = {
    1: "chipset not supported",  # NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED
    2: "GPU not supported",
    3: "PCIe topology not supported",  # NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
    4: "disabled by the driver's registry key",
    5: "not supported",
    6: "unknown",
}
TOPOLOGY = {
    0: "same board",
    10: "one PCIe switch",
    20: "several PCIe switches",
    30: "one host bridge",
    40: "one CPU socket",
    50: "across CPU sockets",
}


@dataclass(frozen=True)
class PeerFacts:
    """Two GPUs and how they reach each other, as NVML answers (`nvidia-smi topo -m`, `topo -p2p r`).

    `read` and `nvlink` are nvmlGpuP2PStatus_t answers for P2P reads and for NVLink (0 = yes);
    `topology` is the PCIe path between them (`TOPOLOGY`); None = not answered, see `missing`."""

    a: int
    b: int
    read: Optional[int] = None
    nvlink: Optional[int] = None
    topology: Optional[int] = None
    missing: tuple[str, ...] = ()

    FREE_TEXT = ("missing",)

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["missing"] = list(self.missing)
        return out

    def checked(self, path: str) -> PeerFacts:
        """Itself, if its values are possible (as read back from a file: a FieldError if not)."""
        if self.a >= self.b:
            raise FieldError(f"{path}: a pair is two GPUs, the lower index first (a < b), got {self.a}-{self.b}")
        for name in ("read", "nvlink"):
            value = getattr(self, name)
            if value is not None and value != P2P_OK and value not in P2P_STATUS:
                raise FieldError(f"{path}.{name}: {value} is not an NVML P2P status (0-{max(P2P_STATUS)})")
        if self.topology is not None and self.topology not in TOPOLOGY:
            raise FieldError(
                f"{path}.topology: {self.topology} is not an NVML topology level ({', '.join(map(str, TOPOLOGY))})"
            )
        return self


@dataclass(frozen=True)
class DriverFacts:
    """The NVIDIA driver and its GPUs. Absence is data: `reason` says why a value is None.

    `cuda_driver_version` is the highest CUDA the driver supports as NVML
    reports it (1000*major + 10*minor, 12080 == 12.8); `os` selects the
    driver-number series ('linux' or 'windows').
    """

    os: str = "linux"
    driver_version: Optional[str] = None
    cuda_driver_version: Optional[int] = None
    gpus: tuple[GpuFacts, ...] = ()
    source: str = ""
    reason: str = ""
    peers: tuple[PeerFacts, ...] = ()  # every pair of GPUs, where NVML answered (not nvidia-smi's CSV)
    # Written only when set, so files from before them read and write back the same:
    wsl: str = ""  # why this is WSL2 ('/proc/sys/kernel/osrelease: ...'): the driver is Windows' (os 'windows')
    jetson: str = ""  # the L4T release ('R36 (release), REVISION: 4.0, ...'): the driver comes with JetPack
    gpu_signs: tuple[str, ...] = ()  # no driver, yet GPUs the kernel shows: /proc/driver/nvidia/gpus/*, /dev/nvidia0

    FREE_TEXT = ("source", "reason", "wsl", "jetson", "gpu_signs")  # tools' words: controls shown escaped
    OSES = ("linux", "windows", "macos")  # bootstrap.platforms' OS names: the driver-number series
    # Every pair of the GPUs a file may list (typed.MAX_ITEMS), each once: `checked` refuses repeats.
    LONG_LISTS = {"peers": MAX_ITEMS * (MAX_ITEMS - 1) // 2}
    CUDA_VERSIONS = (1000, 99990)  # 1.0 to 99.99 as NVML encodes them (1000*major + 10*minor)

    @property
    def os_label(self) -> str:
        """'linux', 'windows, WSL2', 'linux, Jetson': the driver series and where it was seen."""
        return self.os + (", WSL2" if self.wsl else "") + (", Jetson" if self.jetson else "")

    @property
    def has_driver(self) -> bool:
        return bool(self.driver_version) or bool(self.cuda_driver_version)

    def supported_cuda(self) -> tuple[Optional[int], str]:
        """The highest CUDA the driver supports (12080 = 12.8), and where that number came from."""
        if self.cuda_driver_version:
            return self.cuda_driver_version, "reported by the driver"
        if self.driver_version:
            derived = cuda_supported_by_driver_number(self.driver_version, self.os)
            if derived:
                return derived, f"at least, derived from the {driver_column(self.os)} driver number (Table 3)"
        return None, "unknown"

    def to_dict(self) -> dict[str, Any]:
        return {
            "os": self.os,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "gpus": [g.to_dict() for g in self.gpus],
            "source": self.source,
            "reason": self.reason,
            "peers": [p.to_dict() for p in self.peers],
            **{k: v for k, v in (("wsl", self.wsl), ("jetson", self.jetson), ("gpu_signs", list(self.gpu_signs))) if v},
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: str = "nvidia") -> DriverFacts:
        """Read back `to_dict()`; a field of the wrong type or range is a FieldError naming `path`."""
        return cls(**from_mapping(cls, raw, path)).checked(path)

    def checked(self, path: str) -> DriverFacts:
        """Itself, if its values are possible (as read back from a file: a FieldError if not)."""
        self._check_driver(path)
        self._check_gpus(path)
        return self

    def _check_driver(self, path: str) -> None:
        if self.os not in self.OSES:
            raise FieldError(f"{path}.os: {excerpt(self.os)} is not a driver's OS ({', '.join(self.OSES)})")
        # Two or three runs of ASCII digits, '580.95.05' (Linux) or '566.36' (Windows): int() also takes '-580'
        if self.driver_version is not None and not re.fullmatch(r"[0-9]+(\.[0-9]+){1,2}", self.driver_version):
            raise FieldError(
                f"{path}.driver_version: {excerpt(self.driver_version)} "
                "is not a driver version like '570.124.06' or '566.36'"
            )
        low, high = self.CUDA_VERSIONS
        if self.cuda_driver_version is not None and (
            not low <= self.cuda_driver_version <= high or self.cuda_driver_version % 10
        ):
            raise FieldError(
                f"{path}.cuda_driver_version: {self.cuda_driver_version} is not a CUDA version "
                f"as NVML gives it (a multiple of 10 in {low}-{high}; 12080 = 12.8)"
            )
        if self.wsl and self.os != "windows":
            raise FieldError(
                f"{path}.os: {excerpt(self.os)} contradicts {path}.wsl (under WSL2 the driver is Windows': 'windows')"
            )
        if self.jetson and self.os != "linux":
            raise FieldError(f"{path}.os: {excerpt(self.os)} contradicts {path}.jetson (a Jetson runs Linux: 'linux')")

    def _check_gpus(self, path: str) -> None:
        twice = _repeated(gpu.index for gpu in self.gpus)
        if twice is not None:
            raise FieldError(f"{path}.gpus: GPU index {twice} is given twice (NVML numbers each GPU once)")
        twice_uuid = _repeated(gpu.uuid for gpu in self.gpus if gpu.uuid is not None)
        if twice_uuid is not None:
            raise FieldError(f"{path}.gpus: GPU UUID {excerpt(twice_uuid, 60)} is given twice (each GPU has its own)")
        indices, pairs = {gpu.index for gpu in self.gpus}, set()
        for number, peer in enumerate(self.peers):
            where = f"{path}.peers[{number}]"
            if not {peer.a, peer.b} <= indices:
                raise FieldError(
                    f"{where}: GPU {peer.b if peer.a in indices else peer.a} is not among the GPUs "
                    f"({', '.join(map(str, sorted(indices))) or 'none'})"
                )
            if (peer.a, peer.b) in pairs:
                raise FieldError(f"{where}: the pair {peer.a}-{peer.b} is given twice")
            pairs.add((peer.a, peer.b))

    def checked_on(self, platform: str, path: str) -> DriverFacts:
        """Itself, if a host of `platform` (a compat key) reports it: the driver series is the platform's
        OS's, except under WSL2 (a Linux platform), whose driver is Windows'; a Jetson is aarch64 Linux."""
        platform_os = _OS_OF_KEY.get(platform, "")
        if self.wsl and platform_os != "linux":
            raise FieldError(f"{path}.wsl: set on platform {excerpt(platform)}, but WSL is a Linux platform")
        if self.jetson and platform != "linux_aarch64":
            raise FieldError(f"{path}.jetson: set on platform {excerpt(platform)}, but a Jetson is linux_aarch64")
        if not self.wsl and self.os != platform_os:
            under_wsl = f"; 'windows' only under WSL2, with {path}.wsl set" if platform_os == "linux" else ""
            raise FieldError(
                f"{path}.os: {excerpt(self.os)} contradicts platform {excerpt(platform)} "
                f"(expected {platform_os!r}{under_wsl})"
            )
        return self


# --------------------------------------------------------------------------- host


@dataclass(frozen=True)
class HostFacts:
    """CPU, memory and OS limits a DataLoader depends on. None = not available, see `missing`."""

    cpus_usable: Optional[int] = None
    cpus_total: Optional[int] = None
    cpus_quota: Optional[float] = None  # CPUs' worth of a cgroup CPU quota; None: none, or not recorded
    memory_total_mib: Optional[int] = None
    memory_available_mib: Optional[int] = None
    shm_total_mib: Optional[int] = None
    shm_free_mib: Optional[int] = None
    disk_path: str = ""
    disk_free_mib: Optional[int] = None
    nofile_soft: Optional[int] = None  # -1 = unlimited
    nofile_hard: Optional[int] = None
    start_method: Optional[str] = None
    start_method_explicit: bool = False
    container_hints: tuple[str, ...] = ()
    cuda_visible_devices: Optional[str] = None  # the job's GPUs among NVML's (None: unset, all of them)
    cuda_device_order: Optional[str] = None  # how CUDA numbers them (None: unset, fastest first); written when set
    libc: str = ""  # Linux: "glibc 2.36", or "not glibc" (musl); "" off Linux or not recorded
    macos: str = ""  # macOS: its release, "14.5"; "" elsewhere or not recorded
    memory_limit_mib: Optional[int] = None  # a cgroup memory limit, which the memory figures obey
    missing: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["container_hints"] = list(self.container_hints)
        out["missing"] = list(self.missing)
        for name in ("cuda_device_order", "cpus_quota", "memory_limit_mib"):
            if out[name] is None:  # files from before the field read and write back the same
                del out[name]
        return out

    NEGATIVE_OK = ("nofile_soft", "nofile_hard")  # -1 = unlimited
    FREE_TEXT = ("disk_path", "container_hints", "missing")  # paths and hints as found: controls shown escaped

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: str = "host") -> HostFacts:
        """Read back `to_dict()`; a field of the wrong type or range is a FieldError naming `path`."""
        return cls(**from_mapping(cls, raw, path)).checked(path)

    def checked(self, path: str, platform: str = "") -> HostFacts:
        """Itself, if its values are possible on `platform` (a FieldError if not)."""
        if self.cpus_quota is not None and not 0 < self.cpus_quota <= 1 << 20:
            raise FieldError(f"{path}.cpus_quota: {self.cpus_quota} is not a number of CPUs > 0")
        if not re.fullmatch(r"(glibc [0-9]{1,3}\.[0-9]{1,3}|not glibc)?", self.libc):
            raise FieldError(f"{path}.libc: {excerpt(self.libc)} is not 'glibc X.Y' or 'not glibc'")
        if not re.fullmatch(r"([0-9]{1,3}(\.[0-9]{1,3}){0,2})?", self.macos):
            raise FieldError(f"{path}.macos: {excerpt(self.macos)} is not a macOS release like '14.5'")
        for name, os_name in (("libc", "linux"), ("macos", "macos")):
            if platform and getattr(self, name) and not platform.startswith(os_name):
                raise FieldError(f"{path}.{name}: recorded, but the platform is {platform}, not {os_name}")
        return self


def _repeated(items: Iterable[H]) -> Optional[H]:
    """The first item met a second time; None when each is met once."""
    seen: set[H] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None
