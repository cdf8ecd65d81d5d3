"""What a verb returns and prints: a frozen result with a plain-JSON `to_dict()`, printed for people or
as one `{"format", "version", ...}` envelope (`dumps`; formats and versions are listed in `FORMATS`,
and renaming or dropping a key bumps its version), and the `Check`s verify, doctor and bench return,
rendered as a table or as the `bootstrap.checks` envelope. Stdlib only; nothing here prints.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence, TypeVar

from bootstrap.errors import EXIT_FAILED, EXIT_OK, InputError

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform  # typing's own from 3.11
else:

    def dataclass_transform(**_: Any) -> Any:  # read by type checkers only
        return lambda decorated: decorated


# format -> version. What each one carries is pinned by tests/test_report.py.
FORMATS = {
    "bootstrap.checks": 1,  # verify, doctor, bench: {"kind", "checks", "summary", "extra"}
    "bootstrap.env": 2,  # env, env --rollback (2: no "spare", "removed" added)
    "bootstrap.lock": 1,  # lock, lock --dry-run: {"dry_run", "envs": [what moved per platform], "dropped"}
    "bootstrap.change": 1,  # add, remove: {"verb", "env", "edits", "locks", "written", "seconds", ...}
    "bootstrap.lock-check": 1,  # lock --check: {"fresh", "envs": [{"stale": [{"platform", "subject", "reason"}]}]}
    "bootstrap.export": 1,  # export: {"kind", "name", "source", "platforms", "files", "notes"}
    "bootstrap.monitor": 1,  # monitor --once / --count N: {"available", "samples", "gpus", "last_sample", "log", ...}
    "bootstrap.cache": 1,  # cache, cache --prune
    "bootstrap.bundle-result": 1,  # bundle (the tar's own index is "bootstrap.bundle")
    "bootstrap.training": 1,  # tune_training: {"micro_batch", "accumulation_steps", "precision", "grid", "checks", ...}
    "bootstrap.fleet": 1,  # doctor --fleet: {"groups", "release", "variants", "left_out", ...}
    "bootstrap.error": 1,  # any verb that failed: {"verb", "error": {"type", "message", "exit_code", "frames"?}}
}

T = TypeVar("T")


@dataclass_transform(kw_only_default=True, frozen_default=True)
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


def envelope(format_name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """`{"format": format_name, "version": FORMATS[format_name], **body}`."""
    return {"format": format_name, "version": FORMATS[format_name], **body}


def dumps(format_name: str, body: Mapping[str, Any]) -> str:
    """The envelope as the JSON `--json` prints: indented, keys sorted, no NaN."""
    return json.dumps(envelope(format_name, body), indent=2, sort_keys=True, allow_nan=False)


# --------------------------------------------------------------------------- checks

FORMAT = "bootstrap.checks"
FORMAT_VERSION = FORMATS[FORMAT]


class Status(str, Enum):
    """A check's verdict. `skip` is for absent hardware or facts, never for errors; `inconclusive` is
    for a measurement that ran but cannot decide (a saturated or noisy host): it names why and what
    to do, and, like a warning, does not fail the run."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    INCONCLUSIVE = "inconclusive"


STATUS_ORDER = (Status.OK, Status.WARN, Status.FAIL, Status.SKIP, Status.INCONCLUSIVE)
# what `worst` ranks by: an undecided measurement says more than ok, less than a warning with a fix
SEVERITY = {Status.SKIP: 0, Status.OK: 1, Status.INCONCLUSIVE: 2, Status.WARN: 3, Status.FAIL: 4}
SHOWN = 4  # problems a check names in `observed`; its `detail` lists all of them


@dataclass(frozen=True)
class Check:
    """One verdict: what was observed, what was expected, and the fix.

    `remedy` names the exact command, flag or variable that fixes a warn or
    fail ('' when there is nothing to do); `detail` carries the evidence and
    the confidence of the rule that decided (for `--json` and `-v`).
    """

    id: str
    status: Status
    observed: str
    expected: str
    remedy: str = ""
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "id": self.id,
            "status": self.status.value,
            "observed": self.observed,
            "expected": self.expected,
            "remedy": self.remedy,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        return cls(
            id=str(data["id"]),
            status=Status(data["status"]),
            observed=str(data.get("observed", "")),
            expected=str(data.get("expected", "")),
            remedy=str(data.get("remedy", "")),
            detail=str(data.get("detail", "")),
        )


def exit_code(checks: Iterable[Check]) -> int:
    """1 when any check failed, else 0 (warnings, inconclusive checks and skips do not fail a run)."""
    return EXIT_FAILED if any(c.status is Status.FAIL for c in checks) else EXIT_OK


def worst(checks: Iterable[Check]) -> Status:
    """The most severe status (skip < ok < inconclusive < warn < fail); skip when there are no checks."""
    return max((c.status for c in checks), key=SEVERITY.__getitem__, default=Status.SKIP)


def shown(items: Sequence[str]) -> str:
    """The first SHOWN items, '; '-joined, and how many more there are."""
    more = f" (+{len(items) - SHOWN} more)" if len(items) > SHOWN else ""
    return "; ".join(items[:SHOWN]) + more


def remedies(checks: Iterable[Check]) -> list[str]:
    """'id: remedy' for each check with a remedy, one entry per remedy: the checks sharing one are named
    together, the family named once ('cuda.arch.gpu0, gpu1, gpu2: ...'), as a node's GPUs often share it."""
    named: dict[str, list[str]] = {}
    for check in checks:
        if check.remedy:
            named.setdefault(check.remedy, []).append(check.id)
    out = []
    for remedy, ids in named.items():
        family = ids[0].rpartition(".")[0] + "."
        short = [i[len(family) :] if i.startswith(family) and "." not in i[len(family) :] else i for i in ids[1:]]
        out.append(f"{', '.join([ids[0]] + short)}: {remedy}")
    return out


def summary(checks: Iterable[Check]) -> dict[str, int]:
    """Count per status; every status is present, so consumers need no defaults."""
    counts = {status.value: 0 for status in STATUS_ORDER}
    for check in checks:
        counts[check.status.value] += 1
    return counts


def render_table(checks: Sequence[Check], *, show_detail: bool = False) -> str:
    """Plain-text table: STATUS, CHECK, OBSERVED, EXPECTED; the remedy on an indented line below.

    Plain text on purpose: the env side may not have `rich`, and CI logs
    should read the same as a terminal.
    """
    header = ("STATUS", "CHECK", "OBSERVED", "EXPECTED")
    rows = [(c.status.value, c.id, c.observed, c.expected) for c in checks]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    lines = [_row(header, widths)]
    for check, row in zip(checks, rows):
        lines.append(_row(row, widths))
        if check.remedy:
            lines.append(f"    -> {check.remedy}")
        if show_detail and check.detail:
            lines.append(f"       {check.detail}")
    counts = summary(checks)
    # only bench can be inconclusive: the other commands' tables keep their four counts
    lines.append(", ".join(f"{n} {status}" for status, n in counts.items() if n or status != Status.INCONCLUSIVE.value))
    return "\n".join(lines) + "\n"


def _row(cells: Sequence[str], widths: Sequence[int]) -> str:
    padded = [cell.ljust(width) for cell, width in zip(cells, widths)]
    return "  ".join([*padded, cells[-1]]).rstrip()


def body(checks: Sequence[Check], kind: str, extra: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """What a verb's checks put in the envelope: `{"kind", "checks", "summary", "extra"}`.

    `kind` names the producer ('verify', 'doctor'); `extra` holds
    producer-specific data (facts, timings) and is always present.
    """
    return {
        "kind": kind,
        "checks": [c.to_dict() for c in checks],
        "summary": summary(checks),
        "extra": dict(extra or {}),
    }


def to_json(checks: Sequence[Check], kind: str, extra: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The versioned envelope `--json` prints (`body` in `envelope`); its keys are pinned by a contract test."""
    return envelope(FORMAT, body(checks, kind, extra))


def from_json(data: Mapping[str, Any]) -> list[Check]:
    """Read back the checks of an envelope written by `to_json` (same format version only)."""
    if data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
        raise InputError(
            "checks JSON",
            f"format {data.get('format')!r} version {data.get('version')!r} is not {FORMAT} v{FORMAT_VERSION}",
            "re-run the producing command with this bootstrap version",
        )
    return [Check.from_dict(item) for item in data["checks"]]
