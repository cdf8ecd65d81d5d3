"""Pure compatibility rules: (NVIDIA facts, torch target) -> checks.

Driver vs the wheel's CUDA, each GPU's compute capability vs the arch list, a CPU torch on a GPU
host; no I/O, the tables come from `bootstrap.compat.data` (cuda_compat.yml's `decision_rules`).
Docs: docs/checks.md, "Reference: the rules".
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Optional, Sequence

from bootstrap.compat import data, forward, jetson, upgrade
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.target import TorchTarget, driver_fit, older_than_tables, suggest_builds, unlisted_builds
from bootstrap.compat.versions import (
    architecture_name,
    cuda_from_int,
    cuda_to_int,
    driver_column,
    full_support_driver,
    kernel_for,
    minor_version_floor,
    oldest_tabled_cuda,
    short_source,
)
from bootstrap.compat.visible import ORDER_REMEDY, Visible
from bootstrap.report import Check, Status


def evaluate(facts: DriverFacts, target: TorchTarget, visible: Optional[Visible] = None) -> list[Check]:
    """Every CUDA-stack check for one host and one torch build: the kernel images for the GPUs
    `visible` leaves the job (None: every GPU the driver lists)."""
    judged, hidden = visible.split(facts.gpus) if visible is not None else (facts.gpus, ())
    checks = [check_torch_build(facts, target), check_driver(facts, target, judged)]
    if jetson.unlisted(facts):
        checks.append(jetson.arch_check(facts))
    elif not facts.gpus:
        reason = facts.reason or "the driver reports no GPU"
        checks.append(
            Check("cuda.arch", Status.SKIP, "no NVIDIA GPU", "a GPU to match against the arch list", detail=reason)
        )
    if facts.gpus and not judged and visible is not None:  # only a CUDA_VISIBLE_DEVICES hides them all
        checks.append(
            Check(
                "cuda.arch",
                Status.SKIP,
                f"no GPU visible to this job ({visible.note})",
                "a GPU to match against the arch list",
                detail=f"{len(facts.gpus)} GPU(s) hidden; `unset CUDA_VISIBLE_DEVICES` to use them",
            )
        )
    ccs = [g.compute_capability for g in judged if g.compute_capability]
    arch = [check_gpu_arch(gpu, facts, target, ccs) for gpu in facts.gpus]
    if visible is not None and visible.uncertain and visible.devices < len(facts.gpus):
        arch = _maybe_visible(arch, visible)
    checks += [check if gpu in judged else _hidden(check, visible) for gpu, check in zip(facts.gpus, arch)]
    return checks


def _maybe_visible(checks: list[Check], visible: Visible) -> list[Check]:
    """Indices CUDA counts fastest first on a node of several GPU models: the job gets `visible.devices`
    of these GPUs, which ones is CUDA's choice. A GPU without a kernel fails the run only when too few
    others run for the job to miss it; otherwise it is a warning that names the ordering fix."""
    if sum(c.status is not Status.FAIL for c in checks) < visible.devices:
        return checks
    return [
        check
        if check.status is not Status.FAIL
        else Check(
            check.id,
            Status.WARN,
            f"{check.observed} [may be visible: {visible.note} counts fastest first, {visible.order_note}]",
            check.expected,
            remedy=(f"{ORDER_REMEDY}; if the job gets this GPU: {check.remedy}"),
            detail=check.detail,
        )
        for check in checks
    ]


def _hidden(check: Check, visible: Optional[Visible]) -> Check:
    """A GPU the job does not see: its verdict as information, not as this run's failure."""
    note = visible.note if visible is not None else "CUDA_VISIBLE_DEVICES"
    would = f"would be {check.status.value}" + (f" ({check.remedy})" if check.remedy else "")
    return Check(
        check.id,
        Status.SKIP,
        f"{check.observed} [not visible: {note}]",
        check.expected,
        detail=(f"{would}; doctor's variant pick still judges this GPU, as an env outlives CUDA_VISIBLE_DEVICES"),
    )


def check_torch_build(facts: DriverFacts, target: TorchTarget) -> Check:
    """A CPU-only torch on a host with NVIDIA GPUs is a failure: training would silently run on CPU."""
    cid = "torch.cuda_build"
    if target.unknown:
        return Check(cid, Status.SKIP, f"torch {target.version}", "a known torch build", detail=target.unknown)
    if target.cuda is not None:
        return Check(
            cid, Status.OK, f"torch {target.label}: CUDA {target.cuda} build", "a CUDA build", detail=target.source
        )
    if facts.jetson:  # no PyPI build, CPU or CUDA, runs a Jetson's GPU: the remedy is JetPack's torch
        return jetson.cpu_build_check(facts, target.label, target.source)
    if not facts.gpus:
        return Check(
            cid,
            Status.OK,
            f"torch {target.label}: CPU build",
            "CPU build on a host without NVIDIA GPUs",
            detail=target.source,
        )
    ccs = [g.compute_capability for g in facts.gpus if g.compute_capability]
    suggestions = suggest_builds(ccs, target, facts)
    if target.locked:  # the lock itself holds the CPU build (PyPI's only build for Windows): reinstalling keeps it
        remedy = (
            f"the lock holds a CPU build for this platform: lock a CUDA build: {suggestions[0].text}"
            if suggestions
            else "the lock holds a CPU build for this platform: lock a CUDA build of torch"
        )
    else:
        alternative = f"; or lock a CUDA build: {suggestions[0].text}" if suggestions else ""
        remedy = f"reinstall the lock's CUDA wheel: `make env` (recreates the env from the lock){alternative}"
    return Check(
        cid,
        Status.FAIL,
        f"torch {target.label} is a CPU build (torch.version.cuda is None)",
        f"a CUDA build: this host has {len(facts.gpus)} NVIDIA GPU(s)",
        remedy=remedy,
        detail=target.source,
    )


def check_driver(facts: DriverFacts, target: TorchTarget, judged: Optional[Sequence[GpuFacts]] = None) -> Check:
    """The driver must support the CUDA the torch build was compiled with (fully, or same-major minor compat).
    A loaded cuda-compat fails only beside a GPU of the job (`judged`; None: every GPU the driver lists)."""
    cid = "cuda.driver"
    if target.unknown:
        return Check(cid, Status.SKIP, _driver_text(facts), "a known torch build", detail=target.unknown)
    if target.cuda is None:
        return Check(cid, Status.SKIP, _driver_text(facts), "n/a: torch is a CPU build", detail=target.source)
    if not facts.has_driver and facts.jetson:
        return jetson.driver_check(facts, target.cuda)
    if not facts.has_driver:
        observed = "no NVIDIA driver answers" if facts.gpu_signs else "no NVIDIA driver (CPU mode)"
        return Check(
            cid, Status.SKIP, observed, f"a driver for CUDA {target.cuda}", detail=facts.reason or "no driver facts"
        )
    wheel = cuda_to_int(target.cuda)
    supported, how = facts.supported_cuda()
    floor, floor_row = minor_version_floor(wheel // 1000, facts.os)
    _, full_row = full_support_driver(wheel, facts.os)
    too_old = supported is None and older_than_tables(facts)
    oldest = f", older than any CUDA {cuda_from_int(oldest_tabled_cuda())} driver the tables list"
    observed = _driver_text(facts) + (
        f", CUDA {cuda_from_int(supported)} ({how})" if supported else oldest if too_old else ""
    )
    expected = f"CUDA >= {target.cuda} for torch {target.label}"
    detail = _driver_detail(floor_row, full_row, facts.os)
    if supported is None and not too_old:
        return Check(
            cid,
            Status.SKIP,
            observed,
            expected,
            detail="cannot tell which CUDA the driver supports; " + (facts.reason or detail),
        )
    board, support, native = forward.unsupported_board(facts, judged)
    if board and native and (support == forward.REFUSED or (supported is not None and supported >= wheel)):
        return _compat_check(facts, target, (observed, expected, detail), board, support == forward.REFUSED, native)
    if supported is not None and supported >= wheel:
        return Check(cid, Status.OK, observed, expected, detail=detail)
    if driver_fit(facts, wheel) is Status.FAIL:
        alternative = _driver_alternative(facts, target)
        if upgrade.capped(facts, wheel) and alternative.startswith(", or "):
            alternative = "; " + alternative[len(", or ") :]
        return Check(
            cid,
            Status.FAIL,
            observed,
            expected + f" (CUDA {wheel // 1000}.x needs driver >= {floor})",
            remedy=upgrade.upgrade_driver(facts, wheel, with_floor=True) + alternative,
            detail=detail + "; data-center GPUs on Linux may use the cuda-compat forward-compatibility "
            "package instead (not GeForce)",
        )
    return Check(
        cid,
        Status.WARN,
        observed,
        expected,
        remedy=(
            f"runs through CUDA minor-version compatibility (driver >= {floor}): prebuilt SASS kernels work, "
            "but PTX JIT fails (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) and newer-driver features may fail "
            f"(cudaErrorCallRequiresNewerDriver); for full support: "
            f"{upgrade.upgrade_driver(facts, wheel)}"
        ),
        detail=detail,
    )


def _compat_check(
    facts: DriverFacts, target: TorchTarget, texts: tuple[str, str, str], board: str, refused: bool, native: int
) -> Check:
    """cuda-compat loaded beside a GPU it refuses (fail) or may refuse (warn): the remedy is what the
    driver's own CUDA runs once it is off, and the driver that fully supports the build where that is short."""
    observed, expected, detail = texts
    wheel = cuda_to_int(target.cuda or "0.0")
    own = f"driver {facts.driver_version} (CUDA {cuda_from_int(native)})"
    fit = driver_fit(replace(facts, cuda_driver_version=native), wheel)
    if fit is Status.OK:
        fix = f"take cuda-compat off LD_LIBRARY_PATH: {own} runs CUDA {target.cuda} builds itself"
    elif fit is Status.WARN:
        fix = (
            f"take cuda-compat off LD_LIBRARY_PATH: {own} runs CUDA {target.cuda} builds through minor-version "
            f"compatibility; for full support: {upgrade.upgrade_driver(facts, wheel)}"
        )
    else:
        fix = (
            f"take cuda-compat off LD_LIBRARY_PATH{'; ' if upgrade.capped(facts, wheel) else ' and '}"
            f"{upgrade.upgrade_driver(facts, wheel, with_floor=True)}"
        )
    what = (
        f"CUDA {cuda_from_int(facts.cuda_driver_version or 0)} over {own} is the cuda-compat "
        "forward-compatibility package"
    )
    detail += "; forward compatibility: data-center GPUs, select NGC Server Ready RTX SKUs, Jetson"
    if refused:
        return Check(
            "cuda.driver",
            Status.FAIL,
            observed,
            expected,
            detail=detail,
            remedy=(f"{what}, which does not run on {board} (CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE): {fix}"),
        )
    return Check(
        "cuda.driver",
        Status.WARN,
        observed,
        expected,
        detail=detail,
        remedy=(
            f"{what}: NVIDIA supports it on data-center GPUs and select NGC Server Ready RTX SKUs only, and whether "
            f"{board} is one is not known here; if CUDA fails with CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, {fix}"
        ),
    )


def _driver_text(facts: DriverFacts) -> str:
    if not facts.has_driver:
        return f"Jetson ({facts.jetson}): no NVML" if facts.jetson else "no NVIDIA driver"
    return f"driver {facts.driver_version or 'unknown'} ({facts.os_label})"


def _driver_alternative(facts: DriverFacts, target: TorchTarget) -> str:
    ccs = [g.compute_capability for g in facts.gpus if g.compute_capability]
    suggestions = suggest_builds(ccs, target, facts)
    if not suggestions and facts.jetson:  # an aarch64 build without an arch list here is a server (SBSA) build
        return (
            f"; no torch build in the packaged table ({target.platform}) runs on this driver and this Jetson's "
            "GPU: PyPI's aarch64 torch builds are CPU-only or server (SBSA) builds"
        )
    if not suggestions:
        unlisted = _unlisted(target, facts)
        return (
            f"; no torch build in the packaged table ({target.platform}) "
            f"{'is known to run' if unlisted else 'runs'} on this driver and these GPUs{unlisted}"
        )
    return f", or lock a torch build with a CUDA this driver supports: {suggestions[0].text}"


def _unlisted(target: TorchTarget, facts: DriverFacts) -> str:
    """Builds the driver runs but whose arch list the table lacks here: 'unknown', not 'none runs'."""
    unlisted = unlisted_builds(target, facts)
    if not unlisted:
        return ""
    tags = ", ".join(dict.fromkeys(s.tag for s in unlisted))
    return (
        f"; {unlisted[0].text} runs on this driver, but the packaged "
        f"{target.platform} arch lists have no row for {tags}: install it and check "
        "`python -c 'import torch; print(torch.cuda.get_arch_list())'`"
    )


def _driver_detail(floor_row: Optional[Mapping[str, Any]], full_row: Optional[Mapping[str, Any]], os_name: str) -> str:
    parts = []
    if floor_row:
        note = floor_row.get(f"{driver_column(os_name)}_note")
        parts.append(
            f"floor CUDA {floor_row['cuda_major']}.x ({short_source(floor_row)})" + (f" [{note}]" if note else "")
        )
    if full_row:
        parts.append(f"full: {full_row['label']} ({short_source(full_row)})")
    return "; ".join(parts)


def check_gpu_arch(
    gpu: GpuFacts, facts: DriverFacts, target: TorchTarget, ccs: Optional[Sequence[tuple[int, int]]] = None
) -> Check:
    """The torch build must carry SASS for the GPU's major, or PTX the driver can JIT. A build to lock
    instead must also carry kernels for `ccs`, the job's other GPUs (None: every GPU the driver lists)."""
    cid = f"cuda.arch.gpu{gpu.index}"
    observed = f"{gpu.name} CC {gpu.cc_text}"
    if target.unknown or target.cuda is None:
        why = target.unknown or "torch is a CPU build"
        return Check(cid, Status.SKIP, observed, "n/a", detail=why)
    expected = f"a kernel for CC {gpu.cc_text} in torch {target.label}: " + _arch_text(target.arch_list)
    if gpu.compute_capability is None:
        return Check(
            cid,
            Status.SKIP,
            observed,
            expected,
            detail="compute capability not reported (nvidia-smi of R470-era drivers has no compute_cap)",
        )
    if not target.arch_list:
        return Check(
            cid,
            Status.SKIP,
            observed,
            expected,
            detail="; ".join(target.notes)
            or (
                "torch arch list unknown: get_arch_list() returns [] without a visible GPU up to at least 2.11; "
                "torch._C._cuda_getArchFlags() does not need one"
            ),
        )
    cc = gpu.compute_capability
    every = _every_cc(cc, facts, ccs)
    wheel = cuda_to_int(target.cuda)
    sass, ptx = kernel_for(cc, target.arch_list, wheel)
    observed = f"{gpu.name} CC {gpu.cc_text} ({architecture_name(cc)})"
    needed = forward.newer_than_driver(cc, facts)
    if needed is not None:
        return Check(
            cid,
            Status.FAIL,
            observed + f": newer than the driver {facts.driver_version} (CUDA "
            f"{cuda_from_int(needed)} first targets it)",
            expected,
            remedy=upgrade.upgrade_driver(facts, needed, needs=f"the {gpu.name}"),
            detail=f"a driver branch knows only the GPUs released before it; {target.source}",
        )
    if sass:
        return Check(cid, Status.OK, observed + f": runs {sass}", expected, detail=target.source)
    if ptx:
        return _ptx_check(cid, observed, expected, every, ptx, facts, target)
    return Check(
        cid,
        Status.FAIL,
        observed + ": no kernel image is available for execution on the device",
        expected,
        remedy=_no_kernel_remedy(cc, facts, target, every),
        detail="; ".join((target.source,) + target.notes),
    )


def _arch_text(arch_list: Optional[Sequence[str]]) -> str:
    return " ".join(arch_list) if arch_list else "(arch list unknown)"


def _every_cc(
    cc: tuple[int, int], facts: DriverFacts, ccs: Optional[Sequence[tuple[int, int]]]
) -> list[tuple[int, int]]:
    """This GPU's compute capability first, then the others' a build to lock must also run."""
    others = [g.compute_capability for g in facts.gpus if g.compute_capability] if ccs is None else ccs
    return [cc] + sorted(set(others) - {cc})


def _ptx_check(
    cid: str,
    observed: str,
    expected: str,
    ccs: Sequence[tuple[int, int]],
    ptx: str,
    facts: DriverFacts,
    target: TorchTarget,
) -> Check:
    """PTX only: runs after a JIT at first launch, if the driver's JIT accepts PTX from that toolkit."""
    wheel = cuda_to_int(target.cuda or "0.0")
    observed += f": PTX {ptx} only (JIT-compiled on first launch)"
    suggestions = suggest_builds(ccs, target, facts)
    native = f"; for native SASS lock {suggestions[0].text}" if suggestions else ""
    supported, _ = facts.supported_cuda()
    if supported is not None and supported < wheel:
        return Check(
            cid,
            Status.FAIL,
            observed,
            expected,
            remedy=(
                f"PTX from CUDA {target.cuda} needs a driver that fully supports it "
                f"(CUDA_ERROR_UNSUPPORTED_PTX_VERSION otherwise): "
                f"{upgrade.upgrade_driver(facts, wheel)}{native}"
            ),
            detail=data.CAVEATS["ptx_jit_needs_full_driver"]["text"],
        )
    return Check(
        cid,
        Status.WARN,
        observed,
        expected,
        remedy=(
            "expect a slow first run while the driver JIT-compiles PTX (cached in ~/.nv/ComputeCache; "
            f"raise CUDA_CACHE_MAXSIZE if it is evicted){native}"
        ),
        detail=target.source,
    )


def _no_kernel_remedy(
    cc: tuple[int, int], facts: DriverFacts, target: TorchTarget, every: Sequence[tuple[int, int]]
) -> str:
    """A build with SASS for this GPU and every other one of the job (`every`, this GPU's CC first)."""
    hints = []
    if cc < (7, 5) and cuda_to_int(target.cuda or "0.0") >= 13000:
        hints.append("CUDA 13 builds never support CC < 7.5")
    suggestions = suggest_builds(every, target, facts)
    own = suggest_builds([cc], target, facts) if len(every) > 1 and not suggestions else []
    if suggestions:
        also = f" and the other GPUs here (CC {_ccs_text(every[1:])})" if len(every) > 1 else ""
        hints.insert(0, f"lock {suggestions[0].text}, whose arch list has SASS for CC {_ccs_text([cc])}{also}")
    elif own:
        hints.insert(
            0,
            f"no single torch build in the packaged table has SASS for every GPU here (CC "
            f"{_ccs_text(every)}): {own[0].text} has it for CC {_ccs_text([cc])}; give each kind of GPU "
            "an env of its own (a variant per build) and its jobs those GPUs, by UUID in "
            "CUDA_VISIBLE_DEVICES (`nvidia-smi -L`)",
        )
    else:
        # On a Jetson an unlisted aarch64 build is a server (SBSA) build: its kernels skip the integrated GPU.
        hints.insert(
            0,
            f"no torch build in the packaged table (torch {data.TORCH_RELEASES[0]['release']}-"
            f"{data.TORCH_RELEASES[-1]['release']}, {target.platform}) has SASS for CC {cc[0]}.{cc[1]}"
            " that this driver runs" + ("" if facts.jetson else _unlisted(target, facts)),
        )
    if facts.jetson:
        hints.append(
            f"on this Jetson ({facts.jetson}), install the torch build made for its JetPack "
            "(NVIDIA's PyTorch for Jetson wheels)"
        )
    return "; ".join(hints)


def _ccs_text(ccs: Sequence[tuple[int, int]]) -> str:
    return ", ".join(f"{major}.{minor}" for major, minor in ccs)
