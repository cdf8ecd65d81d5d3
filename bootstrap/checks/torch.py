"""torch inside the env: import, CUDA, devices, matmul/conv against a CPU reference, pinning (`torch.*` checks).

GPU branches are written against torch.cuda and have only run on CPU and
`meta` devices so far; torch is always passed in, never imported here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from bootstrap.checks.envstate import EnvState
from bootstrap.compat import jetson
from bootstrap.compat.facts import DriverFacts
from bootstrap.compat.probe import probe_torch
from bootstrap.compat.target import TorchTarget, torch_target_from_lock_entry
from bootstrap.compat.visible import visible_gpus
from bootstrap.fsutil import MIB
from bootstrap.platforms import compat_key, host_platform
from bootstrap.prefix import pip_distributions
from bootstrap.report import Check, Status

if TYPE_CHECKING:
    from bootstrap.lock.lockfile import LockedPackage

MATMUL_N = 512
# Relative to the largest reference value: TF32 (the default for conv, optional for matmul) stays near 1e-3;
# a miscomputing GPU is off by order 1.
COMPUTE_RTOL = 1e-2
PINNED_BYTES = 16 * MIB


# --------------------------------------------------------------------------- torch (inside the env)


@dataclass(frozen=True)
class TorchFound:
    """The env's torch: imported (a GPU to test) or only located, with its build read from torch/version.py."""

    module: Any  # the imported torch; None when not imported
    version: Optional[str]
    location: Optional[str]  # the directory holding the torch package (site-packages)
    target: Optional[TorchTarget]
    how: str  # how the build was read, or why there is none


def find_torch(import_it: bool, torch_module: Any = None) -> TorchFound:
    """Locate the torch this interpreter would import; import it only when `import_it` (or one is given).

    Without a GPU to test, importing torch (a large package, paid for again
    at exit) buys nothing the rules need: the version and CUDA build are
    plain literals in torch/version.py, the very values `torch.version` exposes.
    """
    torch_module = torch_module if torch_module is not None else sys.modules.get("torch")  # already paid for
    if torch_module is None and not import_it:
        located = _torch_from_version_file()
        if located is not None:
            return located
    if torch_module is None:
        try:
            torch_module = importlib.import_module("torch")  # heavy: inside the env, and only with a GPU to test
        except (ImportError, OSError) as exc:  # OSError: a shared library of a CUDA wheel is missing or broken
            return TorchFound(None, None, None, None, f"import torch: {exc}")
    target, _ = probe_torch(torch_module)
    location = os.path.dirname(os.path.dirname(os.path.realpath(getattr(torch_module, "__file__", "") or "")))
    return TorchFound(torch_module, str(torch_module.__version__), location, target, "imported")


def _torch_from_version_file() -> Optional[TorchFound]:
    """torch's build from torch/version.py without running torch/__init__; None when it cannot be read."""
    import ast

    spec = importlib.util.find_spec("torch")
    if spec is None:
        return TorchFound(None, None, None, None, "torch is not installed in this interpreter")
    if not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    try:
        tree = ast.parse((package / "version.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    values: dict[str, Any] = {}
    value: Optional[ast.expr]
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            name, value = node.target, node.value
        else:
            continue
        if isinstance(name, ast.Name) and value is not None:
            try:
                values[name.id] = ast.literal_eval(value)
            except ValueError:
                continue
    version = values.get("__version__")
    if not isinstance(version, str):
        return None
    public, _, local = version.partition("+")
    cuda, hip = values.get("cuda"), values.get("hip")
    how = "read from torch/version.py (not imported: no NVIDIA GPU to test)"
    unknown = f"ROCm build (HIP {hip}): the NVIDIA rules do not apply" if hip else ""
    target = TorchTarget(
        version=public,
        cuda=None if hip else cuda,
        variant=local or ("" if cuda else "cpu"),
        platform=compat_key(host_platform()),
        source=f"installed torch, {how}",
        confidence="high",
        unknown=unknown,
    )
    return TorchFound(None, version, str(package.parent.resolve()), target, how)


def check_torch_import(found: TorchFound, state: EnvState) -> Check:
    """The env's own torch: the locked version, from the env, not from PYTHONPATH or a user site; without
    an install record (no env yet), only whether torch imports."""
    cid = "torch.import"
    record = state.record
    entry = _locked_torch(state) if record is not None else None
    expected = f"torch {entry.version} from {state.prefix}" if entry is not None else "the env's torch"
    if found.version is None:
        if entry is None:
            return Check(cid, Status.SKIP, "no torch", expected, detail=found.how)
        return Check(cid, Status.FAIL, found.how, expected, f"recreate the env: {state.commands.recreate}")
    where = found.location or "?"
    observed = f"torch {found.version} from {where}"
    detail = "" if found.module is not None else found.how
    outside = record is not None and not where.startswith(os.path.realpath(state.prefix) + os.sep)
    shadow = (
        "`unset PYTHONPATH` and `export PYTHONNOUSERSITE=1` so the env's torch is the one imported "
        "(`python -c 'import torch; print(torch.__file__)'`)"
    )
    if entry is None:
        if outside and record is not None:
            return Check(
                cid,
                Status.WARN,
                observed + " (outside the env)",
                "torch from the lock",
                f"add torch to envs/{record.env}.yml under pip: and `make lock`, or {shadow}",
                detail,
            )
        return Check(cid, Status.OK, observed, expected, detail=detail)
    if outside:
        return Check(cid, Status.FAIL, observed + " (outside the env)", expected, shadow, detail)
    if found.version != entry.version:
        return Check(cid, Status.FAIL, observed, expected, f"install the locked wheel: {state.commands.update}", detail)
    return Check(cid, Status.OK, observed, expected, detail=detail)


def _locked_torch(state: EnvState) -> Optional[LockedPackage]:
    if state.lock is None:
        return None
    return next((p for p in state.lock.for_platform(state.platform, "pip") if p.name.lower() == "torch"), None)


def installed_torch_target(state: EnvState) -> tuple[Optional[TorchTarget], str]:
    """From outside the env: the torch version installed in the prefix, refined by the lock's entry."""
    entry = _locked_torch(state)
    dist = next((d for d in pip_distributions(state.prefix) if d.name == "torch"), None)
    if dist is None:
        return None, f"no torch installed in {state.prefix}"
    url = entry.url if entry is not None and entry.version == dist.version else ""
    deps = entry.dependencies if entry is not None and entry.version == dist.version else None
    target = torch_target_from_lock_entry(dist.version, state.platform, url=url, dependencies=deps)
    return target, ""


def device_checks(
    torch: Any,
    nvidia: DriverFacts,
    target: Optional[TorchTarget],
    locked: Optional[TorchTarget] = None,
    environ: Mapping[str, str] = os.environ,
    only: Optional[int] = None,
) -> list[Check]:
    """CUDA available, device count vs NVML, cuDNN, NCCL, pinned memory, matmul + conv on each GPU
    (on GPU `only` alone, if given: a torchrun rank checks its own).

    GPU-only code against the real torch.cuda API; without a driver or
    with a CPU build everything is a skip with the reason.
    """
    ids = (
        "torch.cuda_available",
        "torch.device_count",
        "torch.cudnn",
        "torch.nccl",
        "torch.pinned_memory",
        "torch.gpu",
    )
    if target is None or target.unknown:
        why = target.unknown if target is not None else "torch is not importable here"
        return [Check(cid, Status.SKIP, "no NVIDIA torch build", "a CUDA build", detail=why) for cid in ids]
    if target.cuda is None:
        host = "" if nvidia.gpus else "; no NVIDIA GPU here: " + (nvidia.reason or "the driver reports none")
        return [
            Check(cid, Status.SKIP, "CPU build of torch", "a CUDA build", detail="torch is a CPU build" + host)
            for cid in ids
        ]
    if not nvidia.gpus and not nvidia.jetson:  # a Jetson without NVML still has its GPU: torch is asked
        why = "no NVIDIA driver (CPU mode): " + (nvidia.reason or "no GPU reported")
        return [Check(cid, Status.SKIP, "no NVIDIA GPU", "a GPU to test", detail=why) for cid in ids]
    if torch is None:
        return [
            Check(cid, Status.SKIP, "torch not imported", "a GPU to test", detail="torch could not be imported")
            for cid in ids
        ]
    shown = visible_gpus(nvidia.gpus, environ.get("CUDA_VISIBLE_DEVICES"), environ.get("CUDA_DEVICE_ORDER"))
    visible, visible_note = shown.devices, shown.note
    available = bool(torch.cuda.is_available())
    if not available:
        remedy = (
            f"{visible_note} hides every GPU: `unset CUDA_VISIBLE_DEVICES`"
            if visible_note and not visible
            else jetson.torch_remedy(nvidia)
            if nvidia.jetson
            else "see the cuda.driver row; check that `nvidia-smi` works and /dev/nvidia* are readable "
            "(containers: `docker run --gpus all`, NVIDIA Container Toolkit)"
        )
        first = Check(
            "torch.cuda_available",
            Status.FAIL,
            "torch.cuda.is_available() is False",
            f"True ({len(nvidia.gpus)} GPU(s) per NVML)",
            remedy,
        )
        return [first] + [
            Check(cid, Status.SKIP, "CUDA unavailable", "", detail="torch cannot use CUDA") for cid in ids[1:]
        ]
    checks = [Check("torch.cuda_available", Status.OK, f"True (CUDA {torch.version.cuda})", "True")]
    count = int(torch.cuda.device_count())
    checks.append(
        _count_check(count, visible, visible_note, len(nvidia.gpus))
        if nvidia.gpus
        else Check(
            "torch.device_count",
            Status.OK if count else Status.FAIL,
            str(count),
            f">= 1 (this Jetson's GPU; no NVML to count by: {nvidia.jetson})",
            "" if count else jetson.torch_remedy(nvidia),
        )
    )
    checks.append(_library_check("torch.cudnn", target.cudnn, (locked or target).cudnn, target))
    checks.append(_library_check("torch.nccl", target.nccl, (locked or target).nccl, target))
    checks.append(pinned_check(torch, f"cuda:{only or 0}"))
    for index in range(count) if only is None else [only]:
        checks += compute_checks(torch, index)
    return checks


def _count_check(count: int, visible: int, note: str, nvml: int) -> Check:
    cid = "torch.device_count"
    expected = f"{visible} ({nvml} per NVML" + (f", {note})" if note else ")")
    if count == visible:
        return Check(cid, Status.OK, str(count), expected)
    remedy = (
        f"{note} hides some GPUs: `unset CUDA_VISIBLE_DEVICES`"
        if note and visible < nvml
        else "`nvidia-smi -L` lists every GPU; one torch cannot open is held in exclusive-process mode by "
        "another job or needs a reset (`sudo nvidia-smi -r -i N`); containers: `docker run --gpus all`"
    )
    return Check(cid, Status.FAIL, str(count), expected, remedy)


def _library_check(cid: str, found: Optional[str], wanted: Optional[str], target: TorchTarget) -> Check:
    name = "cuDNN" if cid.endswith("cudnn") else "NCCL"
    if name == "NCCL" and not sys.platform.startswith("linux"):
        return Check(cid, Status.SKIP, "n/a", "NCCL", detail="torch ships NCCL on Linux only")
    expected = f"{name} {wanted}" if wanted else f"{name} available"
    if not found:
        return Check(
            cid,
            Status.FAIL,
            f"{name} not available to torch {target.label}",
            expected,
            "reinstall the locked wheels (nvidia-cudnn-*/nvidia-nccl-*): `make env`, or recreate the env",
        )
    if wanted and not (wanted.startswith(found) or found.startswith(wanted)):
        return Check(
            cid,
            Status.WARN,
            f"{name} {found}",
            expected,
            "the nvidia-* wheel differs from the one torch was built with: install the lock's wheels (`make env`)",
        )
    return Check(cid, Status.OK, f"{name} {found}", expected)


def pinned_check(torch: Any, device: str = "cuda:0") -> Check:
    """Page-locked host memory: allocate 16 MiB, copy host -> GPU -> host non-blocking, compare."""
    cid = "torch.pinned_memory"
    expected = f"{PINNED_BYTES // MIB} MiB pinned, round trip through {device} intact"
    try:
        host = (torch.arange(PINNED_BYTES, dtype=torch.int32) % 251).to(torch.uint8).pin_memory()
        back = torch.empty_like(host).pin_memory()
        back.copy_(host.to(device, non_blocking=True), non_blocking=True)
        torch.cuda.synchronize(device)
        ok = bool(host.is_pinned()) and bool(torch.equal(back, host))
    except Exception as exc:  # noqa: BLE001 - see _compare: any CUDA error is a verdict, not a traceback
        return Check(cid, Status.FAIL, first_line(exc), expected, _pinning_remedy(str(exc)))
    if not ok:
        return Check(
            cid,
            Status.FAIL,
            "round trip corrupted the data",
            expected,
            "the GPU or its PCIe link corrupts transfers: run `dcgmi diag -r 2` and drain the GPU",
        )
    return Check(cid, Status.OK, "allocated and copied", expected)


def _pinning_remedy(error: str) -> str:
    # cudaHostAlloc pins through the CUDA driver, which RLIMIT_MEMLOCK (`ulimit -l`) does not bound: what
    # runs out is host memory, or the container's or job's share of it.
    if "out of memory" in error.lower():
        return (
            "the host could not page-lock 16 MiB: free host memory, or raise the container's or job's memory "
            "limit (docker `--memory`, the job's memory request)"
        )
    return "a CUDA error before or during the copy: the torch.gpu* checks say whether the GPU computes"


def compute_checks(torch: Any, index: int, device: Optional[str] = None) -> list[Check]:
    """A matmul and a convolution on one device, compared with a float64 CPU reference."""
    device = device or f"cuda:{index}"
    prefix = f"torch.gpu{index}"
    where = _device_label(torch, index, device)
    gen = torch.Generator().manual_seed(index)
    a, b = (torch.randn(MATMUL_N, MATMUL_N, generator=gen) for _ in range(2))
    x, w = torch.randn(8, 16, 32, 32, generator=gen), torch.randn(32, 16, 3, 3, generator=gen)
    conv = torch.nn.functional.conv2d
    return [
        _compare(
            torch,
            f"{prefix}.matmul",
            device,
            where,
            f"{MATMUL_N}x{MATMUL_N} fp32 matmul",
            lambda: a.to(device) @ b.to(device),
            a.double() @ b.double(),
        ),
        _compare(
            torch,
            f"{prefix}.conv",
            device,
            where,
            "3x3 fp32 conv2d (8x16x32x32)",
            lambda: conv(x.to(device), w.to(device), padding=1),
            conv(x.double(), w.double(), padding=1),
        ),
    ]


def _device_label(torch: Any, index: int, device: str) -> str:
    """'cuda:1 (NVIDIA H200)': torch numbers GPUs fastest-first by default, NVML in PCI order."""
    if not device.startswith("cuda"):
        return device
    try:
        return f"{device} ({torch.cuda.get_device_name(index)})"
    except Exception:  # noqa: BLE001 - the name is decoration; the compute checks report the error itself
        return device


def _compare(
    torch: Any, cid: str, device: str, where: str, what: str, run_on_device: Callable[[], Any], reference: Any
) -> Check:
    expected = f"{what} on {where} within {COMPUTE_RTOL:g} of the CPU (float64) result"
    try:
        out = run_on_device()
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        error = float((out.to("cpu").double() - reference).abs().max() / reference.abs().max())
    except Exception as exc:  # noqa: BLE001 - CUDA errors come as RuntimeError, AssertionError, AcceleratorError
        return Check(cid, Status.FAIL, first_line(exc), expected, _runtime_remedy(str(exc), cid))
    observed = f"max relative error {error:.1e}"
    if not error <= COMPUTE_RTOL:  # also catches NaN
        return Check(
            cid,
            Status.FAIL,
            observed,
            expected,
            "this GPU computes wrong results: drain it and run `dcgmi diag -r 3` (or gpu-burn)",
        )
    return Check(cid, Status.OK, observed, expected)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _runtime_remedy(message: str, cid: str) -> str:
    lowered = message.lower()
    gpu = cid.split(".")[1]
    if "no kernel image" in lowered:
        return f"this torch build has no kernel for the GPU: apply the remedy of cuda.arch.{gpu}"
    if "out of memory" in lowered:
        return "the GPU is full: `nvidia-smi` lists the processes holding its memory"
    if "cudnn" in lowered:
        return "cuDNN failed: install the lock's nvidia-cudnn wheel (`make env`)"
    return "check `nvidia-smi` and the kernel log (`sudo dmesg | grep -i xid`) for GPU errors"
