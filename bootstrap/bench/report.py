"""Renderings of a `BenchResult`: the text report, the JSON envelope, the code snippet, the files.

The JSON report is the checks envelope (kind 'bench', the verdicts as its checks) with the bench's
own payload under `extra`, which carries its own schema name and version (`SCHEMA`,
`SCHEMA_VERSION`); tests/fixtures/bench.py pins both layouts (docs/benchmark.md, "The JSON report").
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from bootstrap.bench.config import WorkloadSpec
from bootstrap.bench.results import BenchResult, LoaderConfig, Metrics
from bootstrap.errors import InputError
from bootstrap.fsutil import check_directory, check_output, write_target, write_together
from bootstrap.report import render_table, to_json

SCHEMA = "bootstrap.bench"
SCHEMA_VERSION = 1
JSON_NAME = "bench.json"
PNG_NAME = "bench.png"


def payload(result: BenchResult) -> Dict[str, Any]:
    """The bench-specific part of the report (the envelope's `extra`)."""
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "partial": result.partial,
        "seconds": result.seconds,
        "budget_s": result.budget_s,
        "device": result.device,
        "workload": result.workload,
        "thresholds": result.thresholds,
        "phases": [p.to_dict() for p in result.phases],
        "metrics": result.metrics.to_dict(),
        "measurements": [m.to_dict() for m in result.measurements],
        "tuning": result.tuning.to_dict(),
        "sampler": result.sampler.to_dict(),
        "best": None if result.best is None else result.best.to_dict(),
        "snippet": result.snippet,
        "notes": list(result.notes),
        "ranks": list(result.ranks),
        "aggregate": dict(result.aggregate),
    }


def to_envelope(result: BenchResult) -> Dict[str, Any]:
    return to_json(list(result.checks), "bench", extra=payload(result))


def envelope_json(result: BenchResult) -> str:
    """The JSON report as strict JSON: a figure that is NaN or infinite is written as null."""
    return json.dumps(_plain(to_envelope(result)), indent=2, allow_nan=False) + "\n"


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if hasattr(value, "to_dict"):
        return _plain(value.to_dict())
    return str(value)


def report_paths(out_dir: Path, *, png: bool = True) -> List[Path]:
    return [out_dir / JSON_NAME] + ([out_dir / PNG_NAME] if png else [])


def check_out(out_dir: Path, *, png: bool = True) -> List[Path]:
    """Before the run: `--out` is (or can become) a writable directory and its report files can be
    replaced. One InputError line otherwise; creates nothing."""
    check_directory(out_dir, "--out")
    _try_writing_in(out_dir)
    paths = report_paths(out_dir, png=png)
    if out_dir.is_dir():
        for path in paths:
            if write_target(path).is_dir():
                raise InputError(
                    path, "is a directory, where bench writes its report", "remove it or give --out another directory"
                )
            check_output(path, "--out")
    return paths


def _try_writing_in(out_dir: Path) -> None:
    """Create and remove a file where the report will go (`--out`, else the directory it is created
    under): os.access answers yes to root on a read-only mount or a virtual file system (/proc)."""
    probe = out_dir.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        fd, name = tempfile.mkstemp(prefix=".bench-probe-", dir=probe)
    except OSError as exc:
        raise InputError(
            "--out",
            f"cannot write in {probe}: {exc.strerror or exc}",
            "give --out a directory on a writable file system",
        ) from None
    os.close(fd)
    os.unlink(name)


def write_reports(result: BenchResult, out_dir: Path, *, png: bool = True) -> List[Path]:
    """Write bench.json (and bench.png) into `out_dir`, all or none; returns the paths written.

    Both are rendered first; then each is staged beside its target and only when every one is
    staged are they renamed in, so a full disk leaves the previous run's pair whole.
    """
    paths = report_paths(out_dir, png=png)
    data = [envelope_json(result).encode("utf-8")]
    if png:
        from bootstrap.bench.plot import render_png

        data.append(render_png(result))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_together(list(zip(paths, data)))
    return paths


# --------------------------------------------------------------------------- snippet


def dataloader_snippet(
    config: LoaderConfig, spec: WorkloadSpec, device_type: str, caveat: str = "", user: Optional[Dict[str, Any]] = None
) -> str:
    """The winning DataLoader call and loop settings as Python to paste (it runs as is; tests exec it).

    Expects `dataset`, `model`, `optimizer` and `device` to exist; the
    bench's samples are uint8 images, scaled to float on the device.
    `caveat` (why the tune was not complete) heads it, so a partial search
    is not pasted as a tuned one. For the user's own workload (`user`, as
    `UserWorkload.describe` gives it) it is the DataLoader call alone: the
    loop is theirs.
    """
    if user is not None:
        return _user_snippet(config, spec, user, caveat)
    nb = config.non_blocking
    lines = ([f"# NOT FULLY TUNED: {caveat}"] if caveat else []) + [
        "# Measured best by `python -m bootstrap bench`; expects `dataset`, `model`, `optimizer`, `device`.",
        "import torch",
        "import torch.nn.functional as F",
        "from torch.utils.data import DataLoader",
        "",
        "loader = DataLoader(",
        "    dataset,",
        f"    batch_size={spec.batch_size},",
        "    shuffle=True,",
        "    drop_last=True,",
        f"    num_workers={config.num_workers},",
        f"    pin_memory={config.pin_memory},",
    ]
    if config.num_workers:
        lines += [
            f"    prefetch_factor={config.prefetch_factor},",
            f"    persistent_workers={config.persistent_workers},",
        ]
    lines.append(")")
    if device_type == "cuda":
        lines.append("torch.backends.cudnn.benchmark = True")
    if config.channels_last:
        lines.append("model = model.to(device, memory_format=torch.channels_last).train()")
    else:
        lines.append("model = model.to(device).train()")
    to_layout = ".contiguous(memory_format=torch.channels_last)" if config.channels_last else ""
    lines += [
        "for images, labels in loader:",
        f"    images = images.to(device, non_blocking={nb}){to_layout}.float().div_(255)",
        f"    labels = labels.to(device, non_blocking={nb})",
    ]
    if config.amp_dtype:
        lines += [
            f'    with torch.autocast(device_type="{device_type}", dtype=torch.{config.amp_dtype}):',
            "        loss = F.cross_entropy(model(images), labels)",
        ]
    else:
        lines.append("    loss = F.cross_entropy(model(images), labels)")
    lines += ["    optimizer.zero_grad(set_to_none=True)", "    loss.backward()", "    optimizer.step()"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- text


def _num(value: Optional[float], fmt: str = ",.1f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def _user_snippet(config: LoaderConfig, spec: WorkloadSpec, user: Dict[str, Any], caveat: str) -> str:
    """The DataLoader call alone, ordered and batched as the run was: bench's shuffle, or the user's sampler
    or batch sampler; `collate_fn`, `sampler`, `batch_sampler` stand for the user's own objects."""
    own = [name for name in ("collate_fn", "sampler", "batch_sampler") if name.replace("_fn", "") in user]
    if "batch_sampler" in user:
        batching = ["    batch_sampler=batch_sampler,"]
    else:
        order = [] if user.get("stream") else ["    sampler=sampler,"] if "sampler" in user else ["    shuffle=True,"]
        batching = [
            f"    batch_size={spec.loader_batch_size},",
            *order,
            *([] if spec.batched else ["    drop_last=True,"]),
        ]
    expects = ", ".join(f"`{name}`" for name in ["dataset", *own])
    lines = ([f"# NOT FULLY TUNED: {caveat}"] if caveat else []) + [
        f"# Measured best by `python -m bootstrap bench`; expects {expects}.",
        "from torch.utils.data import DataLoader",
        "",
        "loader = DataLoader(",
        "    dataset,",
        *batching,
    ]
    if "collate" in user:
        lines.append("    collate_fn=collate_fn,")
    lines += [f"    {name}={value!r}," for name, value in config.dataloader_kwargs().items()]
    return "\n".join(lines + [")"]) + "\n"


def _workload_line(w: Dict[str, Any]) -> str:
    user = w.get("user")
    if user:
        own = " (its own batches)" if w.get("batched") else ""
        drawn = "".join(
            f", {name.replace('_', ' ')} {user[name]}" for name in ("sampler", "batch_sampler") if name in user
        )
        return f"batch {w.get('batch_size')}{own} from dataset {user.get('dataset')}{drawn}"
    return (
        f"batch {w.get('batch_size')} x 3x{w.get('crop_size')}x{w.get('crop_size')} uint8 from {w.get('storage')}"
        f" (cpu_ms {w.get('cpu_ms'):g}, io_ms {w.get('io_ms'):g})"
    )


def render_text(result: BenchResult, *, verbose: bool = False) -> str:
    """The human report: header, measurements, headline figures, tuner, sampler, sizing, verdicts, snippet."""
    d, w, m = result.device, result.workload, result.metrics
    lines = [
        f"bench: {d.get('type', '?')} ({d.get('name', '?')}), torch {d.get('torch', '?')}, "
        f"{d.get('cpus_usable', '?')} CPUs, model {d.get('model', '?')}, {_workload_line(w)}; "
        f"{result.seconds:.1f} s of a {result.budget_s:g} s budget" + ("  [PARTIAL]" if result.partial else ""),
    ]
    lines += [f"note: {note}" for note in result.notes]
    if result.measurements:
        lines += ["", _measurement_table(result)]
    lines += ["", *_headline(m)]
    lines += _tuner_lines(result)
    lines += _sampler_lines(result)
    if result.aggregate:
        lines += _aggregate_lines(result)
    if result.checks:
        lines += ["", render_table(list(result.checks), show_detail=verbose).rstrip("\n")]
    if result.snippet:
        lines += ["", "# ---- paste: the winning DataLoader and loop settings ----", result.snippet.rstrip("\n")]
    return "\n".join(lines) + "\n"


def _measurement_table(result: BenchResult) -> str:
    header = ("PHASE", "CONFIG", "SAMPLES/S", "SECONDS", "STEPS", "WAIT%", "CV%")
    rows = [
        (
            x.phase,
            x.label,
            f"{x.samples_per_s:,.1f}",
            f"{x.seconds:.2f}",
            str(x.steps),
            f"{x.host_wait_pct:.0f}",
            f"{100 * x.cv:.1f}" + ("*" if x.truncated else ""),
        )
        for x in result.measurements
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = [
        "  ".join(c.ljust(wd) if i < 2 else c.rjust(wd) for i, (c, wd) in enumerate(zip(r, widths))).rstrip()
        for r in [header, *rows]
    ]
    if any(x.truncated for x in result.measurements):
        out.append("* window cut short by the phase budget")
    return "\n".join(out)


def _efficiency(m: Metrics) -> str:
    over = m.tuned_over_ceiling
    if m.efficiency is None and over is not None:
        return f"- (tuned {over:.2f}x the ceiling: a measurement error, see bench.efficiency)"
    return _num(m.efficiency, ".2f")


def _headline(m: Metrics) -> List[str]:
    lines = [
        f"ceiling {_num(m.ceiling_samples_per_s)} samples/s (batch resident on the device)"
        + (f", with the copy {_num(m.ceiling_h2d_samples_per_s)}" if m.ceiling_h2d_samples_per_s else ""),
        f"naive   {_num(m.naive_samples_per_s)} samples/s; tuned {_num(m.tuned_samples_per_s)} samples/s "
        f"(min {_num(m.tuned_min_samples_per_s)}, max {_num(m.tuned_max_samples_per_s)}); "
        f"re-measured {_num(m.recheck_samples_per_s)} samples/s with a fresh loader",
        f"efficiency {_efficiency(m)}; speedup {_num(m.speedup, '.2f')}x over naive "
        f"(predicted {_num(m.predicted_speedup, '.2f')}x); "
        f"stall: host wait {_num(m.stall_host_wait_pct, '.1f')}%, "
        f"differential {_num(m.stall_differential_pct, '.1f')}%, "
        f"device idle {_num(m.stall_device_idle_pct, '.1f')}%",
    ]
    c = m.cpu_s_per_sample
    if c:
        sizing = (
            f"sizing: c = {c * 1000:.2f} ms CPU "
            f"and l = {_num((m.wall_s_per_sample or 0) * 1000, '.2f')} ms wall "
            f"per sample; this host can feed ~{_num(m.feedable_samples_per_s, ',.0f')} samples/s; "
            f"the ceiling needs ~{_num(m.cores_per_device_needed, '.1f')} loader cores "
            f"and ~{_num(m.workers_per_device_needed, '.1f')} workers in flight"
        )
        if m.cores_needed_for_target is not None:
            sizing += f"; the target rate needs ~{m.cores_needed_for_target:.1f} cores"
        lines.append(sizing)
    if m.loader_scaling_efficiency is not None:
        scaling = ", ".join(f"S({w}) = {v:,.0f}/s" for w, v in sorted(m.loader_scaling.items()))
        lines.append(f"loader scaling: {scaling}; efficiency {m.loader_scaling_efficiency:.2f}")
    extra = []
    if m.matmul_tflops is not None:
        extra.append(f"matmul {m.matmul_tflops:.3f} TFLOP/s")
    for name, pinned, pageable in (
        ("H2D", m.h2d_pinned_gb_per_s, m.h2d_pageable_gb_per_s),
        ("D2H", m.d2h_pinned_gb_per_s, m.d2h_pageable_gb_per_s),
    ):  # measured on CUDA only
        if pinned is not None:
            extra.append(f"{name} pinned {pinned:.1f} / pageable {_num(pageable)} GB/s")
    if m.peak_memory_mib is not None:
        extra.append(f"peak memory {m.peak_memory_mib:,.0f} MiB")
    if m.time_to_first_batch_s is not None:
        extra.append(f"first batch {m.time_to_first_batch_s:.2f} s")
    if extra:
        lines.append("; ".join(extra))
    return lines


def _tuner_lines(result: BenchResult) -> List[str]:
    t, m = result.tuning, result.metrics
    if t.predicted_workers is None:
        return []
    measured = m.tune_candidates_measured
    searched = f" ({measured:.0f} measured)" if measured is not None and measured < len(t.candidates) else ""
    lines = [
        f"tuner: W* = {t.predicted_workers} (cap {t.cap}: {t.cap_reason}); candidates "
        f"{', '.join(map(str, t.candidates))}{searched}; {len(t.rounds)} rounds in {t.seconds:.1f} s of "
        f"{t.budget_s:.1f} s" + ("; stopped early" if t.stopped_early else "")
    ]
    for name, _tried, kept, gain, noise in t.knobs:
        if math.isnan(gain):
            lines.append(f"  knob {name}: failed (its loader died) -> dropped")
        else:
            lines.append(f"  knob {name}: {gain:+.1%} vs noise floor {noise:.1%} -> {'kept' if kept else 'dropped'}")
    if t.winner is not None:
        lines.append(f"  winner: {t.winner.label}")
    return lines


def _sampler_lines(result: BenchResult) -> List[str]:
    s = result.sampler
    parts = []
    if s.gpu is not None and s.gpu.count:
        parts.append(
            f"GPU util mean {s.gpu.mean:.0f}% p10 {s.gpu.p10:.0f}% p50 {s.gpu.p50:.0f}% p95 {s.gpu.p95:.0f}% "
            f"({s.gpu.source}, {s.gpu.count} samples)"
        )
    elif s.reason:
        parts.append(f"GPU util: {s.reason}")
    if s.gpm_sm_active is not None:
        parts.append(f"SM active {s.gpm_sm_active:.2f} (GPM)")
    if s.host_cpu is not None and s.host_cpu.count:
        parts.append(f"host CPU busy mean {s.host_cpu.mean:.0f}% p95 {s.host_cpu.p95:.0f}%")
    parts.append(f"sampler overhead {s.overhead_pct:.2f}% ({s.polls} polls)")
    return ["sampler: " + "; ".join(parts)]


def _aggregate_lines(result: BenchResult) -> List[str]:
    a = result.aggregate
    return [
        f"ranks: {a.get('world_size')}; aggregate tuned {_num(a.get('tuned_samples_per_s'))} samples/s; "
        f"scaling efficiency {_num(a.get('scaling_efficiency'), '.2f')}; "
        f"worst rank {a.get('worst_rank')} (efficiency {_num(a.get('worst_efficiency'), '.2f')})"
    ]
