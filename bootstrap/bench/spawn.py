"""What DataLoader workers started by spawn or forkserver (macOS, Windows, or `set_start_method`) need
from the main process: everything DataLoader pickles for them must unpickle there, which means each
class and function it refers to must be importable in a fresh interpreter.

A `__main__` without a file (`python -c`, a notebook) is not: a dataset whose class, or whose inner
dataset's class (a `Subset` from `random_split`, a wrapper applying a transform), is defined there kills
every worker with "Can't get attribute 'D' on <module '__main__'>", which the run could only report as a
worker that exited. `check_workers_can_import` finds such a reference the way DataLoader would meet it:
by pickling, the data itself skipped.
"""

from __future__ import annotations

import pickle
import sys
import types
from typing import Any, Optional, Sequence, Tuple

from bootstrap.errors import InputError

ERROR_CHARS = 200  # of an error quoted in a message, as `user.clip` cuts them


def check_workers_can_import(sent: Sequence[Tuple[str, Any]]) -> None:
    """Refuse, in one line naming it, an object in `sent` ((where, object) pairs) that refers to a class or
    function of a fileless `__main__`, when workers start by spawn or forkserver."""
    from bootstrap.compat.host import probe_start_method

    method = probe_start_method()[0]
    if method == "fork" or getattr(sys.modules.get("__main__"), "__file__", None):
        return
    for where, value in sent:
        name = None if value is None else main_reference(value)
        if name is not None:
            raise InputError(
                where,
                f"{name} is defined in __main__ (python -c, a notebook), which DataLoader "
                f"workers started by {method} cannot import",
                "define it in an importable module (a .py file next to the notebook) and import it",
            )


def check_function_pickles(where: str, function: Any) -> None:
    """Refuse, in one line naming it, a function DataLoader must send to workers started by spawn or
    forkserver (the collate function) that does not pickle: a lambda, a nested function. A dataset is
    left to the run: torch's own pickler sends what this one cannot (shared tensors, handles)."""
    from bootstrap.compat.host import probe_start_method

    method = probe_start_method()[0]
    if method == "fork" or function is None:
        return
    try:
        pickle.dumps(function)
    except Exception as exc:  # noqa: BLE001 (pickling a user's object may raise anything)
        lines = str(exc).strip().splitlines()  # pickle's own message: the object's name, not the user's text
        error = f"{type(exc).__name__}: {lines[0][:ERROR_CHARS]}" if lines else type(exc).__name__
        raise InputError(
            where, f"cannot be sent to DataLoader workers started by {method}: {error}", _pickling_fix(function)
        ) from None


def _pickling_fix(function: Any) -> str:
    """How to make `function` pickle, by what it is: pickle sends a function by its module and name, which
    a lambda or a nested function lacks; an object (a class with `__call__`, a partial) with its attributes."""
    if isinstance(function, types.FunctionType):
        return "define it with def at a module's top level: a lambda or a nested function does not pickle"
    return (
        f"the {type(function).__name__} object is sent with what it holds: keep what does not pickle (a lock, "
        "an open file, a lambda) out of its attributes, or drop it in __getstate__ and remake it on use"
    )


def main_reference(value: Any) -> Optional[str]:
    """The qualified name of the first class or function of `__main__` that pickling `value` refers to;
    None when there is none, or when `value` does not pickle at all (the run reports that in one line
    when the workers start)."""
    probe = _MainProbe(_Discard())
    try:
        probe.dump(value)
    except _FoundInMain as found:
        return str(found)
    except Exception:  # noqa: BLE001 (a user's __reduce__ or __getstate__ may raise anything)
        return None
    return None


class _FoundInMain(Exception):
    pass


class _Discard:
    def write(self, data: Any) -> int:
        return len(data)


class _MainProbe(pickle.Pickler):
    """A pickler that stops at the first reference into `__main__` and does not copy array or tensor data:
    what a worker needs to import is in the classes, not the numbers."""

    def reducer_override(self, obj: Any) -> Any:
        referenced = obj if isinstance(obj, (type, types.FunctionType)) else type(obj)
        if getattr(referenced, "__module__", None) == "__main__":
            raise _FoundInMain(getattr(referenced, "__qualname__", repr(referenced)))
        if type(obj).__module__.split(".")[0] in ("torch", "numpy") and hasattr(obj, "shape"):
            return (tuple, ())  # a tensor or an array: its class checked above, its data irrelevant
        return NotImplemented
