"""Pure rules: a run's metrics and facts against the thresholds -> `Check`s, in report order.

docs/benchmark.md, "Verdicts", gives each rule, its thresholds, and when the rates are `inconclusive`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from bootstrap.bench.config import Thresholds, option
from bootstrap.bench.results import Metrics, SamplerReport
from bootstrap.report import Check, Status

# Dense (non-sparse) BF16 tensor TFLOP/s by SKU name fragment, most specific first: H100/H200 SXM 989
# (MAMF), H100 PCIe 756 and A100 312 from NVIDIA's datasheets.
DENSE_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H200", 989.0), ("GH200", 989.0), ("H100", 989.0), ("A100", 312.0))
PCIE_GB_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}  # after line encoding
# The checks that judge a rate: `inconclusive` when the rates cannot carry a verdict (`inconclusive_reason`).
RATE_CHECKS = (
    "bench.efficiency",
    "bench.stall_device_idle",
    "bench.speedup",
    "bench.nvml_util",
    "bench.gpm_sm_active",
    "bench.loader_scaling",
)
STEPS_PAST_PREFETCH = 3  # a tuned window outlasts the batches its workers prefetched by this many steps
MIN_RECHECK_STEPS = 6  # fewer, and the re-measure's own noise is unknown (its CV needs steps in each third)

CPU_RUN_EFFICIENCY = (
    "CPU run: the step and the loader workers share the cores, so a low figure is expected; never a fail here"
)
OVERSUBSCRIBED_WORKERS = (
    "workers deliver less than their measured cost predicts: look for thread oversubscription "
    "(OMP_NUM_THREADS=1 in workers) or a slow collate"
)
SCALING_UNMEASURED = (
    "needs S(1) and S(W) for some W >= 2 (workers capped below 2, or no time); CPU-only runs measure it"
)
SCALING_DETAIL = "S(W): loader-only samples/s with W workers; below 1 / W, W workers deliver less than one"


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
    pcie: Optional[tuple[int, int, int, int]] = None  # (current gen, current width, max gen, max width)
    local_ranks: int = 1
    budget_s: Optional[float] = None
    partial: bool = False  # interrupted
    left_out: str = ""  # what of the tune the budget cut short or left out
    script: bool = False  # the run came from tune_loader: remedies name its keywords, not the CLI's flags


def quiet_host(script: bool = False) -> str:
    return f"rerun on a quieter host, or with a longer {option('budget_s', script=script)}"


def evaluate(m: Metrics, facts: VerdictFacts, sampler: SamplerReport, t: Thresholds) -> list[Check]:
    """Every bench verdict, in report order."""
    checks = [
        shm_check(facts, t),
        affinity_check(facts),
        start_method_check(facts, m),
        nofile_check(facts),
        matmul_check(m, facts, t),
        h2d_check(m, facts, t),
        tuned_check(m, facts),
        recheck_check(m, t, script=facts.script),
        efficiency_check(m, facts, t),
        device_idle_check(m, facts, t),
        speedup_check(m, t),
        util_check(sampler, facts, t, trained=m.tuned_samples_per_s is not None),
        sm_active_check(sampler, t),
        pss_check(m, t),
        scaling_check(m, t),
    ]
    return undecided(checks, inconclusive_reason(m, t, script=facts.script))


def _skip(check_id: str, observed: str = "not measured", detail: str = "") -> Check:
    return Check(check_id, Status.SKIP, observed, "", detail=detail)


def _band(value: float, ok: float, warn: float, higher_is_better: bool = True) -> Status:
    if not higher_is_better:
        value, ok, warn = -value, -ok, -warn
    if value >= ok:
        return Status.OK
    return Status.WARN if value >= warn else Status.FAIL


def _judged(check_id: str, status: Status, observed: str, expected: str, remedy: str, detail: str = "") -> Check:
    """A verdict whose remedy is given unless it is ok."""
    return Check(check_id, status, observed, expected, "" if status is Status.OK else remedy, detail)


def _mib(value: float) -> str:
    return f"{value:.0f} MiB" if value >= 10 else f"{value:.2f} MiB"


def shm_check(f: VerdictFacts, t: Thresholds) -> Check:
    check_id, need = "bench.shm", f.shm_need_mib or 0.0
    expected = f">= {t.shm_pass_factor:g} x need ({_mib(t.shm_pass_factor * need)})"
    detail = "need = workers x prefetch_factor x batch bytes (PyTorch #5040)"
    free = "unknown" if f.shm_free_mib is None else f"{_mib(f.shm_free_mib)} free"
    observed = f"{free}, need {_mib(need)}"
    if f.shm_failure:
        remedy = _shm_remedy(max(need, f.shm_free_mib or 0.0, 32.0), t, f.script)
        return Check(check_id, Status.FAIL, f"{observed}; a loader died: {f.shm_failure}", expected, remedy, detail)
    if f.shm_free_mib is None:
        return _skip(check_id, "unknown", "/dev/shm could not be read")
    if f.local_ranks > 1:
        observed += f" ({f.local_ranks} local ranks)"
    if need <= 0:
        unused = "no loader workers: batches do not pass through shm"
        return Check(check_id, Status.OK, observed, expected, detail=unused)
    status = _band(f.shm_free_mib / need, t.shm_pass_factor, t.shm_warn_factor)
    return _judged(check_id, status, observed, expected, _shm_remedy(need, t, f.script), detail)


def _shm_remedy(need_mib: float, t: Thresholds, script: bool = False) -> str:
    size = max(64, int(need_mib * t.shm_pass_factor / 64 + 1) * 64)
    fewer = option("max_workers", script=script)
    return (
        f"give /dev/shm {size} MiB or more: `docker run --shm-size={size}m ...` (or `--ipc=host`), "
        f"`sudo mount -o remount,size={size}m /dev/shm` on a host; or use fewer workers ({fewer}) "
        "or a smaller batch (loader workers die with 'Bus error' when shm runs out)"
    )


def affinity_check(f: VerdictFacts) -> Check:
    check_id = "bench.affinity"
    if f.cpus is None:
        return _skip(check_id, "unknown", "CPU affinity unavailable")
    observed = f"{f.cpus} of {f.cpus_total or '?'} CPUs usable"
    if f.local_ranks > 1:
        observed += f", {f.cpus} per rank"
    if not (f.workers and f.cpu_bound and f.workers > f.cpus):
        return Check(check_id, Status.OK, observed, "workers fit the usable CPUs")
    observed += f", {f.workers} CPU-bound workers"
    expected = "CPU-bound workers <= usable CPUs"
    detail = "PyTorch warns past sched_getaffinity (#46867); throughput falls past the core count"
    remedy = f"cap the workers: {option('max_workers', f.cpus, f.script)}"
    return Check(check_id, Status.WARN, observed, expected, remedy, detail)


def start_method_check(f: VerdictFacts, m: Metrics) -> Check:
    origin = "set by the program" if f.start_method_explicit else "platform default"
    observed = f"{f.start_method or 'unknown'} ({origin})"
    if m.time_to_first_batch_s is not None:
        observed += f", first batch {m.time_to_first_batch_s:.2f} s"
    detail = "Python 3.14 defaults to forkserver on Linux; start-up time is in the first batch"
    return Check("bench.start_method", Status.OK, observed, "recorded", detail=detail)


def nofile_check(f: VerdictFacts) -> Check:
    """doctor's `host.nofile` rule as bench.nofile (its remedy knows when to raise the hard limit first)."""
    from bootstrap.compat.facts import HostFacts
    from bootstrap.compat.host import LoaderNeeds
    from bootstrap.compat.host import nofile_check as host_nofile_check

    if f.nofile_soft is None:
        return _skip("bench.nofile", "unknown", "no resource limits on this OS")
    check = host_nofile_check(HostFacts(nofile_soft=f.nofile_soft, nofile_hard=f.nofile_hard), LoaderNeeds())
    return replace(check, id="bench.nofile")


def dense_peak_tflops(gpu_name: str) -> Optional[float]:
    return next((peak for fragment, peak in DENSE_BF16_TFLOPS if fragment.lower() in gpu_name.lower()), None)


def matmul_check(m: Metrics, f: VerdictFacts, t: Thresholds) -> Check:
    check_id, tflops = "bench.matmul", m.matmul_tflops
    if tflops is None:
        return _skip(check_id)
    if f.device_type != "cuda":
        return _skip(check_id, f"{tflops:.3f} TFLOP/s (CPU, fp32)", "CPU run: no dense peak to compare")
    peak = dense_peak_tflops(f.gpu_name)
    if peak is None:
        return _skip(check_id, f"{tflops:.0f} TFLOP/s", f"dense peak of {f.gpu_name!r} unknown: report only")
    status = _band(tflops / peak, t.matmul_pass, t.matmul_warn)
    observed = f"{tflops:.0f} TFLOP/s = {tflops / peak:.0%} of {peak:.0f} dense"
    expected = f">= {t.matmul_pass:.0%} (warn {t.matmul_warn:.0%})"
    remedy = "check clocks and power (`nvidia-smi -q -d CLOCK,POWER,PERFORMANCE`), then `dcgmi diag -r 2`"
    return _judged(check_id, status, observed, expected, remedy, "MAMF reaches 80-87% on A100/H100")


def h2d_check(m: Metrics, f: VerdictFacts, t: Thresholds) -> Check:
    check_id, pinned = "bench.h2d", m.h2d_pinned_gb_per_s
    if pinned is None:
        return _skip(check_id, detail="CUDA only")
    if f.pcie is None:
        return _skip(check_id, f"{pinned:.1f} GB/s pinned", "PCIe link unknown (NVML)")
    gen, width, max_gen, max_width = f.pcie
    link = PCIE_GB_PER_LANE.get(gen, 0.0) * width
    observed = f"{pinned:.1f} GB/s pinned on PCIe Gen{gen} x{width} ({link:.1f} GB/s)"
    if gen < max_gen or width < max_width:
        observed += f", link can do Gen{max_gen} x{max_width}"
        expected = "link at its maximum under load"
        remedy = "reseat the GPU / check BIOS PCIe settings; `nvidia-smi -q -d PCIE`"
        return Check(check_id, Status.FAIL, observed, expected, remedy, "downtrained link (DCGM `pcie`)")
    ratio = pinned / link if link else 0.0
    status = _band(ratio, t.h2d_pass, t.h2d_warn)
    expected = f">= {t.h2d_pass:.0%} of link (warn {t.h2d_warn:.0%})"
    remedy = "check NUMA placement (`nvidia-smi topo -m`) and IOMMU settings"
    return _judged(check_id, status, f"{observed} = {ratio:.0%}", expected, remedy)


def tuned_check(m: Metrics, f: VerdictFacts) -> Check:
    """Did the budget pay for a tune worth the name: every worker candidate measured, all tuned windows?"""
    check_id = "bench.tuned"
    expected = "every candidate measured and 3 tuned windows, within the budget"
    if f.partial:
        return Check(check_id, Status.SKIP, "interrupted", expected)
    needed, script = m.budget_needed_s, f.script
    budget = option("budget_s", f"{needed:.0f}" if needed else None, script)
    rerun = f"rerun with {budget} (or more)" if needed else f"rerun with a larger {budget}"
    if not (m.tune_candidates_measured or m.tuned_windows or m.naive_samples_per_s):
        # Nothing fed the step: no verdict on the pipeline can be given, and a pass would say otherwise.
        observed = "no loader was measured with the step: the budget ended first"
        detail = f"slow samples? a smaller {option('batch_size', script=script)} makes each measurement shorter"
        return Check(check_id, Status.FAIL, observed, expected, rerun, detail)
    progress = _tune_progress(m)
    if f.left_out and needed is not None:
        observed = f"budget too small: ~{needed:.0f} s needed, {f.budget_s or 0:g} s given; {progress}"
        detail = f"left out: {f.left_out}; the winner is the best of what was measured, not a full tune"
        return Check(check_id, Status.WARN, observed, expected, rerun, detail)
    if m.tune_candidates_failed:
        remedy = "see the notes: the loaders that failed, and why (bench.shm for /dev/shm)"
        return Check(check_id, Status.WARN, progress, expected, remedy)
    if m.tune_candidates is None or (m.tuned_windows or 0) < 3:
        return Check(check_id, Status.WARN, progress, expected, "see the phases' notes")
    return Check(check_id, Status.OK, progress, expected)


def _tune_progress(m: Metrics) -> str:
    """How far the tune got: candidates measured (and failed), knobs tried, tuned windows."""
    if m.tune_candidates is None:
        parts = ["no worker search"]
    else:
        parts = [f"{m.tune_candidates_measured or 0:.0f} of {m.tune_candidates:.0f} candidates measured"]
    if m.tune_candidates_failed:
        parts.append(f"{m.tune_candidates_failed:.0f} failed")
    if m.tune_knobs:
        parts.append(f"{m.tune_knobs_tried or 0:.0f} of {m.tune_knobs:.0f} knobs tried")
    parts.append(f"{m.tuned_windows or 0:.0f} of 3 tuned windows")
    return ", ".join(parts)


def recheck_check(m: Metrics, t: Thresholds, script: bool = False) -> Check:
    """The tuned figure against an independent re-measure of the same config (a fresh loader)."""
    check_id, tuned, again = "bench.recheck", m.tuned_samples_per_s, m.recheck_samples_per_s
    if tuned is None or again is None:
        return _skip(check_id, detail="needs the tuned windows and time for one more")
    noise = m.recheck_noise or t.noise_floor_min
    gap = again / tuned - 1.0
    observed = f"tuned {tuned:.0f}, re-measured {again:.0f} samples/s ({gap:+.1%})"
    expected = f"within the measured noise ({noise:.0%}) and {t.noise_inconclusive:.0%}"
    if m.recheck_steps is not None and m.recheck_steps < MIN_RECHECK_STEPS:
        observed += f", over {m.recheck_steps:.0f} steps: too few to confirm or refute"
        remedy = f"a longer {option('budget_s', script=script)} leaves the re-measure a full window"
        detail = "the budget left the re-measure less than a window (a slow first batch of a fresh loader?)"
        return Check(check_id, Status.SKIP, observed, expected, remedy, detail)
    detail = "a fresh loader of the winner, after the tuned windows"
    if abs(gap) <= min(noise, t.noise_inconclusive):
        return Check(check_id, Status.OK, observed, expected, detail=detail)
    # Agreement inside a noise wider than a verdict can stand on is not agreement (`inconclusive_reason`).
    why = "the two disagree beyond the noise" if abs(gap) > noise else f"they agree only within a noise of {noise:.0%}"
    longer = option("budget_s", script=script)
    remedy = f"the host's load changed during the run: rerun on a quiet host, or with a longer {longer}"
    detail += "; the rates are not repeatable"
    return Check(check_id, Status.INCONCLUSIVE, f"{observed}; {why}", expected, remedy, detail)


def efficiency_check(m: Metrics, f: VerdictFacts, t: Thresholds) -> Check:
    check_id = "bench.efficiency"
    expected = f">= {t.efficiency_pass:.2f} (warn {t.efficiency_warn:.2f})"
    tuned, ceiling = m.tuned_samples_per_s or 0, m.ceiling_samples_per_s or 0
    if m.efficiency is None and m.tuned_over_ceiling is not None:
        above = f"tuned {tuned:.0f} above the ceiling {ceiling:.0f} samples/s"
        observed = f"measurement error: {above} ({m.tuned_over_ceiling:.2f}x, beyond the noise)"
        remedy = "the host's load changed between the ceiling and the tuned windows: rerun on a quiet host"
        detail = "a loader cannot beat its own step on a resident batch; no efficiency is reported"
        return Check(check_id, Status.INCONCLUSIVE, observed, f"{expected}; tuned <= ceiling", remedy, detail)
    if m.efficiency is None:
        return _skip(check_id, detail="needs the ceiling and tuned phases")
    observed = f"{m.efficiency:.2f} (tuned {tuned:.0f} / ceiling {ceiling:.0f} samples/s)"
    status = _band(m.efficiency, t.efficiency_pass, t.efficiency_warn)
    detail = "differential method: 1 - efficiency is the data-stall fraction"
    if f.device_type != "cuda" and status is Status.FAIL:
        status = Status.WARN
        detail = CPU_RUN_EFFICIENCY
    return _judged(check_id, status, observed, expected, _efficiency_remedy(m, f), detail)


def _efficiency_remedy(m: Metrics, f: VerdictFacts) -> str:
    if _waits_at_the_cap(f):
        raise_cap = option("max_workers", f.predicted_workers, f.script)
        raise_cap += "" if f.script else " (tune_loader: max_workers=)"
        return (
            f"the loader waits on I/O, not on CPU, and the winner sits at the tuner's cap of {f.worker_cap} "
            f"workers (predicted {f.predicted_workers}): try {raise_cap}, since a waiting worker needs no core "
            "(each needs RAM and /dev/shm), or read from faster storage"
        )
    if m.cores_per_device_needed:
        return (
            f"the loader needs ~{m.cores_per_device_needed:.1f} cores at the ceiling rate: give the job more CPUs, "
            "cut per-sample work (pre-resized, packed samples), or decode on the GPU (DALI)"
        )
    return "give the loader more CPUs"


def _waits_at_the_cap(f: VerdictFacts) -> bool:
    """An I/O-bound loader whose winner is the most workers tried, fewer than the tuner predicted."""
    if f.cpu_bound is not False or f.workers is None or f.worker_cap is None or f.predicted_workers is None:
        return False
    return f.workers >= f.worker_cap and f.predicted_workers > f.worker_cap


def device_idle_check(m: Metrics, f: VerdictFacts, t: Thresholds) -> Check:
    check_id, idle = "bench.stall_device_idle", m.stall_device_idle_pct
    if idle is None:
        return _skip(check_id, detail="CUDA events only" if f.device_type != "cuda" else "")
    status = _band(idle / 100.0, t.device_idle_pass, t.device_idle_warn, higher_is_better=False)
    expected = f"<= {t.device_idle_pass:.0%} (warn {t.device_idle_warn:.0%})"
    remedy = "more loader workers or cheaper samples (see bench.efficiency)"
    detail = "gaps between consecutive steps' GPU work / wall time"
    differential = m.stall_differential_pct
    if differential is not None and differential > 2 * idle + 5:
        slowed = "the workers slow the step itself (CPU contention)"
        detail += f"; differential stall {differential:.0f}% >> device-idle: {slowed}"
    return _judged(check_id, status, f"{idle:.1f}%", expected, remedy, detail)


def speedup_check(m: Metrics, t: Thresholds) -> Check:
    check_id, speedup, predicted = "bench.speedup", m.speedup, m.predicted_speedup
    if speedup is None:
        return _skip(check_id, detail="needs the naive and tuned phases")
    observed = f"{speedup:.2f}x over naive"
    if predicted:
        observed += f" (predicted {predicted:.2f}x)"
    expected = f">= {t.speedup_pass_fraction:.2f} x predicted; tuned >= naive"
    noise = m.speedup_noise or t.noise_floor_min
    if speedup < 1.0 - noise:
        remedy = "the tuned loader is slower than num_workers=0: check shm, worker start-up and CPU contention"
        detail = f"tuned < naive by more than the noise ({noise:.0%})"
        return Check(check_id, Status.FAIL, observed, expected, remedy, detail)
    if speedup < 1.0:
        remedy = "no gain over num_workers=0: see bench.efficiency"
        detail = f"tuned below naive, but within the noise ({noise:.0%})"
        return Check(check_id, Status.WARN, observed, expected, remedy, detail)
    basis = "predicted = min(ceiling, W / l, CPUs / (c + step CPU)) / naive"
    if predicted and speedup < t.speedup_pass_fraction * predicted:
        return Check(check_id, Status.WARN, observed, expected, OVERSUBSCRIBED_WORKERS, basis)
    return Check(check_id, Status.OK, observed, expected, detail=basis)


def util_check(s: SamplerReport, f: VerdictFacts, t: Thresholds, trained: bool = True) -> Check:
    """NVML's utilization over the tuned windows: judged only when a tuned loader trained."""
    check_id, g = "bench.nvml_util", s.gpu
    if not trained:
        return _skip(check_id, "no tuned windows ran", "see bench.tuned for what the budget left out")
    if g is None or not g.count or g.p95 is None or g.p5 is None:
        return _skip(check_id, "no samples", s.reason or ("CPU run" if f.device_type != "cuda" else ""))
    observed = f"mean {g.mean:.0f}%, p5 {g.p5:.0f}%, p50 {g.p50:.0f}%, p95 {g.p95:.0f}% ({g.count} samples)"
    expected = f"p95 >= {t.util_p95_pass:.0f}%, p5 >= {t.util_p5_pass:.0f}%"
    detail = f"{g.source}; supporting evidence only: 'a kernel ran during the sample period'"
    if g.p95 < t.util_p95_pass:
        remedy = "the GPU idles: see bench.efficiency and bench.stall_device_idle"
        return Check(check_id, Status.FAIL, observed, expected, remedy, detail)
    if g.p5 < t.util_p5_pass:
        remedy = "idle bursts: a deeper prefetch or more workers"
        return Check(check_id, Status.WARN, observed, expected, remedy, detail)
    return Check(check_id, Status.OK, observed, expected, detail=detail)


def sm_active_check(s: SamplerReport, t: Thresholds) -> Check:
    check_id, value = "bench.gpm_sm_active", s.gpm_sm_active
    if value is None:
        return _skip(check_id, detail=s.gpm_reason or "CPU run")
    expected = f">= {t.sm_active_pass:.2f} (warn only)"
    if value >= t.sm_active_pass:
        return Check(check_id, Status.OK, f"{value:.2f}", expected, detail="necessary, not sufficient (NVIDIA)")
    why = "likely ineffective GPU use" if value < t.sm_active_warn else "below the 0.8 NVIDIA calls necessary"
    remedy = "a larger batch, AMP/bf16, or a bigger model keeps more SMs busy"
    return Check(check_id, Status.WARN, f"{value:.2f}", expected, remedy, why)


def pss_check(m: Metrics, t: Thresholds) -> Check:
    check_id, growth = "bench.worker_pss", m.worker_pss_growth_pct
    if growth is None:
        return _skip(check_id, detail="no loader workers, or /proc/PID/smaps_rollup unavailable")
    status = _band(growth / 100.0, t.pss_growth_pass, t.pss_growth_warn, higher_is_better=False)
    expected = f"< {t.pss_growth_pass:.0%} (warn {t.pss_growth_warn:.0%})"
    remedy = "keep the dataset index in numpy/Arrow arrays, not lists/dicts (PyTorch #13246)"
    return _judged(check_id, status, f"{growth:+.1f}% over the tuned windows", expected, remedy)


def scaling_check(m: Metrics, t: Thresholds) -> Check:
    check_id, efficiency = "bench.loader_scaling", m.loader_scaling_efficiency
    if efficiency is None:
        return _skip(check_id, "only S(1) measured" if 1 in m.loader_scaling else "not measured", SCALING_UNMEASURED)
    w = m.loader_scaling_workers or 0.0
    status = Status.OK if efficiency >= t.loader_scaling_pass else Status.WARN
    observed = f"S({w:.0f}) / ({w:.0f} x S(1)) = {efficiency:.2f}"
    expected = f">= {t.loader_scaling_pass:.2f} at W = min(8, CPUs - 1), at least 2"
    remedy = "suspect thread oversubscription: set OMP_NUM_THREADS=1 / cv2.setNumThreads(0) in workers"
    return _judged(check_id, status, observed, expected, remedy, SCALING_DETAIL)


def inconclusive_reason(m: Metrics, t: Thresholds, script: bool = False) -> tuple[str, str]:
    """(why, what to do) when the rates cannot separate pass from fail; ('', '') when they can."""
    busy, steps, prefetched = m.host_busy_before_pct, m.tuned_window_steps, m.tuned_prefetched_batches
    limit = f"(> {t.noise_inconclusive:.0%})"
    if busy is not None and busy >= t.host_saturated_pct:
        why = f"host saturated: {busy:.0f}% CPU busy from other processes before the run"
        return why, "rerun when the host is quiet (`uptime`, `top`: load below the CPU count), or on a node of its own"
    if steps is not None and prefetched and steps < prefetched + STEPS_PAST_PREFETCH:
        why = (
            f"windows too short: a tuned window ran {steps:.0f} steps, and the workers had up to {prefetched:.0f} "
            "batches prefetched, which it drains faster than the loader makes them"
        )
        return why, f"rerun with a longer {option('budget_s', script=script)} for longer windows"
    spread = m.tuned_spread_pct
    if spread is not None and spread / 100.0 > t.noise_inconclusive:
        return f"too noisy: the tuned windows spread {spread:.0f}% {limit}", f"{quiet_host(script)} for longer windows"
    gap = m.recheck_gap_pct
    if gap is not None and abs(gap) / 100.0 > t.noise_inconclusive:
        return f"not repeatable: an independent re-measure of the winner differs by {gap:+.0f}% {limit}", quiet_host(
            script
        )
    return "", ""


def undecided(checks: list[Check], reason: tuple[str, str]) -> list[Check]:
    """The rate checks (RATE_CHECKS) that judged ok/warn/fail turned `inconclusive` for `reason`."""
    why, remedy = reason
    if not why:
        return checks
    judged = (Status.OK, Status.WARN, Status.FAIL)
    return [_undecided(c, why, remedy) if c.id in RATE_CHECKS and c.status in judged else c for c in checks]


def _undecided(check: Check, why: str, remedy: str) -> Check:
    detail = f"would be {check.status.value}; {check.detail}".rstrip("; ")
    return replace(check, status=Status.INCONCLUSIVE, observed=f"{check.observed}; {why}", remedy=remedy, detail=detail)
