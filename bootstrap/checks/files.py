"""`env.files`: is every file the env's packages installed still as installed? Sizes always; a file's
sha256 where its mtime or ctime is newer than the install record, or everywhere with `--deep`.
"""

from __future__ import annotations

import base64
import csv
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from bootstrap.checks.envstate import EnvState
from bootstrap.fsutil import sha256_file
from bootstrap.prefix import InstalledConda, InstalledPip
from bootstrap.report import Check, Status, result, shown

_SKIP_PATH_TYPES = ("directory", "pyc_file")


def paths_data(record: InstalledConda) -> list[Mapping[str, Any]]:
    """The files a conda-meta record lists, with their sha256 and size where the record has them."""
    data = json.loads(record.record_path.read_text(encoding="utf-8"))
    paths: Optional[list[Mapping[str, Any]]] = (data.get("paths_data") or {}).get("paths")
    if paths is None:  # old records: a bare file list, no hashes
        return [{"_path": p} for p in data.get("files", ())]
    return paths


@result
class FileScan:
    """What `scan_files` found: files checked, files hashed, and each problem."""

    checked: int
    hashed: int
    problems: tuple[tuple[str, str, str], ...]  # (owner, path relative to the prefix, what is wrong)
    unhashed: int = 0  # changed since install by their times, their content not compared (`hash_changed` off)

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "hashed": self.hashed,
            "unhashed": self.unhashed,
            "problems": [{"owner": owner, "path": path, "problem": what} for owner, path, what in self.problems],
        }


def _b64_to_hex(value: str) -> str:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def _expected_files(
    prefix: Path, conda_paths: Mapping[str, Sequence[Mapping[str, Any]]], pip: Sequence[InstalledPip]
) -> Iterable[tuple[str, str, str, Optional[str], Optional[int]]]:
    """(owner, absolute path, path type, sha256 (hex, or 'b64:' + RECORD's form), size) of every recorded file."""
    base = str(prefix)
    for name, entries in conda_paths.items():
        for entry in entries:
            kind = entry.get("path_type", "hardlink")
            if kind in _SKIP_PATH_TYPES:
                continue
            digest = entry.get("sha256_in_prefix") or entry.get("sha256")
            yield (f"conda:{name}", os.path.join(base, entry["_path"]), kind, digest, entry.get("size_in_bytes"))
    for dist in pip:
        site = dist.dist_info.parent
        try:
            rows = list(csv.reader((dist.dist_info / "RECORD").read_text(encoding="utf-8").splitlines()))
        except OSError:
            yield (f"pip:{dist.name}", str(dist.dist_info / "RECORD"), "hardlink", None, None)
            continue
        for row in rows:
            if len(row) < 3 or not row[0] or row[0].endswith(".pyc"):
                continue
            algo, _, value = row[1].partition("=")
            digest = "b64:" + value if algo == "sha256" and value else None  # decoded only if the file is hashed
            size = int(row[2]) if row[2].isdigit() else None
            yield (f"pip:{dist.name}", os.path.join(site, row[0]), "hardlink", digest, size)


def scan_files(
    prefix: Path,
    conda_paths: Mapping[str, Sequence[Mapping[str, Any]]],
    pip: Sequence[InstalledPip],
    since: float,
    deep: bool = False,
    by_ctime: bool = True,
    hash_changed: bool = True,
) -> FileScan:
    """Files changed since install: a missing file, a size that differs, or (when its mtime/ctime is
    newer than the install record, or always with `deep`) a sha256 that differs from the record.
    Without `by_ctime`, a newer ctime alone does not get a file hashed: in an env of hard links,
    every env linked from the same cache since changed it. Without `hash_changed` (a pre-job check, which
    must not read an env's worth of files), those files are counted, not hashed: sizes and times only.

    Shell equivalent of `deep`: `sha256sum` of every file listed in conda-meta/*.json and */RECORD.
    """
    checked = 0
    problems: list[tuple[str, str, str]] = []
    to_hash: list[tuple[str, str, str]] = []
    for owner, path, kind, digest, size in _expected_files(prefix, conda_paths, pip):
        checked += 1
        if kind == "softlink":
            if not os.path.lexists(path):
                problems.append((owner, path, "missing"))
            continue
        try:
            st = os.stat(path)
        except OSError:
            problems.append((owner, path, "missing"))
            continue
        if size is not None and st.st_size != size:
            problems.append((owner, path, f"size {st.st_size} != {size}"))
        elif digest and (deep or max(st.st_mtime, st.st_ctime if by_ctime else 0.0) > since):
            to_hash.append((owner, path, _b64_to_hex(digest[4:]) if digest.startswith("b64:") else digest))
    unhashed = 0 if hash_changed or deep else len(to_hash)
    if unhashed:
        to_hash = []
    for (owner, path, digest), actual in zip(to_hash, _hash_all([p for _, p, _ in to_hash])):
        if actual != digest:
            problems.append((owner, path, "content differs" if actual else "unreadable"))
    base = str(prefix)
    relative = tuple((owner, os.path.relpath(os.path.normpath(path), base), what) for owner, path, what in problems)
    return FileScan(checked=checked, hashed=len(to_hash), problems=relative, unhashed=unhashed)


def _hash_all(paths: Sequence[str]) -> list[str]:
    """sha256 of each path ('' if unreadable); threads for many files (hashlib releases the GIL)."""

    def one(path: str) -> str:
        try:
            return sha256_file(path)
        except OSError:
            return ""

    if len(paths) < 64:
        return [one(p) for p in paths]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(one, paths, chunksize=32))


def check_files(
    state: EnvState,
    conda_paths: Mapping[str, Sequence[Mapping[str, Any]]],
    pip: Sequence[InstalledPip],
    deep: bool,
    hash_changed: bool = True,
) -> Check:
    """env.files; without `hash_changed` (verify --prolog) by sizes and times alone."""
    cid = "env.files"
    mode = (
        "sha256 of every file"
        if deep
        else "size, then sha256 of files changed since install"
        if hash_changed
        else "size and time (--prolog)"
    )
    # Without hashing, a newer ctime alone (another env hard-linking the same cached file) is no sign
    scan = scan_files(
        state.prefix, conda_paths, pip, state.record_mtime, deep, by_ctime=hash_changed, hash_changed=hash_changed
    )
    expected = f"as installed ({mode})"
    if not scan.problems and scan.unhashed:
        return Check(
            cid,
            Status.WARN,
            f"{scan.unhashed} of {scan.checked} files modified since install, their content not compared",
            expected,
            "`python -m bootstrap verify --no-bench` (without --prolog) compares their sha256 with the record",
        )
    if not scan.problems:
        return Check(cid, Status.OK, f"{scan.checked} files unchanged ({scan.hashed} hashed)", expected)
    items = [f"{path} ({owner}, {what})" for owner, path, what in scan.problems]
    remedy = (
        f"restore them: {state.commands.recreate} recreates the env from the lock (the package cache keeps it quick)"
    )
    if state.record is not None and state.record.link.get("used") == "hardlink":
        remedy += (
            "; its files are hard links into the package cache, so the edit is there too: the next `env` run "
            "finds it and extracts those packages again (`--link copy` keeps edits in one env)"
        )
    if _older_generation(state.prefix):
        remedy += f", or {state.commands.rollback} returns to the previous generation if that one is intact"
    return Check(
        cid,
        Status.FAIL,
        f"{len(items)} of {scan.checked} files changed: {shown(items)}",
        expected,
        remedy,
        "; ".join(items),
    )


def edited_files(prefix: Path) -> FileScan:
    """The files of the env at `prefix` (a generation) no longer as installed, by size and by the
    sha256 of those modified since its install record (`scan_files` without `by_ctime`)."""
    from bootstrap.prefix import INSTALL_RECORD, conda_records, metadata_names, normalise, pip_distributions

    installed = conda_records(prefix)
    owned, names = metadata_names(installed), {normalise(c.name) for c in installed}
    pip = [d for d in pip_distributions(prefix) if d.dist_info.name not in owned and d.name not in names]
    since = os.stat(prefix / "conda-meta" / INSTALL_RECORD).st_mtime
    return scan_files(prefix, {c.name: paths_data(c) for c in installed}, pip, since, by_ctime=False)


def _older_generation(prefix: Path) -> bool:
    from bootstrap.install import generations as gens

    layout = gens.Layout(prefix)
    current = layout.current()
    return current is not None and any(g < current for g in layout.generations())
