"""The one check-result model, and its two renderings.

Every check `verify` and `doctor` run returns a `Check`; the exit code comes
from the statuses; the same list renders as a plain-text table for people
and as a versioned JSON envelope for CI. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from bootstrap.errors import EXIT_FAILED, EXIT_OK, InputError

FORMAT = "bootstrap.checks"
FORMAT_VERSION = 1  # bootstrap.report.FORMATS holds it too; a test keeps the two equal


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

    def to_dict(self) -> Dict[str, str]:
        return {
            "id": self.id,
            "status": self.status.value,
            "observed": self.observed,
            "expected": self.expected,
            "remedy": self.remedy,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Check":
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


def remedies(checks: Iterable[Check]) -> List[str]:
    """'id: remedy' for each check with a remedy, one entry per remedy: the checks sharing one are named
    together, the family named once ('cuda.arch.gpu0, gpu1, gpu2: ...'), as a node's GPUs often share it."""
    named: Dict[str, List[str]] = {}
    for check in checks:
        if check.remedy:
            named.setdefault(check.remedy, []).append(check.id)
    out = []
    for remedy, ids in named.items():
        family = ids[0].rpartition(".")[0] + "."
        short = [i[len(family) :] if i.startswith(family) and "." not in i[len(family) :] else i for i in ids[1:]]
        out.append(f"{', '.join([ids[0]] + short)}: {remedy}")
    return out


def summary(checks: Iterable[Check]) -> Dict[str, int]:
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


def body(checks: Sequence[Check], kind: str, extra: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
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


def to_json(checks: Sequence[Check], kind: str, extra: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The versioned envelope `--json` prints (`body` in `bootstrap.report`'s envelope); its keys are
    pinned by a contract test."""
    from bootstrap.report import envelope

    return envelope(FORMAT, body(checks, kind, extra))


def from_json(envelope: Mapping[str, Any]) -> List[Check]:
    """Read back the checks of an envelope written by `to_json` (same format version only)."""
    if envelope.get("format") != FORMAT or envelope.get("version") != FORMAT_VERSION:
        raise InputError(
            "checks JSON",
            f"format {envelope.get('format')!r} version {envelope.get('version')!r} is not {FORMAT} v{FORMAT_VERSION}",
            "re-run the producing command with this bootstrap version",
        )
    return [Check.from_dict(item) for item in envelope["checks"]]
