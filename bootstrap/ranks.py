"""What every torchrun-launched verb shares: the rank facts torchrun sets, and one rank-0 view
of every rank's checks (the worst of each, naming its rank).

    torchrun --nproc-per-node N [--nnodes M --rdzv-endpoint HOST:PORT] -m bootstrap VERB --distributed
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from bootstrap.checks import Check, Status
from bootstrap.errors import InputError

SEVERITY = {Status.FAIL: 3, Status.WARN: 2, Status.OK: 1, Status.SKIP: 0}


def torchrun_env(environ: Mapping[str, str], verb: str = "bench") -> Dict[str, int]:
    """RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE as torchrun sets them; InputError outside torchrun."""
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in environ]
    if missing:
        raise InputError("--distributed", f"{'/'.join(missing)} not set: not started by torchrun",
                         f"run `torchrun --nproc-per-node N -m bootstrap {verb} --distributed`")
    return {
        "rank": int(environ["RANK"]), "world_size": int(environ["WORLD_SIZE"]),
        "local_rank": int(environ.get("LOCAL_RANK", "0")),
        "local_world_size": int(environ.get("LOCAL_WORLD_SIZE", "1")),
    }


def worst(checks: Sequence[Tuple[int, Check]]) -> Tuple[int, Check]:
    """The (rank, check) with the worst status; the lowest rank among equals."""
    return max(checks, key=lambda rc: (SEVERITY[rc[1].status], -rc[0]))


def merge_checks(gathered: Sequence[Mapping[str, Any]]) -> List[Check]:
    """One check per id from every rank's `{"rank", "checks": [Check.to_dict()]}`: the worst
    rank's, its observation prefixed with the rank, every rank's status in the detail."""
    by_id: Dict[str, List[Tuple[int, Check]]] = {}
    for item in sorted(gathered, key=lambda g: g["rank"]):
        for raw in item["checks"]:
            check = Check.from_dict(raw)
            by_id.setdefault(check.id, []).append((item["rank"], check))
    merged = []
    for ranked in by_id.values():  # dicts keep the order ids were first seen in
        rank, check = worst(ranked)
        statuses = ", ".join(f"rank {r} {c.status.value}" for r, c in ranked)
        merged.append(replace(check, observed=f"rank {rank}: {check.observed}",
                              detail="; ".join(x for x in (check.detail, statuses) if x)))
    return merged
