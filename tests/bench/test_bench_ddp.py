"""The DDP ceiling of `bench --distributed`, on the run's own workload: the ceiling's model, step and
batches trained under DistributedDataParallel, so that the communication loss compares like with like;
a workload that cannot train under DDP is said, and leaves the communication loss out."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from dataclasses import replace

import pytest

from bootstrap.bench.config import BenchOptions, Thresholds, WorkloadSpec
from bootstrap.bench.distributed import aggregate, ddp_ceiling
from bootstrap.bench.report import render_text
from tests.bench.test_bench_dataset import clean_imports  # noqa: F401 (a fixture)
from tests.bench.test_bench_run import TORCHRUN
from tests.bench.test_bench_units import rank_payload
from tests.fixtures import REPO
from tests.fixtures.bench import synthetic_result

STEP_S_PER_TOKEN = 0.001

WORKLOAD = textwrap.dedent(f'''
    import time

    import torch
    from torch.utils.data import Dataset

    SEEN = []  # (the type of the model each step was given, the padded length of its batch)

    class Sequences(Dataset):
        """Token sequences of 4, 8 and 12 tokens: batches of several padded lengths."""

        def __len__(self):
            return 64

        def __getitem__(self, index):
            return torch.ones(4 + 4 * (index % 3), dtype=torch.long)

    def make():
        return Sequences()

    def pad(samples):
        return torch.nn.utils.rnn.pad_sequence(samples, batch_first=True)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(1, 1)

        def forward(self, tokens):
            return self.linear(tokens.float().unsqueeze(-1)).mean()

        def custom_loss(self, tokens):
            return self(tokens)

    def model():
        return Model()

    def step(model, tokens, device):
        SEEN.append((type(model).__name__, tokens.shape[1]))
        time.sleep({STEP_S_PER_TOKEN} * tokens.shape[1])  # the step's cost grows with the padded length
        return model(tokens)

    def custom_step(model, tokens, device):
        return model.custom_loss(tokens)  # a method of the model, which a DDP wrapper does not have
''')


@pytest.fixture
def gloo_of_one(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1)
    try:
        yield dist
    finally:
        dist.destroy_process_group()


def user_options(tmp_path, step):
    from bootstrap.bench.user import UserWorkload

    (tmp_path / "user_ddp.py").write_text(WORKLOAD)
    user = UserWorkload(
        "user_ddp:make", collate="user_ddp:pad", model="user_ddp:model", step=step, paths=(str(tmp_path),)
    )
    return BenchOptions(workload=WorkloadSpec(batch_size=8), device="cpu", user=user)


def through_the_ceiling(options):
    """A run up to its ceiling, its state still set up (the clean-up is the caller's)."""
    from bootstrap.bench.phases import PHASES, run_phase
    from bootstrap.bench.run import set_up
    from bootstrap.bench.state import new_state

    state = new_state(replace(options, budget_s=600))
    set_up(state)
    for phase in PHASES:
        run_phase(state, phase, time.perf_counter() + phase.share * 10.0)
        if phase.name == "ceiling":
            return state
    raise AssertionError("no ceiling phase")


@pytest.mark.slow  # a real gloo process group and two bench phases: CI runs it with the slow ones
def test_the_ddp_ceiling_of_the_synthetic_workload_steps_as_its_ceiling(gloo_of_one):
    """--step-ms (a stand-in device) sleeps in the DDP steps too."""
    from bootstrap.bench.run import clean_up

    spec = WorkloadSpec(samples=64, image_size=32, crop_size=24, batch_size=8, step_ms=20.0, model="tiny")
    state = through_the_ceiling(BenchOptions(workload=spec, device="cpu"))
    try:
        rate, why = ddp_ceiling(state, gloo_of_one)
    finally:
        clean_up(state)
    ceiling = state.metrics.ceiling_samples_per_s
    assert why == "" and 0.6 * ceiling < rate < 1.5 * ceiling, (rate, ceiling)


@pytest.mark.slow  # a real gloo process group and two bench phases: CI runs it with the slow ones
def test_the_ddp_ceiling_trains_the_run_s_model_step_and_batches(tmp_path, clean_imports, gloo_of_one):  # noqa: F811
    from bootstrap.bench.run import clean_up

    state = through_the_ceiling(user_options(tmp_path, "user_ddp:step"))
    try:
        seen = sys.modules["user_ddp"].SEEN
        before = len(seen)
        rate, why = ddp_ceiling(state, gloo_of_one)
    finally:
        clean_up(state)
    assert why == "" and rate is not None
    ddp, plain = seen[before:], seen[:before]
    assert ddp and {kind for kind, _ in ddp} == {"DistributedDataParallel"}
    assert {length for _, length in ddp} <= {length for kind, length in plain}  # the ceiling's batches
    # One rank, no peer to wait for: the same steps on the same batches as the ceiling, at its rate.
    ceiling = state.metrics.ceiling_samples_per_s
    assert 0.6 * ceiling < rate < 1.5 * ceiling, (rate, ceiling)


def test_a_workload_that_cannot_train_under_ddp_says_so(tmp_path, clean_imports, gloo_of_one):  # noqa: F811
    from bootstrap.bench.run import clean_up

    state = through_the_ceiling(user_options(tmp_path, "user_ddp:custom_step"))
    try:
        rate, why = ddp_ceiling(state, gloo_of_one)
    finally:
        clean_up(state)
    assert rate is None
    assert why == (
        "the workload did not train under DistributedDataParallel: AttributeError: "
        "'DistributedDataParallel' object has no attribute 'custom_loss'"
    )


def test_without_every_rank_s_ddp_ceiling_the_communication_loss_is_left_out():
    lacking = {
        **rank_payload(1, 0.92, 4.0),
        "ddp_ceiling_samples_per_s": None,
        "ddp_ceiling_reason": "the workload did not train under DistributedDataParallel: AttributeError: x",
    }
    result = aggregate(synthetic_result(), [rank_payload(0, 0.95, 3.0), lacking], Thresholds())
    assert "communication_loss_pct" not in result.aggregate and result.aggregate["ddp_ceiling_samples_per_s"] is None
    reason = "rank 1: the workload did not train under DistributedDataParallel: AttributeError: x"
    assert result.aggregate["ddp_ceiling_reason"] == f"{reason}; communication loss not reported"
    assert f"no DDP ceiling: {reason}" in render_text(result)
    measured = aggregate(synthetic_result(), [rank_payload(0, 0.95, 3.0), rank_payload(1, 0.92, 4.0)], Thresholds())
    assert "DDP ceiling 1,800.0 samples/s, communication loss 10.0%" in render_text(measured)


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun not installed beside this python")
def test_torchrun_two_ranks_on_the_user_s_dataset(tmp_path):
    import subprocess

    (tmp_path / "user_ddp.py").write_text(WORKLOAD)
    argv = [
        str(TORCHRUN),
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "bootstrap",
        "bench",
        "--distributed",
        "--device",
        "cpu",
        "--dataset",
        "user_ddp:make",
        "--collate",
        "user_ddp:pad",
        "--model",
        "user_ddp:model",
        "--step",
        "user_ddp:step",
        "--path",
        str(tmp_path),
        "--batch-size",
        "8",
        "--budget",
        "8",
        "--out",
        str(tmp_path / "out"),
        "--json",
        "--quiet",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=180)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert done.stdout.strip(), f"exit {done.returncode}, no JSON on stdout; stderr: {done.stderr[-3000:]}"
    aggregate = json.loads(done.stdout)["extra"]["aggregate"]
    assert aggregate["world_size"] == 2 and "ddp_ceiling_reason" not in aggregate, aggregate
    assert aggregate["ddp_ceiling_samples_per_s"] > 0 and "communication_loss_pct" in aggregate
    ranks = [row["ddp_ceiling_samples_per_s"] for row in aggregate["ranks"]]
    assert all(rate > 0 for rate in ranks) and sum(ranks) == pytest.approx(aggregate["ddp_ceiling_samples_per_s"])
