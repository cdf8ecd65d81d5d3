"""What an installed environment holds: read from disk, stdlib only.

Used on both sides: `bootstrap env` plans against it, `verify` (inside the
env, Python 3.9, no rattler) compares it with the lock.

    conda-meta/<name>-<version>-<build>.json      one record per conda package
    <site-packages>/<dist>.dist-info/              one per pip distribution
        direct_url.json                            PEP 610: the locked URL + sha256
    conda-meta/bootstrap                           what `bootstrap env` installed, from which lock (JSON)
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from bootstrap.fsutil import atomic_write_text

# No .json suffix: rattler parses every conda-meta/*.json as a package record
# (pixi keeps its own state in `conda-meta/pixi` for the same reason).
INSTALL_RECORD = "bootstrap"
INSTALL_RECORD_VERSION = 1
# Files rattler writes into conda-meta that are not package records.
_NOT_RECORDS = {INSTALL_RECORD, "history"}


@dataclass(frozen=True)
class InstalledConda:
    name: str
    version: str
    build: str
    sha256: Optional[str]
    url: Optional[str]
    record_path: Path


@dataclass(frozen=True)
class InstalledPip:
    name: str  # normalised (PEP 503)
    version: str
    sha256: Optional[str]  # of the wheel, from direct_url.json
    url: Optional[str]
    dist_info: Path


@dataclass(frozen=True)
class InstallRecord:
    """Written last by `bootstrap env`; `verify` compares against it."""

    lock_path: str
    env: str
    platform: str
    content_hash: str
    generation: str
    bootstrap_version: str
    installed_at: str
    conda: dict = field(default_factory=dict)  # name -> sha256
    pip: dict = field(default_factory=dict)  # normalised name -> {"version": ..., "sha256": ...}
    version: int = INSTALL_RECORD_VERSION


def normalise(name: str) -> str:
    """PEP 503 name normalisation (`Typing_Extensions` -> `typing-extensions`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def conda_records(prefix: Path) -> list[InstalledConda]:
    """The conda packages in `prefix` (`ls conda-meta/*.json`)."""
    meta = prefix / "conda-meta"
    if not meta.is_dir():
        return []
    out = []
    for path in sorted(meta.glob("*.json")):
        if path.name in _NOT_RECORDS:
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        out.append(InstalledConda(data["name"], str(data["version"]), data["build"],
                                  data.get("sha256"), data.get("url"), path))
    return out


def site_packages(prefix: Path) -> Optional[Path]:
    """`<prefix>/lib/pythonX.Y/site-packages` (or `Lib/site-packages` on Windows), if present."""
    found = sorted(prefix.glob("lib/python3*/site-packages")) or sorted(prefix.glob("Lib/site-packages"))
    return found[-1] if found else None


def pip_distributions(prefix: Path) -> list[InstalledPip]:
    """Every distribution with a `.dist-info` in the env's site-packages, conda-installed ones included.

    Callers that want the pip part alone drop names that conda records own.
    """
    site = site_packages(prefix)
    if site is None:
        return []
    # uv's direct_url.json carries no hash for URL installs; the install record
    # knows which wheel (sha256) bootstrap put there, valid while the version
    # on disk is still the one it installed.
    record = read_install_record(prefix)
    installed = record.pip if record is not None else {}
    out = []
    for dist_info in sorted(site.glob("*.dist-info")):
        name, version = _name_version(dist_info)
        if name is None:
            continue
        url, sha256 = _direct_url(dist_info)
        known = installed.get(normalise(name)) or {}
        if sha256 is None and known.get("version") == version:
            sha256 = known.get("sha256")
        out.append(InstalledPip(normalise(name), version, sha256, url, dist_info))
    return out


def _name_version(dist_info: Path) -> tuple[Optional[str], str]:
    metadata = dist_info / "METADATA"
    name = version = None
    if metadata.is_file():
        for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.strip():
                break  # end of the header block
            key, _, value = line.partition(":")
            if key == "Name":
                name = value.strip()
            elif key == "Version":
                version = value.strip()
    if name is None:  # fall back to the directory name: <name>-<version>.dist-info
        stem = dist_info.name[: -len(".dist-info")]
        name, _, version = stem.partition("-")
    return name, version or ""


def _direct_url(dist_info: Path) -> tuple[Optional[str], Optional[str]]:
    path = dist_info / "direct_url.json"
    if not path.is_file():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None, None
    hashes = (data.get("archive_info") or {}).get("hashes") or {}
    sha256 = hashes.get("sha256")
    if sha256 is None and str((data.get("archive_info") or {}).get("hash", "")).startswith("sha256="):
        sha256 = data["archive_info"]["hash"].split("=", 1)[1]
    return data.get("url"), sha256


def read_install_record(prefix: Path) -> Optional[InstallRecord]:
    path = prefix / "conda-meta" / INSTALL_RECORD
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    known = set(InstallRecord.__dataclass_fields__)
    return InstallRecord(**{k: v for k, v in data.items() if k in known})


def write_install_record(prefix: Path, record: InstallRecord) -> None:
    atomic_write_text(prefix / "conda-meta" / INSTALL_RECORD, json.dumps(asdict(record), indent=2, sort_keys=True) + "\n")


def python_executable(prefix: Path) -> Path:
    if sys.platform == "win32":
        return prefix / "python.exe"
    return prefix / "bin" / "python"
