"""Probes: one small function per fact, each returning a value or None with a reason; the rules judge.

Subprocesses go through the runner passed in and NVML through `bootstrap.compat.nvml`, so every probe
runs in tests without a GPU; `save_facts` / `load_facts` make a diagnosis travel (`--save-facts`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import re
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Optional

from bootstrap.compat.facts import DriverFacts, GpuFacts, HostFacts, checked_platform
from bootstrap.compat.host import collect_host_facts, probe_gpu_signs, probe_jetson, probe_wsl
from bootstrap.compat.nvml import Nvml
from bootstrap.compat.target import TorchTarget
from bootstrap.compat.typed import FieldError, from_mapping
from bootstrap.compat.versions import driver_tuple
from bootstrap.compat.visible import Visible, visible_gpus
from bootstrap.errors import InputError, ToolError, excerpt
from bootstrap.fsutil import check_output, read_input_text
from bootstrap.platforms import compat_key, host_platform, os_of
from bootstrap.runner import Runner, run

FACTS_FORMAT = "bootstrap.facts"
FACTS_VERSION = 1
SMI_FIELDS = ("name", "driver_version", "compute_cap", "memory.total")
SMI_TIMEOUT_S = 20.0
HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")  # RFC 1123 labels, dots, and what clusters use
_SMI_ABSENT = {"", "[n/a]", "n/a", "[not supported]", "[unknown error]"}


# --------------------------------------------------------------------------- GPUs


def probe_gpus(
    nvml: Any = None,
    runner: Runner = run,
    os_name: Optional[str] = None,
    *,
    root: str = "/",
    environ: Mapping[str, str] = os.environ,
) -> DriverFacts:
    """Driver and GPUs: NVML first, then `nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total
    --format=csv,noheader,nounits`. No driver is a DriverFacts with a reason, never an exception.

    `nvml` is the pynvml-like module (None: import pynvml lazily). Under WSL the driver is the Windows
    host's, so its number is read in the Windows series; on a Jetson the L4T release is noted; without
    a driver, the GPUs the kernel still shows are (a container started without `--gpus`).
    """
    wsl = probe_wsl(root, environ)
    os_name = "windows" if wsl else os_name or os_of(host_platform())
    jetson = probe_jetson(root)
    with Nvml(nvml, os_name=os_name) as session:
        from_nvml = session.facts()
    if from_nvml.has_driver:
        return replace(from_nvml, wsl=wsl, jetson=jetson)
    from_smi = probe_nvidia_smi(runner, os_name)
    if from_smi.has_driver:
        reason = "; ".join(r for r in (from_nvml.reason, from_smi.reason) if r)
        return replace(from_smi, reason=reason, wsl=wsl, jetson=jetson)
    return DriverFacts(
        os=os_name,
        reason=f"no NVIDIA driver found ({from_nvml.reason}; {from_smi.reason})",
        gpu_signs=probe_gpu_signs(root),
        wsl=wsl,
        jetson=jetson,
    )


def probe_nvidia_smi(runner: Runner = run, os_name: str = "linux") -> DriverFacts:
    """`nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader,nounits`.

    R470-era nvidia-smi rejects `compute_cap`; the query is then repeated
    without it and the compute capability stays None. Rows that do not read
    as a GPU (no driver version) are not taken for one.
    """
    fields: tuple[str, ...] = SMI_FIELDS
    answer, reason, refused = _run_smi(runner, fields)
    note = ""
    if refused and "compute_cap" in reason:
        fields = tuple(f for f in SMI_FIELDS if f != "compute_cap")
        answer, reason, _ = _run_smi(runner, fields)
        note = "nvidia-smi: this driver's nvidia-smi has no compute_cap field (R470 era)"
    if answer is None:
        return DriverFacts(os=os_name, source="nvidia-smi", reason=reason)
    driver, gpus = parse_nvidia_smi_csv(answer, fields)
    if not gpus:
        first = next((line.strip() for line in answer.splitlines() if line.strip()), "no output")
        return DriverFacts(os=os_name, source="nvidia-smi", reason=f"nvidia-smi: output not understood: {first[:60]!r}")
    return DriverFacts(os=os_name, driver_version=driver, gpus=tuple(gpus), source="nvidia-smi", reason=note)


def _run_smi(runner: Runner, fields: tuple[str, ...]) -> tuple[Optional[str], str, bool]:
    """(its output or None, why not, whether nvidia-smi ran and refused the query)."""
    argv = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    try:
        done = runner(argv, timeout=SMI_TIMEOUT_S)
    except ToolError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            return None, "nvidia-smi: not found on PATH", False
        return None, f"nvidia-smi: {exc}", False
    if done.returncode != 0:
        message = (done.stdout.strip() or done.stderr.strip()).splitlines()
        return None, f"nvidia-smi exit {done.returncode}: {message[0] if message else 'no output'}", True
    return done.stdout, "", False


def parse_nvidia_smi_csv(text: str, fields: tuple[str, ...] = SMI_FIELDS) -> tuple[Optional[str], list[GpuFacts]]:
    """Parse `--format=csv,noheader,nounits` output: (driver version, GPUs in index order). A row
    with another number of cells or no driver version like 570.124.06 is not a GPU."""
    driver: Optional[str] = None
    gpus: list[GpuFacts] = []
    for row in (r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r):
        values = dict(zip(fields, (_smi_value(cell) for cell in row)))
        if len(row) != len(fields) or driver_tuple(values.get("driver_version")) is None:
            continue
        driver = driver or values.get("driver_version")
        index = len(gpus)
        gpus.append(
            GpuFacts(
                index=index,
                name=values.get("name") or f"GPU {index}",
                compute_capability=_parse_cc(values.get("compute_cap")),
                memory_total_mib=_parse_int(values.get("memory.total")),
            )
        )
    return driver, gpus


def _smi_value(cell: str) -> Optional[str]:
    cell = cell.strip()
    return None if cell.lower() in _SMI_ABSENT else cell


def _parse_cc(text: Optional[str]) -> Optional[tuple[int, int]]:
    if not text or "." not in text:
        return None
    major, minor = text.split(".", 1)
    try:
        return int(major), int(minor)
    except ValueError:
        return None


def _parse_int(text: Optional[str]) -> Optional[int]:
    try:
        return None if text is None else int(float(text))
    except ValueError:
        return None


# --------------------------------------------------------------------------- torch


def probe_torch(torch_module: Any = None) -> tuple[Optional[TorchTarget], str]:
    """The installed torch build (`python -c 'import torch; print(torch.version.cuda)'`); None if no torch.

    The arch list comes from `torch._C._cuda_getArchFlags()`, which unlike
    `torch.cuda.get_arch_list()` does not return [] without a visible GPU.
    """
    torch = torch_module
    if torch is None:
        try:
            import torch as imported  # heavy: only when the env side asks
        except ImportError:
            return None, "torch is not installed in this interpreter"
        torch = imported
    public, _, local = str(torch.__version__).partition("+")
    hip = getattr(torch.version, "hip", None)
    if hip:
        unknown = f"ROCm build (HIP {hip}): the NVIDIA rules do not apply"
        return TorchTarget(
            version=public,
            cuda=None,
            variant=local,
            platform=compat_key(host_platform()),
            source="installed torch",
            unknown=unknown,
        ), ""
    cuda = getattr(torch.version, "cuda", None)
    return TorchTarget(
        version=public,
        cuda=cuda,
        arch_list=_torch_arch_list(torch) if cuda else None,
        variant=local or ("" if cuda else "cpu"),
        platform=compat_key(host_platform()),
        cudnn=_torch_cudnn(torch) if cuda else None,
        nccl=_torch_nccl(torch) if cuda else None,
        source="installed torch",
        confidence="high",
    ), ""


def _torch_arch_list(torch: Any) -> Optional[tuple[str, ...]]:
    try:
        flags = torch._C._cuda_getArchFlags()
    except (AttributeError, RuntimeError):
        flags = None
    if flags:
        return tuple(str(flags).split())
    try:
        listed = torch.cuda.get_arch_list()
    except (AttributeError, RuntimeError):
        return None
    return tuple(listed) or None  # [] means "no visible GPU", not "no kernels"


def _torch_cudnn(torch: Any) -> Optional[str]:
    """91002 -> '9.10.2' (cuDNN 9 encoding); 8902 -> '8.9.2' (cuDNN 8 encoding)."""
    try:
        value = torch.backends.cudnn.version()
    except (AttributeError, RuntimeError, OSError):
        return None
    if not value:
        return None
    value = int(value)
    if value >= 90000:
        return f"{value // 10000}.{(value % 10000) // 100}.{value % 100}"
    return f"{value // 1000}.{(value % 1000) // 100}.{value % 100}"


def _torch_nccl(torch: Any) -> Optional[str]:
    try:
        value = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError, OSError):
        return None
    return ".".join(str(v) for v in value) if isinstance(value, tuple) else str(value)


# --------------------------------------------------------------------------- all facts


@dataclass(frozen=True)
class Facts:
    """Everything the rules need, as saved by `doctor --save-facts` and replayed by `--facts`."""

    host: HostFacts
    nvidia: DriverFacts
    torch: Optional[TorchTarget] = None
    torch_reason: str = ""
    python: str = ""
    platform: str = ""
    hostname: str = ""  # the fleet view tells hosts apart by it; written only when recorded

    FREE_TEXT = ("torch_reason",)  # an import error's words: a control character is shown escaped

    def checked(self) -> Facts:
        """Itself, if one machine reports all of it (as read back from a file: a FieldError if not)."""
        if self.python and not re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?\+?", self.python):
            raise FieldError(f"python: {excerpt(self.python)} is not a Python version like '3.12.3'")
        if self.hostname and not HOSTNAME.fullmatch(self.hostname):
            raise FieldError(f"hostname: {excerpt(self.hostname)} is not a host name like 'node07'")
        self.host.checked("host", self.platform)
        if self.platform:  # files written before the field existed leave it empty
            checked_platform(self.platform, "platform")
            self.nvidia.checked_on(self.platform, "nvidia")
            if self.torch is not None and self.torch.platform != self.platform:
                raise FieldError(
                    f"torch.platform: {excerpt(self.torch.platform)} contradicts platform "
                    f"{excerpt(self.platform)} (the torch recorded is the one imported there)"
                )
        return self

    def visible(self) -> Visible:
        """The GPUs this run's CUDA_VISIBLE_DEVICES leaves it, among those the driver lists."""
        return visible_gpus(self.nvidia.gpus, self.host.cuda_visible_devices, self.host.cuda_device_order)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FACTS_FORMAT,
            "version": FACTS_VERSION,
            "python": self.python,
            "platform": self.platform,
            "host": self.host.to_dict(),
            "nvidia": self.nvidia.to_dict(),
            "torch": None if self.torch is None else self.torch.to_dict(),
            "torch_reason": self.torch_reason,
            **({"hostname": self.hostname} if self.hostname else {}),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "facts") -> Facts:
        if raw.get("format") != FACTS_FORMAT or raw.get("version") != FACTS_VERSION:
            raise InputError(
                where,
                f"not a {FACTS_FORMAT} v{FACTS_VERSION} file "
                f"(format {excerpt(raw.get('format'))}, version {excerpt(raw.get('version'))})",
                "record it again with `python -m bootstrap doctor --save-facts FILE`",
            )
        fields = {k: v for k, v in raw.items() if k not in ("format", "version")}
        try:
            facts = cls(**from_mapping(cls, fields))
            if not facts.platform and facts.nvidia.jetson:  # a file without `platform`: a Jetson is linux_aarch64
                facts = replace(facts, platform="linux_aarch64")
            return facts.checked()
        except FieldError as exc:
            raise InputError(
                where,
                str(exc),
                "fix that field, or record the facts again with `python -m bootstrap doctor --save-facts FILE`",
            ) from None


def collect_facts(
    nvml: Any = None, runner: Runner = run, *, disk_path: str = ".", with_torch: bool = False, torch_module: Any = None
) -> Facts:
    """Host (the disk check on `disk_path`'s file system), driver/GPU and, only on request, torch facts of
    this machine."""
    torch, torch_reason = probe_torch(torch_module) if with_torch else (None, "not probed (doctor needs no torch)")
    return Facts(
        host=collect_host_facts(disk_path=disk_path),
        nvidia=probe_gpus(nvml, runner),
        torch=torch,
        torch_reason=torch_reason,
        python=platform.python_version(),
        platform=compat_key(host_platform()),
        hostname=this_hostname(),
    )


def this_hostname() -> str:
    """This host's name, as Slurm's %h and `hostname` give it; "" where it is not one a facts file takes."""
    name = socket.gethostname()
    return name if HOSTNAME.fullmatch(name) else ""


class _RepeatedKey(ValueError):
    pass


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members, each key once: json would keep the last of a repeated one unsaid."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(f"key {excerpt(key, 60)} is given twice in one object")
        out[key] = value
    return out


def load_facts(path: Path) -> Facts:
    """Read a `bootstrap.facts` file written by `--save-facts` (or by an editor: a leading BOM is no part
    of it)."""
    text = read_input_text(path, "record one with `python -m bootstrap doctor --save-facts FILE`")
    try:
        raw = json.loads(text[1:] if text.startswith("\ufeff") else text, object_pairs_hook=_no_repeated_keys)
    except _RepeatedKey as exc:
        raise InputError(
            path,
            f"not a facts file as written: {exc}",
            "keep one of them, or record the facts again with `python -m bootstrap doctor --save-facts FILE`",
        ) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(
            path,
            f"not a readable JSON facts file ({exc})",
            "record it again with `python -m bootstrap doctor --save-facts FILE`",
        ) from None
    if not isinstance(raw, dict):
        raise InputError(
            path,
            "not a facts file (expected a JSON object)",
            "record it again with `python -m bootstrap doctor --save-facts FILE`",
        )
    return Facts.from_dict(raw, where=str(path))


def save_facts(facts: Facts, path: Path) -> None:
    """Write `facts` atomically (temp file + rename), so a failed run leaves no half file;
    through a symlink, or straight into a FIFO or /dev/stdout."""
    from bootstrap.fsutil import atomic_write_text, write_failed

    target = check_output(path, "--save-facts")
    try:
        atomic_write_text(target, json.dumps(facts.to_dict(), indent=2, sort_keys=True) + "\n")
    except OSError as exc:  # a full disk, a FIFO whose reader went away, ...: the temp file is already gone
        raise write_failed(exc, path, "--save-facts", "the facts are not saved", target.parent) from None
