"""The one NVML chokepoint: every NVML call goes through `Nvml`, which imports pynvml on first use,
initialises NVML once, and turns a missing library, driver or query into None plus a reason.
Tests pass a module-like object built from recorded answers instead of pynvml.
"""

from __future__ import annotations

import importlib
import itertools
from typing import Any, NamedTuple, Optional, Sequence

from bootstrap.compat.facts import DriverFacts, GpuFacts, PeerFacts
from bootstrap.fsutil import MIB

# nvml.h return codes (a stable ABI) -> what they mean for the user.
NVML_REASONS = {
    2: "invalid argument",
    3: "not supported on this GPU",
    4: "insufficient permissions",
    6: "not found",
    9: "NVIDIA driver not loaded (is the nvidia kernel module loaded? `lsmod | grep nvidia`)",
    12: "NVML library not found (libnvidia-ml.so.1 / nvml.dll): no NVIDIA driver installed",
    13: "not available in this driver's NVML (driver too old)",
    15: "GPU is lost (fell off the bus; see `dmesg`)",
    17: "blocked by the operating system",
    18: "driver/library version mismatch: reboot, or reload the nvidia kernel module",
}
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_FUNCTION_NOT_FOUND = 13
# nvmlMemory_v2: the struct version nvmlDeviceGetMemoryInfo_v2 takes (pynvml's `nvmlMemory_v2`).
NVML_MEMORY_V2 = 0x02000028
# nvmlPageRetirementCause_t: multiple single-bit ECC errors, double-bit ECC error.
_RETIREMENT_CAUSES = (0, 1)
# nvmlGpuP2PCapsIndex_t: P2P reads, NVLink.
_P2P_CAPS_READ, _P2P_CAPS_NVLINK = 0, 2


class Answer(NamedTuple):
    """One NVML call's outcome: its value, or why not (a reason for people, the NVML code for code)."""

    value: Any
    reason: str = ""  # '' when it answered
    code: Optional[int] = None  # the nvmlReturn_t of a failed call, where it had one


class Nvml:
    """Lazy, initialise-once access to NVML that answers `(value, reason)`.

    `module` is `pynvml` or any object with the same functions and an
    `NVMLError` class whose instances carry the NVML code in `.value`
    (and, like pynvml, an `NVMLLibraryMismatchError`); None imports
    `pynvml` on first use. Use as a context manager so
    `nvmlShutdown` runs when NVML was initialised.
    """

    def __init__(self, module: Any = None, *, os_name: str = "linux") -> None:
        self._module = module
        self._os = os_name
        self._init_reason: Optional[str] = None  # None: not tried yet; '': ready
        self._memory_v2 = True  # False once the driver or pynvml lacks nvmlDeviceGetMemoryInfo_v2

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def init(self) -> str:
        """Initialise NVML once (`nvmlInit`); '' when ready, else why not."""
        if self._init_reason is None:
            self._init_reason = self._first_init()
        return self._init_reason

    def shutdown(self) -> None:
        if self._init_reason == "":
            self._call("nvmlShutdown")
            self._init_reason = None

    def _first_init(self) -> str:
        if self._module is None:
            try:
                self._module = importlib.import_module("pynvml")
            except ImportError:
                return "pynvml is not installed (`pip install nvidia-ml-py`)"
        _, reason = self._call("nvmlInit")
        return reason

    def _call(self, name: str, *args: Any) -> tuple[Any, str]:
        """Call one NVML function; (result, '') or (None, reason)."""
        value, reason, _ = self._answer(name, *args)
        return value, reason

    def _answer(self, name: str, *args: Any) -> Answer:
        function = getattr(self._module, name, None)
        if function is None:
            return Answer(None, f"{name} missing from this pynvml (upgrade nvidia-ml-py)")
        try:
            return Answer(function(*args))
        except self._module.NVMLError as exc:
            code: Any = getattr(exc, "value", None)  # an NVMLError carries its code
            return Answer(None, NVML_REASONS.get(code, f"NVML error {code}: {exc}"), code)
        except self._mismatch():
            # pynvml's unversioned calls (nvmlDeviceGetComputeRunningProcesses, ...) raise this in place
            # of FUNCTION_NOT_FOUND when the driver lacks the version they call: the versioned ones may answer.
            code = NVML_ERROR_FUNCTION_NOT_FOUND
            return Answer(None, NVML_REASONS[code], code)
        except OSError as exc:  # ctypes could not load the library or a symbol
            return Answer(None, f"NVML library unusable: {exc}")

    def _mismatch(self) -> tuple[type[Exception], ...]:
        """pynvml's NVMLLibraryMismatchError, a plain Exception rather than an NVMLError; () where the
        module has none (pynvml before 11.5)."""
        mismatch = getattr(self._module, "NVMLLibraryMismatchError", None)
        return (mismatch,) if isinstance(mismatch, type) and issubclass(mismatch, Exception) else ()

    def query(self, name: str, *args: Any) -> tuple[Any, str]:
        """Call any `pynvml.<name>(*args)` through the chokepoint: (value, "") or (None, reason)."""
        value, reason, _ = self.ask(name, *args)
        return value, reason

    def ask(self, name: str, *args: Any) -> Answer:
        """`query` with the NVML code of a failure, for a caller whose next step depends on it
        (NOT_FOUND from nvmlDeviceGetSamples: nothing newer yet)."""
        reason = self.init()
        return Answer(None, reason) if reason else self._answer(name, *args)

    def memory_info(self, handle: Any) -> tuple[Any, str, bool]:
        """(memory, reason, v2) of a GPU, in bytes: `nvmlDeviceGetMemoryInfo_v2`, whose `used` leaves out
        the memory the driver reserves, as nvidia-smi shows it; else (drivers before R510, pynvml before
        11.510) the v1 call, whose `used` counts the reserved memory too (v2 False)."""
        if self._memory_v2:
            try:
                answer = self.ask("nvmlDeviceGetMemoryInfo", handle, NVML_MEMORY_V2)
            except TypeError:  # a pynvml whose nvmlDeviceGetMemoryInfo takes no version
                answer = Answer(None, "", NVML_ERROR_FUNCTION_NOT_FOUND)
            if answer.value is not None:
                return answer.value, "", True
            self._memory_v2 = answer.code != NVML_ERROR_FUNCTION_NOT_FOUND
        value, reason = self.query("nvmlDeviceGetMemoryInfo", handle)
        return value, reason, False

    def driver_version(self) -> tuple[Optional[str], str]:
        """Driver version string such as '580.95.05' (`nvidia-smi --query-gpu=driver_version`)."""
        value, reason = self.query("nvmlSystemGetDriverVersion")
        return (None if value is None else _text(value)), reason

    def cuda_driver_version(self) -> tuple[Optional[int], str]:
        """Highest CUDA the driver supports, 1000*major + 10*minor (the `CUDA Version` in `nvidia-smi`).

        `_v2` reads libcuda itself; where libcuda is missing the v1 call
        still answers the driver's known supported version, so it is the
        fallback.
        """
        value, reason = self.query("nvmlSystemGetCudaDriverVersion_v2")
        if value:
            return int(value), ""
        fallback, fallback_reason = self.query("nvmlSystemGetCudaDriverVersion")
        if fallback:
            return int(fallback), f"nvmlSystemGetCudaDriverVersion_v2: {reason}; used v1"
        return None, reason or fallback_reason or "driver reports CUDA version 0"

    def device_count(self) -> tuple[Optional[int], str]:
        """Number of GPUs NVML sees (`nvidia-smi --list-gpus | wc -l`)."""
        value, reason = self.query("nvmlDeviceGetCount")
        return (None if value is None else int(value)), reason

    def gpu(self, index: int) -> tuple[Optional[GpuFacts], str]:
        """Facts of GPU `index`; a query the GPU does not support leaves its field None, noted in `missing`."""
        handle, reason = self.query("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return None, f"GPU {index}: {reason}"
        missing: list[str] = []

        def ask(field: str, name: str, *args: Any) -> Any:
            value, why = self._call(name, handle, *args)
            if why:
                missing.append(f"{field}: {why}")
            return value

        name = ask("name", "nvmlDeviceGetName")
        memory, why, _ = self.memory_info(handle)
        if why:
            missing.append(f"memory_total_mib: {why}")
        cc = ask("compute_capability", "nvmlDeviceGetCudaComputeCapability")
        persistence = ask("persistence_mode", "nvmlDeviceGetPersistenceMode")
        ecc = ask("ecc_enabled", "nvmlDeviceGetEccMode")
        retired = [ask("retired_pages", "nvmlDeviceGetRetiredPages", cause) for cause in _RETIREMENT_CAUSES]
        pending = ask("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus")
        remapped = ask("remapped_rows", "nvmlDeviceGetRemappedRows")
        facts = GpuFacts(
            index=index,
            name=_text(name) if name is not None else f"GPU {index}",
            compute_capability=None if cc is None else (int(cc[0]), int(cc[1])),
            memory_total_mib=None if memory is None else int(memory.total) // MIB,
            memory_used_mib=None if memory is None else int(memory.used) // MIB,
            uuid=_optional_text(ask("uuid", "nvmlDeviceGetUUID")),
            persistence_mode=None if persistence is None else persistence == 1,
            ecc_enabled=None if ecc is None else ecc[0] == 1,
            retired_pages=None if None in retired else sum(len(pages) for pages in retired),
            retired_pages_pending=None if pending is None else pending == 1,
            remapped_rows_pending=None if remapped is None else bool(remapped[2]),
            remapped_rows_failed=None if remapped is None else bool(remapped[3]),
            missing=_dedupe(missing),
            mig_uuids=self._mig_uuids(handle),
        )
        return facts, ""

    def _mig_uuids(self, handle: Any) -> tuple[str, ...]:
        """The UUIDs of the GPU's MIG instances (`nvidia-smi -L`); () when MIG is off or not offered.

        Not listed in `missing`: most GPUs have no MIG, and saying so on each would bury the rest."""
        mode, _ = self._call("nvmlDeviceGetMigMode", handle)
        if not mode or mode[0] != 1:
            return ()
        slots, _ = self._call("nvmlDeviceGetMaxMigDeviceCount", handle)
        uuids = []
        for slot in range(int(slots or 0)):
            instance, _ = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            uuid = None if instance is None else self._call("nvmlDeviceGetUUID", instance)[0]
            if uuid:  # an empty slot answers NOT_FOUND
                uuids.append(_text(uuid))
        return tuple(uuids)

    def facts(self) -> DriverFacts:
        """Driver, CUDA version and every GPU in one record (`nvidia-smi -q`)."""
        reason = self.init()
        if reason:
            return DriverFacts(os=self._os, source="nvml", reason=f"NVML: {reason}")
        driver, driver_reason = self.driver_version()
        cuda, cuda_reason = self.cuda_driver_version()
        count, count_reason = self.device_count()
        gpus = []
        reasons = [r for r in (driver_reason, cuda_reason, count_reason) if r]
        for index in range(count or 0):
            gpu, gpu_reason = self.gpu(index)
            if gpu is None:
                reasons.append(gpu_reason)
            else:
                gpus.append(gpu)
        return DriverFacts(
            os=self._os,
            driver_version=driver,
            cuda_driver_version=cuda,
            gpus=tuple(gpus),
            source="nvml",
            reason="; ".join(f"NVML: {r}" for r in reasons),
            peers=self.peers([g.index for g in gpus]),
        )

    def peers(self, indices: Sequence[int]) -> tuple[PeerFacts, ...]:
        """How each pair of GPUs `indices` reaches the other: P2P reads, NVLink, and the PCIe path."""
        handles = {index: self.query("nvmlDeviceGetHandleByIndex", index)[0] for index in indices}
        pairs = itertools.combinations([index for index in indices if handles[index] is not None], 2)
        found = []
        for a, b in pairs:
            missing: list[str] = []

            def ask(field: str, name: str, *args: Any) -> Optional[int]:  # called in this iteration only
                value, why = self._call(name, handles[a], handles[b], *args)  # noqa: B023
                if why:
                    missing.append(f"{field}: {why}")  # noqa: B023
                return None if value is None else int(value)

            found.append(
                PeerFacts(
                    a,
                    b,
                    read=ask("read", "nvmlDeviceGetP2PStatus", _P2P_CAPS_READ),
                    nvlink=ask("nvlink", "nvmlDeviceGetP2PStatus", _P2P_CAPS_NVLINK),
                    topology=ask("topology", "nvmlDeviceGetTopologyCommonAncestor"),
                    missing=_dedupe(missing),
                )
            )
        return tuple(found)


def _text(value: Any) -> str:
    # pynvml before 11.5 returned bytes; current versions return str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _optional_text(value: Any) -> Optional[str]:
    return None if value is None else _text(value)


def _dedupe(items: list[str]) -> tuple[str, ...]:
    # Both retirement-cause queries fail with the same reason; report it once.
    return tuple(dict.fromkeys(items))
