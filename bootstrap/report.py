"""What every verb's `--json` prints: one envelope, `{"format", "version", ...the result's to_dict()}`.

A result is a frozen value built once by the core (`@result` makes its
constructor keyword-only) with a `to_dict()` of plain JSON types; the CLI
prints it either for people or through `dumps` here. The formats and their
versions are listed once, in `FORMATS`; a test runs every verb with
`--json` and holds each envelope to it. A change that renames or drops a
key bumps that format's version.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, Mapping, TypeVar

# format -> version. What each one carries is pinned by tests/test_report.py.
FORMATS = {
    "bootstrap.checks": 1,  # verify, doctor, bench: {"kind", "checks", "summary", "extra"}
    "bootstrap.env": 2,  # env, env --rollback (2: no "spare", "removed" added)
    "bootstrap.lock": 1,  # lock, lock --dry-run: {"dry_run", "envs": [what moved per platform], "dropped"}
    "bootstrap.lock-check": 1,  # lock --check: {"fresh", "envs": [{"stale": [{"platform", "subject", "reason"}]}]}
    "bootstrap.export": 1,  # export: {"kind", "name", "source", "platforms", "files", "notes"}
    "bootstrap.monitor": 1,  # monitor --once / --count N: {"available", "samples", "gpus", "last_sample", "log", ...}
    "bootstrap.cache": 1,  # cache, cache --prune
    "bootstrap.bundle-result": 1,  # bundle (the tar's own index is "bootstrap.bundle")
    "bootstrap.error": 1,  # any verb that failed: {"verb", "error": {"type", "message", "exit_code"}}
}

T = TypeVar("T")


def result(cls: type[T]) -> type[T]:
    """A frozen dataclass whose constructor takes keywords only (dataclass's own `kw_only` needs 3.10),
    so that `EnvResult(changed=False, ...)` says what each value is."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    positional_init = cls.__init__

    @functools.wraps(positional_init)
    def __init__(self: Any, **fields: Any) -> None:  # noqa: N807 (the constructor it replaces)
        positional_init(self, **fields)

    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


def envelope(format_name: str, body: Mapping[str, Any]) -> dict:
    """`{"format": format_name, "version": FORMATS[format_name], **body}`."""
    return {"format": format_name, "version": FORMATS[format_name], **body}


def dumps(format_name: str, body: Mapping[str, Any]) -> str:
    """The envelope as the JSON `--json` prints: indented, keys sorted, no NaN."""
    return json.dumps(envelope(format_name, body), indent=2, sort_keys=True, allow_nan=False)
