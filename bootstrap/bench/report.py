"""A `BenchResult` rendered: the text report, bench.json (the checks envelope, the bench's payload
under `extra`), the DataLoader snippet to paste. docs/benchmark.md, "Reading the report"."""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from bootstrap.bench.advice import summary_lines
from bootstrap.bench.config import WorkloadSpec
from bootstrap.bench.results import BenchResult, LoaderConfig, Metrics
from bootstrap.errors import InputError
from bootstrap.fsutil import check_directory, check_output, write_target, write_together
from bootstrap.report import render_table, to_json

SCHEMA = "bootstrap.bench"
SCHEMA_VERSION = 1  # of `extra`; tests/fixtures/bench.py pins its layout
JSON_NAME = "bench.json"
PNG_NAME = "bench.png"


def payload(result: BenchResult) -> dict[str, Any]:
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


def to_envelope(result: BenchResult) -> dict[str, Any]:
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


def report_paths(out_dir: Path, *, png: bool = True) -> list[Path]:
    return [out_dir / JSON_NAME] + ([out_dir / PNG_NAME] if png else [])


def check_out(out_dir: Path, *, png: bool = True) -> list[Path]:
    """Before the run: `--out` is (or can become) a writable directory whose report files can be replaced."""
    check_directory(out_dir, "--out")
    try_writing_in(out_dir)
    paths = report_paths(out_dir, png=png)
    if out_dir.is_dir():
        for path in paths:
            if write_target(path).is_dir():
                fix = "remove it or give --out another directory"
                raise InputError(path, "is a directory, where bench writes its report", fix)
            check_output(path, "--out")
    return paths


def try_writing_in(out_dir: Path) -> None:
    """Create and remove a file in `--out` (or where it will be created): os.access says yes to root on a
    read-only mount."""
    probe = out_dir.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        fd, name = tempfile.mkstemp(prefix=".bench-probe-", dir=probe)
    except OSError as exc:
        problem = f"cannot write in {probe}: {exc.strerror or exc}"
        raise InputError("--out", problem, "give --out a directory on a writable file system") from None
    os.close(fd)
    os.unlink(name)


def write_reports(result: BenchResult, out_dir: Path, *, png: bool = True) -> list[Path]:
    """Write bench.json (and bench.png) into `out_dir`, all or none; returns the paths written."""
    drawn: Optional[Callable[[], bytes]] = None
    if png:  # Pillow only when a picture is asked for
        from bootstrap.bench.plot import render_png

        drawn = functools.partial(render_png, result)
    return write_files(out_dir, report_paths(out_dir, png=png), envelope_json(result), drawn)


def write_files(out_dir: Path, paths: list[Path], text: str, png: Optional[Callable[[], bytes]]) -> list[Path]:
    """The JSON report `text` and the PNG `png` draws at `paths` in `out_dir`, all or none; the paths."""
    data = [text.encode("utf-8")] + ([png()] if png is not None else [])
    out_dir.mkdir(parents=True, exist_ok=True)
    write_together(list(zip(paths, data)))
    return paths


# --------------------------------------------------------------------------- snippet


def dataloader_snippet(
    config: LoaderConfig, spec: WorkloadSpec, device_type: str, caveat: str = "", user: Optional[dict[str, Any]] = None
) -> str:
    """The winning DataLoader call (and for the built-in workload its training loop) as Python that runs as
    is; `caveat` says why the tune is not complete; `user` is `UserWorkload.describe()`."""
    if user is not None:
        return _user_snippet(config, spec, user, caveat)
    arguments = [f"    batch_size={spec.batch_size},", *_assumed(shuffled=True, full_batches=True)]
    imports = ["import torch", "import torch.nn.functional as F"]
    lines = _loader_call(config, caveat, ["dataset", "model", "optimizer", "device"], arguments, imports)
    return "\n".join(lines + _training_loop(config, device_type)) + "\n"


def _user_snippet(config: LoaderConfig, spec: WorkloadSpec, user: dict[str, Any], caveat: str) -> str:
    """The DataLoader call alone, with what the user gave bench (batch size or batch sampler, sampler,
    collate) and the winner's settings; `collate_fn`, `sampler` and `batch_sampler` stand for the user's own
    objects. The order and batching bench chose itself (`user.loader_kwargs`) are said, not passed."""
    own = [name for name in ("collate_fn", "sampler", "batch_sampler") if name.replace("_fn", "") in user]
    assumed: list[str] = []
    if "batch_sampler" in user:
        arguments = ["    batch_sampler=batch_sampler,"]
    else:
        arguments = [f"    batch_size={spec.loader_batch_size},"] + ["    sampler=sampler,"] * ("sampler" in user)
        shuffled = not user.get("stream") and "sampler" not in user
        assumed = _assumed(shuffled=shuffled, full_batches=not spec.batched)
    arguments += ["    collate_fn=collate_fn,"] * ("collate" in user) + assumed
    return "\n".join(_loader_call(config, caveat, ["dataset", *own], arguments)) + "\n"


def _assumed(*, shuffled: bool, full_batches: bool) -> list[str]:
    """The comment that names the order and batching bench read the data in where the user gave none:
    pasted as arguments, they would change how the user trains without being asked."""
    said = ["shuffle=True"] * shuffled + ["drop_last=True"] * full_batches
    if not said:
        return []
    how = ", ".join(["shuffled"] * shuffled + ["in full batches"] * full_batches)
    names = " and ".join(name.split("=")[0] for name in said)
    return [f"    # bench read the data {how} ({', '.join(said)}):", f"    # set {names} as you train"]


def _loader_call(
    config: LoaderConfig, caveat: str, expects: Sequence[str], arguments: list[str], imports: Sequence[str] = ()
) -> list[str]:
    """`loader = DataLoader(...)` with `arguments` and the winning config's, headed by what it expects."""
    names = ", ".join(f"`{name}`" for name in expects)
    lines = [f"# NOT FULLY TUNED: {caveat}"] if caveat else []
    lines.append(f"# Measured best by `python -m bootstrap bench`; expects {names}.")
    lines += [*imports, "from torch.utils.data import DataLoader", "", "loader = DataLoader(", "    dataset,"]
    lines += arguments + [f"    {name}={value!r}," for name, value in config.dataloader_kwargs().items()]
    return lines + [")"]


def _training_loop(config: LoaderConfig, device_type: str) -> list[str]:
    """The built-in workload's loop: uint8 images scaled to float on the device, with the winner's settings."""
    copy = f"to(device, non_blocking={config.non_blocking})"
    layout = ".contiguous(memory_format=torch.channels_last)" if config.channels_last else ""
    model_format = ", memory_format=torch.channels_last" if config.channels_last else ""
    loss = "loss = F.cross_entropy(model(images), labels)"
    lines = ["torch.backends.cudnn.benchmark = True"] if device_type == "cuda" else []
    lines += [
        f"model = model.to(device{model_format}).train()",
        "for images, labels in loader:",
        f"    images = images.{copy}{layout}.float().div_(255)",
        f"    labels = labels.{copy}",
    ]
    if config.amp_dtype:
        autocast = f'torch.autocast(device_type="{device_type}", dtype=torch.{config.amp_dtype})'
        lines += [f"    with {autocast}:", f"        {loss}"]
    else:
        lines.append(f"    {loss}")
    return lines + ["    optimizer.zero_grad(set_to_none=True)", "    loss.backward()", "    optimizer.step()"]


# --------------------------------------------------------------------------- text


DETAILS = '---- details: docs/benchmark.md, "Reading the report", explains them ----'
PASTE = "# ---- paste: the winning DataLoader and loop settings ----"


def render_text(result: BenchResult, *, verbose: bool = False) -> str:
    """The human report: the verdict and the advice in plain words; under DETAILS the header and notes,
    measurements, headline figures, tuner, sampler and verdicts (`verbose`: with their evidence); the
    snippet last."""
    d = result.device
    header = f"bench: {d.get('type', '?')} ({d.get('name', '?')}), torch {d.get('torch', '?')}, "
    header += f"{d.get('cpus_usable', '?')} CPUs, model {d.get('model', '?')}, {_workload_line(result.workload)}; "
    header += f"{result.seconds:.1f} s of a {result.budget_s:g} s budget" + ("  [PARTIAL]" if result.partial else "")
    lines = [*summary_lines(result), "", DETAILS, header] + [f"note: {note}" for note in result.notes]
    if result.measurements:
        lines += ["", _measurement_table(result)]
    lines += ["", *_headline(result.metrics), *_tuner_lines(result), _sampler_line(result)]
    if result.aggregate:
        lines.append(_aggregate_line(result.aggregate))
    if result.checks:
        lines += ["", render_table(list(result.checks), show_detail=verbose).rstrip("\n")]
    if result.snippet:
        lines += ["", PASTE, result.snippet.rstrip("\n")]
    return "\n".join(lines) + "\n"


def _num(value: Optional[float], fmt: str = ",.1f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def _workload_line(w: dict[str, Any]) -> str:
    user = w.get("user")
    if not user:
        size = f"3x{w.get('crop_size')}x{w.get('crop_size')}"
        costs = f"cpu_ms {w.get('cpu_ms'):g}, io_ms {w.get('io_ms'):g}"
        return f"batch {w.get('batch_size')} x {size} uint8 from {w.get('storage')} ({costs})"
    own = " (its own batches)" if w.get("batched") else ""
    drawn = "".join(f", {name.replace('_', ' ')} {user[name]}" for name in ("sampler", "batch_sampler") if name in user)
    return f"batch {w.get('batch_size')}{own} from dataset {user.get('dataset')}{drawn}"


def _measurement_table(result: BenchResult) -> str:
    header = ("PHASE", "CONFIG", "SAMPLES/S", "SECONDS", "STEPS", "WAIT%", "CV%")
    rows = [header]
    for x in result.measurements:
        rate = f"{x.samples_per_s:,.1f}"
        cv = f"{100 * x.cv:.1f}" + ("*" if x.truncated else "")
        rows.append((x.phase, x.label, rate, f"{x.seconds:.2f}", str(x.steps), f"{x.host_wait_pct:.0f}", cv))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) if i < 2 else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    if any(x.truncated for x in result.measurements):
        lines.append("* window cut short by the phase budget")
    return "\n".join(lines)


def _headline(m: Metrics) -> list[str]:
    """The rates, efficiency and stalls; sizing, loader scaling and the micro-benchmarks where measured."""
    ceiling = f"ceiling {_num(m.ceiling_samples_per_s)} samples/s (batch resident on the device)"
    if m.ceiling_h2d_samples_per_s:
        ceiling += f", with the copy {_num(m.ceiling_h2d_samples_per_s)}"
    spread = f"(min {_num(m.tuned_min_samples_per_s)}, max {_num(m.tuned_max_samples_per_s)})"
    rates = f"naive   {_num(m.naive_samples_per_s)} samples/s; tuned {_num(m.tuned_samples_per_s)} samples/s {spread}; "
    rates += f"re-measured {_num(m.recheck_samples_per_s)} samples/s with a fresh loader"
    speedup = f"speedup {_num(m.speedup, '.2f')}x over naive (predicted {_num(m.predicted_speedup, '.2f')}x)"
    stall = f"host wait {_num(m.stall_host_wait_pct, '.1f')}%, differential {_num(m.stall_differential_pct, '.1f')}%"
    stall += f", device idle {_num(m.stall_device_idle_pct, '.1f')}%"
    lines = [ceiling, rates, f"efficiency {_efficiency(m)}; {speedup}; stall: {stall}"]
    if m.cpu_s_per_sample:
        lines.append(_sizing_line(m, m.cpu_s_per_sample))
    if m.loader_scaling_efficiency is not None:
        scaling = ", ".join(f"S({w}) = {v:,.0f}/s" for w, v in sorted(m.loader_scaling.items()))
        lines.append(f"loader scaling: {scaling}; efficiency {m.loader_scaling_efficiency:.2f}")
    extra = _device_figures(m)
    return lines + (["; ".join(extra)] if extra else [])


def _efficiency(m: Metrics) -> str:
    over = m.tuned_over_ceiling
    if m.efficiency is None and over is not None:
        return f"- (tuned {over:.2f}x the ceiling: a measurement error, see bench.efficiency)"
    return _num(m.efficiency, ".2f")


def _sizing_line(m: Metrics, cpu_s_per_sample: float) -> str:
    wall = _num((m.wall_s_per_sample or 0) * 1000, ".2f")
    sizing = f"sizing: c = {cpu_s_per_sample * 1000:.2f} ms CPU and l = {wall} ms wall per sample; "
    sizing += f"this host can feed ~{_num(m.feedable_samples_per_s, ',.0f')} samples/s; "
    sizing += f"the ceiling needs ~{_num(m.cores_per_device_needed, '.1f')} loader cores "
    sizing += f"and ~{_num(m.workers_per_device_needed, '.1f')} workers in flight"
    if m.cores_needed_for_target is not None:
        sizing += f"; the target rate needs ~{m.cores_needed_for_target:.1f} cores"
    return sizing


def _device_figures(m: Metrics) -> list[str]:
    """Matmul, copies (CUDA only), peak memory, first batch: those measured."""
    figures = []
    if m.matmul_tflops is not None:
        figures.append(f"matmul {m.matmul_tflops:.3f} TFLOP/s")
    if m.h2d_pinned_gb_per_s is not None:
        figures.append(f"H2D pinned {m.h2d_pinned_gb_per_s:.1f} / pageable {_num(m.h2d_pageable_gb_per_s)} GB/s")
    if m.d2h_pinned_gb_per_s is not None:
        figures.append(f"D2H pinned {m.d2h_pinned_gb_per_s:.1f} / pageable {_num(m.d2h_pageable_gb_per_s)} GB/s")
    if m.peak_memory_mib is not None:
        figures.append(f"peak memory {m.peak_memory_mib:,.0f} MiB")
    if m.time_to_first_batch_s is not None:
        figures.append(f"first batch {m.time_to_first_batch_s:.2f} s")
    return figures


def _tuner_lines(result: BenchResult) -> list[str]:
    t = result.tuning
    if t.predicted_workers is None:
        return []
    measured = result.metrics.tune_candidates_measured
    searched = f" ({measured:.0f} measured)" if measured is not None and measured < len(t.candidates) else ""
    candidates = ", ".join(map(str, t.candidates)) + searched
    rounds = f"{len(t.rounds)} rounds in {t.seconds:.1f} s of {t.budget_s:.1f} s"
    stopped = "; stopped early" if t.stopped_early else ""
    prediction = f"W* = {t.predicted_workers} (cap {t.cap}: {t.cap_reason})"
    lines = [f"tuner: {prediction}; candidates {candidates}; {rounds}{stopped}"]
    for name, _tried, kept, gain, noise in t.knobs:
        if math.isnan(gain):
            lines.append(f"  knob {name}: failed (its loader died) -> dropped")
        else:
            lines.append(f"  knob {name}: {gain:+.1%} vs noise floor {noise:.1%} -> {'kept' if kept else 'dropped'}")
    if t.winner is not None:
        lines.append(f"  winner: {t.winner.label}")
    return lines


def _sampler_line(result: BenchResult) -> str:
    s = result.sampler
    parts = []
    if s.gpu is not None and s.gpu.count:
        g = s.gpu
        spread = f"p10 {g.p10:.0f}% p50 {g.p50:.0f}% p95 {g.p95:.0f}%"
        parts.append(f"GPU util mean {g.mean:.0f}% {spread} ({g.source}, {g.count} samples)")
    elif s.reason:
        parts.append(f"GPU util: {s.reason}")
    if s.gpm_sm_active is not None:
        parts.append(f"SM active {s.gpm_sm_active:.2f} (GPM)")
    if s.host_cpu is not None and s.host_cpu.count:
        parts.append(f"host CPU busy mean {s.host_cpu.mean:.0f}% p95 {s.host_cpu.p95:.0f}%")
    parts.append(f"sampler overhead {s.overhead_pct:.2f}% ({s.polls} polls)")
    return "sampler: " + "; ".join(parts)


def _aggregate_line(a: dict[str, Any]) -> str:
    tuned = f"aggregate tuned {_num(a.get('tuned_samples_per_s'))} samples/s"
    scaling = f"scaling efficiency {_num(a.get('scaling_efficiency'), '.2f')}"
    worst = f"worst rank {a.get('worst_rank')} (efficiency {_num(a.get('worst_efficiency'), '.2f')})"
    if a.get("communication_loss_pct") is not None:
        ddp = f"DDP ceiling {_num(a.get('ddp_ceiling_samples_per_s'))} samples/s"
        ddp += f", communication loss {_num(a.get('communication_loss_pct'), '.1f')}%"
    else:
        ddp = f"no DDP ceiling: {a.get('ddp_ceiling_reason') or 'not measured'}"
    return f"ranks: {a.get('world_size')}; {tuned}; {scaling}; {worst}; {ddp}"
