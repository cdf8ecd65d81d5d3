"""Pure rules: a run's metrics and facts against the thresholds -> `Check`s, in report order
(docs/benchmark.md, "Verdicts").

A figure that was not measured (no GPU, no workers, interrupted) is a `skip` with the reason. When
the rates cannot carry a verdict (a saturated host, windows shorter than the prefetched batches, too
much noise, a re-measure that disagrees) the rate verdicts become `inconclusive`, with what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

from bootstrap.bench.config import Thresholds
from bootstrap.bench.results import Metrics, SamplerReport
from bootstrap.report import Check, Status

# Dense (non-sparse) BF16 tensor TFLOP/s by SKU name fragment, most specific first: H100/H200 SXM 989
# (MAMF), H100 PCIe 756 and A100 312 from NVIDIA's datasheets.
DENSE_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H200", 989.0), ("GH200", 989.0), ("H100", 989.0), ("A100", 312.0))
PCIE_GB_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}  # after line encoding
RATE_CHECKS = (
    "bench.efficiency",
    "bench.stall_device_idle",
    "bench.speedup",
    "bench.nvml_util",
    "bench.gpm_sm_active",
    "bench.loader_scaling",
)
# A tuned window must outlast the batches the workers queued before it (workers x prefetch), which it
# takes at the step's pace however slow the loader is, by this many steps of the loader's own.
STEPS_PAST_PREFETCH = 3
MIN_RECHECK_STEPS = 6  # fewer, and the re-measure's own noise is unknown (its CV needs steps in each third)


@dataclass(frozen=True)
class VerdictFacts:
    """What the rules need besides the metrics."""

    device_type: str  # 'cuda' | 'cpu' | 'mps'
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
    left_out: str = ""  # what of the tune the budget cut short or left out


def evaluate(m: Metrics, facts: VerdictFacts, sampler: SamplerReport, t: Thresholds) -> List[Check]:
    """Every bench verdict, in report order."""
    checks = [
        shm_check(facts, t),
        affinity_check(facts),
        start_method_check(facts, m),
        nofile_check(facts),
        matmul_check(m, facts, t),
        h2d_check(m, facts, t),
        tuned_check(m, facts),
        recheck_check(m, t),
        efficiency_check(m, facts, t),
        device_idle_check(m, facts, t),
        speedup_check(m, t),
        util_check(sampler, facts, t, trained=m.tuned_samples_per_s is not None),
        sm_active_check(sampler, t),
        pss_check(m, t),
        scaling_check(m, t),
    ]
    return undecided(checks, inconclusive_reason(m, t))


def _mib(value: float) -> str:
    return f"{value:.0f} MiB" if value >= 10 else f"{value:.2f} MiB"


def _band(value: float, ok: float, warn: float, higher_is_better: bool = True) -> Status:
    if not higher_is_better:
        value, ok, warn = -value, -ok, -warn
    return Status.OK if value >= ok else (Status.WARN if value >= warn else Status.FAIL)


def _unless_ok(status: Status, remedy: str) -> str:
    return "" if status is Status.OK else remedy


def shm_check(f: VerdictFacts, t: Thresholds) -> Check:
    cid, need = "bench.shm", f.shm_need_mib or 0.0
    expected = f">= {t.shm_pass_factor:g} x need ({_mib(t.shm_pass_factor * need)})"
    detail = "need = workers x prefetch_factor x batch bytes (PyTorch #5040)"
    free = "unknown" if f.shm_free_mib is None else f"{_mib(f.shm_free_mib)} free"
    if f.shm_failure:
        remedy = _shm_remedy(max(need, f.shm_free_mib or 0.0, 32.0), t)
        return Check(
            cid, Status.FAIL, f"{free}, need {_mib(need)}; a loader died: {f.shm_failure}", expected, remedy, detail
        )
    if f.shm_free_mib is None:
        return Check(cid, Status.SKIP, "unknown", "", detail="/dev/shm could not be read")
    observed = f"{free}, need {_mib(need)}" + (f" ({f.local_ranks} local ranks)" if f.local_ranks > 1 else "")
    if need <= 0:
        return Check(cid, Status.OK, observed, expected, detail="no loader workers: batches do not pass through shm")
    status = _band(f.shm_free_mib / need, t.shm_pass_factor, t.shm_warn_factor)
    return Check(cid, status, observed, expected, _unless_ok(status, _shm_remedy(need, t)), detail)


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
    observed = f"{f.cpus} of {f.cpus_total or '?'} CPUs usable" + (f", {f.cpus} per rank" if f.local_ranks > 1 else "")
    if f.workers and f.cpu_bound and f.workers > f.cpus:
        why = "PyTorch warns past sched_getaffinity (#46867); throughput falls past the core count"
        observed += f", {f.workers} CPU-bound workers"
        return Check(
            cid,
            Status.WARN,
            observed,
            "CPU-bound workers <= usable CPUs",
            f"cap the workers: --max-workers {f.cpus}",
            why,
        )
    return Check(cid, Status.OK, observed, "workers fit the usable CPUs")


def start_method_check(f: VerdictFacts, m: Metrics) -> Check:
    origin = "set by the program" if f.start_method_explicit else "platform default"
    observed = f"{f.start_method or 'unknown'} ({origin})"
    if m.time_to_first_batch_s is not None:
        observed += f", first batch {m.time_to_first_batch_s:.2f} s"
    detail = "Python 3.14 defaults to forkserver on Linux; start-up time is in the first batch"
    return Check("bench.start_method", Status.OK, observed, "recorded", detail=detail)


def nofile_check(f: VerdictFacts) -> Check:
    """doctor's `host.nofile` rule (its remedy knows when the hard limit must be raised first), as bench.nofile."""
    from bootstrap.compat.facts import HostFacts
    from bootstrap.compat.host import LoaderNeeds
    from bootstrap.compat.host import nofile_check as host_nofile_check

    if f.nofile_soft is None:
        return Check("bench.nofile", Status.SKIP, "unknown", "", detail="no resource limits on this OS")
    check = host_nofile_check(HostFacts(nofile_soft=f.nofile_soft, nofile_hard=f.nofile_hard), LoaderNeeds())
    return replace(check, id="bench.nofile")


def dense_peak_tflops(gpu_name: str) -> Optional[float]:
    return next((peak for fragment, peak in DENSE_BF16_TFLOPS if fragment.lower() in gpu_name.lower()), None)


def matmul_check(m: Metrics, f: VerdictFacts, t: Thresholds) -> Check:
    cid, tflops = "bench.matmul", m.matmul_tflops
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
    status = _band(tflops / peak, t.matmul_pass, t.matmul_warn)
    remedy = "check clocks and power (`nvidia-smi -q -d CLOCK,POWER,PERFORMANCE`), then `dcgmi diag -r 2`"
    observed, expected = (
        f"{tflops:.0f} TFLOP/s = {tflops / peak:.0%} of {peak:.0f} dense",
        f">= {t.matmul_pass:.0%} (warn {t.matmul_warn:.0%})",
    )
    return Check(cid, status, observed, expected, _unless_ok(status, remedy), "MAMF reaches 80-87% on A100/H100")


def h2d_check(m: Metrics, f: VerdictFacts, t: Thresholds) -> Check:
    cid, pinned = "bench.h2d", m.h2d_pinned_gb_per_s
    if pinned is None:
        return Check(cid, Status.SKIP, "not measured", "", detail="CUDA only")
    if f.pcie is None:
        return Check(cid, Status.SKIP, f"{pinned:.1f} GB/s pinned", "", detail="PCIe link unknown (NVML)")
    gen, width, max_gen, max_width = f.pcie
    link = PCIE_GB_PER_LANE.get(gen, 0.0) * width
    observed = f"{pinned:.1f} GB/s pinned on PCIe Gen{gen} x{width} ({link:.1f} GB/s)"
    if gen < max_gen or width < max_width:
        remedy = "reseat the GPU / check BIOS PCIe settings; `nvidia-smi -q -d PCIE`"
        observed += f", link can do Gen{max_gen} x{max_width}"
        return Check(
            cid, Status.FAIL, observed, "link at its maximum under load", remedy, "downtrained link (DCGM `pcie`)"
        )
    ratio = pinned / link if link else 0.0
    status = _band(ratio, t.h2d_pass, t.h2d_warn)
    remedy = "check NUMA placement (`nvidia-smi topo -m`) and IOMMU settings"
    expected = f">= {t.h2d_pass:.0%} of link (warn {t.h2d_warn:.0%})"
    return Check(cid, status, observed + f" = {ratio:.0%}", expected, _unless_ok(status, remedy))


def tuned_check(m: Metrics, f: VerdictFacts) -> Check:
    """Did the budget pay for a tune worth the name: every worker candidate measured, all tuned windows?"""
    cid, expected = "bench.tuned", "every candidate measured and 3 tuned windows, within the budget"
    if f.partial:
        return Check(cid, Status.SKIP, "interrupted", expected)
    candidates, measured = m.tune_candidates, m.tune_candidates_measured
    failed, windows, needed = m.tune_candidates_failed or 0, m.tuned_windows or 0, m.budget_needed_s
    parts = [
        "no worker search" if candidates is None else f"{measured or 0:.0f} of {candidates:.0f} candidates measured"
    ]
    parts += [f"{failed:.0f} failed"] if failed else []
    parts += [f"{m.tune_knobs_tried or 0:.0f} of {m.tune_knobs:.0f} knobs tried"] if m.tune_knobs else []
    parts.append(f"{windows:.0f} of 3 tuned windows")
    rerun = f"rerun with --budget {needed:.0f} (or more)" if needed else "rerun with a larger --budget"
    if not (measured or windows or m.naive_samples_per_s):
        # Nothing fed the step: no verdict on the pipeline can be given, and a pass would say otherwise.
        observed = "no loader was measured with the step: the budget ended first"
        return Check(
            cid,
            Status.FAIL,
            observed,
            expected,
            rerun,
            "slow samples? a smaller --batch-size makes each measurement shorter",
        )
    if f.left_out and needed is not None:
        observed = f"budget too small: ~{needed:.0f} s needed, {f.budget_s or 0:g} s given; " + ", ".join(parts)
        detail = f"left out: {f.left_out}; the winner is the best of what was measured, not a full tune"
        return Check(cid, Status.WARN, observed, expected, rerun, detail)
    if candidates is None or failed or windows < 3:
        remedy = (
            "see the notes: the loaders that failed, and why (bench.shm for /dev/shm)"
            if failed
            else "see the phases' notes"
        )
        return Check(cid, Status.WARN, ", ".join(parts), expected, remedy)
    return Check(cid, Status.OK, ", ".join(parts), expected)


def recheck_check(m: Metrics, t: Thresholds) -> Check:
    """The tuned figure against an independent re-measure of the same config (a fresh loader)."""
    cid, tuned, again = "bench.recheck", m.tuned_samples_per_s, m.recheck_samples_per_s
    if tuned is None or again is None:
        return Check(cid, Status.SKIP, "not measured", "", detail="needs the tuned windows and time for one more")
    noise, gap = m.recheck_noise or t.noise_floor_min, again / tuned - 1.0
    observed = f"tuned {tuned:.0f}, re-measured {again:.0f} samples/s ({gap:+.1%})"
    expected = f"within the measured noise ({noise:.0%}) and {t.noise_inconclusive:.0%}"
    if m.recheck_steps is not None and m.recheck_steps < MIN_RECHECK_STEPS:
        return Check(
            cid,
            Status.SKIP,
            f"{observed}, over {m.recheck_steps:.0f} steps: too few to confirm or refute",
            expected,
            "a longer --budget leaves the re-measure a full window",
            "the budget left the re-measure less than a window (a slow first batch of a fresh loader?)",
        )
    detail = "a fresh loader of the winner, after the tuned windows"
    if abs(gap) <= min(noise, t.noise_inconclusive):
        return Check(cid, Status.OK, observed, expected, detail=detail)
    # Agreement inside a noise wider than a verdict can stand on is not agreement (`inconclusive_reason`).
    why = "the two disagree beyond the noise" if abs(gap) > noise else f"they agree only within a noise of {noise:.0%}"
    remedy = "the host's load changed during the run: rerun on a quiet host, or with a longer --budget"
    return Check(
        cid, Status.INCONCLUSIVE, f"{observed}; {why}", expected, remedy, f"{detail}; the rates are not repeatable"
    )


def efficiency_check(m: Metrics, f: VerdictFacts, t: Thresholds) -> Check:
    cid, eff, over = "bench.efficiency", m.efficiency, m.tuned_over_ceiling
    expected = f">= {t.efficiency_pass:.2f} (warn {t.efficiency_warn:.2f})"
    tuned, ceiling = m.tuned_samples_per_s or 0, m.ceiling_samples_per_s or 0
    if eff is None and over is not None:
        return Check(
            cid,
            Status.INCONCLUSIVE,
            f"measurement error: tuned {tuned:.0f} above the ceiling {ceiling:.0f} samples/s ({over:.2f}x, beyond "
            "the noise)",
            f"{expected}; tuned <= ceiling",
            "the host's load changed between the ceiling and the tuned windows: rerun on a quiet host",
            "a loader cannot beat its own step on a resident batch; no efficiency is reported",
        )
    if eff is None:
        return Check(cid, Status.SKIP, "not measured", "", detail="needs the ceiling and tuned phases")
    status = _band(eff, t.efficiency_pass, t.efficiency_warn)
    cores, remedy = m.cores_per_device_needed, ""
    if status is not Status.OK:
        remedy = "give the loader more CPUs"
        if cores:
            remedy = (
                f"the loader needs ~{cores:.1f} cores at the ceiling rate: give the job more CPUs, "
                "cut per-sample work (pre-resized, packed samples), or decode on the GPU (DALI)"
            )
        if _waits_at_the_cap(f):
            remedy = (
                f"the loader waits on I/O, not on CPU, and the winner sits at the tuner's cap of {f.worker_cap} "
                f"workers (predicted {f.predicted_workers}): try --max-workers {f.predicted_workers} (tune_loader: "
                "max_workers=), since a waiting worker needs no core (each needs RAM and /dev/shm), or read from "
                "faster storage"
            )
    detail = "differential method: 1 - efficiency is the data-stall fraction"
    if f.device_type != "cuda" and status is Status.FAIL:
        status = Status.WARN
        detail = (
            "CPU run: the step and the loader workers share the cores, so a low figure is expected; never a fail here"
        )
    observed = f"{eff:.2f} (tuned {tuned:.0f} / ceiling {ceiling:.0f} samples/s)"
    return Check(cid, status, observed, expected, remedy, detail)


def _waits_at_the_cap(f: VerdictFacts) -> bool:
    """An I/O-bound loader whose winner is the most workers tried, fewer than the tuner predicted."""
    if f.cpu_bound is not False or f.workers is None or f.worker_cap is None or f.predicted_workers is None:
        return False
    return f.workers >= f.worker_cap and f.predicted_workers > f.worker_cap


def device_idle_check(m: Metrics, f: VerdictFacts, t: Thresholds) -> Check:
    cid, idle = "bench.stall_device_idle", m.stall_device_idle_pct
    if idle is None:
        return Check(cid, Status.SKIP, "not measured", "", detail="CUDA events only" if f.device_type != "cuda" else "")
    status = _band(idle / 100.0, t.device_idle_pass, t.device_idle_warn, higher_is_better=False)
    diff = m.stall_differential_pct
    detail = "gaps between consecutive steps' GPU work / wall time"
    if diff is not None and diff > 2 * idle + 5:
        detail += f"; differential stall {diff:.0f}% >> device-idle: the workers slow the step itself (CPU contention)"
    remedy = "more loader workers or cheaper samples (see bench.efficiency)"
    expected = f"<= {t.device_idle_pass:.0%} (warn {t.device_idle_warn:.0%})"
    return Check(cid, status, f"{idle:.1f}%", expected, _unless_ok(status, remedy), detail)


def speedup_check(m: Metrics, t: Thresholds) -> Check:
    cid, speedup, predicted = "bench.speedup", m.speedup, m.predicted_speedup
    if speedup is None:
        return Check(cid, Status.SKIP, "not measured", "", detail="needs the naive and tuned phases")
    observed = f"{speedup:.2f}x over naive" + (f" (predicted {predicted:.2f}x)" if predicted else "")
    expected = f">= {t.speedup_pass_fraction:.2f} x predicted; tuned >= naive"
    noise = m.speedup_noise or t.noise_floor_min
    basis = "predicted = min(ceiling, W / l, CPUs / (c + step CPU)) / naive"
    if speedup < 1.0 - noise:
        remedy = "the tuned loader is slower than num_workers=0: check shm, worker start-up and CPU contention"
        return Check(
            cid, Status.FAIL, observed, expected, remedy, f"tuned < naive by more than the noise ({noise:.0%})"
        )
    if speedup < 1.0:
        remedy = "no gain over num_workers=0: see bench.efficiency"
        return Check(
            cid, Status.WARN, observed, expected, remedy, f"tuned below naive, but within the noise ({noise:.0%})"
        )
    if predicted and speedup < t.speedup_pass_fraction * predicted:
        remedy = (
            "workers deliver less than their measured cost predicts: look for thread oversubscription "
            "(OMP_NUM_THREADS=1 in workers) or a slow collate"
        )
        return Check(cid, Status.WARN, observed, expected, remedy, basis)
    return Check(cid, Status.OK, observed, expected, detail=basis)


def util_check(s: SamplerReport, f: VerdictFacts, t: Thresholds, trained: bool = True) -> Check:
    """NVML's utilization over the tuned windows; judged only when a tuned loader trained (an idle GPU
    during set-up or a skipped tune says nothing of the input pipeline)."""
    cid, g = "bench.nvml_util", s.gpu
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
    cid, value = "bench.gpm_sm_active", s.gpm_sm_active
    if value is None:
        return Check(cid, Status.SKIP, "not measured", "", detail=s.gpm_reason or "CPU run")
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


def pss_check(m: Metrics, t: Thresholds) -> Check:
    cid, growth = "bench.worker_pss", m.worker_pss_growth_pct
    if growth is None:
        return Check(
            cid, Status.SKIP, "not measured", "", detail="no loader workers, or /proc/PID/smaps_rollup unavailable"
        )
    status = _band(growth / 100.0, t.pss_growth_pass, t.pss_growth_warn, higher_is_better=False)
    remedy = "keep the dataset index in numpy/Arrow arrays, not lists/dicts (PyTorch #13246)"
    expected = f"< {t.pss_growth_pass:.0%} (warn {t.pss_growth_warn:.0%})"
    return Check(cid, status, f"{growth:+.1f}% over the tuned windows", expected, _unless_ok(status, remedy))


def scaling_check(m: Metrics, t: Thresholds) -> Check:
    cid, eff = "bench.loader_scaling", m.loader_scaling_efficiency
    if eff is None:
        detail = "needs S(1) and S(W) for some W >= 2 (workers capped below 2, or no time); CPU-only runs measure it"
        return Check(
            cid, Status.SKIP, "only S(1) measured" if 1 in m.loader_scaling else "not measured", "", detail=detail
        )
    w = m.loader_scaling_workers or 0.0
    status = Status.OK if eff >= t.loader_scaling_pass else Status.WARN
    remedy = "suspect thread oversubscription: set OMP_NUM_THREADS=1 / cv2.setNumThreads(0) in workers"
    return Check(
        cid,
        status,
        f"S({w:.0f}) / ({w:.0f} x S(1)) = {eff:.2f}",
        f">= {t.loader_scaling_pass:.2f} at W = min(8, CPUs - 1), at least 2",
        _unless_ok(status, remedy),
        "S(W): loader-only samples/s with W workers; below 1 / W, W workers deliver less than one",
    )


def inconclusive_reason(m: Metrics, t: Thresholds) -> Tuple[str, str]:
    """(why, what to do) when the rates cannot separate pass from fail; ('', '') when they can."""
    busy, steps, prefetched = m.host_busy_before_pct, m.tuned_window_steps, m.tuned_prefetched_batches
    if busy is not None and busy >= t.host_saturated_pct:
        return (
            f"host saturated: {busy:.0f}% CPU busy from other processes before the run",
            "rerun when the host is quiet (`uptime`, `top`: load below the CPU count), or on a node of its own",
        )
    if steps is not None and prefetched and steps < prefetched + STEPS_PAST_PREFETCH:
        return (
            f"windows too short: a tuned window ran {steps:.0f} steps, and the workers had up to {prefetched:.0f} "
            "batches prefetched, which it drains faster than the loader makes them",
            "rerun with a longer --budget for longer windows",
        )
    if m.tuned_spread_pct is not None and m.tuned_spread_pct / 100.0 > t.noise_inconclusive:
        return (
            f"too noisy: the tuned windows spread {m.tuned_spread_pct:.0f}% (> {t.noise_inconclusive:.0%})",
            "rerun on a quieter host, or with a longer --budget for longer windows",
        )
    gap = m.recheck_gap_pct
    if gap is not None and abs(gap) / 100.0 > t.noise_inconclusive:
        return (
            f"not repeatable: an independent re-measure of the winner differs by {gap:+.0f}% "
            f"(> {t.noise_inconclusive:.0%})",
            "rerun on a quieter host, or with a longer --budget",
        )
    return "", ""


def undecided(checks: List[Check], reason: Tuple[str, str]) -> List[Check]:
    """The rate checks (RATE_CHECKS) that judged ok/warn/fail turned `inconclusive` for `reason`."""
    why, remedy = reason
    if not why:
        return checks
    judged = (Status.OK, Status.WARN, Status.FAIL)
    return [
        replace(
            c,
            status=Status.INCONCLUSIVE,
            observed=f"{c.observed}; {why}",
            remedy=remedy,
            detail=f"would be {c.status.value}; {c.detail}".rstrip("; "),
        )
        if c.id in RATE_CHECKS and c.status in judged
        else c
        for c in checks
    ]
