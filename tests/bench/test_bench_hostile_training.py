"""Generated models, steps and datasets a team might hand to `tune_training`: every case gets a recipe
that holds together or one line naming the keyword at fault, never a traceback.

Each case crosses the model (a plain Linear, with BatchNorm, with Dropout, an LSTM, an embedding, one
that returns a tuple, one without parameters, one whose parameters are all frozen, one in float64), the
step (the built-in one, a loss of the user's own, one that updates the model itself, one that returns a
float, a loss per sample, one that already called backward(), one that runs out of memory above 16
samples), the dataset ((inputs, label) tuples, dicts, 5 samples only, samples of three lengths) and the
effective batch (a power of two, a prime). Where the built-in step or the user's can train on the data,
there must be a recipe; a recipe reaches the effective batch (or says what it reaches instead), its row
was timed and fits, its checks are the three of the tuner, its snippet compiles and its JSON round-trips.
The default run takes every 47th case (a stride that divides none of the axes) and one trainable case;
`slow` takes all.
"""

from __future__ import annotations

import itertools
import json
import re

import pytest

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from bootstrap.bench.recipe import TrainingAdvice  # noqa: E402
from bootstrap.bench.training import TrainingOptions, run_training  # noqa: E402
from bootstrap.errors import InputError  # noqa: E402
from bootstrap.report import Status  # noqa: E402

FEATURES, CLASSES = 8, 3
MODELS = ("linear", "batchnorm", "dropout", "lstm", "embedding", "tuple_out", "no_params", "frozen", "float64")
STEPS = ("builtin", "loss", "own_update", "float", "per_sample", "backward_called", "oom_above_16")
DATASETS = ("tuples", "dicts", "five", "ragged")
EFFECTIVE = (16, 7)
CHECK_IDS = {"training.precision", "training.accumulation", "training.not_slower"}
WHERE = re.compile(r"tune_training\((dataset|model|step|batch_size)=\.\.\.\)")


class Samples(torch.utils.data.Dataset):
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __len__(self) -> int:
        return 5 if self.kind == "five" else 48

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(index)
        width = FEATURES + (index % 3 if self.kind == "ragged" else 0)
        features, label = torch.randn(width, generator=g), index % CLASSES
        return {"x": features, "y": label} if self.kind == "dicts" else (features, label)


class Sequence(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.head = nn.LSTM(1, 8, batch_first=True), nn.Linear(8, CLASSES)

    def forward(self, x):
        out, _ = self.rnn(x.unsqueeze(-1))
        return self.head(out[:, -1])


class Embedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.EmbeddingBag(50, 8), nn.Linear(8, CLASSES)

    def forward(self, x):
        return self.head(self.embed((x.abs() * 10).long() % 50))


class TupleOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        return self.head(x), x


class NoParams(nn.Module):
    def forward(self, x):
        return x[:, :CLASSES] * 2


def model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    if kind == "frozen":
        frozen = nn.Linear(FEATURES, CLASSES)
        frozen.requires_grad_(False)
        return frozen
    return {
        "linear": lambda: nn.Linear(FEATURES, CLASSES),
        "batchnorm": lambda: nn.Sequential(nn.Linear(FEATURES, 16), nn.BatchNorm1d(16), nn.Linear(16, CLASSES)),
        "dropout": lambda: nn.Sequential(nn.Linear(FEATURES, 16), nn.Dropout(0.5), nn.Linear(16, CLASSES)),
        "lstm": Sequence,
        "embedding": Embedding,
        "tuple_out": TupleOut,
        "no_params": NoParams,
        "float64": lambda: nn.Linear(FEATURES, CLASSES).double(),
    }[kind]()


def _inputs(batch):
    return (batch["x"], batch["y"]) if isinstance(batch, dict) else (batch[0], batch[1])


def own_update(net, batch, device):
    inputs, labels = _inputs(batch)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    optimizer.zero_grad()
    F.cross_entropy(net(inputs), labels).backward()
    optimizer.step()


def backward_called(net, batch, device):
    inputs, labels = _inputs(batch)
    loss = F.cross_entropy(net(inputs), labels)
    loss.backward()
    return loss


def oom_above_16(net, batch, device):
    inputs, labels = _inputs(batch)
    if len(labels) > 16:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return F.cross_entropy(net(inputs), labels)


STEP_FUNCTIONS = {
    "builtin": None,
    "loss": lambda net, batch, device: F.cross_entropy(net(_inputs(batch)[0]), _inputs(batch)[1]),
    "own_update": own_update,
    "float": lambda net, batch, device: float(F.cross_entropy(net(_inputs(batch)[0]), _inputs(batch)[1])),
    "per_sample": lambda net, batch, device: F.cross_entropy(
        net(_inputs(batch)[0]), _inputs(batch)[1], reduction="none"
    ),
    "backward_called": backward_called,
    "oom_above_16": oom_above_16,
}


def trainable(model_kind: str, step: str, data: str, effective: int) -> bool:
    """Whether the case must get a recipe: a model with parameters that returns logits, a step that returns
    a scalar loss it has not backpropagated (or updates the model itself), on batches it can read."""
    reads = data in ("tuples", "five") or (data == "dicts" and step != "builtin")
    return (
        model_kind in ("linear", "batchnorm", "dropout", "lstm", "embedding")
        and step in ("builtin", "loss", "own_update", "oom_above_16")
        and reads
    )


CASES = list(itertools.product(MODELS, STEPS, DATASETS, EFFECTIVE))
FIRST_TRAINABLE = next(case for case in CASES if trainable(*case))


def sampled(every: int) -> list:
    return [
        pytest.param(
            *case,
            id="-".join(map(str, case)),
            marks=() if index % every == 0 or case == FIRST_TRAINABLE else pytest.mark.slow,
        )
        for index, case in enumerate(CASES)
    ]


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")  # the "float" step's own
@pytest.mark.parametrize("model_kind, step, data, effective", sampled(every=47))
def test_a_generated_case_gets_a_coherent_recipe_or_one_line(model_kind, step, data, effective) -> None:
    options = TrainingOptions(effective_batch=effective, budget_s=1.5, device="cpu", tune_loader=False)
    try:
        advice = run_training(Samples(data), model(model_kind), STEP_FUNCTIONS[step], options)
    except InputError as refused:
        assert not trainable(model_kind, step, data, effective), f"refused a trainable case: {refused}"
        assert WHERE.fullmatch(refused.where), refused.where
        assert "\n" not in str(refused) and "Traceback" not in str(refused), str(refused)
        return
    assert trainable(model_kind, step, data, effective), f"a recipe for a case that cannot train: {advice}"
    reached = advice.micro_batch * advice.accumulation_steps
    accumulation = next(c for c in advice.checks if c.id == "training.accumulation")
    if reached != effective:  # said in a note and in the check, which warns
        assert any(f"of {advice.micro_batch} make {reached} samples an update" in n for n in advice.notes), advice
        assert accumulation.status is Status.WARN and f"not {effective}" in accumulation.observed, accumulation
    row = next(r for r in advice.grid if r.key == (advice.micro_batch, advice.precision, advice.channels_last))
    assert row.fits and row.samples_per_s and advice.micro_batch <= advice.max_micro_batch, advice
    assert {c.id for c in advice.checks} == CHECK_IDS, advice.checks
    compile(advice.snippet(), "<snippet>", "exec")
    data_json = json.loads(json.dumps(advice.to_json(), allow_nan=False))
    assert TrainingAdvice.from_json(data_json) == advice


def test_the_generator_holds_cases_of_both_outcomes() -> None:
    """The axes keep producing cases that must train and cases that must be refused, and the default
    run's stride samples every value of every axis."""
    must_train = [case for case in CASES if trainable(*case)]
    assert 40 < len(must_train) < len(CASES) - 40
    default = [case for index, case in enumerate(CASES) if index % 47 == 0]
    for axis, values in enumerate((MODELS, STEPS, DATASETS, EFFECTIVE)):
        assert {case[axis] for case in default} == set(values), (axis, values)
