"""What a new user hits in their own code: a step that calls backward() itself and returns the loss, a
torch error quoted whole or not at all, a module that imports torch in a Python without it. Each is one
line naming the user's reference, exit 2.

Real models and DataLoaders on this CPU, the modules written into tmp_path.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

BATCH = 8

STEPS = textwrap.dedent('''
    import torch
    import torch.nn.functional as F


    def make():
        return torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))


    def model():
        return torch.nn.Linear(4, 2)


    def backward_itself(model, batch, device):
        inputs, labels = batch
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        return loss


    KEPT = {}


    def keeps_state(model, batch, device):
        """An RNN's mistake: the state carried to the next batch keeps its graph."""
        inputs, labels = batch
        logits = model(inputs) + KEPT.get("state", 0)
        KEPT["state"] = logits[:1].mean(0)
        return F.cross_entropy(logits, labels)
''')


@pytest.fixture
def steps(tmp_path, monkeypatch):
    (tmp_path / "user_steps.py").write_text(STEPS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    yield tmp_path
    sys.modules.pop("user_steps", None)


def bench(tmp_path: Path, capsys, *argv: str, budget: str = "5") -> tuple:
    """(exit code, stdout, stderr) of an in-process `bench ARGV` on the user's model; --out stays empty."""
    from bootstrap.cli import main

    out = tmp_path / "out"
    code = main(
        [
            "bench",
            "--device",
            "cpu",
            "--quiet",
            "--no-png",
            "--batch-size",
            str(BATCH),
            "--budget",
            budget,
            "--out",
            str(out),
            "--model",
            "user_steps:model",
            *argv,
        ]
    )
    captured = capsys.readouterr()
    assert not out.exists() or not any(out.iterdir()), captured.err
    return code, captured.out, captured.err


# --------------------------------------------------------------------------- a step that calls backward()


def test_a_step_that_calls_backward_and_returns_the_loss_is_told_the_contract(steps, capsys):
    """torch's double-backward error, cut at "freed when you cal...", was all the user got."""
    code, _, err = bench(steps, capsys, "--dataset", "user_steps:make", "--step", "user_steps:backward_itself")
    assert code == 2
    assert err == (
        "error: --step user_steps:backward_itself: failed on the first batch: returned a loss it had already called "
        "backward() on; bench calls backward() on the loss itself (return the loss and let bench call backward() "
        "and step, or do both yourself and return None)\n"
    )


def test_a_loss_whose_graph_reaches_into_an_earlier_batch_is_told_to_detach(steps, capsys):
    """The same torch error on a later step: a state kept from the batch before, not a second backward()."""
    code, _, err = bench(steps, capsys, "--dataset", "user_steps:make", "--step", "user_steps:keeps_state")
    assert code == 2
    assert err == (
        "error: --step user_steps:keeps_state: failed on the first batch: returned a loss whose graph reaches into "
        "an earlier batch's, already backpropagated (detach() what the step or model keeps from one batch to the "
        "next, such as a hidden state)\n"
    )


def test_tune_loader_names_its_step_keyword_for_a_step_that_calls_backward(steps):
    import torch
    import user_steps

    from bootstrap.bench import tune_loader
    from bootstrap.errors import InputError

    dataset, model = user_steps.make(), torch.nn.Linear(4, 2)
    with pytest.raises(InputError, match=r"^step: failed on the first batch: returned a loss it had already called"):
        tune_loader(dataset, batch_size=BATCH, budget=5, device="cpu", model=model, step=user_steps.backward_itself)


def test_bench_help_states_the_step_contract(capsys):
    from bootstrap.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert (
        "--step MODULE:FN with --dataset: the training step, FN(model, batch, device): return the loss and bench "
        "calls backward() and steps, or call backward() and step yourself and return None"
    ) in helped


def test_a_quoted_error_is_clipped_at_a_word_with_an_ellipsis():
    """The quoted error is all the user gets: cut at the end of a word, never inside one."""
    from bootstrap.bench.user import ERROR_CHARS, clip, describe_error

    torch_says = (
        "Trying to backward through the graph a second time (or directly access saved tensors after they have "
        "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
        "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time."
    )
    clipped = describe_error(RuntimeError(torch_says))
    assert clipped == (
        "RuntimeError: Trying to backward through the graph a second time (or directly access saved tensors "
        "after they have already been freed). Saved intermediate values of the graph are freed when you..."
    )
    whole = "RuntimeError: " + torch_says
    assert whole[len(clipped) - 3] == " " and len(clipped) <= ERROR_CHARS
    blob = "x" * 100_000  # no word to end at: cut inside it
    assert clip(blob) == "x" * (ERROR_CHARS - 3) + "..."
    assert clip("short") == "short"


# --------------------------------------------------------------------------- torch missing


def test_a_module_that_cannot_import_torch_is_not_blamed(steps, monkeypatch):
    """No torch in this Python: not the user's module's error; the CLI says where bench runs."""
    from bootstrap.bench.user import import_ref

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ModuleNotFoundError) as raised:
        import_ref("user_steps:make", "--dataset")
    assert raised.value.name == "torch"
