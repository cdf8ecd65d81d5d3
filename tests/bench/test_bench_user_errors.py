"""What a new user hits in their own code: a module that imports torch, run by a Python without it. Each
is one line naming the user's reference, exit 2.

Real models and DataLoaders on this CPU, the modules written into tmp_path.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

STEPS = textwrap.dedent("""
    import torch


    def make():
        return torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
""")


@pytest.fixture
def steps(tmp_path, monkeypatch):
    (tmp_path / "user_steps.py").write_text(STEPS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    yield tmp_path
    sys.modules.pop("user_steps", None)


# --------------------------------------------------------------------------- torch missing


def test_a_module_that_cannot_import_torch_is_not_blamed(steps, monkeypatch):
    """No torch in this Python: not the user's module's error; the CLI says where bench runs."""
    from bootstrap.bench.user import import_ref

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ModuleNotFoundError) as raised:
        import_ref("user_steps:make", "--dataset")
    assert raised.value.name == "torch"
