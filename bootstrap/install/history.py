"""conda-meta/history: the record of what was *requested*, in conda's own format. rattler only creates
the file, so `bootstrap env` appends an entry per change (`conda env export --from-history` replays it).
"""

from __future__ import annotations

import ast
import re
from datetime import datetime
from pathlib import Path
from typing import Sequence

# `[channel::]name`: the package name of a conda match spec, and its channel if pinned.
# The channel may be a URL (`https://conda.anaconda.org/conda-forge::numpy`), so it ends at the first `::`.
CONDA_NAME = re.compile(r"^(?:(?P<channel>\S+?)::)?(?P<name>[A-Za-z0-9_][A-Za-z0-9_.\-]*)")
_SPECS_LINE = re.compile(r"^#\s*(\w+)\s*specs:\s*(.+)?$")
COMMAND = "bootstrap env"  # how bootstrap's entries begin (`# cmd: bootstrap env py310 (conda-lock.yml)`)


def spec_name(spec: str) -> str:
    """`conda-forge::numpy >=1.26` -> `numpy`."""
    match = CONDA_NAME.match(spec.strip())
    return match.group("name").lower() if match else ""


def requested_specs(history: Path) -> dict[str, str]:
    """name -> spec as last requested, replaying update/install/create/remove entries like conda."""
    try:
        text = history.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return _replay(text.splitlines())


def _replay(lines: Sequence[str]) -> dict[str, str]:
    spec_map: dict[str, str] = {}
    for line in lines:
        match = _SPECS_LINE.match(line.strip())
        if not match:
            continue
        action, listed = match.group(1), (match.group(2) or "").strip()
        try:
            specs = [str(s) for s in ast.literal_eval(listed)] if listed.startswith("[") else []
        except (ValueError, SyntaxError):
            specs = []
        specs = [s for s in specs if s and not s.endswith("@")]
        if action in ("remove", "uninstall"):
            for spec in specs:
                spec_map.pop(spec_name(spec), None)
        elif action in ("update", "install", "create", "neutered"):
            spec_map.update((spec_name(s), s) for s in specs)
    return {n: s for n, s in spec_map.items() if n and not n.startswith("__")}


def _since_our_last_entry(lines: Sequence[str]) -> Sequence[str]:
    """The history from bootstrap's last entry on: that entry lists every spec then requested,
    so replaying from it gives what a full replay gives, without re-reading every change ever made."""
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith(f"# cmd: {COMMAND}"):
            return lines[index:]
    return lines


def append_request(history: Path, specs: Sequence[str], command: str) -> None:
    """Record that `specs` are now what the env requests (and that dropped ones no longer are).

    `command` should start with COMMAND: bootstrap's own entries are where the next replay starts.
    """
    try:
        lines = history.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    before = _replay(_since_our_last_entry(lines))
    names = {spec_name(s) for s in specs}
    removed = [spec for name, spec in sorted(before.items()) if name not in names]
    entry = [f"==> {datetime.now().strftime('%Y-%m-%d %H:%M:%S')} <==", f"# cmd: {command}"]
    if removed:
        entry.append(f"# remove specs: {removed!r}")
    entry.append(f"# update specs: {list(specs)!r}")
    history.parent.mkdir(parents=True, exist_ok=True)
    with open(history, "a", encoding="utf-8") as handle:
        handle.write("\n".join(entry) + "\n")
