"""Pure rules: measured metrics + thresholds -> `Check`s (bench_method.md section 5, "Thresholds").

Each rule reads the flat `metrics` mapping a run produced (names carry
units) and the facts it needs, and returns one Check; a metric that was not
measured (no GPU, no workers, interrupted) is a `skip` with the reason.
The thresholds used are quoted in each check's `expected`.
The rate verdicts can end up `inconclusive` (`bootstrap.bench.trust`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Mapping, Optional, Tuple

from bootstrap.bench.config import Thresholds
from bootstrap.bench.results import SamplerReport
from bootstrap.bench.trust import inconclusive_reason, recheck_check, undecided
from bootstrap.report import Check, Status

# Dense (non-sparse) BF16 tensor TFLOP/s by SKU name fragment, most specific first.
# H100/H200 SXM 989 (bench_method.md [15]); H100 PCIe 756 and A100 312 from NVIDIA's datasheets.
DENSE_BF16_TFLOPS: Tuple[Tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H200", 989.0),
    ("GH200", 989.0),
    ("H100", 989.0),
    ("A100", 312.0),
)
# PCIe GB/s per lane after line encoding, by generation.
PCIE_GB_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


@dataclass(frozen=True)
class VerdictFacts:
    """What the rules need besides the metrics."""

    device_type: str  # 'cuda' | 'cpu'
    gpu_name: str = ""
    cpus: Optional[int] = None
    cpus_total: Optional[int] = None
    shm_free_mib: Optional[float] = None
    shm_need_mib: Optional[float] = None
    shm_failure: str = ""  # why a loader's workers died of /dev/shm ('' if none did)
    start_method: str = ""
    start_method_explicit: bool = False
    nofile_soft: Optional[int] = None
    nofile_hard: Optional[int] = None
    workers: Optional[int] = None
    cpu_bound: Optional[bool] = None
    worker_cap: Optional[int] = None  # the most workers the tuner tried, and the count it predicted
    predicted_workers: Optional[int] = None
    pcie: Optional[Tuple[int, int, int, int]] = None  # (current gen, current width, max gen, max width)
    local_ranks: int = 1
    budget_s: Optional[float] = None
    partial: bool = False  # interrupted
    left_out: str = ""  # what of the tune the budget could not pay for (budget.Ledger.summary)


def dense_peak_tflops(gpu_name: str) -> Optional[float]:
    for fragment, peak in DENSE_BF16_TFLOPS:
        if fragment.lower() in gpu_name.lower():
            return peak
    return None


def evaluate(
    metrics: Mapping[str, Optional[float]], facts: VerdictFacts, sampler: SamplerReport, t: Thresholds
) -> List[Check]:
    """Every bench verdict, in report order."""
    checks = [
        shm_check(facts, t),
        affinity_check(facts),
        start_method_check(facts, metrics),
        nofile_check(facts),
        matmul_check(metrics, facts, t),
        h2d_check(metrics, facts, t),
        tuned_check(metrics, facts),
        recheck_check(metrics, t),
        efficiency_check(metrics, facts, t),
        device_idle_check(metrics, facts, t),
        speedup_check(metrics, t),
        util_check(sampler, facts, t, trained=metrics.get("tuned_samples_per_s") is not None),
        sm_active_check(sampler, t),
        pss_check(metrics, t),
        scaling_check(metrics, t),
    ]
    return undecided(checks, inconclusive_reason(metrics, t))


def _mib(value: float) -> str:
    return f"{value:.0f} MiB" if value >= 10 else f"{value:.2f} MiB"


def _band(value: float, ok: float, warn: float, higher_is_better: bool = True) -> Status:
    if higher_is_better:
        return Status.OK if value >= ok else (Status.WARN if value >= warn else Status.FAIL)
    return Status.OK if value <= ok else (Status.WARN if value <= warn else Status.FAIL)


def shm_check(f: VerdictFacts, t: Thresholds) -> Check:
    cid = "bench.shm"
    need = f.shm_need_mib or 0.0
    expected = f">= {t.shm_pass_factor:g} x need ({_mib(t.shm_pass_factor * need)})"
    detail = "need = workers x prefetch_factor x batch bytes (PyTorch #5040)"
    free = "unknown" if f.shm_free_mib is None else f"{_mib(f.shm_free_mib)} free"
    if f.shm_failure:
        return Check(
            cid,
            Status.FAIL,
            f"{free}, need {_mib(need)}; a loader died: {f.shm_failure}",
            expected,
            _shm_remedy(max(need, f.shm_free_mib or 0.0, 32.0), t),
            detail,
        )
    if f.shm_free_mib is None:
        return Check(cid, Status.SKIP, "unknown", "", detail="/dev/shm could not be read")
    observed = f"{free}, need {_mib(need)}"
    if f.local_ranks > 1:
        observed += f" ({f.local_ranks} local ranks)"
    if need <= 0:
        return Check(cid, Status.OK, observed, expected, detail="no loader workers: batches do not pass through shm")
    status = _band(f.shm_free_mib / need, t.shm_pass_factor, t.shm_warn_factor)
    return Check(cid, status, observed, expected, "" if status is Status.OK else _shm_remedy(need, t), detail)


def _shm_remedy(need_mib: float, t: Thresholds) -> str:
    size = max(64, int(need_mib * t.shm_pass_factor / 64 + 1) * 64)
    return (
        f"give /dev/shm {size} MiB or more: `docker run --shm-size={size}m ...` (or `--ipc=host`), "
        f"`sudo mount -o remount,size={size}m /dev/shm` on a host; or use fewer workers (--max-workers) "
        "or a smaller batch (loader workers die with 'Bus error' when shm runs out)"
    )


def affinity_check(f: VerdictFacts) -> Check:
    cid = "bench.affinity"
    if f.cpus is None:
        return Check(cid, Status.SKIP, "unknown", "", detail="CPU affinity unavailable")
    observed = f"{f.cpus} of {f.cpus_total or '?'} CPUs usable"
    if f.local_ranks > 1:
        observed += f", {f.cpus} per rank"
    if f.workers and f.cpu_bound and f.workers > f.cpus:
        return Check(
            cid,
            Status.WARN,
            observed + f", {f.workers} CPU-bound workers",
            "CPU-bound workers <= usable CPUs",
            f"cap the workers: --max-workers {f.cpus}",
            "PyTorch warns past sched_getaffinity (#46867); throughput falls past the core count",
        )
    return Check(cid, Status.OK, observed, "workers fit the usable CPUs")


def start_method_check(f: VerdictFacts, metrics: Mapping[str, Optional[float]]) -> Check:
    first = metrics.get("time_to_first_batch_s")
    origin = "set by the program" if f.start_method_explicit else "platform default"
    observed = f"{f.start_method or 'unknown'} ({origin})"
    if first is not None:
        observed += f", first batch {first:.2f} s"
    return Check(
        "bench.start_method",
        Status.OK,
        observed,
        "recorded",
        detail="Python 3.14 defaults to forkserver on Linux; start-up time is in the first batch",
    )


def nofile_check(f: VerdictFacts) -> Check:
    """doctor's `host.nofile` rule (its remedy knows when the hard limit must be raised first), as bench.nofile."""
    from bootstrap.compat.facts import HostFacts
    from bootstrap.compat.host import LoaderNeeds
    from bootstrap.compat.host import nofile_check as host_nofile_check

    if f.nofile_soft is None:
        return Check("bench.nofile", Status.SKIP, "unknown", "", detail="no resource limits on this OS")
    check = host_nofile_check(HostFacts(nofile_soft=f.nofile_soft, nofile_hard=f.nofile_hard), LoaderNeeds())
    return replace(check, id="bench.nofile")


def matmul_check(m: Mapping[str, Optional[float]], f: VerdictFacts, t: Thresholds) -> Check:
    cid = "bench.matmul"
    tflops = m.get("matmul_tflops")
    if tflops is None:
        return Check(cid, Status.SKIP, "not measured", "")
    if f.device_type != "cuda":
        return Check(
            cid, Status.SKIP, f"{tflops:.3f} TFLOP/s (CPU, fp32)", "", detail="CPU run: no dense peak to compare"
        )
    peak = dense_peak_tflops(f.gpu_name)
    if peak is None:
        return Check(
            cid, Status.SKIP, f"{tflops:.0f} TFLOP/s", "", detail=f"dense peak of {f.gpu_name!r} unknown: report only"
        )
    ratio = tflops / peak
    status = _band(ratio, t.matmul_pass, t.matmul_warn)
    return Check(
        cid,
        status,
        f"{tflops:.0f} TFLOP/s = {ratio:.0%} of {peak:.0f} dense",
        f">= {t.matmul_pass:.0%} (warn {t.matmul_warn:.0%})",
        ""
        if status is Status.OK
        else "check clocks and power (`nvidia-smi -q -d CLOCK,POWER,PERFORMANCE`), then `dcgmi diag -r 2`",
        "MAMF reaches 80-87% on A100/H100",
    )


def h2d_check(m: Mapping[str, Optional[float]], f: VerdictFacts, t: Thresholds) -> Check:
    cid = "bench.h2d"
    pinned = m.get("h2d_pinned_gb_per_s")
    if pinned is None:
        return Check(cid, Status.SKIP, "not measured", "", detail="CUDA only")
    if f.pcie is None:
        return Check(cid, Status.SKIP, f"{pinned:.1f} GB/s pinned", "", detail="PCIe link unknown (NVML)")
    gen, width, max_gen, max_width = f.pcie
    link = PCIE_GB_PER_LANE.get(gen, 0.0) * width
    observed = f"{pinned:.1f} GB/s pinned on PCIe Gen{gen} x{width} ({link:.1f} GB/s)"
    if gen < max_gen or width < max_width:
        return Check(
            cid,
            Status.FAIL,
            observed + f", link can do Gen{max_gen} x{max_width}",
            "link at its maximum under load",
            "reseat the GPU / check BIOS PCIe settings; `nvidia-smi -q -d PCIE`",
            "downtrained link (DCGM `pcie`)",
        )
    ratio = pinned / link if link else 0.0
    status = _band(ratio, t.h2d_pass, t.h2d_warn)
    return Check(
        cid,
        status,
        observed + f" = {ratio:.0%}",
        f">= {t.h2d_pass:.0%} of link (warn {t.h2d_warn:.0%})",
        "" if status is Status.OK else "check NUMA placement (`nvidia-smi topo -m`) and IOMMU settings",
    )


def tuned_check(m: Mapping[str, Optional[float]], f: VerdictFacts) -> Check:
    """Did the budget pay for a tune worth the name: every worker candidate measured, all tuned windows?"""
    cid = "bench.tuned"
    expected = "every candidate measured and 3 tuned windows, within the budget"
    if f.partial:
        return Check(cid, Status.SKIP, "interrupted", expected)
    candidates, measured = m.get("tune_candidates"), m.get("tune_candidates_measured")
    failed, windows = m.get("tune_candidates_failed") or 0, m.get("tuned_windows") or 0
    parts = ["no worker search" if candidates is None else f"{measured:.0f} of {candidates:.0f} candidates measured"]
    if failed:
        parts.append(f"{failed:.0f} failed")
    if m.get("tune_knobs"):
        parts.append(f"{m.get('tune_knobs_tried') or 0:.0f} of {m['tune_knobs']:.0f} knobs tried")
    parts.append(f"{windows:.0f} of 3 tuned windows")
    needed = m.get("budget_needed_s")
    if not (measured or windows or m.get("naive_samples_per_s")):
        # Nothing fed the step: no verdict on the pipeline can be given, and a pass would say otherwise.
        return Check(
            cid,
            Status.FAIL,
            "no loader was measured with the step: the budget ended first",
            expected,
            f"rerun with --budget {needed:.0f} (or more)" if needed else "rerun with a larger --budget",
            "slow samples? a smaller --batch-size makes each measurement shorter",
        )
    if f.left_out and needed is not None:
        observed = f"budget too small: ~{needed:.0f} s needed, {f.budget_s or 0:g} s given; " + ", ".join(parts)
        return Check(
            cid,
            Status.WARN,
            observed,
            expected,
            f"rerun with --budget {needed:.0f} (or more)",
            f"left out: {f.left_out}; the winner is the best of what was measured, not a full tune",
        )
    if candidates is None or failed or windows < 3:
        return Check(
            cid,
            Status.WARN,
            ", ".join(parts),
            expected,
            "see the notes: the loaders that failed, and why (bench.shm for /dev/shm)"
            if failed
            else "see the phases' notes",
        )
    return Check(cid, Status.OK, ", ".join(parts), expected)


def _waits_at_the_cap(f: VerdictFacts) -> bool:
    """An I/O-bound loader whose winner is the most workers tried, fewer than the tuner predicted."""
    return (
        f.cpu_bound is False
        and None not in (f.workers, f.worker_cap, f.predicted_workers)
        and f.workers >= f.worker_cap
        and f.predicted_workers > f.worker_cap
    )


def efficiency_check(m: Mapping[str, Optional[float]], f: VerdictFacts, t: Thresholds) -> Check:
    cid = "bench.efficiency"
    eff, over = m.get("efficiency"), m.get("tuned_over_ceiling")
    if eff is None and over is not None:
        return Check(
            cid,
            Status.INCONCLUSIVE,
            f"measurement error: tuned {m.get('tuned_samples_per_s') or 0:.0f} above the ceiling "
            f"{m.get('ceiling_samples_per_s') or 0:.0f} samples/s ({over:.2f}x, beyond the noise)",
            f">= {t.efficiency_pass:.2f} (warn {t.efficiency_warn:.2f}); tuned <= ceiling",
            "the host's load changed between the ceiling and the tuned windows: rerun on a quiet host",
            "a loader cannot beat its own step on a resident batch; no efficiency is reported",
        )
    if eff is None:
        return Check(cid, Status.SKIP, "not measured", "", detail="needs the ceiling and tuned phases")
    status = _band(eff, t.efficiency_pass, t.efficiency_warn)
    observed = (
        f"{eff:.2f} (tuned {m.get('tuned_samples_per_s') or 0:.0f} "
        f"/ ceiling {m.get('ceiling_samples_per_s') or 0:.0f} samples/s)"
    )
    expected = f">= {t.efficiency_pass:.2f} (warn {t.efficiency_warn:.2f})"
    cores = m.get("cores_per_device_needed")
    remedy = ""
    if status is not Status.OK:
        remedy = (
            f"the loader needs ~{cores:.1f} cores at the ceiling rate: give the job more CPUs, "
            "cut per-sample work (pre-resized, packed samples), or decode on the GPU (DALI)"
            if cores
            else "give the loader more CPUs"
        )
        if _waits_at_the_cap(f):
            remedy = (
                f"the loader waits on I/O, not on CPU, and the winner sits at the tuner's cap of "
                f"{f.worker_cap} workers (predicted {f.predicted_workers}): try --max-workers "
                f"{f.predicted_workers} (tune_loader: max_workers=), since a waiting worker needs no core "
                "(each needs RAM and /dev/shm), or read from faster storage"
            )
    detail = "differential method: 1 - efficiency is the data-stall fraction"
    if f.device_type != "cuda" and status is Status.FAIL:
        status = Status.WARN
        detail = (
            "CPU run: the step and the loader workers share the cores, so a low figure is expected; never a fail here"
        )
    return Check(cid, status, observed, expected, remedy, detail)


def device_idle_check(m: Mapping[str, Optional[float]], f: VerdictFacts, t: Thresholds) -> Check:
    cid = "bench.stall_device_idle"
    idle = m.get("stall_device_idle_pct")
    if idle is None:
        return Check(cid, Status.SKIP, "not measured", "", detail="CUDA events only" if f.device_type != "cuda" else "")
    status = _band(idle / 100.0, t.device_idle_pass, t.device_idle_warn, higher_is_better=False)
    diff = m.get("stall_differential_pct")
    detail = "gaps between consecutive steps' GPU work / wall time"
    if diff is not None and diff > 2 * idle + 5:
        detail += f"; differential stall {diff:.0f}% >> device-idle: the workers slow the step itself (CPU contention)"
    return Check(
        cid,
        status,
        f"{idle:.1f}%",
        f"<= {t.device_idle_pass:.0%} (warn {t.device_idle_warn:.0%})",
        "" if status is Status.OK else "more loader workers or cheaper samples (see bench.efficiency)",
        detail,
    )


def speedup_check(m: Mapping[str, Optional[float]], t: Thresholds) -> Check:
    cid = "bench.speedup"
    speedup, predicted = m.get("speedup"), m.get("predicted_speedup")
    if speedup is None:
        return Check(cid, Status.SKIP, "not measured", "", detail="needs the naive and tuned phases")
    observed = f"{speedup:.2f}x over naive"
    if predicted:
        observed += f" (predicted {predicted:.2f}x)"
    expected = f">= {t.speedup_pass_fraction:.2f} x predicted; tuned >= naive"
    noise = m.get("speedup_noise") or t.noise_floor_min
    if speedup < 1.0 - noise:
        return Check(
            cid,
            Status.FAIL,
            observed,
            expected,
            "the tuned loader is slower than num_workers=0: check shm, worker start-up and CPU contention",
            f"tuned < naive by more than the noise ({noise:.0%})",
        )
    if speedup < 1.0:
        return Check(
            cid,
            Status.WARN,
            observed,
            expected,
            "no gain over num_workers=0: see bench.efficiency",
            f"tuned below naive, but within the noise ({noise:.0%})",
        )
    if predicted and speedup < t.speedup_pass_fraction * predicted:
        return Check(
            cid,
            Status.WARN,
            observed,
            expected,
            "workers deliver less than their measured cost predicts: look for thread oversubscription "
            "(OMP_NUM_THREADS=1 in workers) or a slow collate",
            "predicted = min(ceiling, W / l, CPUs / (c + step CPU)) / naive",
        )
    return Check(
        cid, Status.OK, observed, expected, detail="predicted = min(ceiling, W / l, CPUs / (c + step CPU)) / naive"
    )


def util_check(s: SamplerReport, f: VerdictFacts, t: Thresholds, trained: bool = True) -> Check:
    """NVML's utilization over the run; judged only when a tuned loader trained (an idle GPU during
    set-up or a skipped tune says nothing about the input pipeline)."""
    cid = "bench.nvml_util"
    g = s.gpu
    if not trained:
        return Check(
            cid, Status.SKIP, "no tuned windows ran", "", detail="see bench.tuned for what the budget left out"
        )
    if g is None or not g.count or g.p95 is None or g.p5 is None:
        return Check(
            cid, Status.SKIP, "no samples", "", detail=s.reason or ("CPU run" if f.device_type != "cuda" else "")
        )
    observed = f"mean {g.mean:.0f}%, p5 {g.p5:.0f}%, p50 {g.p50:.0f}%, p95 {g.p95:.0f}% ({g.count} samples)"
    expected = f"p95 >= {t.util_p95_pass:.0f}%, p5 >= {t.util_p5_pass:.0f}%"
    detail = f"{g.source}; supporting evidence only: 'a kernel ran during the sample period'"
    if g.p95 < t.util_p95_pass:
        return Check(
            cid,
            Status.FAIL,
            observed,
            expected,
            "the GPU idles: see bench.efficiency and bench.stall_device_idle",
            detail,
        )
    if g.p5 < t.util_p5_pass:
        return Check(cid, Status.WARN, observed, expected, "idle bursts: a deeper prefetch or more workers", detail)
    return Check(cid, Status.OK, observed, expected, detail=detail)


def sm_active_check(s: SamplerReport, t: Thresholds) -> Check:
    cid = "bench.gpm_sm_active"
    if s.gpm_sm_active is None:
        return Check(cid, Status.SKIP, "not measured", "", detail=s.gpm_reason or "CPU run")
    value = s.gpm_sm_active
    expected = f">= {t.sm_active_pass:.2f} (warn only)"
    if value >= t.sm_active_pass:
        return Check(cid, Status.OK, f"{value:.2f}", expected, detail="necessary, not sufficient (NVIDIA)")
    why = "likely ineffective GPU use" if value < t.sm_active_warn else "below the 0.8 NVIDIA calls necessary"
    return Check(
        cid,
        Status.WARN,
        f"{value:.2f}",
        expected,
        "a larger batch, AMP/bf16, or a bigger model keeps more SMs busy",
        why,
    )


def pss_check(m: Mapping[str, Optional[float]], t: Thresholds) -> Check:
    cid = "bench.worker_pss"
    growth = m.get("worker_pss_growth_pct")
    if growth is None:
        return Check(
            cid, Status.SKIP, "not measured", "", detail="no loader workers, or /proc/PID/smaps_rollup unavailable"
        )
    status = _band(growth / 100.0, t.pss_growth_pass, t.pss_growth_warn, higher_is_better=False)
    return Check(
        cid,
        status,
        f"{growth:+.1f}% over the tuned windows",
        f"< {t.pss_growth_pass:.0%} (warn {t.pss_growth_warn:.0%})",
        "" if status is Status.OK else "keep the dataset index in numpy/Arrow arrays, not lists/dicts (PyTorch #13246)",
    )


def scaling_check(m: Mapping[str, Optional[float]], t: Thresholds) -> Check:
    cid = "bench.loader_scaling"
    eff = m.get("loader_scaling_efficiency")
    if eff is None:
        only_one = m.get("loader_w1_samples_per_s") is not None
        return Check(
            cid,
            Status.SKIP,
            "only S(1) measured" if only_one else "not measured",
            "",
            detail="needs S(1) and S(W) for some W >= 2 (workers capped below 2, or no time); CPU-only runs measure it",
        )
    workers = m.get("loader_scaling_workers")
    status = Status.OK if eff >= t.loader_scaling_pass else Status.WARN
    return Check(
        cid,
        status,
        f"S({workers:.0f}) / ({workers:.0f} x S(1)) = {eff:.2f}",
        f">= {t.loader_scaling_pass:.2f} at W = min(8, CPUs - 1), at least 2",
        ""
        if status is Status.OK
        else "suspect thread oversubscription: set OMP_NUM_THREADS=1 / cv2.setNumThreads(0) in workers",
        "S(W): loader-only samples/s with W workers; below 1 / W, W workers deliver less than one",
    )
