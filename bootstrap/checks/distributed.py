"""`verify --distributed` under torchrun: every rank verifies its env and GPU, then the ranks compare
what they run (`dist.same_env`) and time an all-reduce (`dist.all_reduce`); rank 0 reports.
Docs: docs/checks.md, "Many GPUs, many nodes: torchrun".
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any, Callable, Mapping, Optional, Sequence

from bootstrap.checks.verify import VerifyOptions, VerifyResult, run_verify
from bootstrap.fsutil import MIB
from bootstrap.report import SEVERITY, Check, Status
from bootstrap.torchrun import gpu_of_rank, init_process_group, merge_checks, torchrun_env

ALL_REDUCE_MIB = {"cuda": 256, "cpu": 16}  # nccl-tests' large-message regime on GPUs; gloo is slow
ALL_REDUCE_ITERATIONS = {"cuda": 20, "cpu": 5}
# What must agree across ranks (fail), and what should (warn): rank facts keys.
SAME = (("packages", "the packages installed"),)
ALIKE = (("driver", "the NVIDIA driver"),)


def run_verify_distributed(
    options: VerifyOptions, report: Callable[[VerifyResult], None], environ: Mapping[str, str] = os.environ
) -> VerifyResult:
    """Every rank gathers every rank's checks and merges them alike, so each returns the same
    verdict; rank 0 `report`s it, and the others wait for that before they return (torchrun
    stops every rank as soon as one exits with an error)."""
    import torch
    import torch.distributed as dist

    ranks = torchrun_env(environ, "verify")
    cuda = torch.cuda.is_available()
    index = gpu_of_rank(ranks["local_rank"], torch.cuda.device_count(), environ) if cuda else None
    if index is not None:
        torch.cuda.set_device(index)
    init_process_group(dist, "nccl" if cuda else "gloo", timedelta(seconds=600), environ)
    try:
        result = run_verify(replace(options, bench=False, gpu=index))
        device = torch.device("cuda", index) if index is not None else torch.device("cpu")
        sums_right, seconds = all_reduce_trial(torch, dist, device, ranks["rank"], ranks["world_size"])
        own = {
            "rank": ranks["rank"],
            "host": socket.gethostname(),
            "checks": [c.to_dict() for c in result.checks],
            "facts": rank_facts(result),
            "all_reduce_ok": sums_right,
            "all_reduce_s": seconds,
        }
        gathered: list[Any] = [None] * ranks["world_size"]
        dist.all_gather_object(gathered, own)
        checks = [c for c in merge_checks(gathered) if c.id != "bench"]  # run_verify's "--no-bench" skip
        checks += [
            same_env_check(gathered),
            all_reduce_check(gathered, device.type, dist.get_backend()),
            Check(
                "bench",
                Status.SKIP,
                "--distributed",
                "the acceptance benchmark passes",
                detail="every rank's loaders: `torchrun ... -m bootstrap bench --distributed`",
            ),
        ]
        ranked = tuple({k: g[k] for k in ("rank", "host", "facts")} for g in sorted(gathered, key=lambda g: g["rank"]))
        merged = replace(result, checks=tuple(checks), ranks=ranked)
        if ranks["rank"] == 0:
            report(merged)
            sys.stdout.flush()
        dist.barrier()  # the verdict is out before any rank exits
        return merged
    finally:
        dist.destroy_process_group()


def rank_facts(result: VerifyResult) -> dict[str, Optional[str]]:
    """What a rank runs, as the other ranks must see it too: a digest of every package the env's
    install record lists (conda sha256s, pip versions and sha256s: torch included), and the driver."""
    from bootstrap.prefix import read_install_record

    record = read_install_record(result.prefix) if result.prefix is not None and result.prefix.is_dir() else None
    nvidia = result.facts.nvidia if result.facts is not None else None
    packages = None
    if record is not None:
        digest = hashlib.sha256(json.dumps([record.conda, record.pip], sort_keys=True).encode()).hexdigest()
        packages = f"{digest[:12]} ({len(record.conda)} conda, {len(record.pip)} pip, {record.platform})"
    return {"packages": packages, "driver": nvidia.driver_version if nvidia is not None else None}


def all_reduce_trial(torch: Any, dist: Any, device: Any, rank: int, world_size: int) -> tuple[bool, Optional[float]]:
    """(every element summed right, seconds per all-reduce of ALL_REDUCE_MIB float32)."""
    probe = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(probe)
    right = bool((probe == world_size * (world_size + 1) / 2).all().item())
    if world_size < 2:
        return right, None
    data = torch.ones(ALL_REDUCE_MIB[device.type] * MIB // 4, dtype=torch.float32, device=device)
    iterations = ALL_REDUCE_ITERATIONS[device.type]
    for _ in range(2):  # NCCL sets up its rings and buffers on the first calls
        dist.all_reduce(data)
    _sync(torch, device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(data)
    _sync(torch, device)
    return right, (time.perf_counter() - started) / iterations


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bus_bandwidth_gb_s(nbytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s as nccl-tests reports an all-reduce: busbw = algbw x 2(n-1)/n."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world_size - 1) / world_size


def all_reduce_check(gathered: Sequence[Mapping[str, Any]], device_type: str, backend: str) -> Check:
    cid, n = "dist.all_reduce", len(gathered)
    expected = "the right sum on every rank; bus bandwidth recorded (nccl-tests' busbw)"
    wrong = [g["rank"] for g in gathered if not g["all_reduce_ok"]]
    if wrong:
        return Check(
            cid,
            Status.FAIL,
            f"wrong sum on rank(s) {', '.join(map(str, sorted(wrong)))} of {n}",
            expected,
            f"`NCCL_DEBUG=INFO torchrun ... -m bootstrap verify --distributed` shows the {backend} transport in use",
        )
    timed = [g for g in gathered if g["all_reduce_s"]]
    if not timed:
        return Check(cid, Status.OK, "sums right; one rank: no bandwidth to measure", expected)
    slowest = max(timed, key=lambda g: g["all_reduce_s"])
    mib = ALL_REDUCE_MIB[device_type]
    algbw, busbw = bus_bandwidth_gb_s(mib * MIB, slowest["all_reduce_s"], n)
    return Check(
        cid,
        Status.OK,
        f"bus bandwidth {busbw:.2f} GB/s (algbw {algbw:.2f}), {n} ranks, {backend}, {mib} MiB float32",
        expected,
        detail=f"slowest: rank {slowest['rank']} on {slowest['host']}",
    )


def _shown(value: object) -> str:
    return "none seen" if value is None else str(value)


def same_env_check(gathered: Sequence[Mapping[str, Any]]) -> Check:
    """Every rank against rank 0: another lock or torch build fails, another driver warns."""
    ordered = sorted(gathered, key=lambda g: g["rank"])
    reference = ordered[0]["facts"]
    differ: list[str] = []
    status = Status.OK
    for keys, severity in ((SAME, Status.FAIL), (ALIKE, Status.WARN)):
        for key, what in keys:
            odd = [g for g in ordered[1:] if g["facts"].get(key) != reference.get(key)]
            if odd:
                status = max(status, severity, key=SEVERITY.__getitem__)
                differ.append(
                    f"{what}: rank 0 {_shown(reference.get(key))}, "
                    + ", ".join(f"rank {g['rank']} on {g['host']} {_shown(g['facts'].get(key))}" for g in odd)
                )
    known = [f"{what} {reference[key]}" for key, what in SAME + ALIKE if reference.get(key) is not None]
    hosts = {g["host"] for g in ordered}
    if status is Status.OK:
        return Check(
            "dist.same_env",
            status,
            f"{len(ordered)} rank(s) on {len(hosts)} host(s) agree"
            + (f": {', '.join(known)}" if known else " (no env record or driver seen to compare)"),
            "every rank runs the same env",
        )
    return Check(
        "dist.same_env",
        status,
        "; ".join(differ),
        "every rank runs the same env",
        "run `make env` from the same checkout of the lock on every node (`make env BUNDLE=...` offline)",
    )
