"""uv's unpacked wheels in the package cache (`<cache>/uv`), and the seals that vouch for them.

uv hard-links an env's pip files from its unpacked wheels (`archive-v0/<id>/`) and trusts them: an
edit made through one env's link would reach every env installed after it. So with hard links, each
unpacked wheel is checked against its seal before uv links from it, and one edited since is dropped
with `uv cache clean NAME`, which makes uv unpack it again from the checked wheel. Docs: docs/env.md,
"The package cache and its seals".
"""

from __future__ import annotations

import base64
import csv
import json
from pathlib import Path
from typing import Optional, Sequence

from bootstrap.fsutil import atomic_write_text, sha256_file
from bootstrap.install.store import fingerprint

SEAL_HEADER = "bootstrap-wheel-seal 1\n"
UV_DIR = "uv"  # uv's cache inside the package cache: one file system pair to probe, one `--cache-dir`
_CONTENT = ("files", "content")


def uv_cache(cache_dir: Path) -> Path:
    return cache_dir / UV_DIR


def archives(cache_dir: Path) -> list[Path]:
    root = uv_cache(cache_dir) / "archive-v0"
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()) if root.is_dir() else []


def _seal_path(cache_dir: Path, archive: Path) -> Path:
    return cache_dir / "seals" / f"uv-{archive.name}.json"


def edited(cache_dir: Path) -> list[tuple[Path, str]]:
    """(unpacked wheel, distribution name) of each one whose files changed since it was sealed, or,
    unsealed or with changed inodes, no longer match its RECORD. The others are sealed as they are."""
    found = []
    for archive in archives(cache_dir):
        now = fingerprint(archive)
        sealed = _read_seal(cache_dir, archive)
        if sealed == now:
            continue
        content_kept = sealed is None or all(sealed.get(k) == now[k] for k in _CONTENT)
        if content_kept and _matches_record(archive):
            _write_seal(cache_dir, archive, now)
        else:
            found.append((archive, _dist_name(archive)))
    return found


def seal_all(cache_dir: Path, checked: Sequence[Path] = ()) -> None:
    """Seal what uv unpacked in this run (no seal yet), and again the unpacked wheels `checked` by
    `edited` before uv linked from them, whose inodes the new links changed."""
    wanted = {p.name for p in checked}
    for archive in archives(cache_dir):
        if archive.name in wanted or _read_seal(cache_dir, archive) is None:
            _write_seal(cache_dir, archive, fingerprint(archive))


def _read_seal(cache_dir: Path, archive: Path) -> Optional[dict[str, object]]:
    try:
        header, _, body = _seal_path(cache_dir, archive).read_text(encoding="utf-8").partition("\n")
        value = json.loads(body)
    except (OSError, ValueError):
        return None
    return value if header + "\n" == SEAL_HEADER and isinstance(value, dict) else None


def _write_seal(cache_dir: Path, archive: Path, print_: dict[str, object]) -> None:
    path = _seal_path(cache_dir, archive)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, SEAL_HEADER + json.dumps(print_, sort_keys=True) + "\n")


def _record(archive: Path) -> Optional[Path]:
    return next(iter(sorted(archive.glob("*.dist-info/RECORD"))), None)


def _dist_name(archive: Path) -> str:
    record = _record(archive)
    return record.parent.name[: -len(".dist-info")].rpartition("-")[0] if record is not None else ""


def _matches_record(archive: Path) -> bool:
    """Every file the wheel's RECORD lists with a sha256 still has it."""
    record = _record(archive)
    if record is None:
        return False
    try:
        rows = list(csv.reader(record.read_text(encoding="utf-8").splitlines()))
        for row in rows:
            if len(row) < 2 or not row[1].startswith("sha256="):
                continue
            value = row[1][len("sha256=") :]
            digest = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
            if sha256_file(archive / row[0]) != digest:
                return False
    except (OSError, ValueError):
        return False
    return True
