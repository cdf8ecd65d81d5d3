"""Recorded facts read back by their annotations: every field checked against its declared type and
bounded, a bad one named by its path. A class adjusts the checks with `NEGATIVE_OK`, `LONG_LISTS`,
`FREE_TEXT` and a `checked(path)` method. Docs: docs/checks.md, "Facts files: a diagnosis that travels".
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import typing
from typing import Any, Mapping

from bootstrap.urls import scrub_credentials

MAX_ITEMS = 1024  # GPUs, hints, notes: no real host comes near
MAX_TEXT = 4096  # PATH_MAX, the longest value a real probe writes (a disk path)
INT_RANGE = (-(2**63), 2**63 - 1)  # what NVML and the OS report in: a 400-digit "size" is no size
# C0 and C1 controls (escape sequences, NUL, a carriage return that overwrites a row) and the
# invisible bidi controls that reorder what a terminal shows (Trojan Source, CVE-2021-42574).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class FieldError(ValueError):
    """One field of a record is missing, unknown or of the wrong type: `path: problem`."""


def from_mapping(cls: type, raw: Any, path: str = "") -> dict[str, Any]:
    """The keyword arguments of dataclass `cls` from `raw`, each checked against its annotation."""
    if not isinstance(raw, Mapping):
        raise FieldError(f"{path or 'the file'}: expected an object, got {_shown(raw)}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(map(str, raw)) - set(fields))
    if unknown:
        raise FieldError(f"{_join(path, _name(unknown[0]))}: unknown field (known: {', '.join(fields)})")
    values = {}
    for name, field in fields.items():
        if name in raw:
            rules = _Rules(
                negative_ok=name in getattr(cls, "NEGATIVE_OK", ()),
                free_text=name in getattr(cls, "FREE_TEXT", ()),
                max_items=getattr(cls, "LONG_LISTS", {}).get(name, MAX_ITEMS),
            )
            values[name] = _value(raw[name], hints[name], _join(path, name), rules)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise FieldError(f"{_join(path, name)}: missing")
    return values


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    # Resolving string annotations compiles each one: once per class, not once per GPU read.
    return typing.get_type_hints(cls)


@dataclasses.dataclass(frozen=True)
class _Rules:
    """How one field's values are checked, from its class's `NEGATIVE_OK`, `FREE_TEXT`, `LONG_LISTS`."""

    negative_ok: bool = False
    free_text: bool = False
    max_items: int = MAX_ITEMS


def _value(value: Any, hint: Any, path: str, rules: _Rules = _Rules()) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _value(value, inner, path, rules)
    if origin is tuple:
        if isinstance(value, list) and len(value) > rules.max_items:
            raise FieldError(f"{path}: {len(value)} entries, more than the {rules.max_items} a real host has")
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis and isinstance(value, list) else args
        if not isinstance(value, list) or len(value) != len(items):
            size = "" if len(args) == 2 and args[1] is Ellipsis else f"{len(args)} "
            raise FieldError(f"{path}: expected a list of {size}{_PLURAL.get(args[0], 'values')}, got {_shown(value)}")
        return tuple(_value(v, t, f"{path}[{i}]", rules) for i, (v, t) in enumerate(zip(value, items)))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        record = hint(**from_mapping(hint, value, path))
        return record.checked(path) if hasattr(record, "checked") else record  # its own range checks
    if hint is Any:
        return value
    return _scalar(value, hint, path, rules)


def _scalar(value: Any, hint: Any, path: str, rules: _Rules) -> Any:
    if hint is bool and isinstance(value, bool):
        return value
    if hint is str and isinstance(value, str):
        return _text(value, path, rules.free_text)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        if value < 0 and not rules.negative_ok:
            raise FieldError(f"{path}: {_shown(value)} is negative")
        if not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise FieldError(f"{path}: {_shown(value)} is out of range (a 64-bit integer at most)")
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise FieldError(f"{path}: expected {_SINGULAR.get(hint, getattr(hint, '__name__', hint))}, got {_shown(value)}")


_SINGULAR = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
_PLURAL = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}


def _text(value: str, path: str, free_text: bool) -> str:
    """`value` fit to show: bounded, no credentials, controls refused or (free text) escaped."""
    if len(value) > MAX_TEXT:
        raise FieldError(f"{path}: {len(value)} characters, more than {MAX_TEXT} ({_shown(value)})")
    control = _CONTROL.search(value)
    if control and not free_text:
        raise FieldError(f"{path}: control character {control.group()!r} at offset {control.start()} ({_shown(value)})")
    if control:
        value = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), value)
    return scrub_credentials(value)


def _shown(value: object) -> str:
    # A bad value is quoted in the error, never whole (a 100,000-digit number, a 1 MB name) and
    # never with a URL's password; repr shows its controls as escapes.
    if isinstance(value, int) and not isinstance(value, bool) and not -(10**30) < value < 10**30:
        return f"a {value.bit_length() * 30103 // 100000 + 1}-digit number"
    text = repr(scrub_credentials(value[:200]) if isinstance(value, str) else value)
    return text if len(text) <= 40 else text[:37] + "..."


def _name(key: str) -> str:
    """A key as an error shows it: quoted (escapes, cut short) unless it reads as a field name."""
    return key if re.fullmatch(r"\w{1,64}", key, re.ASCII) else _shown(key)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
