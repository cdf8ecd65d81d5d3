"""The ceiling on the team's own dataset: the step on several of its batches in turn, not on one, since a
batch of another shape (padded sequences, images of several sizes) costs another step."""

from __future__ import annotations

import textwrap

from tests.bench.test_bench_dataset import clean_imports  # noqa: F401 (a fixture)
from tests.fixtures.bench import run_every_phase

SHORT, LONG, STEP_S_PER_TOKEN = 4, 64, 0.001

SEQUENCES = textwrap.dedent(f'''
    import time

    import torch
    from torch.utils.data import DataLoader, Dataset

    from bootstrap.bench.user import loader_kwargs

    class Sequences(Dataset):
        """64 token sequences: those of the first batch bench's shuffle draws short, every other one long."""

        def __init__(self):
            first = next(iter(DataLoader(range(64), **loader_kwargs(range(64), 8, seed=0))))
            self.short = set(first.tolist())

        def __len__(self):
            return 64

        def __getitem__(self, index):
            return torch.ones({SHORT} if index in self.short else {LONG}, dtype=torch.long)

    def make():
        return Sequences()

    def pad(samples):
        return torch.nn.utils.rnn.pad_sequence(samples, batch_first=True)

    def model():
        return torch.nn.Linear(1, 1)

    def step(model, tokens, device):
        time.sleep({STEP_S_PER_TOKEN} * tokens.shape[1])  # the step's cost grows with the padded length
''')


def test_the_ceiling_steps_on_batches_of_every_shape_the_loader_gave(tmp_path, clean_imports):  # noqa: F811
    from bootstrap.bench.config import BenchOptions, WorkloadSpec
    from bootstrap.bench.user import UserWorkload

    (tmp_path / "user_sequences.py").write_text(SEQUENCES)
    user = UserWorkload(
        "user_sequences:make",
        collate="user_sequences:pad",
        model="user_sequences:model",
        step="user_sequences:step",
        paths=(str(tmp_path),),
    )
    result = run_every_phase(BenchOptions(workload=WorkloadSpec(batch_size=8), device="cpu", user=user), last="ceiling")
    ceiling = next(m for m in result.measurements if m.phase == "ceiling")
    # Set-up's first batch alone is all short; the loader's first eight batches average 7/8 long.
    short_rate = 8 / (SHORT * STEP_S_PER_TOKEN)
    mixed_rate = 8 / ((SHORT + 7 * LONG) / 8 * STEP_S_PER_TOKEN)
    assert ceiling.samples_per_s < (short_rate * mixed_rate) ** 0.5, (ceiling, short_rate, mixed_rate)


POPPING = textwrap.dedent("""
    import torch
    from torch.utils.data import Dataset

    class Tokens(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            return {"input_ids": torch.ones(8, dtype=torch.long), "labels": torch.tensor(index % 2)}

    def make():
        return Tokens()

    def model():
        return torch.nn.Linear(8, 2)

    def step(model, batch, device):
        labels = batch.pop("labels")  # as Hugging Face training loops do
        return torch.nn.functional.cross_entropy(model(batch["input_ids"].float()), labels)
""")


def test_a_step_that_pops_from_its_batch_finds_the_batch_whole_each_turn(tmp_path, clean_imports):  # noqa: F811
    from bootstrap.bench.config import BenchOptions, WorkloadSpec
    from bootstrap.bench.user import UserWorkload

    (tmp_path / "user_popping.py").write_text(POPPING)
    user = UserWorkload(
        "user_popping:make", model="user_popping:model", step="user_popping:step", paths=(str(tmp_path),)
    )
    result = run_every_phase(BenchOptions(workload=WorkloadSpec(batch_size=8), device="cpu", user=user), last="ceiling")
    ceiling = next(m for m in result.measurements if m.phase == "ceiling")
    assert ceiling.steps >= 5 and ceiling.samples == 8 * ceiling.steps
