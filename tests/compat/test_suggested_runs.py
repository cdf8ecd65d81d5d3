"""A build a remedy offers to lock passes doctor's own rules on the host it is offered for.

Generated: every Linux driver of the toolkit table, reporting its own CUDA
or a newer one (cuda-compat), beside each dated GPU model and a few mixed
pairs. The first build `suggest_builds` offers (the one every remedy names),
judged by `evaluate` on the same facts, fails no check; where cuda-compat is
loaded beside a GPU that refuses it, no build runs until the cuda.driver
remedy takes it off, and the offer is judged on the driver's own CUDA.
"""

from __future__ import annotations

from dataclasses import replace

from bootstrap.compat import data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.forward import REFUSED, unsupported_board
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import suggest_builds, torch_target_from_lock_entry
from bootstrap.compat.versions import cuda_to_int, driver_tuple
from bootstrap.report import Status

MODELS = {
    "Tesla K80": (3, 7),
    "Tesla M60": (5, 2),
    "Tesla P100": (6, 0),
    "Tesla V100": (7, 0),
    "Tesla T4": (7, 5),
    "NVIDIA A100": (8, 0),
    "NVIDIA GeForce RTX 3090": (8, 6),
    "NVIDIA H100": (9, 0),
    "NVIDIA B200": (10, 0),
    "NVIDIA B300": (10, 3),
    "NVIDIA GeForce RTX 5090": (12, 0),
}
NODES = [(name,) for name in MODELS] + [("Tesla P100", "NVIDIA B200"), ("Tesla V100", "NVIDIA H100")]
ROWS = sorted(
    {(row["linux"], cuda_to_int(row["cuda"]) // 10 * 10) for row in data.TOOLKIT_DRIVERS if driver_tuple(row["linux"])},
    key=lambda row: driver_tuple(row[0]),
)
NEWER = sorted({cuda for _, cuda in ROWS})
NEAR = torch_target_from_lock_entry(f"{data.TORCH_RELEASES[-1]['versions'][-1]}")


def hosts():
    for driver, own in ROWS:
        compat = [cuda for cuda in NEWER if cuda // 1000 > own // 1000][:1]  # the next major's first CUDA
        for cuda in [own] + compat:
            for node in NODES:
                yield DriverFacts(
                    driver_version=driver,
                    cuda_driver_version=cuda,
                    source="test",
                    gpus=tuple(
                        GpuFacts(index=i, name=name, compute_capability=MODELS[name]) for i, name in enumerate(node)
                    ),
                )


def test_the_build_a_remedy_offers_runs_on_that_host() -> None:
    offered = refused = 0
    for facts in hosts():
        suggestions = suggest_builds([g.compute_capability for g in facts.gpus], NEAR, facts)
        if not suggestions:
            continue
        offered += 1
        _, support, native = unsupported_board(facts)
        if support == REFUSED:
            refused += 1
            facts = replace(facts, cuda_driver_version=native)
        checks = evaluate(facts, torch_target_from_lock_entry(suggestions[0].pin))
        failed = [f"{c.id}: {c.observed}" for c in checks if c.status is Status.FAIL]
        assert not failed, (
            facts.driver_version,
            facts.cuda_driver_version,
            [g.name for g in facts.gpus],
            suggestions[0].pin,
            failed,
        )
    assert offered > 500 and refused > 20
