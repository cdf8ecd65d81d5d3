"""Pure compatibility rules: (NVIDIA facts, torch target) -> checks.

The facts are plain dataclasses that probes fill in (or that a support
engineer loads from a `--save-facts` file); the target is the torch build,
read from the running torch or derived from the lock's pip entry. Nothing
here does I/O: the tables come from `bootstrap.compat.data` (generated from
../shared/reference/cuda_compat.yml, every row with its source and
confidence) and every rule is a function of its arguments.

Rules (see cuda_compat.md section 5):
  * driver vs torch CUDA: full compatibility when the driver supports the
    wheel's CUDA minor; same-major minor-version compatibility (warn: SASS
    only, no PTX JIT, no newer driver features) when the driver meets the
    major's floor; otherwise fail.
  * GPU compute capability vs the torch arch list: SASS of the same major
    with minor <= the GPU's (Jetson/iGPU CCs excluded), or PTX compute_XY
    with XY <= CC (warn: JIT on first launch); otherwise fail ("no kernel
    image is available").
  * a CPU-only torch on a host with NVIDIA GPUs fails.
  * no driver / no GPU is a skip with the reason, never an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from bootstrap.compat import data
from bootstrap.checks.model import Check, Status
from bootstrap.compat.typed import FieldError, from_mapping
from bootstrap.platforms import compat_key

PYTORCH_INDEX = "https://download.pytorch.org/whl"
# Jetson / integrated GPUs need code built for exactly their CC (PyTorch's
# DEVICE_REQUIREMENT map encodes the same exclusions).
IGPU_CCS = frozenset({(5, 3), (6, 2), (7, 2), (8, 7), (10, 1), (11, 0)})
# PyTorch: "CUDA 13.2 allows SBSA binaries to run on Jetson devices".
IGPU_RELAXED_FROM_CUDA = 13020
IGPU_RELAXED_CCS = frozenset({(7, 2), (8, 7)})

_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class GpuFacts:
    """One GPU as NVML (or `nvidia-smi --query-gpu=...`) reports it. None = not reported."""

    index: int
    name: str
    compute_capability: Optional[Tuple[int, int]] = None
    memory_total_mib: Optional[int] = None
    memory_used_mib: Optional[int] = None
    uuid: Optional[str] = None
    persistence_mode: Optional[bool] = None
    ecc_enabled: Optional[bool] = None
    retired_pages: Optional[int] = None
    retired_pages_pending: Optional[bool] = None
    remapped_rows_pending: Optional[bool] = None
    remapped_rows_failed: Optional[bool] = None
    missing: Tuple[str, ...] = ()  # "field: why it is None", e.g. "ecc_enabled: not supported on this GPU"

    @property
    def cc_text(self) -> str:
        return "unknown" if self.compute_capability is None else "{}.{}".format(*self.compute_capability)

    def to_dict(self) -> Dict[str, Any]:
        out = dict(self.__dict__)
        out["compute_capability"] = None if self.compute_capability is None else list(self.compute_capability)
        out["missing"] = list(self.missing)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: str = "gpu") -> "GpuFacts":
        """Read back `to_dict()`; a field of the wrong type or range is a FieldError naming `path`."""
        return cls(**from_mapping(cls, raw, path)).checked(path)

    def checked(self, path: str) -> "GpuFacts":
        """Itself, if its values are possible (as read back from a file: a FieldError if not)."""
        if self.compute_capability is not None and not 1 <= self.compute_capability[0] <= 99:
            raise FieldError(f"{path}.compute_capability: {self.cc_text} is not a compute capability")
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
TOPOLOGY = {0: "same board", 10: "one PCIe switch", 20: "several PCIe switches", 30: "one host bridge",
            40: "one CPU socket", 50: "across CPU sockets"}


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
    missing: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        out = dict(self.__dict__)
        out["missing"] = list(self.missing)
        return out

    def checked(self, path: str) -> "PeerFacts":
        """Itself, if its values are possible (as read back from a file: a FieldError if not)."""
        if self.a >= self.b:
            raise FieldError(f"{path}: a pair is two GPUs, the lower index first (a < b), got {self.a}-{self.b}")
        for name in ("read", "nvlink"):
            value = getattr(self, name)
            if value is not None and value != P2P_OK and value not in P2P_STATUS:
                raise FieldError(f"{path}.{name}: {value} is not an NVML P2P status (0-{max(P2P_STATUS)})")
        if self.topology is not None and self.topology not in TOPOLOGY:
            raise FieldError(f"{path}.topology: {self.topology} is not an NVML topology level "
                             f"({', '.join(map(str, TOPOLOGY))})")
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
    gpus: Tuple[GpuFacts, ...] = ()
    source: str = ""
    reason: str = ""
    peers: Tuple[PeerFacts, ...] = ()  # every pair of GPUs, where NVML answered (not nvidia-smi's CSV)

    @property
    def has_driver(self) -> bool:
        return bool(self.driver_version) or bool(self.cuda_driver_version)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "os": self.os,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "gpus": [g.to_dict() for g in self.gpus],
            "source": self.source,
            "reason": self.reason,
            "peers": [p.to_dict() for p in self.peers],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: str = "nvidia") -> "DriverFacts":
        """Read back `to_dict()`; a field of the wrong type or range is a FieldError naming `path`."""
        return cls(**from_mapping(cls, raw, path)).checked(path)

    def checked(self, path: str) -> "DriverFacts":
        """Itself, if its values are possible (as read back from a file: a FieldError if not)."""
        if self.driver_version is not None and driver_tuple(self.driver_version) is None:
            raise FieldError(f"{path}.driver_version: {self.driver_version!r} is not a driver version like '570.124.06'")
        if self.cuda_driver_version is not None and self.cuda_driver_version < 1000:
            raise FieldError(f"{path}.cuda_driver_version: {self.cuda_driver_version} is not a CUDA version "
                             "as NVML gives it (12080 = 12.8)")
        indices, pairs = {gpu.index for gpu in self.gpus}, set()
        for number, peer in enumerate(self.peers):
            where = f"{path}.peers[{number}]"
            if not {peer.a, peer.b} <= indices:
                raise FieldError(f"{where}: GPU {peer.b if peer.a in indices else peer.a} is not among the GPUs "
                                 f"({', '.join(map(str, sorted(indices))) or 'none'})")
            if (peer.a, peer.b) in pairs:
                raise FieldError(f"{where}: the pair {peer.a}-{peer.b} is given twice")
            pairs.add((peer.a, peer.b))
        return self


@dataclass(frozen=True)
class Visible:
    """What CUDA_VISIBLE_DEVICES leaves a CUDA program of the GPUs NVML lists (NVML ignores it)."""

    gpus: Tuple[GpuFacts, ...]  # the whole GPUs it names, in its order
    devices: int  # the devices a CUDA program sees: those GPUs, or the one MIG instance it names
    note: str = ""  # "CUDA_VISIBLE_DEVICES='2,3'" (abridged); "" when the variable is unset


def visible_gpus(gpus: Sequence[GpuFacts], value: Optional[str]) -> Visible:
    """Read CUDA_VISIBLE_DEVICES as CUDA does (PyTorch's `torch.cuda._parse_visible_devices`
    models the same rules). The first entry decides what the list holds: indices, `GPU-` UUIDs
    (a unique prefix is enough) or `MIG-` instances. An index is read as C's strtoul reads it
    (`1gpu2` is 1); the first entry that names no GPU ends the list, so "" and "-1" hide every
    GPU; a repeated one empties it. An index counts in NVML's order (PCI bus), which is CUDA's
    under CUDA_DEVICE_ORDER=PCI_BUS_ID and on a node of one GPU model. A process sees one MIG
    instance at most (CUDA enumerates only the first), and not as one of NVML's GPUs here."""
    if value is None:
        return Visible(tuple(gpus), len(gpus))
    note = f"CUDA_VISIBLE_DEVICES={_abridged(value)}"
    if value.startswith("MIG-"):
        return Visible((), 1 if len(value.split(",")[0]) > len("MIG-") else 0, note)
    named: List[GpuFacts] = []
    for item in value.split(","):
        gpu = _by_uuid(gpus, item) if value.startswith("GPU-") else _by_index(gpus, item)
        if gpu is None:
            break
        if gpu in named:
            return Visible((), 0, note)
        named.append(gpu)
    return Visible(tuple(named), len(named), note)


_STRTOUL = re.compile(r"\s*\+?([0-9]+)")  # C's strtoul: spaces, a sign, ASCII digits, then anything


def _by_index(gpus: Sequence[GpuFacts], item: str) -> Optional[GpuFacts]:
    number = _STRTOUL.match(item)
    return next((g for g in gpus if number and g.index == int(number.group(1))), None)


def _by_uuid(gpus: Sequence[GpuFacts], item: str) -> Optional[GpuFacts]:
    found = [g for g in gpus if item.startswith("GPU-") and g.uuid and g.uuid.startswith(item)]
    return found[0] if len(found) == 1 else None


def _abridged(value: str, keep: int = 100) -> str:
    return repr(value) if len(value) <= keep else f"{value[:keep]!r}... ({len(value)} characters)"


@dataclass(frozen=True)
class TorchTarget:
    """The torch build to check against.

    `cuda` is None for a CPU build; `arch_list` is None when unknown (e.g.
    `get_arch_list()` returned [] without a visible GPU). A non-empty
    `unknown` means the build could not be identified: the rules then skip
    with that reason instead of guessing.
    """

    version: str
    cuda: Optional[str]
    arch_list: Optional[Tuple[str, ...]] = None
    variant: str = ""
    platform: str = "linux_x86_64"
    cudnn: Optional[str] = None
    nccl: Optional[str] = None
    source: str = ""
    confidence: str = ""
    unknown: str = ""
    notes: Tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.version}+{self.variant}" if self.variant else self.version

    def to_dict(self) -> Dict[str, Any]:
        out = dict(self.__dict__)
        out["arch_list"] = None if self.arch_list is None else list(self.arch_list)
        out["notes"] = list(self.notes)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: str = "torch") -> "TorchTarget":
        """Read back `to_dict()`; a field of the wrong type, or a version that is none, is a FieldError naming `path`."""
        return cls(**from_mapping(cls, raw, path)).checked(path)

    def checked(self, path: str) -> "TorchTarget":
        """Itself, if its versions read as versions (as read back from a file: a FieldError if not)."""
        if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.+a-z0-9]*)", self.version):
            raise FieldError(f"{path}.version: {self.version!r} is not a torch version like '2.10.0'")
        if self.cuda is not None and not re.fullmatch(r"\d+\.\d+", self.cuda):
            raise FieldError(f"{path}.cuda: {self.cuda!r} is not a CUDA version like '12.8' (null for a CPU build)")
        return self


# --------------------------------------------------------------------------- versions


def driver_tuple(text: Optional[str]) -> Optional[Tuple[int, ...]]:
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


def _release_key(text: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def _short_source(row: Mapping[str, Any]) -> str:
    """A row's provenance in one short clause: 'high; https://...'."""
    first = str(row.get("source", "")).split(";")[0].strip()
    return f"{row.get('confidence', 'unknown')}; {first}"


# --------------------------------------------------------------------------- driver tables


def _column(os_name: str) -> str:
    return "windows" if os_name == "windows" else "linux"


def minor_version_floor(major: int, os_name: str) -> Tuple[Optional[str], Optional[Mapping[str, Any]]]:
    """The lowest driver that runs any CUDA `major`.x binary (Table 2), per OS series.

    Where the exact number is unknown (Windows 13.x) the branch number
    ('580') stands in: '580' < '580.88' compares as intended.
    """
    for row in data.MINOR_VERSION_FLOORS:
        if row["cuda_major"] == major:
            return (row[_column(os_name)] or str(row["branch"])), row
    return None, None


def full_support_driver(cuda: int, os_name: str) -> Tuple[Optional[str], Optional[Mapping[str, Any]]]:
    """The driver bundled with CUDA major.minor GA (Table 3): the floor for full compatibility."""
    prefix = cuda_from_int(cuda) + "."
    best: Optional[Tuple[Tuple[int, ...], str, Mapping[str, Any]]] = None
    for row in data.TOOLKIT_DRIVERS:
        number = row[_column(os_name)]
        if not (row["cuda"] + ".").startswith(prefix) or driver_tuple(number) is None:
            continue
        key = driver_tuple(number)
        if best is None or key < best[0]:
            best = (key, number, row)
    return (best[1], best[2]) if best else (None, None)


def cuda_supported_by_driver_number(driver: str, os_name: str) -> Optional[int]:
    """Highest CUDA a driver number supports, from Table 3 (a lower bound).

    Secondary signal only: NVML's nvmlSystemGetCudaDriverVersion is exact.
    Windows lists N/A for 13.x, so a Windows driver on the >= 580 branch is
    credited with 13.0 from the branch rule.
    """
    number = driver_tuple(driver)
    if number is None:
        return None
    best = 0
    for row in data.TOOLKIT_DRIVERS:
        needed = driver_tuple(row[_column(os_name)])
        if needed is not None and needed <= number:
            best = max(best, cuda_to_int(row["cuda"]))
    for row in data.MINOR_VERSION_FLOORS:
        if (row["branch"],) <= number:
            best = max(best, row["cuda_major"] * 1000)
    return best or None


def _driver_cuda(facts: DriverFacts) -> Tuple[Optional[int], str]:
    """The CUDA version the driver supports, and where that number came from."""
    if facts.cuda_driver_version:
        return facts.cuda_driver_version, "reported by the driver"
    if facts.driver_version:
        derived = cuda_supported_by_driver_number(facts.driver_version, facts.os)
        if derived:
            return derived, f"at least, derived from the {_column(facts.os)} driver number (Table 3)"
    return None, "unknown"


# --------------------------------------------------------------------------- arch lists


def parse_arch(entry: str) -> Optional[Tuple[str, Tuple[int, int], str]]:
    """'sm_120' -> ('sm', (12, 0), ''); 'compute_90' -> ('compute', (9, 0), ''); 'sm_90a' -> (..., 'a')."""
    match = _ARCH.match(entry.strip())
    if not match:
        return None
    return match.group(1), (int(match.group(2)), int(match.group(3))), match.group(4)


def sass_runs_on(code: Tuple[int, int], suffix: str, cc: Tuple[int, int], wheel_cuda: int) -> bool:
    """SASS for X.y runs on X.z with z >= y; 'a' targets and Jetson/iGPU CCs need an exact match."""
    if code == cc:
        return True
    if suffix == "a" or code[0] != cc[0] or code[1] > cc[1]:
        return False
    relaxed = wheel_cuda >= IGPU_RELAXED_FROM_CUDA and cc in IGPU_RELAXED_CCS
    return not ((cc in IGPU_CCS and not relaxed) or code in IGPU_CCS)


def ptx_runs_on(code: Tuple[int, int], suffix: str, cc: Tuple[int, int]) -> bool:
    """PTX compute_XY JIT-compiles for any CC >= X.Y ('a' PTX only for X.Y itself, 'f' within the major)."""
    if suffix == "a":
        return code == cc
    if suffix == "f":
        return code[0] == cc[0] and code[1] <= cc[1]
    return code <= cc


def kernel_for(cc: Tuple[int, int], arch_list: Iterable[str], wheel_cuda: int) -> Tuple[Optional[str], Optional[str]]:
    """(best SASS entry, best PTX entry) for a GPU, None where there is none.

    Best = the highest matching target, the one the CUDA loader picks.
    """
    sass: List[Tuple[Tuple[int, int], str]] = []
    ptx: List[Tuple[Tuple[int, int], str]] = []
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


def architecture_name(cc: Tuple[int, int]) -> str:
    for row in data.GPUS:
        if tuple(row["compute_capability"]) == cc:
            return str(row["architecture"])
    return "unknown architecture"


# --------------------------------------------------------------------------- torch builds


def find_release(version: str) -> Optional[Mapping[str, Any]]:
    """The table row of a torch version ('2.8.0' -> release '2.8'), None when not in the table."""
    key = ".".join(version.split("+")[0].split(".")[:2])
    for row in data.TORCH_RELEASES:
        if row["release"] == key:
            return row
    return None


def variant_arch_list(variant: Mapping[str, Any], platform: str) -> Optional[Tuple[str, ...]]:
    """SASS + confirmed PTX entries of a variant on a platform; None where the table has no list."""
    if platform == "linux_x86_64":
        return tuple(variant["sass"]) + tuple(variant["ptx"])
    if platform == "linux_aarch64":
        arch = variant.get("aarch64_sass")
        return tuple(arch) if arch else None
    if platform == "windows_x86_64":
        arch = data.WINDOWS_ARCH_LISTS["sass"].get(variant["tag"])
        return tuple(arch) if arch else None
    return None


@dataclass(frozen=True)
class Suggestion:
    """A torch build to lock instead: `pip install torch==<pin> --index-url <index_url>`."""

    pin: str
    tag: str
    cuda: str
    index_url: str
    confidence: str

    @property
    def text(self) -> str:
        return f"torch=={self.pin} (--index-url {self.index_url})"


def suggest_builds(
    ccs: Sequence[Tuple[int, int]],
    near: TorchTarget,
    facts: Optional[DriverFacts] = None,
) -> List[Suggestion]:
    """Other torch builds with SASS for every CC that the driver runs, best first.

    Best = the release of `near`, then the nearest release (newer on ties);
    within a release a CUDA the driver fully supports, then the PyPI default
    or stable variants, then the newest CUDA. The build `near` itself (same
    release and CUDA) is never suggested.
    """
    home = _release_key(near.version)[:2]
    ranked = []
    for release in data.TORCH_RELEASES:
        rkey = _release_key(release["release"])
        for variant in release["variants"]:
            if tuple(rkey) == tuple(home) and variant["cuda"] == near.cuda:
                continue
            arch = variant_arch_list(variant, near.platform)
            wheel = cuda_to_int(variant["cuda"])
            if ccs and not (arch and all(kernel_for(cc, _sass_only(arch), wheel)[0] for cc in ccs)):
                continue
            fit = _driver_fit(facts, wheel)
            if fit is Status.FAIL:
                continue
            distance = abs((rkey[0] - home[0]) * 100 + rkey[1] - home[1]) if len(home) == 2 else 0
            key = (distance, tuple(-p for p in rkey), fit is not Status.OK, _status_rank(variant), -wheel)
            ranked.append((key, release, variant))
    ranked.sort(key=lambda item: item[0])
    return [
        Suggestion(
            pin=f"{release['versions'][-1]}+{variant['tag']}",
            tag=variant["tag"],
            cuda=variant["cuda"],
            index_url=f"{PYTORCH_INDEX}/{variant['tag']}",
            confidence=variant["confidence"],
        )
        for _, release, variant in ranked
    ]


def _status_rank(variant: Mapping[str, Any]) -> int:
    status = str(variant.get("status", "")).lower()
    return 0 if "pypi default" in status else 1 if status.startswith("stable") else 2


def _sass_only(arch: Iterable[str]) -> List[str]:
    # Suggestions promise native kernels; PTX-only coverage is not offered as a fix.
    return [a for a in arch if a.startswith("sm_")]


def _driver_fit(facts: Optional[DriverFacts], wheel: int) -> Status:
    """OK: full support; WARN: minor-version compatibility; FAIL: driver too old. No driver facts: OK."""
    if facts is None or not facts.has_driver:
        return Status.OK
    supported, _ = _driver_cuda(facts)
    if supported is None or supported >= wheel:
        return Status.OK
    if supported // 1000 < wheel // 1000:
        return Status.FAIL
    floor, _ = minor_version_floor(wheel // 1000, facts.os)
    number = driver_tuple(facts.driver_version)
    if floor and number is not None and number < driver_tuple(floor):
        return Status.FAIL
    return Status.WARN


def _split_local(version: str) -> Tuple[str, str]:
    public, _, local = version.strip().partition("+")
    return public, local.lower()


def _cuda_from_requires(dependencies: Optional[Mapping[str, str]]) -> Optional[str]:
    """The CUDA minor a torch wheel pins: nvidia-cuda-runtime-cu12==12.8.90 or cuda-toolkit==13.0.2."""
    for name, spec in (dependencies or {}).items():
        base = re.split(r"[\[<>=!~ ]", name.lower(), maxsplit=1)[0]
        if base.startswith("nvidia-cuda-runtime") or base == "cuda-toolkit":
            match = re.search(r"==\s*(\d+\.\d+)", f"{name} {spec}")
            if match:
                return match.group(1)
    return None


def torch_target_from_lock_entry(
    version: str,
    platform: str = "linux-64",
    *,
    url: str = "",
    dependencies: Optional[Mapping[str, str]] = None,
) -> TorchTarget:
    """Derive the torch build a locked pip entry installs, from the packaged tables.

    '2.10.0' on linux-64 from PyPI -> CUDA 12.8 with that wheel's arch list;
    '2.8.0+cu126' -> the cu126 variant; macOS and Windows PyPI wheels -> CPU.
    `url` (a download.pytorch.org/whl/cuXYZ link) and `dependencies` (the
    wheel's Requires-Dist pins) refine the answer when the version has no
    local tag.
    """
    public, local = _split_local(version)
    plat = compat_key(platform)
    release = find_release(public)
    base = TorchTarget(version=public, cuda=None, platform=plat)
    if plat == "macos":
        return replace(base, variant="cpu", source="macOS torch wheels have no CUDA", confidence="high")
    tag = local or _tag_from_url(url)
    if tag == "cpu":
        return replace(base, variant="cpu", source=f"local version tag +{tag}", confidence="high")
    if tag.startswith("cu"):
        return _target_for_variant(base, release, tag)
    return _target_for_pypi_default(base, release, _cuda_from_requires(dependencies))


def _tag_from_url(url: str) -> str:
    match = re.search(r"download\.pytorch\.org/whl/(cu\d+|cpu)/", url or "")
    return match.group(1) if match else ""


def _variant_row(release: Optional[Mapping[str, Any]], tag: str) -> Optional[Mapping[str, Any]]:
    for variant in (release or {}).get("variants", ()):
        if variant["tag"] == tag:
            return variant
    return None


def _from_variant(base: TorchTarget, variant: Mapping[str, Any], source: str) -> TorchTarget:
    notes = () if variant.get("ptx_known", True) else (f"PTX in this build unknown: {variant.get('ptx_note', '')}",)
    return replace(
        base,
        cuda=variant["cuda"],
        variant=variant["tag"],
        arch_list=variant_arch_list(variant, base.platform),
        source=f"{source}; arch list: {_short_source(variant)}",
        confidence=variant["confidence"],
        notes=notes,
    )


def _target_for_variant(base: TorchTarget, release: Optional[Mapping[str, Any]], tag: str) -> TorchTarget:
    variant = _variant_row(release, tag)
    if variant is not None:
        return _from_variant(base, variant, f"variant {tag} of torch {release['release']}")
    cuda = cuda_from_tag(tag)
    return replace(
        base, cuda=cuda, variant=tag, source=f"local version tag +{tag}; arch list not in the packaged table",
        confidence="medium",
    )


def _target_for_pypi_default(
    base: TorchTarget, release: Optional[Mapping[str, Any]], pinned_cuda: Optional[str]
) -> TorchTarget:
    cell = (release or {}).get("pypi_default", {}).get(base.platform)
    if cell is None and pinned_cuda is None:
        return replace(base, unknown=(
            f"torch {base.version} on {base.platform} is not in the packaged table "
            f"(torch {data.TORCH_RELEASES[0]['release']}-{data.TORCH_RELEASES[-1]['release']}); "
            "regenerate bootstrap/compat_data.py with scripts/gen_compat_data.py"))
    cuda = pinned_cuda or (cell or {}).get("cuda")
    if cuda is None:
        return replace(base, variant="cpu", source=f"PyPI wheel: {cell.get('cuda_note', 'CPU-only')}",
                       confidence=cell["confidence"])
    cudnn = (cell or {}).get("cudnn")
    nccl = (cell or {}).get("nccl")
    for variant in (release or {}).get("variants", ()):
        if variant["cuda"] == cuda:
            target = _from_variant(base, variant, f"PyPI default wheel of torch {release['release']} (CUDA {cuda})")
            return replace(target, variant="", cudnn=cudnn, nccl=nccl)
    return replace(base, cuda=cuda, cudnn=cudnn, nccl=nccl, confidence="medium",
                   source=f"Requires-Dist pins CUDA {cuda}; arch list not in the packaged table")


# --------------------------------------------------------------------------- rules


def evaluate(facts: DriverFacts, target: TorchTarget) -> List[Check]:
    """Every CUDA-stack check for one host and one torch build."""
    checks = [check_torch_build(facts, target), check_driver(facts, target)]
    if not facts.gpus:
        reason = facts.reason or "the driver reports no GPU"
        checks.append(Check("cuda.arch", Status.SKIP, "no NVIDIA GPU", "a GPU to match against the arch list",
                            detail=reason))
    for gpu in facts.gpus:
        checks.append(check_gpu_arch(gpu, facts, target))
    return checks


def check_torch_build(facts: DriverFacts, target: TorchTarget) -> Check:
    """A CPU-only torch on a host with NVIDIA GPUs is a failure: training would silently run on CPU."""
    cid = "torch.cuda_build"
    if target.unknown:
        return Check(cid, Status.SKIP, f"torch {target.version}", "a known torch build", detail=target.unknown)
    if target.cuda is not None:
        return Check(cid, Status.OK, f"torch {target.label}: CUDA {target.cuda} build", "a CUDA build",
                     detail=target.source)
    if not facts.gpus:
        return Check(cid, Status.OK, f"torch {target.label}: CPU build", "CPU build on a host without NVIDIA GPUs",
                     detail=target.source)
    ccs = [g.compute_capability for g in facts.gpus if g.compute_capability]
    suggestions = suggest_builds(ccs, target, facts)
    alternative = f"; or lock a CUDA build: {suggestions[0].text}" if suggestions else ""
    return Check(
        cid, Status.FAIL,
        f"torch {target.label} is a CPU build (torch.version.cuda is None)",
        f"a CUDA build: this host has {len(facts.gpus)} NVIDIA GPU(s)",
        remedy=f"reinstall the lock's CUDA wheel: `make env` (recreates the env from the lock){alternative}",
        detail=target.source,
    )


def check_driver(facts: DriverFacts, target: TorchTarget) -> Check:
    """The driver must support the CUDA the torch build was compiled with (fully, or same-major minor compat)."""
    cid = "cuda.driver"
    if target.unknown:
        return Check(cid, Status.SKIP, _driver_text(facts), "a known torch build", detail=target.unknown)
    if target.cuda is None:
        return Check(cid, Status.SKIP, _driver_text(facts), "n/a: torch is a CPU build", detail=target.source)
    if not facts.has_driver:
        return Check(cid, Status.SKIP, "no NVIDIA driver (CPU mode)", f"a driver for CUDA {target.cuda}",
                     detail=facts.reason or "no driver facts")
    wheel = cuda_to_int(target.cuda)
    supported, how = _driver_cuda(facts)
    floor, floor_row = minor_version_floor(wheel // 1000, facts.os)
    full, full_row = full_support_driver(wheel, facts.os)
    observed = _driver_text(facts) + (f", CUDA {cuda_from_int(supported)} ({how})" if supported else "")
    expected = f"CUDA >= {target.cuda} for torch {target.label}"
    detail = _driver_detail(floor_row, full_row, facts.os)
    if supported is None:
        return Check(cid, Status.SKIP, observed, expected, detail="cannot tell which CUDA the driver supports; "
                     + (facts.reason or detail))
    if supported >= wheel:
        return Check(cid, Status.OK, observed, expected, detail=detail)
    upgrade = _upgrade_text(wheel, floor, full, facts.os)
    if _driver_fit(facts, wheel) is Status.FAIL:
        alternative = _driver_alternative(facts, target)
        return Check(cid, Status.FAIL, observed, expected + f" (CUDA {wheel // 1000}.x needs driver >= {floor})",
                     remedy=f"upgrade the NVIDIA driver to {upgrade}{alternative}",
                     detail=detail + "; data-center GPUs on Linux may use the cuda-compat forward-compatibility "
                     "package instead (not GeForce)")
    return Check(
        cid, Status.WARN, observed, expected,
        remedy=(f"runs through CUDA minor-version compatibility (driver >= {floor}): prebuilt SASS kernels work, "
                "but PTX JIT fails (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) and newer-driver features may fail "
                f"(cudaErrorCallRequiresNewerDriver); for full support upgrade the NVIDIA driver to "
                f"{_full_text(wheel, full, facts.os)}"),
        detail=detail,
    )


def _driver_text(facts: DriverFacts) -> str:
    if not facts.has_driver:
        return "no NVIDIA driver"
    return f"driver {facts.driver_version or 'unknown'} ({facts.os})"


def _full_text(wheel: int, full: Optional[str], os_name: str) -> str:
    if full:
        return f">= {full} (the {os_name} driver of CUDA {cuda_from_int(wheel)})"
    return (f"one that reports CUDA >= {cuda_from_int(wheel)} (`nvidia-smi` header; NVIDIA publishes no "
            f"{os_name} driver number for it)")


def _upgrade_text(wheel: int, floor: Optional[str], full: Optional[str], os_name: str) -> str:
    return (f">= {floor} (CUDA {wheel // 1000}.x minor-version floor); "
            f"{_full_text(wheel, full, os_name)} for full CUDA {cuda_from_int(wheel)} support")


def _driver_alternative(facts: DriverFacts, target: TorchTarget) -> str:
    ccs = [g.compute_capability for g in facts.gpus if g.compute_capability]
    suggestions = suggest_builds(ccs, target, facts)
    if not suggestions:
        return f"; no torch build in the packaged table ({target.platform}) runs on this driver and these GPUs"
    return f", or lock a torch build with a CUDA this driver supports: {suggestions[0].text}"


def _driver_detail(floor_row: Optional[Mapping[str, Any]], full_row: Optional[Mapping[str, Any]], os_name: str) -> str:
    parts = []
    if floor_row:
        note = floor_row.get(f"{_column(os_name)}_note")
        parts.append(f"floor CUDA {floor_row['cuda_major']}.x ({_short_source(floor_row)})"
                     + (f" [{note}]" if note else ""))
    if full_row:
        parts.append(f"full: {full_row['label']} ({_short_source(full_row)})")
    return "; ".join(parts)


def check_gpu_arch(gpu: GpuFacts, facts: DriverFacts, target: TorchTarget) -> Check:
    """The torch build must carry SASS for the GPU's major, or PTX the driver can JIT."""
    cid = f"cuda.arch.gpu{gpu.index}"
    observed = f"{gpu.name} CC {gpu.cc_text}"
    if target.unknown or target.cuda is None:
        why = target.unknown or "torch is a CPU build"
        return Check(cid, Status.SKIP, observed, "n/a", detail=why)
    expected = f"a kernel for CC {gpu.cc_text} in torch {target.label}: " + _arch_text(target.arch_list)
    if gpu.compute_capability is None:
        return Check(cid, Status.SKIP, observed, expected,
                     detail="compute capability not reported (nvidia-smi of R470-era drivers has no compute_cap)")
    if not target.arch_list:
        return Check(cid, Status.SKIP, observed, expected, detail=(
            "torch arch list unknown: get_arch_list() returns [] without a visible GPU up to at least 2.11; "
            "torch._C._cuda_getArchFlags() does not need one"))
    cc = gpu.compute_capability
    wheel = cuda_to_int(target.cuda)
    sass, ptx = kernel_for(cc, target.arch_list, wheel)
    observed = f"{gpu.name} CC {gpu.cc_text} ({architecture_name(cc)})"
    if sass:
        return Check(cid, Status.OK, observed + f": runs {sass}", expected, detail=target.source)
    if ptx:
        return _ptx_check(cid, observed, expected, gpu, ptx, facts, target)
    return Check(
        cid, Status.FAIL,
        observed + ": no kernel image is available for execution on the device",
        expected,
        remedy=_no_kernel_remedy(cc, facts, target),
        detail="; ".join((target.source,) + target.notes),
    )


def _arch_text(arch_list: Optional[Sequence[str]]) -> str:
    return " ".join(arch_list) if arch_list else "(arch list unknown)"


def _ptx_check(cid: str, observed: str, expected: str, gpu: GpuFacts, ptx: str,
               facts: DriverFacts, target: TorchTarget) -> Check:
    """PTX only: runs after a JIT at first launch, if the driver's JIT accepts PTX from that toolkit."""
    wheel = cuda_to_int(target.cuda or "0.0")
    observed += f": PTX {ptx} only (JIT-compiled on first launch)"
    suggestions = suggest_builds([gpu.compute_capability], target, facts)
    native = f"; for native SASS lock {suggestions[0].text}" if suggestions else ""
    supported, _ = _driver_cuda(facts)
    if supported is not None and supported < wheel:
        full, _ = full_support_driver(wheel, facts.os)
        return Check(cid, Status.FAIL, observed, expected,
                     remedy=(f"PTX from CUDA {target.cuda} needs a driver that fully supports it "
                             f"(CUDA_ERROR_UNSUPPORTED_PTX_VERSION otherwise): upgrade the NVIDIA driver to "
                             f"{_full_text(wheel, full, facts.os)}{native}"),
                     detail=data.CAVEATS["ptx_jit_needs_full_driver"]["text"])
    return Check(cid, Status.WARN, observed, expected,
                 remedy=("expect a slow first run while the driver JIT-compiles PTX (cached in ~/.nv/ComputeCache; "
                         f"raise CUDA_CACHE_MAXSIZE if it is evicted){native}"),
                 detail=target.source)


def _no_kernel_remedy(cc: Tuple[int, int], facts: DriverFacts, target: TorchTarget) -> str:
    hints = []
    if cc < (7, 5) and cuda_to_int(target.cuda or "0.0") >= 13000:
        hints.append("CUDA 13 builds never support CC < 7.5")
    suggestions = suggest_builds([cc], target, facts)
    if suggestions:
        hints.insert(0, f"lock {suggestions[0].text}, whose arch list has SASS for CC {cc[0]}.{cc[1]}")
    else:
        hints.insert(0, f"no torch build in the packaged table (torch {data.TORCH_RELEASES[0]['release']}-"
                        f"{data.TORCH_RELEASES[-1]['release']}, {target.platform}) has SASS for CC {cc[0]}.{cc[1]}"
                        " that this driver runs")
    return "; ".join(hints)
