"""Recorded facts read back by their annotations.

`doctor --facts FILE` and `verify --facts FILE` replay JSON that a person may
have edited or another tool written, so each field is checked against the
type its dataclass declares (`Optional[int]`, `Tuple[int, int]`, a nested
dataclass, ...) before any rule compares it, and a bad one is named by its
path: `nvidia.gpus[0].compute_capability: expected a list of 2 integers, got '8.6'`.
Integers are counts and sizes, so they may not be negative unless the class
lists the field in `NEGATIVE_OK` (e.g. -1 = unlimited); a class with a
`checked(path)` method adds its own checks (a driver version that is none).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Dict, Mapping


class FieldError(ValueError):
    """One field of a record is missing, unknown or of the wrong type: `path: problem`."""


def from_mapping(cls: type, raw: Any, path: str = "") -> Dict[str, Any]:
    """The keyword arguments of dataclass `cls` from `raw`, each checked against its annotation."""
    if not isinstance(raw, Mapping):
        raise FieldError(f"{path or 'the file'}: expected an object, got {_shown(raw)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(map(str, raw)) - set(fields))
    if unknown:
        raise FieldError(f"{_join(path, unknown[0])}: unknown field (known: {', '.join(fields)})")
    values = {}
    for name, field in fields.items():
        if name in raw:
            values[name] = _value(raw[name], hints[name], _join(path, name), name in getattr(cls, "NEGATIVE_OK", ()))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise FieldError(f"{_join(path, name)}: missing")
    return values


def _value(value: Any, hint: Any, path: str, negative_ok: bool = False) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _value(value, inner, path, negative_ok)
    if origin is tuple:
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis and isinstance(value, list) else args
        if not isinstance(value, list) or len(value) != len(items):
            size = "" if len(args) == 2 and args[1] is Ellipsis else f"{len(args)} "
            raise FieldError(f"{path}: expected a list of {size}{_PLURAL.get(args[0], 'values')}, got {_shown(value)}")
        return tuple(_value(v, t, f"{path}[{i}]", negative_ok) for i, (v, t) in enumerate(zip(value, items)))
    if dataclasses.is_dataclass(hint):
        record = hint(**from_mapping(hint, value, path))
        return record.checked(path) if hasattr(record, "checked") else record  # its own range checks
    if hint is Any:
        return value
    return _scalar(value, hint, path, negative_ok)


def _scalar(value: Any, hint: Any, path: str, negative_ok: bool) -> Any:
    if hint is bool and isinstance(value, bool) or hint is str and isinstance(value, str):
        return value
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        if value < 0 and not negative_ok:
            raise FieldError(f"{path}: {value} is negative")
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise FieldError(f"{path}: expected {_SINGULAR.get(hint, getattr(hint, '__name__', hint))}, got {_shown(value)}")


_SINGULAR = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
_PLURAL = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
