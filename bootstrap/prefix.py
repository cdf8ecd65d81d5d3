"""What an installed environment holds, read from disk with the stdlib only: `bootstrap env` plans
against it, `verify` (inside the env, Python 3.9, no rattler) compares it with the lock.
Docs: docs/env.md, "What an installed env holds".
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from bootstrap.errors import InputError
from bootstrap.fsutil import atomic_write_text

# No .json suffix: rattler parses every conda-meta/*.json as a package record
# (pixi keeps its own state in `conda-meta/pixi` for the same reason).
INSTALL_RECORD = "bootstrap"
INSTALL_RECORD_VERSION = 1
# Files rattler writes into conda-meta that are not package records.
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class InstalledConda:
    name: str
    version: str
    build: str
    sha256: Optional[str]
    url: Optional[str]
    record_path: Path
    channel: str = ""
    subdir: str = ""
    depends: tuple[str, ...] = ()
    requested_specs: tuple[str, ...] = ()
    files: tuple[str, ...] = field(default=(), repr=False)
    noarch: str = ""  # "python", "generic", or "" for a package of its platform


@dataclass(frozen=True)
class InstalledPip:
    name: str  # normalised (PEP 503)
    version: str
    sha256: Optional[str]  # of the wheel: direct_url.json's hash, else the install record's
    url: Optional[str]
    dist_info: Path  # its metadata: a .dist-info directory, or a legacy .egg-info directory or file
    installer: str = ""  # INSTALLER: "uv", "pip", "conda", ...
    requested: bool = False  # a REQUESTED file: asked for by name, not pulled in
    requires: tuple[str, ...] = ()  # names of unconditional Requires-Dist entries
    direct_url: dict[str, Any] = field(default_factory=dict, repr=False)  # PEP 610


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
    conda: dict[str, str] = field(default_factory=dict)  # name -> sha256
    pip: dict[str, dict[str, str]] = field(default_factory=dict)  # normalised name -> {"version", "sha256"}
    version: int = INSTALL_RECORD_VERSION
    conda_meta: dict[str, list[int]] = field(default_factory=dict)  # conda_meta_fingerprint() once all was written
    variant: str = ""  # the spec's variant `lock_path` holds ("" when the spec declares none)
    # how the files came from the package cache: {"requested": auto|..., "used": reflink|hardlink|copy}; {} before
    link: dict[str, str] = field(default_factory=dict)


def normalise(name: str) -> str:
    """PEP 503 name normalisation (`Typing_Extensions` -> `typing-extensions`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def conda_records(prefix: Path) -> list[InstalledConda]:
    """The conda packages in `prefix` (`ls conda-meta/*.json`), every record parsed."""
    meta = prefix / "conda-meta"
    if not meta.is_dir():
        return []
    out = []
    for path in sorted(meta.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or "name" not in data or "version" not in data:
                continue  # not a package record
            requested = data.get("requested_specs") or ([data["requested_spec"]] if data.get("requested_spec") else [])
            out.append(
                InstalledConda(
                    name=str(data["name"]).lower(),
                    version=str(data["version"]),
                    build=str(data.get("build", "")),
                    sha256=data.get("sha256"),
                    url=data.get("url"),
                    record_path=path,
                    channel=str(data.get("channel") or ""),
                    subdir=str(data.get("subdir") or ""),
                    depends=tuple(str(d) for d in data.get("depends") or ()),
                    requested_specs=tuple(str(s) for s in requested),
                    files=tuple(str(f) for f in data.get("files") or ()),
                    noarch=_noarch(data.get("noarch")),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(path, f"unreadable package record: {exc}", "repair or recreate the environment") from None
    return out


def _noarch(value: object) -> str:
    """A record's `noarch`: `"python"`, or `{"type": "python"}` in older records."""
    if isinstance(value, dict):
        value = value.get("type")
    return str(value) if isinstance(value, str) else ""


def conda_meta_fingerprint(prefix: Path) -> dict[str, list[int]]:
    """`conda-meta/*.json` name -> [size, mtime_ns]: changes when any package record does."""
    out = {}
    try:
        with os.scandir(prefix / "conda-meta") as entries:
            for entry in entries:
                if entry.name.endswith(".json") and entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    out[entry.name] = [info.st_size, info.st_mtime_ns]
    except FileNotFoundError:
        pass
    return out


def conda_packages(prefix: Path) -> list[InstalledConda]:
    """Name, version, build and sha256 of each conda package: what `bootstrap env` plans against.

    Parsing the records costs in proportion to the files they list, and a CUDA
    env lists tens of thousands. When conda-meta is still exactly as bootstrap
    left it (same files, sizes and mtimes as in the install record), the
    install record already knows the answer; otherwise every record is parsed.
    The result carries no `files`, `depends` or `url`; `conda_records` does.
    """
    record = read_install_record(prefix)
    if record is None or not record.conda_meta or record.conda_meta != conda_meta_fingerprint(prefix):
        return conda_records(prefix)
    out = []
    for filename in sorted(record.conda_meta):
        name, version, build = filename[: -len(".json")].rsplit("-", 2)  # conda versions and builds have no "-"
        out.append(
            InstalledConda(
                name=name,
                version=version,
                build=build,
                sha256=record.conda.get(name),
                url=None,
                record_path=prefix / "conda-meta" / filename,
            )
        )
    return out


def conda_owned_metadata(prefix: Path) -> set[str]:
    """Names of the `.dist-info` / `.egg-info` entries that conda packages installed, from the `files`
    of every record: all of them parsed, so only worth it when one may pass for a pip distribution."""
    return metadata_names(conda_records(prefix))


def metadata_names(records: Iterable[InstalledConda]) -> set[str]:
    """The `.dist-info` / `.egg-info` entries among `records`' files (conda's, not pip's)."""
    owned: set[str] = set()
    for record in records:
        for path in record.files:
            owned.update(part for part in path.split("/")[:-1] if part.endswith((".dist-info", ".egg-info")))
            if path.endswith(".egg-info"):  # a distutils PKG-INFO file
                owned.add(path.rsplit("/", 1)[-1])
    return owned


def site_packages(prefix: Path) -> Optional[Path]:
    """`<prefix>/lib/pythonX.Y/site-packages` (or `Lib/site-packages` on Windows), if present. A python
    minor upgrade leaves the old one's behind, holding what pip installed: the one of the env's
    python (`bin/pythonX.Y`) counts, else the highest version (3.10 above 3.9)."""
    found = list(prefix.glob("lib/python3*/site-packages"))
    if not found:
        windows = sorted(prefix.glob("Lib/site-packages"))
        return windows[-1] if windows else None
    return max(found, key=lambda site: ((prefix / "bin" / site.parent.name).exists(), python_version(site.parent.name)))


def python_version(text: str) -> tuple[int, ...]:
    """(3, 10) of `python3.10`, `python3.13t` or `3.10.13`: its first two numbers."""
    return tuple(int(n) for n in re.findall(r"\d+", text)[:2])


def pip_distributions(prefix: Path) -> list[InstalledPip]:
    """Every distribution with a `.dist-info` or `.egg-info` in the env's site-packages, conda-installed
    ones included (`importlib.metadata.distributions()` finds both).

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
    for dist_info in sorted([*site.glob("*.dist-info"), *site.glob("*.egg-info")]):
        fields = _metadata(dist_info)
        name = (fields.get("name") or [dist_info.name.rsplit(".", 1)[0].partition("-")[0]])[0]
        version = (fields.get("version") or [""])[0]
        direct_url = _json(dist_info / "direct_url.json")
        sha256 = _wheel_sha256(direct_url)
        known = installed.get(normalise(name)) or {}
        if sha256 is None and known.get("version") == version:
            sha256 = known.get("sha256")
        out.append(
            InstalledPip(
                name=normalise(name),
                version=version,
                sha256=sha256,
                url=direct_url.get("url"),
                dist_info=dist_info,
                installer=_read(dist_info / "INSTALLER").strip().lower(),
                requested=(dist_info / "REQUESTED").exists(),
                requires=tuple(_required_names(fields.get("requires-dist", []))),
                direct_url=direct_url,
            )
        )
    return out


def _metadata(dist_info: Path) -> dict[str, list[str]]:
    """The header fields of METADATA, or of a legacy install's PKG-INFO (RFC 822 style; the body after
    the blank line is the description). distutils wrote PKG-INFO as the `.egg-info` file itself."""
    if dist_info.name.endswith(".dist-info"):
        text = _read(dist_info / "METADATA")
    else:
        text = _read(dist_info / "PKG-INFO") if dist_info.is_dir() else _read(dist_info)
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and not line[:1].isspace():
            fields.setdefault(key.strip().lower(), []).append(value.strip())
    return fields


def _required_names(requires: list[str]) -> list[str]:
    names = []
    for requirement in requires:
        text, _, marker = requirement.partition(";")
        if "extra" in marker:
            continue  # only installed when someone asked for the extra
        match = _REQUIREMENT_NAME.match(text.strip())
        if match:
            names.append(match.group(0))
    return names


def _wheel_sha256(direct_url: dict[str, Any]) -> Optional[str]:
    archive = direct_url.get("archive_info") or {}
    sha256 = (archive.get("hashes") or {}).get("sha256")
    if sha256 is None and str(archive.get("hash", "")).startswith("sha256="):
        sha256 = archive["hash"].split("=", 1)[1]
    return sha256


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _json(path: Path) -> dict[str, Any]:
    text = _read(path)
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def read_install_record(prefix: Path) -> Optional[InstallRecord]:
    path = prefix / "conda-meta" / INSTALL_RECORD
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    known = set(InstallRecord.__dataclass_fields__)
    return InstallRecord(**{k: v for k, v in data.items() if k in known})


def write_install_record(prefix: Path, record: InstallRecord, fsync: bool = True) -> None:
    # One field per line, each value compact: `indent` would switch json to its pure-Python encoder.
    fields = sorted(vars(record).items())
    text = "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in fields) + "\n}\n"
    atomic_write_text(prefix / "conda-meta" / INSTALL_RECORD, text, fsync)


def python_executable(prefix: Path) -> Path:
    if sys.platform == "win32":
        return prefix / "python.exe"
    return prefix / "bin" / "python"
