"""The text report a new user reads: the verdict and the advice first, in plain words and a few lines
under 100 columns (what to run with, how much faster than the untuned loader, whether the GPU is kept
busy, what to do first); every figure after them, under the details heading."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bootstrap.bench.config import WorkloadSpec
from bootstrap.bench.report import DETAILS, PASTE, dataloader_snippet, render_text
from bootstrap.bench.results import LoaderConfig, Metrics
from bootstrap.report import Check, Status
from tests.fixtures.bench import SMALL, bench, synthetic_result

LONG_REMEDY = (
    "the loader needs ~37.2 cores at the ceiling rate: give the job more CPUs, cut per-sample work "
    "(pre-resized, packed samples), or decode on the GPU (DALI)"
)
GPU_CHECKS = (
    Check("bench.shm", Status.OK, "24105 MiB free, need 37 MiB", ">= 2 x need (74 MiB)"),
    Check("bench.recheck", Status.INCONCLUSIVE, "tuned 406, re-measured 440", "within 15%", "rerun on a quiet host"),
    Check("bench.efficiency", Status.FAIL, "0.60 (tuned 1,823 / ceiling 3,039 samples/s)", ">= 0.90", LONG_REMEDY),
    Check("bench.speedup", Status.WARN, "2.18x over naive (predicted 3.40x)", ">= 0.85 x predicted", "look for it"),
    Check("bench.nvml_util", Status.OK, "p95 82%", "p95 >= 70%"),
)


def summary_of(text: str) -> list[str]:
    """The lines before the details heading, blank lines left out."""
    return [line for line in text.split(DETAILS)[0].splitlines() if line]


def on_a_gpu(efficiency: float, checks=GPU_CHECKS, **metrics):
    result = synthetic_result()
    figures = dict(ceiling_samples_per_s=3039.0, naive_samples_per_s=835.0, speedup=efficiency * 3039.0 / 835.0)
    figures.update(tuned_samples_per_s=efficiency * 3039.0, efficiency=efficiency, **metrics)
    best = LoaderConfig(num_workers=3, pin_memory=True, non_blocking=True, amp_dtype="bfloat16", channels_last=True)
    return replace(
        result,
        device={**result.device, "type": "cuda", "name": "NVIDIA H200"},
        metrics=Metrics(**figures),
        checks=checks,
        best=best,
        snippet=dataloader_snippet(best, WorkloadSpec(), "cuda"),
    )


def test_the_report_leads_with_the_verdict_and_the_advice_under_100_columns():
    text = render_text(on_a_gpu(0.60))
    assert summary_of(text) == [
        "Verdict:    FAILED: 1 check failed (efficiency); 1 warns (speedup); 1 could not tell (recheck)",
        "Run with:   num_workers=3, pin_memory=True, prefetch_factor=2, persistent_workers=False;",
        "            non_blocking=True copies, bf16 autocast, channels_last",
        "            (the DataLoader(...) to paste is at the end)",
        "Speed:      1,823 samples/s, 2.18x the untuned loader (num_workers=0: 835 samples/s)",
        "GPU:        waits for data: it trains at 60% of its rate on data already on it (3,039 samples/s);",
        "            utilization (nvidia-smi's) p95 99%",
        "Fix first:  efficiency: the loader needs ~37.2 cores at the ceiling rate: give the job more CPUs,",
        "            cut per-sample work (pre-resized, packed samples), or decode on the GPU (DALI)",
    ]
    assert all(len(line) < 100 for line in summary_of(text))


def test_the_details_follow_under_their_heading_and_the_snippet_comes_last():
    text = render_text(on_a_gpu(0.60))
    summary, details = text.split(DETAILS)
    assert "PHASE" not in summary and "STATUS" not in summary and "DataLoader(\n" not in summary
    header, table, verdicts, paste = (details.index(s) for s in ("bench: cuda (NVIDIA H200)", "PHASE", "STATUS", PASTE))
    assert header < table < verdicts < paste
    assert "efficiency 0.60; speedup 2.18x over naive" in details and "tuner: W* = 4 (cap 16: x)" in details
    assert text.rstrip().endswith("optimizer.step()")


def test_verbose_adds_the_evidence_to_the_verdict_table_only():
    result = on_a_gpu(0.60, checks=(replace(GPU_CHECKS[2], detail="differential method: 1 - efficiency"),))
    plain, verbose = render_text(result), render_text(result, verbose=True)
    assert summary_of(plain) == summary_of(verbose)
    assert "differential method" not in plain
    assert "       differential method: 1 - efficiency" in verbose.split(DETAILS)[1]


def test_a_gpu_kept_busy_passes_with_nothing_to_fix():
    checks = (GPU_CHECKS[0], GPU_CHECKS[4], Check("bench.efficiency", Status.OK, "0.97", ">= 0.90"))
    summary = summary_of(render_text(on_a_gpu(0.97, checks=checks)))
    assert summary[0] == "Verdict:    passed: 3 checks ok"
    assert summary[5].startswith("GPU:        kept busy: it trains at 97% of its rate on data already on it")
    assert len(summary) == 7 and not any(line.startswith(("Fix first", "To ")) for line in summary)


@pytest.mark.parametrize(
    ("shm", "efficiency", "line"),
    [
        (Status.WARN, Status.FAIL, "Fix first:  efficiency: give the job more CPUs"),
        (Status.WARN, Status.WARN, "To improve: shm: mount a larger /dev/shm"),  # the first in report order
        (Status.WARN, Status.INCONCLUSIVE, "To improve: shm: mount a larger /dev/shm"),  # a warning says more
        (Status.OK, Status.INCONCLUSIVE, "To be sure: recheck: rerun on a quiet host"),
        (Status.OK, Status.OK, None),  # nothing to do
    ],
)
def test_the_one_thing_to_do_first_is_the_first_check_of_the_worst_status(shm, efficiency, line):
    unsure = Status.INCONCLUSIVE if efficiency is Status.INCONCLUSIVE else Status.OK
    checks = (
        Check("bench.shm", shm, "free 50 MiB", ">= 2 x need", "" if shm is Status.OK else "mount a larger /dev/shm"),
        Check("bench.recheck", unsure, "+20%", "within 15%", "" if unsure is Status.OK else "rerun on a quiet host"),
        Check("bench.efficiency", efficiency, "0.97", ">= 0.90", "give the job more CPUs"),
        Check("bench.speedup", efficiency, "1.1x", ">= 0.85 x predicted", "look for oversubscription"),
    )
    told = [x for x in summary_of(render_text(on_a_gpu(0.97, checks=checks))) if x.startswith(("Fix", "To "))]
    assert told == ([] if line is None else [line])


def test_a_cpu_run_says_there_is_no_gpu_and_what_this_host_could_feed():
    result = replace(synthetic_result(), metrics=replace(synthetic_result().metrics, feedable_samples_per_s=1268.0))
    summary = summary_of(render_text(result))
    assert "GPU:        none on this run (cpu); this host's loader could feed a GPU ~1,268 samples/s" in summary
    assert "GPU:        none on this run (cpu): the rates are this host's, not a GPU's" in summary_of(
        render_text(synthetic_result())
    )


def test_a_figure_whose_verdict_could_not_tell_says_so():
    noisy = (
        Check("bench.efficiency", Status.INCONCLUSIVE, "0.60; too noisy", ">= 0.90", "rerun on a quieter host"),
        Check("bench.speedup", Status.INCONCLUSIVE, "2.18x; too noisy", ">= 0.85 x predicted", "rerun"),
    )
    words = " ".join(" ".join(summary_of(render_text(on_a_gpu(0.60, checks=noisy)))).split())
    assert "2.18x the untuned loader (num_workers=0: 835 samples/s); too noisy to be sure (bench.speedup)" in words
    assert "(3,039 samples/s); too noisy to be sure (bench.efficiency)" in words
    assert "too noisy" not in " ".join(summary_of(render_text(on_a_gpu(0.60))))


def test_a_cpu_run_with_a_target_rate_says_the_cores_it_needs():
    metrics = replace(synthetic_result().metrics, feedable_samples_per_s=1299.0, cores_needed_for_target=1.54)
    words = " ".join(" ".join(summary_of(render_text(replace(synthetic_result(), metrics=metrics)))).split())
    assert "this host's loader could feed a GPU ~1,299 samples/s; --target-rate needs ~1.5 loader cores" in words


def test_when_the_untuned_settings_win_the_speed_says_so_not_a_speedup():
    best = LoaderConfig()
    result = replace(synthetic_result(), best=best, snippet=dataloader_snippet(best, WorkloadSpec(), "cpu"))
    speed = next(line for line in summary_of(render_text(result)) if line.startswith("Speed:"))
    assert (
        speed == "Speed:      228 samples/s; the untuned loader's own settings won (measured earlier at 80 samples/s)"
    )


def test_a_tune_cut_short_and_a_run_without_a_winner_say_so():
    best, spec = LoaderConfig(num_workers=2), WorkloadSpec()
    cut = replace(
        synthetic_result(),
        best=best,
        metrics=replace(synthetic_result().metrics, budget_needed_s=50.0),
        snippet=dataloader_snippet(best, spec, "cpu", caveat="budget too small: ~50 s needed"),
    )
    words = " ".join(" ".join(summary_of(render_text(cut))).split())  # the line wraps: its words
    assert "persistent_workers=False (the best measured, not fully tuned: ~50 s would finish it (--budget 50))" in words
    nothing = replace(
        synthetic_result(partial=True),
        best=None,
        snippet="",
        metrics=Metrics(),
        checks=(Check("bench.tuned", Status.FAIL, "no loader fed the step", "", "a longer --budget"),),
    )
    summary = summary_of(render_text(nothing))
    assert summary == [
        "Verdict:    INTERRUPTED, a partial report; so far FAILED: 1 check failed (tuned)",
        "Run with:   no advice: no loader fed the training step within the budget",
        "Speed:      not measured: the run ended before the tuned loader's windows",
        "GPU:        none on this run (cpu): the rates are this host's, not a GPU's",
        "Fix first:  tuned: a longer --budget",
    ]


def test_a_real_run_prints_the_summary_first_then_the_details_then_the_code(tmp_path):
    done = bench("--budget", "2", "--quiet", "--no-png", "--out", str(tmp_path), *SMALL)
    assert done.returncode in (0, 1), done.stderr
    summary = summary_of(done.stdout)
    labels = [line.split(":")[0] for line in summary if not line.startswith(" ")]
    assert labels[:4] == ["Verdict", "Run with", "Speed", "GPU"] and len(summary) <= 10, done.stdout
    assert all(len(line) < 100 for line in summary), summary
    details = done.stdout.split(DETAILS)[1]
    assert details.index("bench: cpu (CPU)") < details.index("STATUS  CHECK")
    advised = not summary[1].startswith("Run with:   no advice")  # a busy host may leave the tune no time
    assert (PASTE in details) is advised and (not advised or details.index("STATUS  CHECK") < details.index(PASTE))
