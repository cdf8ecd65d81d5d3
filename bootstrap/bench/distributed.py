"""`bench --distributed` under torchrun: every rank runs the phases, rank 0 aggregates.

Backends, each rank's CPUs, the DDP ceiling and the worst rank: docs/benchmark.md, "Many GPUs".
Shell equivalent: `torchrun --nproc-per-node N -m bootstrap bench --distributed`.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any, Optional, Sequence

from bootstrap.bench.config import BenchOptions, Thresholds
from bootstrap.bench.host import usable_cpus
from bootstrap.bench.phases import resident_batches
from bootstrap.bench.report import payload
from bootstrap.bench.results import BenchResult, LoaderConfig
from bootstrap.bench.run import run_bench
from bootstrap.bench.state import ProgressFn, RunState
from bootstrap.bench.step import StepFailed, Trainer
from bootstrap.bench.verdicts import VerdictFacts, shm_check
from bootstrap.errors import RankLostError
from bootstrap.report import SEVERITY, Check, Status
from bootstrap.torchrun import gpu_of_rank, init_process_group, merge_checks, torchrun_env

DDP_SECONDS = 3.0
Row = dict[str, Any]  # one rank's figures in the aggregate

# A collective's RuntimeError that means a peer rank is gone, as gloo and NCCL word it.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "NCCL communicator")
_RANK_LOST = "another rank of the job went away (interrupted, or crashed: its own output says why)"
_STALLS = (("stall_device_idle_pct", "device idle"), ("stall_host_wait_pct", "host wait"))
_WORST_RANK_FIX = "one rank's stall shows as compute on the others"


def run_distributed(options: BenchOptions, progress: Optional[ProgressFn] = None) -> tuple[BenchResult, bool]:
    """(result, is_reporter): rank 0 gets the aggregate and reports; other ranks get their own result."""
    import torch
    import torch.distributed as dist

    ranks = torchrun_env(os.environ)
    cuda = options.device != "cpu" and torch.cuda.is_available()
    index = gpu_of_rank(ranks["local_rank"], torch.cuda.device_count(), os.environ) if cuda else 0
    if cuda:
        torch.cuda.set_device(index)
    device = f"cuda:{index}" if cuda else "cpu"
    cpus = max(1, (options.cpus or usable_cpus()) // max(1, ranks["local_world_size"]))
    rank_options = replace(options, device=device, cpus=cpus)  # each rank's samples go to its own temp dir
    timeout = timedelta(seconds=options.budget_s + 300)
    init_process_group(dist, "nccl" if cuda else "gloo", timeout, os.environ)
    try:
        return _run_ranks(rank_options, progress, ranks, dist, options)
    except RuntimeError as exc:
        if not lost_a_rank(exc, dist):
            raise
        cause = str(exc).strip().splitlines()[0][:200]
        message = f"rank {ranks['rank']}: {_RANK_LOST}, so this one stopped without a report: {cause}"
        raise RankLostError(message) from None
    finally:
        dist.destroy_process_group()


def lost_a_rank(exc: RuntimeError, dist: Any) -> bool:
    """Whether `exc`, raised by a collective, means a peer rank is gone (c10d's DistError, or a closed
    or reset connection)."""
    text = str(exc)
    return isinstance(exc, getattr(dist, "DistError", ())) or any(sign in text for sign in _PEER_GONE)


def _run_ranks(
    rank_options: BenchOptions, progress: Optional[ProgressFn], ranks: dict[str, int], dist: Any, options: BenchOptions
) -> tuple[BenchResult, bool]:
    """This rank's run, its DDP ceiling, and on rank 0 the aggregate of every rank's."""
    ddp: list[tuple[Optional[float], str]] = []
    result = run_bench(
        rank_options,
        progress if ranks["rank"] == 0 else None,
        barrier=dist.barrier,
        rank=ranks,
        after=lambda state: ddp.append(ddp_ceiling(state, dist)),
    )
    if result.partial:
        # A Ctrl-C reaches every rank at a different point: gathering could hang. Each keeps its own.
        return replace(result, notes=result.notes + ("interrupted: ranks not aggregated",)), ranks["rank"] == 0
    rate, why = ddp[0] if ddp else (None, "not measured: the run ended before it")
    own = {
        "rank": ranks["rank"],
        "host": socket.gethostname(),
        "checks": [c.to_dict() for c in result.checks],
        "extra": payload(result),
        "ddp_ceiling_samples_per_s": rate,
        "ddp_ceiling_reason": why,
    }
    gathered: list[Any] = [None] * ranks["world_size"]
    dist.all_gather_object(gathered, own)
    if ranks["rank"] != 0:
        return result, False
    return aggregate(result, gathered, options.thresholds.values), True


def ddp_steps(state: RunState) -> int:
    """DDP_SECONDS (or 5 % of the budget, if shorter) of steps at the ceiling's own step time: 5 to 200."""
    seconds = min(DDP_SECONDS, 0.05 * state.options.budget_s)
    return max(5, min(200, int(seconds / state.step_s) if state.step_s else 0))


def ddp_ceiling(state: RunState, dist: Any) -> tuple[Optional[float], str]:
    """(samples/s, '') of DDP steps on the ceiling's own batches, resident on the device, with its model,
    step and step config (the user's, on their workload), counted as the ceiling counts them, the same
    step count on every rank (rank 0's); (None, why) where the workload cannot train under DDP."""
    steps = [ddp_steps(state)]
    dist.broadcast_object_list(steps, src=0)
    state.trainers.clear()  # the run's models are done with: the device holds the DDP one alone
    try:
        return _time_ddp(state, steps[0], dist), ""
    except Exception as exc:  # noqa: BLE001 (the user's model or step under DDP may raise anything)
        if isinstance(exc, RuntimeError) and lost_a_rank(exc, dist):
            raise
        error = exc.error if isinstance(exc, StepFailed) else exc
        first = (str(error).strip().splitlines() or [""])[0][:200]
        return None, f"the workload did not train under DistributedDataParallel: {type(error).__name__}: {first}"


def _time_ddp(state: RunState, steps: int, dist: Any) -> float:
    from torch.nn.parallel import DistributedDataParallel

    device = state.device
    assert device is not None
    config = LoaderConfig(amp_dtype=state.step_config.amp_dtype, channels_last=state.step_config.channels_last)
    step_s = state.workload.step_ms / 1000.0  # as the ceiling's trainer (`RunState.trainer`)
    trainer = Trainer(state.model_name, state.workload.num_classes, device, config, step_s=step_s, user=state.user)
    trainer.model = DistributedDataParallel(trainer.model, device_ids=[device.index] if device.is_cuda else None)
    take, counted = resident_batches(state, trainer)
    trainer.run(take())  # DDP's first step builds its buckets
    device.sync()
    dist.barrier()
    samples, started = 0, time.perf_counter()
    for _ in range(steps):
        batch = take()
        samples += state.workload.batch_size if counted is None else counted(batch)
        trainer.run(batch)
    device.sync()
    return samples / (time.perf_counter() - started)


def aggregate(own: BenchResult, gathered: Sequence[dict[str, Any]], thresholds: Thresholds) -> BenchResult:
    """Rank 0's report: every rank's figures, the worst status per check, the worst rank, scaling."""
    rows = [_rank_row(item) for item in sorted(gathered, key=lambda g: g["rank"])]
    worst = min(rows, key=_worst_first)
    tuned = sum(r["tuned_samples_per_s"] or 0.0 for r in rows)
    ceiling = sum(r["ceiling_samples_per_s"] or 0.0 for r in rows)
    ddp = [r["ddp_ceiling_samples_per_s"] for r in rows if r["ddp_ceiling_samples_per_s"]]
    ddp_total = sum(ddp) if len(ddp) == len(rows) else None
    summary = {
        "world_size": len(rows),
        "tuned_samples_per_s": tuned,
        "ceiling_samples_per_s": ceiling,
        "scaling_efficiency": tuned / ceiling if ceiling else None,
        "ddp_ceiling_samples_per_s": ddp_total,
        "worst_rank": worst["rank"],
        "worst_efficiency": worst["efficiency"],
        "ranks": rows,
    }
    if ddp_total and ceiling:
        summary["communication_loss_pct"] = 100.0 * (1.0 - ddp_total / ceiling)
    else:
        summary["ddp_ceiling_reason"] = _no_ddp_ceiling(rows, bool(ddp_total))
    checks = [_shm_across_ranks(rows, thresholds) if c.id == "bench.shm" else c for c in merge_checks(gathered)]
    checks.insert(0, _worst_rank_check(worst, checks, summary))
    return replace(own, checks=tuple(checks), aggregate=summary, ranks=tuple(gathered))


def _rank_row(item: dict[str, Any]) -> Row:
    metrics = item["extra"]["metrics"]
    best = item["extra"].get("best") or {}
    return {
        "rank": item["rank"],
        "host": item["host"],
        "efficiency": metrics.get("efficiency"),
        "tuned_samples_per_s": metrics.get("tuned_samples_per_s"),
        "ceiling_samples_per_s": metrics.get("ceiling_samples_per_s"),
        "naive_samples_per_s": metrics.get("naive_samples_per_s"),
        "stall_device_idle_pct": metrics.get("stall_device_idle_pct"),
        "stall_host_wait_pct": metrics.get("stall_host_wait_pct"),
        "config": best.get("label"),
        "shm_need_mib": metrics.get("shm_need_mib") or 0.0,
        "shm_free_mib": item["extra"]["device"].get("shm_free_mib"),
        "ddp_ceiling_samples_per_s": item.get("ddp_ceiling_samples_per_s"),
        "ddp_ceiling_reason": item.get("ddp_ceiling_reason") or "",
    }


def _no_ddp_ceiling(rows: list[Row], measured: bool) -> str:
    """Why the aggregate has no communication loss: the first rank without a DDP ceiling, and its reason."""
    if measured:
        return "no single-GPU ceiling to compare the DDP ceiling with"
    row = next(r for r in rows if not r["ddp_ceiling_samples_per_s"])
    return f"rank {row['rank']}: {row['ddp_ceiling_reason'] or 'not measured'}; communication loss not reported"


def _worst_first(row: Row) -> tuple[float, float]:
    """Sort key: the lowest tuned efficiency (unknown lowest of all), then the highest stall."""
    efficiency = row["efficiency"] if row["efficiency"] is not None else -1.0
    stall = row["stall_device_idle_pct"] or row["stall_host_wait_pct"] or 0.0
    return efficiency, -stall


def _shm_across_ranks(rows: list[Row], thresholds: Thresholds) -> Check:
    """Ranks on one host share /dev/shm: sum their needs per host, report the tightest host."""
    hosts: dict[str, list[Row]] = {}
    for row in rows:
        hosts.setdefault(row["host"], []).append(row)
    checks = [shm_check(_host_shm(members), thresholds) for members in hosts.values()]
    return max(checks, key=lambda c: SEVERITY[c.status])


def _host_shm(members: list[Row]) -> VerdictFacts:
    free = [m["shm_free_mib"] for m in members if m["shm_free_mib"] is not None]
    least_free = min(free) if free else None
    need = sum(m["shm_need_mib"] for m in members)
    return VerdictFacts(device_type="", shm_free_mib=least_free, shm_need_mib=need, local_ranks=len(members))


def _worst_rank_check(worst: Row, checks: list[Check], summary: dict[str, Any]) -> Check:
    """The worst rank, with the status of the efficiency check across ranks."""
    efficiency = next((c for c in checks if c.id == "bench.efficiency"), None)
    status = Status.SKIP if efficiency is None else efficiency.status
    parts = [f"rank {worst['rank']} on {worst['host']}"]
    if worst["efficiency"] is not None:
        parts.append(f"efficiency {worst['efficiency']:.2f}")
    for key, name in _STALLS:
        if worst[key] is not None:
            parts.append(f"{name} {worst[key]:.0f}%")
    expected = f"every rank's efficiency passes; aggregate {summary['tuned_samples_per_s']:,.0f} samples/s"
    scaling = summary.get("scaling_efficiency")
    if scaling is not None:
        expected += f", scaling {scaling:.2f}"
    passed = status in (Status.OK, Status.SKIP)
    remedy = "" if passed else f"fix rank {worst['rank']} first: {_WORST_RANK_FIX}"
    detail = "worst = lowest tuned efficiency, then highest stall"
    return Check("bench.worst_rank", status, ", ".join(parts), expected, remedy, detail)
