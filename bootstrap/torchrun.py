"""What every torchrun-launched verb shares: the rank facts torchrun sets, and one rank-0 view
of every rank's checks (the worst of each, naming its rank).

    torchrun --nproc-per-node N [--nnodes M --rdzv-endpoint HOST:PORT] -m bootstrap VERB --distributed
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from dataclasses import replace
from datetime import timedelta
from typing import Any, Mapping, Optional, Sequence

from bootstrap.errors import InputError
from bootstrap.report import SEVERITY, Check


def torchrun_env(environ: Mapping[str, str], verb: str = "bench") -> dict[str, int]:
    """RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE as torchrun sets them, checked before any
    rendezvous (a RANK beyond WORLD_SIZE, or a MASTER_ADDR that names no host, would wait there
    until its timeout); InputError outside torchrun."""
    missing = [
        name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not environ.get(name, "").strip()
    ]
    if missing:
        raise InputError(
            "--distributed",
            f"{'/'.join(missing)} not set: not started by torchrun",
            f"run `torchrun --nproc-per-node N -m bootstrap {verb} --distributed`",
        )
    values = {
        name: _integer(environ, name, default)
        for name, default in (
            ("RANK", None),
            ("WORLD_SIZE", None),
            ("LOCAL_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "1"),
            ("MASTER_PORT", None),
        )
    }
    for name, low, high in (
        ("WORLD_SIZE", 1, None),
        ("RANK", 0, values["WORLD_SIZE"] - 1),
        ("LOCAL_WORLD_SIZE", 1, values["WORLD_SIZE"]),
        ("LOCAL_RANK", 0, values["LOCAL_WORLD_SIZE"] - 1),
        ("MASTER_PORT", 1, 65535),
    ):
        if values[name] < low or (high is not None and values[name] > high):
            bounds = f"{low}..{high}" if high is not None else f">= {low}"
            raise InputError(name, f"{values[name]} is outside {bounds}", "let torchrun set the rank variables")
    _check_resolves(environ["MASTER_ADDR"].strip(), values["MASTER_PORT"])
    return {
        "rank": values["RANK"],
        "world_size": values["WORLD_SIZE"],
        "local_rank": values["LOCAL_RANK"],
        "local_world_size": values["LOCAL_WORLD_SIZE"],
    }


# getaddrinfo(3) has no timeout of its own; glibc gives up on a silent resolver after 5 s per try
# and server, so this covers its default of two tries on each of three servers.
RESOLVE_S = 30.0


def _check_resolves(host: str, port: int) -> None:
    """InputError unless MASTER_ADDR resolves (`getent ahosts HOST`) within RESOLVE_S: the rendezvous
    would retry it silently for its whole timeout."""
    answer: list[Optional[str]] = []

    def lookup() -> None:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            answer.append(None)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a name IDNA cannot encode (a label over 63)
            answer.append(getattr(exc, "strerror", None) or str(exc))

    # A daemon thread: a resolver that never answers must not keep the process from exiting.
    worker = threading.Thread(target=lookup, name="resolve MASTER_ADDR", daemon=True)
    worker.start()
    worker.join(RESOLVE_S)
    if answer and answer[0] is None:
        return
    why = answer[0] if answer else f"no answer from the resolver in {RESOLVE_S:.0f} s"
    raise InputError(
        "MASTER_ADDR",
        f"{host!r} does not resolve to an address: {why}",
        "set it to the host name or IP address of rank 0's node; its port goes in MASTER_PORT",
    )


def init_process_group(dist: Any, backend: str, timeout: timedelta, environ: Mapping[str, str]) -> None:
    """`dist.init_process_group(backend)` from the variables `torchrun_env` checked. Started without
    torchrun's agent (srun, or the variables set by hand), rank 0 listens on MASTER_PORT itself: a port
    another program holds is an InputError, not c10d's DistNetworkError."""
    try:
        dist.init_process_group(backend, timeout=timeout)
    except RuntimeError as exc:  # DistNetworkError, a RuntimeError; older torch raised a bare one
        text = str(exc)
        if "EADDRINUSE" not in text and os.strerror(errno.EADDRINUSE) not in text:
            raise
        raise InputError(
            "MASTER_PORT",
            f"{environ.get('MASTER_PORT')} is in use on this host, so rank 0 cannot listen on it",
            "set MASTER_PORT to a free port, or pass torchrun --master-port PORT",
        ) from None


def gpu_of_rank(local_rank: int, gpus: int, environ: Mapping[str, str]) -> int:
    """The CUDA device index of this rank, said before any rendezvous: LOCAL_RANK where each rank sees the
    node's GPUs, as torchrun's agent starts them (it sets TORCHELASTIC_RUN_ID, and every process it starts
    inherits its CUDA_VISIBLE_DEVICES); 0 where another launcher gives each task one GPU of its own
    (`srun --gpus-per-task=1`, a Kubernetes device plugin), the only one it sees. A local rank beyond the
    GPUs CUDA sees otherwise is a usage error (torch.cuda.set_device's 'invalid device ordinal')."""
    if local_rank < gpus:
        return local_rank
    if gpus == 1 and not environ.get("TORCHELASTIC_RUN_ID"):
        return 0
    raise InputError(
        "--nproc-per-node",
        f"LOCAL_RANK {local_rank} but {gpus} GPU(s) visible",
        "start one process per GPU: `torchrun --nproc-per-node NUMBER_OF_GPUS ...`",
    )


def _integer(environ: Mapping[str, str], name: str, default: Optional[str]) -> int:
    text = environ.get(name, default)
    try:
        return int(str(text))
    except ValueError:
        raise InputError(name, f"{text!r} is not an integer", "let torchrun set the rank variables") from None


def worst(checks: Sequence[tuple[int, Check]]) -> tuple[int, Check]:
    """The (rank, check) with the worst status; the lowest rank among equals."""
    return max(checks, key=lambda rc: (SEVERITY[rc[1].status], -rc[0]))


def merge_checks(gathered: Sequence[Mapping[str, Any]]) -> list[Check]:
    """One check per id from every rank's `{"rank", "checks": [Check.to_dict()]}`: the worst
    rank's, its observation prefixed with the rank, every rank's status in the detail."""
    by_id: dict[str, list[tuple[int, Check]]] = {}
    for item in sorted(gathered, key=lambda g: g["rank"]):
        for raw in item["checks"]:
            check = Check.from_dict(raw)
            by_id.setdefault(check.id, []).append((item["rank"], check))
    merged = []
    for ranked in by_id.values():  # dicts keep the order ids were first seen in
        rank, check = worst(ranked)
        statuses = ", ".join(f"rank {r} {c.status.value}" for r, c in ranked)
        merged.append(
            replace(
                check,
                observed=f"rank {rank}: {check.observed}",
                detail="; ".join(x for x in (check.detail, statuses) if x),
            )
        )
    return merged
