"""`verify --prolog`: the pre-job check's one line, for a Slurm prolog or a Kubernetes init container.

A node-drain reason is one line of limited length (`scontrol update ... reason=`), so the verdict is
one line of printable ASCII, at most `MAX_CHARS`: the failure a node's operator acts on first (the
driver and GPUs before the env, the env before the host's limits), how many more there are, and the
fix. Pure: checks in, text out. Docs: docs/cluster.md, "The pre-job check".
"""

from __future__ import annotations

import re
from typing import Sequence

from bootstrap.report import Check, Status, summary

MAX_CHARS = 256
# The order failures are named in: what the node itself needs fixed first.
FIRST = ("nvidia.", "cuda.", "torch.", "lock.", "env.", "host.")
_SPACES = re.compile(r"\s+")


def clean(text: str) -> str:
    """One line of printable ASCII: whitespace runs as one space, anything else as its escape."""
    flat = _SPACES.sub(" ", text).strip()
    return "".join(c if " " <= c <= "~" else ascii(c)[1:-1] for c in flat)


def _rank(check: Check) -> int:
    return next((i for i, prefix in enumerate(FIRST) if check.id.startswith(prefix)), len(FIRST))


def prolog_line(checks: Sequence[Check], where: str) -> str:
    """The verdict in one line of at most MAX_CHARS: the first failure to act on, else ok and the warnings."""
    failed = sorted((c for c in checks if c.status is Status.FAIL), key=_rank)
    if not failed:
        counts = summary(checks)
        warned = [c.id for c in checks if c.status is Status.WARN]
        said = f"; warn: {', '.join(warned)}" if warned else ""
        return _fit(f"bootstrap: ok: {where}: {counts['ok']} ok, {counts['warn']} warn, {counts['skip']} skip{said}")
    first = failed[0]
    more = f" [+{len(failed) - 1} more: {', '.join(c.id for c in failed[1:])}]" if len(failed) > 1 else ""
    fix = f"; fix: {first.remedy}" if first.remedy else ""
    return _fit(f"bootstrap: {first.id}: {first.observed}; needs {first.expected}{fix}", more)


def _fit(text: str, tail: str = "") -> str:
    """`text` and `tail` in MAX_CHARS, `text` cut (with '...') before `tail` is."""
    text, tail = clean(text), clean(tail)
    tail = tail if len(tail) <= MAX_CHARS // 4 else tail[: MAX_CHARS // 4 - 4] + "...]"
    room = MAX_CHARS - len(tail)
    if len(text) > room:
        text = text[: room - 3].rstrip() + "..."
    return text + tail
