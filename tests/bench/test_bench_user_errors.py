"""What a new user hits in their own code: a step that calls backward() itself and returns the loss, a
torch error quoted whole or not at all, an error whose one line names no file, a module that imports
torch in a Python without it. Each is one line naming the user's reference, exit 2; `-v` adds where in
the user's own code it arose, `--json` the same as "frames".

Real models and DataLoaders on this CPU, the modules written into tmp_path.
"""

from __future__ import annotations

import json
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

BATCH = 8

STEPS = textwrap.dedent('''
    import time

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


    def own_bug(model, batch, device):
        return helper(batch)


    def helper(batch):
        raise ValueError("expected a dict batch")


    def factory_bug():
        return helper(None)


    def hanging_step(model, batch, device):
        while True:
            time.sleep(3600)
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


# --------------------------------------------------------------------------- where in the user's code


def test_verbose_adds_the_users_own_frames_under_the_one_line(steps, capsys):
    """The step's error names no file; -v adds the user's frames, none of bootstrap's or torch's."""
    argv = ("--dataset", "user_steps:make", "--step", "user_steps:own_bug")
    line = "error: --step user_steps:own_bug: failed on the first batch: ValueError: expected a dict batch\n"
    assert bench(steps, capsys, *argv) == (2, "", line)
    module = steps / "user_steps.py"
    code, _, err = bench(steps, capsys, *argv, "-v")
    assert code == 2
    assert err == (
        f"{line}  in your code (most recent call last):\n"
        f"    {module}:{STEPS.splitlines().index('def own_bug(model, batch, device):') + 2} in own_bug\n"
        f"    {module}:{STEPS.splitlines().index('def helper(batch):') + 2} in helper\n"
    )


def test_json_error_envelope_carries_the_frames(steps, capsys):
    """Raised `from None` (the factory's error, quoted): the frames still come from the user's error."""
    code, out, err = bench(steps, capsys, "--dataset", "user_steps:factory_bug", "--json")
    assert code == 2 and err.count("\n") == 1
    error = json.loads(out)["error"]
    module = str(steps / "user_steps.py")
    lines = STEPS.splitlines()
    assert error == {
        "type": "InputError",
        "message": "--dataset user_steps:factory_bug: raised ValueError: expected a dict batch",
        "exit_code": 2,
        "frames": [
            {"file": module, "line": lines.index("def factory_bug():") + 2, "function": "factory_bug"},
            {"file": module, "line": lines.index("def helper(batch):") + 2, "function": "helper"},
        ],
    }


def test_an_error_outside_the_users_code_has_no_frames(steps, capsys):
    """Bad input that is no error of their code: the envelope as before, no "frames"."""
    code, out, _ = bench(steps, capsys, "--dataset", "user_steps:make", "--step", "user_steps:no_such", "--json")
    assert code == 2 and set(json.loads(out)["error"]) == {"type", "message", "exit_code"}


def test_tune_loader_s_error_carries_the_frames(steps):
    import torch
    import user_steps

    from bootstrap.bench import tune_loader
    from bootstrap.errors import InputError

    dataset, model = user_steps.make(), torch.nn.Linear(4, 2)
    with pytest.raises(InputError, match=r"^step: failed on the first batch: ValueError: expected a dict") as raised:
        tune_loader(dataset, batch_size=BATCH, budget=5, device="cpu", model=model, step=user_steps.own_bug)
    assert [(Path(f.file), f.function) for f in raised.value.frames] == [
        (steps / "user_steps.py", "own_bug"),
        (steps / "user_steps.py", "helper"),
    ]


def test_debug_shows_the_users_error_the_line_was_raised_over(steps):
    from bootstrap.cli import main
    from bootstrap.errors import InputError

    argv = ["--debug", "bench", "--device", "cpu", "--quiet", "--no-png", "--out", str(steps / "out")]
    with pytest.raises(InputError) as raised:
        main([*argv, "--dataset", "user_steps:factory_bug"])
    shown = "".join(traceback.format_exception(type(raised.value), raised.value, raised.value.__traceback__))
    assert 'user_steps.py", line' in shown and "ValueError: expected a dict batch" in shown


def test_a_worker_s_error_gives_the_frames_torch_quotes():
    """A sample that fails in a DataLoader worker reaches this process as text: the frames come from it."""
    from torch.utils.data._utils import ExceptionWrapper

    from bootstrap.bench.frames import own_frames

    def load_sample():
        raise OSError("image file is truncated")

    try:
        load_sample()
    except OSError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    try:
        wrapped.reraise()
    except OSError as reraised:
        frames = own_frames(reraised)
    here = Path(__file__)
    assert [(Path(f.file), f.function) for f in frames] == [
        (here, "test_a_worker_s_error_gives_the_frames_torch_quotes"),
        (here, "load_sample"),
    ]


def test_a_syntax_error_in_the_users_module_gives_its_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "user_typo.py").write_text("import torch\n\n\ndef make(:\n    pass\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    code, out, _ = bench(tmp_path, capsys, "--dataset", "user_typo:make", "--json")
    assert code == 2
    assert json.loads(out)["error"]["frames"] == [
        {"file": str(tmp_path / "user_typo.py"), "line": 4, "function": "<module>"}
    ]


@pytest.mark.slow
def test_a_step_the_watchdog_stopped_gives_where_it_hung(steps, capsys, monkeypatch):
    """The grace leaves set-up (its first SGD optimizer imports torch._dynamo, a second or more on a busy
    host) time to reach the step, so that the stop lands in the step and not inside an import."""
    from bootstrap.bench import watchdog

    monkeypatch.setattr(watchdog, "GRACE_MIN_S", 8.0)
    monkeypatch.setattr(watchdog, "GRACE_SHARE", 0.0)
    argv = ("--dataset", "user_steps:make", "--step", "user_steps:hanging_step", "--json")
    code, out, _ = bench(steps, capsys, *argv, budget="1")
    assert code == 2
    frames = json.loads(out)["error"]["frames"]
    assert [frame["function"] for frame in frames] == ["hanging_step"], frames


# --------------------------------------------------------------------------- torch missing


def test_a_module_that_cannot_import_torch_is_not_blamed(steps, monkeypatch):
    """No torch in this Python: not the user's module's error; the CLI says where bench runs."""
    from bootstrap.bench.user import import_ref

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ModuleNotFoundError) as raised:
        import_ref("user_steps:make", "--dataset")
    assert raised.value.name == "torch"
