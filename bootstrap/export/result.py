"""What `export` returns (the files to write, and notes) and how it writes them: all or none."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping

from bootstrap.fsutil import check_output, write_failed, write_together
from bootstrap.report import result


@result
class ExportResult:
    """Files to write (path -> text, in order) and notes; nothing is written yet."""

    kind: str  # "portable" (an environment.yml) or "pinned" (explicit files, one per platform)
    name: str  # the environment's name in the files
    source: str  # what they were made from, as their header says: "envs/py310.yml pinned to conda-lock.yml"
    platforms: tuple[str, ...]
    files: Mapping[Path, str]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The `--json` body: each file by path, size and sha256 (the text itself is the file)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "source": self.source,
            "platforms": list(self.platforms),
            "files": [_file(path, text) for path, text in self.files.items()],
            "notes": list(self.notes),
        }


def _file(path: Path, text: str) -> dict[str, Any]:
    data = text.encode("utf-8")
    return {"path": str(path), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_files(files: Mapping[Path, str]) -> None:
    """Write every file or none (`fsutil.write_together`). An unwritable target (missing directory,
    a directory in the way, no permission) is an InputError naming it as -o gave it, a full disk a
    DiskFullError, and nothing is left behind."""
    targets = [(check_output(path, "-o"), text.encode("utf-8")) for path, text in files.items()]
    given = {str(target): path for (target, _), path in zip(targets, files)}
    try:
        write_together(targets)
    except OSError as exc:
        failed = given.get(str(exc.filename), next(iter(files)))
        outcome = "nothing was written" if len(targets) == 1 else "no file is left half-written"
        raise write_failed(exc, failed, "-o", outcome) from None
