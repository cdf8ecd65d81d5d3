"""The NVIDIA checks `doctor` and `verify` share (`nvidia.*`): the driver, each GPU's health, the job's
GPUs, peer-to-peer. Pure: facts in, checks out. Docs: docs/checks.md, "What is checked".
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Optional

from bootstrap.compat.facts import P2P_OK, P2P_STATUS, TOPOLOGY, DriverFacts, GpuFacts, HostFacts
from bootstrap.compat.target import older_than_tables
from bootstrap.compat.versions import cuda_from_int, cuda_supported_by_driver_number, oldest_tabled_cuda
from bootstrap.compat.visible import ORDER_REMEDY, Visible, visible_gpus, visible_note
from bootstrap.report import Check, Status

# A loaded driver that lists no GPU: a CUDA torch would quietly train on the CPU.
NO_GPU_REMEDY = (
    "the driver is loaded but lists no GPU: usually a GPU it does not support or one that fell off "
    "the bus. `nvidia-smi` shows what it sees; `sudo dmesg | grep -i nvrm` says why a GPU was not "
    "taken (RmInitAdapter failed, fallen off the bus, not supported); a GPU newer than the driver "
    "needs a newer driver"
)

# NVIDIA's RMA guidance for page retirement: 60 retired pages (or a pending retirement) warrants service.
RETIRED_PAGES_WARN = 60


def nvidia_checks(nvidia: DriverFacts, host: Optional[HostFacts] = None) -> list[Check]:
    """The driver, the highest CUDA it supports, each GPU with its health (`nvidia-smi -q`), and for
    the GPUs of the job (`host`'s CUDA_VISIBLE_DEVICES) which they are and peer-to-peer between them."""
    if not nvidia.has_driver:
        return [no_driver_check(nvidia, host)]
    if nvidia.cuda_driver_version:
        cuda = f"CUDA {cuda_from_int(nvidia.cuda_driver_version)} (reported by the driver)"
    else:
        derived = cuda_supported_by_driver_number(nvidia.driver_version or "", nvidia.os)
        cuda = f"CUDA >= {cuda_from_int(derived)} (from the driver number)" if derived else "CUDA unknown"
        if older_than_tables(nvidia):
            cuda = f"CUDA < {cuda_from_int(oldest_tabled_cuda())} (older than every driver the tables list)"
    observed = f"driver {nvidia.driver_version or 'unknown'} ({nvidia.os_label}), {cuda}, {len(nvidia.gpus)} GPU(s)"
    detail = "; ".join(part for part in (f"source: {nvidia.source}", nvidia.reason, _where(nvidia)) if part)
    if not nvidia.gpus:
        return [Check("nvidia.driver", Status.WARN, observed, "an NVIDIA driver with its GPUs", NO_GPU_REMEDY, detail)]
    checks = [Check("nvidia.driver", Status.OK, observed, "an NVIDIA driver", detail=detail)]
    checks += [gpu_check(gpu, nvidia.os) for gpu in nvidia.gpus]
    visible = visible_gpus(
        nvidia.gpus, host.cuda_visible_devices if host else None, host.cuda_device_order if host else None
    )
    return checks + [c for c in (visible_check(nvidia, visible), peer_check(nvidia, visible)) if c is not None]


def no_driver_check(nvidia: DriverFacts, host: Optional[HostFacts]) -> Check:
    """No driver answers: CPU mode, unless the kernel still shows NVIDIA GPUs (a container started
    without them, or a driver without its libraries) or this is a Jetson, whose NVML is often absent."""
    cid, expected, why = "nvidia.driver", "an NVIDIA driver", nvidia.reason or "no driver facts"
    if nvidia.jetson:
        return Check(
            cid,
            Status.SKIP,
            f"Jetson ({nvidia.jetson}): no NVML answer",
            expected,
            detail=f"the integrated GPU's driver comes with JetPack and NVML is often absent there; {why}",
        )
    if not nvidia.gpu_signs:
        return Check(cid, Status.SKIP, "no NVIDIA driver (CPU mode)", expected, detail=why)
    shown = ", ".join(nvidia.gpu_signs[:4]) + (", ..." if len(nvidia.gpu_signs) > 4 else "")
    contained = host is not None and bool(host.container_hints)
    return Check(
        cid,
        Status.FAIL,
        f"no NVIDIA driver answers, yet the kernel shows NVIDIA GPUs ({shown})",
        "an NVIDIA driver for the GPUs the kernel shows",
        _NO_GPUS_PASSED if contained else _NO_USER_SPACE,
        f"{why}" + (f"; container: {', '.join(host.container_hints)}" if contained and host else ""),
    )


_NO_GPUS_PASSED = (
    "this container was started without the GPUs: `docker run --gpus all ...` (podman: "
    "`--device nvidia.com/gpu=all`), which needs the NVIDIA Container Toolkit on the host "
    "(`sudo nvidia-ctk runtime configure --runtime=docker`); Kubernetes: request `nvidia.com/gpu` "
    "in the pod's resources"
)
_NO_USER_SPACE = (
    "the kernel module is loaded but its libraries (libnvidia-ml.so.1, nvidia-smi) are missing or "
    "not on the loader path: install the driver utilities of the loaded module's version "
    "(`cat /proc/driver/nvidia/version`); in a container, start it with `--gpus all`"
)


def _where(nvidia: DriverFacts) -> str:
    if nvidia.wsl:
        return f"WSL2 ({nvidia.wsl}): the Windows driver, judged by NVIDIA's Windows driver table"
    return f"Jetson: {nvidia.jetson}; the driver comes with JetPack" if nvidia.jetson else ""


def visible_check(nvidia: DriverFacts, visible: Visible) -> Optional[Check]:
    """Which of the GPUs CUDA_VISIBLE_DEVICES gives CUDA programs; no row when it is unset, unless CUDA
    numbers this node's GPUs of several models otherwise than nvidia-smi does."""
    cid, expected = "nvidia.visible", "the job's GPUs among those NVML lists"
    total = f"{len(nvidia.gpus)} GPU(s)"
    if nvidia.gpus and visible.unordered and (visible.uncertain or not visible.note):
        models = len({(g.name, g.compute_capability) for g in nvidia.gpus})
        which = (
            f"{visible.note}: which {visible.devices} of the {total} it names is CUDA's guess"
            if visible.note
            else f"cuda:N is not nvidia-smi's GPU N on these {total}"
        )
        return Check(
            cid,
            Status.WARN,
            f"{which} ({models} GPU models, {visible.order_note}: CUDA counts fastest first)",
            expected,
            ORDER_REMEDY,
            detail="nvidia-smi and NVML number GPUs in PCI bus order; CUDA does so only under "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID",
        )
    if not visible.note or not nvidia.gpus:
        return None
    if visible.devices == 0:
        return Check(
            cid,
            Status.WARN,
            f"{visible.note} leaves CUDA programs none of the {total}",
            expected,
            f"`unset CUDA_VISIBLE_DEVICES`, or name GPUs by index (0-{len(nvidia.gpus) - 1}) or by UUID "
            "(`nvidia-smi -L`): the first entry naming none ends the list, a repeated one empties it",
        )
    if not visible.gpus:
        return Check(cid, Status.OK, f"{visible.note}: one MIG instance of {total}", expected)
    # A count first: the indices alone ('0 of 2') read as one; they are nvidia-smi's, CUDA's may differ
    named = ", ".join(str(gpu.index) for gpu in visible.gpus)
    return Check(cid, Status.OK, f"{visible.note}: {len(visible.gpus)} of {total} (nvidia-smi's {named})", expected)


def gpu_check(gpu: GpuFacts, os_name: str = "linux") -> Check:
    """One GPU: name, compute capability, memory; ECC row remapping / page retirement and persistence mode."""
    cid = f"nvidia.gpu{gpu.index}"
    memory = f", {gpu.memory_total_mib} MiB" if gpu.memory_total_mib is not None else ""
    observed = f"{gpu.name}, CC {gpu.cc_text}{memory}"
    extras = []
    if gpu.ecc_enabled is not None:
        extras.append("ECC on" if gpu.ecc_enabled else "ECC off")
    if gpu.persistence_mode is not None:
        extras.append("persistence on" if gpu.persistence_mode else "persistence off")
    if gpu.retired_pages:
        extras.append(f"{gpu.retired_pages} retired pages")
    observed += (" (" + ", ".join(extras) + ")") if extras else ""
    expected = "healthy: no failed or pending row remaps / page retirements"
    detail = "; ".join(gpu.missing)
    if gpu.remapped_rows_failed:
        return Check(
            cid,
            Status.FAIL,
            observed + ": row remapping failed",
            expected,
            f"this GPU needs service: drain it and open an RMA (`nvidia-smi -q -d ROW_REMAPPER -i {gpu.index}`)",
            detail,
        )
    if gpu.remapped_rows_pending or gpu.retired_pages_pending:
        return Check(
            cid,
            Status.WARN,
            observed + ": a memory remap/retirement is pending",
            expected,
            f"reset the GPU to apply it: `sudo nvidia-smi -r -i {gpu.index}` (or reboot)",
            detail,
        )
    if gpu.retired_pages is not None and gpu.retired_pages >= RETIRED_PAGES_WARN:
        return Check(
            cid,
            Status.WARN,
            observed,
            expected + f", fewer than {RETIRED_PAGES_WARN} retired pages",
            f"NVIDIA's threshold for service is reached: `nvidia-smi -q -d PAGE_RETIREMENT -i {gpu.index}`",
            detail,
        )
    if gpu.persistence_mode is False and os_name == "linux":
        return Check(
            cid,
            Status.WARN,
            observed,
            expected + ", persistence mode on",
            "enable persistence so each process does not re-initialise the GPU: "
            "`sudo systemctl enable --now nvidia-persistenced` (or `sudo nvidia-smi -pm 1`)",
            detail,
        )
    return Check(cid, Status.OK, observed, expected, detail=detail)


def peer_check(nvidia: DriverFacts, visible: Visible) -> Optional[Check]:
    """Peer-to-peer between every two of the job's GPUs (`nvidia-smi topo -p2p r`); None with fewer than two.

    Without it, NCCL and device-to-device copies between that pair go through host memory: the
    job runs, its gradients' all-reduce slower. A warning, then, not a failure."""
    indices = {gpu.index for gpu in visible.gpus}
    if len(indices) < 2:
        return None
    cid, expected = "nvidia.p2p", "peer-to-peer between every two of the job's GPUs"
    note = visible_note(visible)
    pairs = [p for p in nvidia.peers if p.a in indices and p.b in indices]
    answered = [p for p in pairs if p.read is not None]
    total = len(indices) * (len(indices) - 1) // 2
    why_not_answered = "; ".join(dict.fromkeys(m for p in pairs if p.read is None for m in p.missing)) or (
        "no answers in these facts: nvidia-smi's CSV has none (NVML answers it)"
        if nvidia.source == "nvidia-smi"
        else "no answers in these facts (saved before bootstrap asked NVML for them?)"
    )
    if not answered:
        return Check(cid, Status.SKIP, f"unknown for {_pairs(total)}{note}", expected, detail=why_not_answered)
    unanswered = f"; {total - len(answered)} not answered" if len(answered) < total else ""
    without = [p for p in answered if p.read != P2P_OK]
    if not without:
        nvlink = sum(1 for p in answered if p.nvlink == P2P_OK)
        observed = f"{_pairs(len(answered))} peer-to-peer, {nvlink} over NVLink{note}{unanswered}"
        if unanswered:  # no verdict on the pairs NVML did not answer for
            return Check(cid, Status.SKIP, observed, expected, detail=why_not_answered)
        return Check(cid, Status.OK, observed, expected)
    why = Counter(p.read for p in without if p.read is not None).most_common(1)[0][0]
    shown = ", ".join(f"{p.a}-{p.b}" for p in without[:6]) + (", ..." if len(without) > 6 else "")
    observed = (
        f"{len(without)} of {_pairs(len(answered))} without it ({P2P_STATUS.get(why, f'status {why}')}): "
        f"{shown}{note}{unanswered}"
    )
    detail = "; ".join(
        f"{p.a}-{p.b}: {_lookup(P2P_STATUS, p.read, f'status {p.read}')}, "
        f"{_lookup(TOPOLOGY, p.topology, 'PCIe path unknown')}"
        for p in without[:6]
    )
    return Check(
        cid,
        Status.WARN,
        observed,
        expected,
        _P2P_REMEDIES.get(why, _P2P_REMEDY_OTHER),
        f"{detail}; NCCL stages these pairs' traffic through host memory",
    )


def _pairs(count: int) -> str:
    return f"{count} GPU pair" + ("" if count == 1 else "s")


_P2P_REMEDY_OTHER = (
    "`nvidia-smi topo -p2p r` shows every pair; in a VM, P2P needs the GPUs passed through with "
    "their PCIe switch and ACS off"
)
_P2P_PATH = (
    "their PCIe path (across CPU sockets, or a root complex without P2P) does not carry it: give a job "
    "GPUs under one CPU socket (`nvidia-smi topo -m` shows which)"
)
_P2P_REMEDIES = {
    1: _P2P_PATH,  # chipset not supported
    3: _P2P_PATH,  # PCIe topology not supported
    2: "these GPUs offer no P2P over PCIe (GeForce boards): nothing to switch on; "
    "`torchrun ... -m bootstrap verify --distributed` measures what it costs the all-reduce",
    4: "P2P is switched off in the NVIDIA driver's configuration: look for a registry key among the nvidia "
    "module's options (`/etc/modprobe.d/`), remove it and reload the module",
}


def _lookup(table: Mapping[int, str], code: Optional[int], default: str) -> str:
    """`table[code]`, or `default` for a code it lacks or none."""
    return table.get(code, default) if code is not None else default
