"""`bench --distributed` under torchrun: every rank runs the phases, rank 0 aggregates.

Backend NCCL on GPUs, gloo on CPU. Each rank gets affinity / LOCAL_WORLD_SIZE
CPUs for its loader search. Phase starts and tuned windows are aligned with
`dist.barrier()`; after the run a short synthetic-data DDP ceiling (fixed
step count, decided by rank 0) separates communication loss from loader
loss. One rank's stall shows up as compute on the others (DS-Analyzer), so
the aggregate names the worst rank by efficiency and device-idle stall.

Shell equivalent: `torchrun --nproc-per-node N -m bootstrap bench --distributed`.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from bootstrap.bench.config import BenchOptions
from bootstrap.bench.results import BenchResult
from bootstrap.bench.run import run_bench
from bootstrap.bench.state import ProgressFn
from bootstrap.errors import RankLostError
from bootstrap.report import SEVERITY, Check, Status
from bootstrap.torchrun import check_gpu_of_rank, init_process_group, merge_checks, torchrun_env

DDP_SECONDS = 3.0


def run_distributed(options: BenchOptions, progress: Optional[ProgressFn] = None) -> Tuple[BenchResult, bool]:
    """(result, is_reporter): rank 0 gets the aggregate and reports; other ranks get their own result."""
    import torch
    import torch.distributed as dist

    from bootstrap.bench.host import usable_cpus

    ranks = torchrun_env(os.environ)
    cuda = options.device != "cpu" and torch.cuda.is_available()
    if cuda:
        check_gpu_of_rank(ranks["local_rank"], torch.cuda.device_count())
        torch.cuda.set_device(ranks["local_rank"])
    device = f"cuda:{ranks['local_rank']}" if cuda else "cpu"
    cpus = max(1, (options.cpus or usable_cpus()) // max(1, ranks["local_world_size"]))
    rank_options = replace(options, device=device, cpus=cpus)  # each rank's samples go to its own temp dir
    init_process_group(dist, "nccl" if cuda else "gloo", timedelta(seconds=options.budget_s + 300), os.environ)
    try:
        return _run_ranks(rank_options, progress, ranks, dist, options)
    except RuntimeError as exc:
        if not lost_a_rank(exc, dist):
            raise
        raise RankLostError(
            f"rank {ranks['rank']}: another rank of the job went away (interrupted, or crashed: "
            f"its own output says why), so this one stopped without a report: "
            f"{str(exc).strip().splitlines()[0][:200]}"
        ) from None
    finally:
        dist.destroy_process_group()


def lost_a_rank(exc: RuntimeError, dist: Any) -> bool:
    """Whether `exc`, raised by a collective, means a peer rank is gone: c10d's DistError (DistBackendError,
    DistNetworkError), or gloo's and NCCL's own RuntimeErrors about a closed or reset connection."""
    text = str(exc)
    return isinstance(exc, getattr(dist, "DistError", ())) or any(
        sign in text for sign in ("Connection closed by peer", "Connection reset by peer", "NCCL communicator")
    )


def _run_ranks(
    rank_options: BenchOptions, progress: Optional[ProgressFn], ranks: Dict[str, int], dist: Any, options: BenchOptions
) -> Tuple[BenchResult, bool]:
    """This rank's run, its DDP ceiling, and on rank 0 the aggregate of every rank's."""
    from bootstrap.bench import report

    result = run_bench(rank_options, progress if ranks["rank"] == 0 else None, barrier=dist.barrier, rank=ranks)
    if result.partial:
        # A Ctrl-C reaches every rank at a different point: gathering could hang. Each keeps its own.
        return replace(result, notes=result.notes + ("interrupted: ranks not aggregated",)), ranks["rank"] == 0
    ddp = ddp_ceiling(result, rank_options, dist)
    own = {
        "rank": ranks["rank"],
        "host": socket.gethostname(),
        "checks": [c.to_dict() for c in result.checks],
        "extra": report.payload(result),
        "ddp_ceiling_samples_per_s": ddp,
    }
    gathered: List[Any] = [None] * ranks["world_size"]
    dist.all_gather_object(gathered, own)
    if ranks["rank"] != 0:
        return result, False
    return aggregate(result, gathered, options.thresholds.values), True


def ddp_ceiling(result: BenchResult, options: BenchOptions, dist: Any) -> Optional[float]:
    """Samples/s of DDP steps on a resident synthetic batch, the same step count on every rank."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from bootstrap.bench.device import Device
    from bootstrap.bench.results import LoaderConfig
    from bootstrap.bench.step import Trainer

    spec = options.workload
    rate = result.metrics.ceiling_samples_per_s or 0.0
    steps = [max(5, min(200, int(rate / spec.batch_size * min(DDP_SECONDS, 0.05 * options.budget_s))))]
    dist.broadcast_object_list(steps, src=0)
    device = Device(options.device)
    config = LoaderConfig(
        amp_dtype=result.best.amp_dtype if result.best else None,
        channels_last=bool(result.best and result.best.channels_last),
    )
    trainer = Trainer(result.device.get("model", "tiny"), spec.num_classes, device, config)
    ids = [device.torch_device.index] if device.is_cuda else None
    trainer.model = DistributedDataParallel(trainer.model, device_ids=ids)
    images = torch.randint(0, 256, (spec.batch_size, 3, spec.crop_size, spec.crop_size), dtype=torch.uint8)
    labels = torch.randint(0, spec.num_classes, (spec.batch_size,))
    images, labels = trainer.to_device(images, labels, non_blocking=False)
    trainer.step_on_device(images, labels)  # DDP's first step builds its buckets
    device.sync()
    dist.barrier()
    started = time.perf_counter()
    for _ in range(steps[0]):
        trainer.step_on_device(images, labels)
    device.sync()
    return steps[0] * spec.batch_size / (time.perf_counter() - started)


def aggregate(own: BenchResult, gathered: Sequence[Mapping[str, Any]], thresholds: Any) -> BenchResult:
    """Rank 0's report: every rank's figures, the worst status per check, the worst rank, scaling."""
    from bootstrap.bench.verdicts import VerdictFacts, shm_check

    rows = []
    for item in sorted(gathered, key=lambda g: g["rank"]):
        metrics = item["extra"]["metrics"]
        best = item["extra"].get("best") or {}
        rows.append(
            {
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
            }
        )
    worst = min(
        rows,
        key=lambda r: (
            r["efficiency"] if r["efficiency"] is not None else -1.0,
            -(r["stall_device_idle_pct"] or r["stall_host_wait_pct"] or 0.0),
        ),
    )
    tuned = sum(r["tuned_samples_per_s"] or 0.0 for r in rows)
    ceiling = sum(r["ceiling_samples_per_s"] or 0.0 for r in rows)
    ddp = [r["ddp_ceiling_samples_per_s"] for r in rows if r["ddp_ceiling_samples_per_s"]]
    summary = {
        "world_size": len(rows),
        "tuned_samples_per_s": tuned,
        "ceiling_samples_per_s": ceiling,
        "scaling_efficiency": tuned / ceiling if ceiling else None,
        "ddp_ceiling_samples_per_s": sum(ddp) if len(ddp) == len(rows) else None,
        "worst_rank": worst["rank"],
        "worst_efficiency": worst["efficiency"],
        "ranks": rows,
    }
    if summary["ddp_ceiling_samples_per_s"] and ceiling:
        summary["communication_loss_pct"] = 100.0 * (1.0 - summary["ddp_ceiling_samples_per_s"] / ceiling)
    checks = merge_checks(gathered)
    checks = [
        _shm_across_ranks(rows, thresholds, shm_check, VerdictFacts) if c.id == "bench.shm" else c for c in checks
    ]
    checks.insert(0, _worst_rank_check(worst, checks, summary))
    return replace(own, checks=tuple(checks), aggregate=summary, ranks=tuple(gathered))


def _shm_across_ranks(rows: List[Dict[str, Any]], thresholds: Any, shm_check: Any, facts_type: Any) -> Check:
    """Ranks on one host share /dev/shm: sum their needs per host, report the tightest host."""
    hosts: Dict[str, List[Dict[str, Any]]] = {}
    for row in rows:
        hosts.setdefault(row["host"], []).append(row)
    results = []
    for members in hosts.values():
        free = [m["shm_free_mib"] for m in members if m["shm_free_mib"] is not None]
        need = sum(m["shm_need_mib"] for m in members)
        results.append(
            shm_check(
                facts_type(
                    device_type="",
                    shm_free_mib=min(free) if free else None,
                    shm_need_mib=need,
                    local_ranks=len(members),
                ),
                thresholds,
            )
        )
    return max(results, key=lambda c: SEVERITY[c.status])


def _worst_rank_check(worst: Dict[str, Any], checks: List[Check], summary: Dict[str, Any]) -> Check:
    eff = next((c for c in checks if c.id == "bench.efficiency"), None)
    status = Status.SKIP if eff is None else eff.status
    parts = [f"rank {worst['rank']} on {worst['host']}"]
    if worst["efficiency"] is not None:
        parts.append(f"efficiency {worst['efficiency']:.2f}")
    for key, name in (("stall_device_idle_pct", "device idle"), ("stall_host_wait_pct", "host wait")):
        if worst[key] is not None:
            parts.append(f"{name} {worst[key]:.0f}%")
    scaling = summary.get("scaling_efficiency")
    return Check(
        "bench.worst_rank",
        status,
        ", ".join(parts),
        f"every rank's efficiency passes; aggregate {summary['tuned_samples_per_s']:,.0f} samples/s"
        + (f", scaling {scaling:.2f}" if scaling is not None else ""),
        ""
        if status in (Status.OK, Status.SKIP)
        else f"fix rank {worst['rank']} first: one rank's stall shows as compute on the others",
        "worst = lowest tuned efficiency, then highest stall",
    )
