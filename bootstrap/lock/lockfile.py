"""conda-lock v1 lock files, read: plain YAML into frozen dataclasses, every field checked.

Reading never imports conda-lock, so the env side reads locks too; writing is `bootstrap.lock.write`,
the content hash `bootstrap.lock.content_hash`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional
from urllib.parse import unquote, urlsplit

from bootstrap.errors import InputError, excerpt
from bootstrap.lock.variants import META_VARIANT
from bootstrap.urls import has_credentials, has_query, plain_url, scrub_credentials
from bootstrap.yamlfile import load_yaml, read_text

# Keys bootstrap adds to conda-lock's `metadata.custom_metadata` (a str -> str map).
META_VERSION = "bootstrap.version"
META_MIRRORS = "bootstrap.mirrors"  # the channels a mirror served, never where from (mirrors.lock_record)
# `bootstrap.inputs-sha256.<platform>`: a digest of what that platform's content hash was computed from
# (`content_hash.inputs_digests`); `bootstrap.inputs-sha256` alone, one for the whole lock, is older.
META_INPUTS = "bootstrap.inputs-sha256"
META_TORCH_INDEX = "bootstrap.torch-index"  # the URL the variant's torch family came from (absent: the default)
_REGENERATE = "regenerate it with `make lock`"


def is_virtual(name: str) -> bool:
    """Whether `name` is a virtual package (`__glibc`, `__osx`, `__cuda`): the machine provides it, no
    lock entry does, so conda-lock keeps it among a record's dependencies but never locks it."""
    return name.startswith("__")


@dataclass(frozen=True)
class LockedPackage:
    """One entry of a lock's `package:` list."""

    name: str
    version: str
    manager: str  # "conda" | "pip"
    platform: str
    url: str
    sha256: str
    md5: Optional[str] = None
    build: Optional[str] = None
    dependencies: Mapping[str, str] = field(default_factory=dict)
    categories: tuple[str, ...] = ("main",)  # conda-lock's v1 files list an entry once per category

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        """The filename without `.conda` / `.tar.bz2`: `name-version-build`, as package caches name it."""
        for suffix in (".conda", ".tar.bz2"):
            if self.filename.endswith(suffix):
                return self.filename[: -len(suffix)]
        return self.filename

    @property
    def locked_dependencies(self) -> Mapping[str, str]:
        """The dependencies other entries of the lock satisfy: those on virtual packages left out."""
        return {name: spec for name, spec in self.dependencies.items() if not is_virtual(name)}

    @property
    def virtual_dependencies(self) -> Mapping[str, str]:
        """The dependencies the machine must satisfy: `{"__glibc": ">=2.17,<3.0.a0"}`."""
        return {name: spec for name, spec in self.dependencies.items() if is_virtual(name)}

    def describe(self) -> str:
        """`python 3.10.19 h3c07f61_3_cpython` or `torch 2.10.0`."""
        return f"{self.name} {self.version}" + (f" {self.build}" if self.build else "")


@dataclass(frozen=True)
class Lock:
    path: Path
    content_hash: Mapping[str, str]
    channels: tuple[str, ...]
    platforms: tuple[str, ...]
    sources: tuple[str, ...]
    custom: Mapping[str, str]
    packages: tuple[LockedPackage, ...]

    def for_platform(self, platform: str, manager: Optional[str] = None) -> list[LockedPackage]:
        return [p for p in self.packages if p.platform == platform and (manager is None or p.manager == manager)]


def read_lock(path: Path) -> Lock:
    """Parse a conda-lock v1 file; any structural problem is an InputError naming the field."""
    return _parse(path, read_text(path))


def _parse(path: Path, text: str) -> Lock:
    data = load_yaml(path, text)
    if not isinstance(data, dict):
        raise InputError(path, "not a conda-lock file (expected a mapping)", _REGENERATE)
    if data.get("version") != 1:
        raise InputError(path, f"version: expected 1, found {excerpt(data.get('version'))}", _REGENERATE)
    meta = _mapping(path, data, "metadata")
    entries = data.get("package")
    if not isinstance(entries, list):
        raise InputError(path, "package: missing or not a list", _REGENERATE)
    content_hash = _mapping(path, meta, "content_hash", "metadata.")
    if not all(isinstance(v, str) for v in content_hash.values()):
        raise InputError(path, "metadata.content_hash: every value must be a string", _REGENERATE)
    platforms = tuple(_word(path, "metadata.platforms", p) for p in _list(path, meta, "platforms"))
    if not platforms:
        raise InputError(path, "metadata.platforms: empty", _REGENERATE)
    custom = _strings(path, "metadata.custom_metadata", meta.get("custom_metadata") or {})
    if META_VARIANT in custom:
        _word(path, f"metadata.custom_metadata.{META_VARIANT}", custom[META_VARIANT])
    for key in (k for k in custom if k == META_INPUTS or k.startswith(f"{META_INPUTS}.")):
        if not re.fullmatch("[0-9a-f]{64}", custom[key]):
            raise InputError(
                path, f"metadata.custom_metadata.{key}: {excerpt(custom[key])} is not 64 hex digits", _REGENERATE
            )
    sources = _list(path, meta, "sources")
    if not all(isinstance(s, str) for s in sources):
        raise InputError(path, "metadata.sources: every entry must be a file name", _REGENERATE)
    packages = _packages(path, entries, platforms)
    return Lock(
        path=path,
        content_hash=dict(content_hash),
        channels=tuple(_channel_url(path, c) for c in _list(path, meta, "channels")),
        platforms=platforms,
        sources=tuple(sources),
        custom=custom,
        packages=packages,
    )


def _packages(path: Path, entries: list[object], platforms: tuple[str, ...]) -> tuple[LockedPackage, ...]:
    """Each entry checked; one entry per (platform, manager, `entry_name_key`), but for entries
    identical except for their category, which conda-lock writes for a package of several categories
    and reads as one package of them all; an exact repeat refused too (conda-lock's own reader fails
    on it: `conda-lock render` stops with an AssertionError); every locked platform with at least one
    package."""
    seen: dict[tuple[str, str, str], tuple[int, LockedPackage]] = {}
    for index, entry in enumerate(entries):
        _refuse_credentials(path, f"package[{index}].url", entry.get("url") if isinstance(entry, dict) else None)
        package = _package(path, index, entry)
        if package.platform not in platforms:
            raise InputError(
                path,
                f"package[{index}].platform: {excerpt(package.platform)} is not in "
                f"metadata.platforms ({', '.join(platforms)})",
                _REGENERATE,
            )
        key = (package.platform, package.manager, entry_name_key(package))
        if key in seen:
            first, known = seen[key]
            if replace(package, categories=known.categories) != known or package.categories[0] in known.categories:
                raise InputError(
                    path,
                    f"package[{index}]: {package.name} is listed twice for {package.platform} (also package[{first}])",
                    _REGENERATE,
                )
            # conda-lock's multi-category format: one entry per category, identical but for it
            package = replace(known, categories=tuple(sorted({*known.categories, *package.categories})))
            index = first
        seen[key] = (index, package)
    empty = [p for p in platforms if not any(key[0] == p for key in seen)]
    if empty:
        raise InputError(path, f"metadata.platforms: no packages are locked for {', '.join(empty)}", _REGENERATE)
    return tuple(package for _, package in seen.values())


def _mapping(path: Path, data: dict[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise InputError(path, f"{prefix}{key}: missing or not a mapping", _REGENERATE)
    return value


def _list(path: Path, data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        raise InputError(path, f"metadata.{key}: missing or not a list", _REGENERATE)
    return value


def _strings(path: Path, where: str, value: object) -> dict[str, str]:
    """A mapping of strings to strings (conda-lock's type for custom_metadata and dependencies)."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InputError(path, f"{where}: expected a mapping of names to strings", _REGENERATE)
    return dict(value)


def _channel_url(path: Path, entry: object) -> str:
    used = entry.get("used_env_vars", []) if isinstance(entry, dict) else []
    if not isinstance(used, list) or not all(isinstance(v, str) for v in used):
        raise InputError(path, "metadata.channels: used_env_vars must be a list of variable names", _REGENERATE)
    if isinstance(entry, dict) and isinstance(entry.get("url"), str):
        url = _word(path, "metadata.channels", entry["url"])
        _refuse_credentials(path, "metadata.channels", url)
        return url
    raise InputError(path, f"metadata.channels: bad entry {excerpt(scrub_credentials(str(entry)))}", _REGENERATE)


def _word(path: Path, where: str, value: object) -> str:
    """A platform or channel URL as the lock's entries and the host name it: a string without spaces
    (`'linux-64 '` would lock packages no host ever asks for)."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise InputError(
            path,
            f"{where}: {excerpt(scrub_credentials(str(value)))} is not a platform or URL (a string without spaces)",
            _REGENERATE,
        )
    return value


def _refuse_credentials(path: Path, where: str, url: object) -> None:
    """A lock is shared (committed, bundled into a node's cache, exported): it must hold no
    `user:password@`, `/t/TOKEN/` or query (`?token=...`), which the spec reader and the writer
    refuse too; nor a fragment, which conda-lock drops from the URLs it locks."""
    if isinstance(url, str) and (has_credentials(url) or has_query(url)):
        raise InputError(
            path,
            f"{where}: '{plain_url(url)}' carries credentials or a query; a lock holds each file's plain URL",
            "keep secrets out of locks: ~/.netrc or --mirror",
        )


def _package(path: Path, index: int, entry: object) -> LockedPackage:
    where = f"package[{index}]"
    if not isinstance(entry, dict):
        raise InputError(path, f"{where}: not a mapping", _REGENERATE)
    dependencies = _strings(path, f"{where}.dependencies", entry.get("dependencies", {}))
    if not isinstance(entry.get("category", "main"), str) or not isinstance(entry.get("optional", False), bool):
        raise InputError(path, f"{where}: category must be a string and optional true or false", _REGENERATE)
    try:
        hashes = entry["hash"] or {}
        manager = entry["manager"]
        _refuse_numbers(path, where, entry, hashes)
        package = LockedPackage(
            name=str(entry["name"]),
            version=str(entry["version"]),
            manager=manager,
            platform=entry["platform"],
            url=entry["url"],
            sha256=str(hashes["sha256"]).lower(),
            md5=str(hashes["md5"]).lower() if hashes.get("md5") else None,
            build=entry.get("build"),
            dependencies=dependencies,
            categories=(entry.get("category", "main"),),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise InputError(path, f"{where}: missing or malformed field {exc}", _REGENERATE) from None
    if manager not in ("conda", "pip"):
        raise InputError(path, f"{where}.manager: expected conda or pip, found {excerpt(manager)}", _REGENERATE)
    if manager == "conda" and not package.md5:
        raise InputError(path, f"{where}.hash.md5: missing (conda-lock requires it)", _REGENERATE)
    problem = _entry_problem(package)
    if problem:
        raise InputError(path, f"{where}.{problem}", _REGENERATE)
    return package


def _refuse_numbers(path: Path, where: str, entry: dict[str, Any], hashes: dict[str, Any]) -> None:
    """YAML reads unquoted digits as a number (a hash of zeros becomes 0, `0123` an octal number, a
    build `7` the number 7), and conda-lock refuses a number wherever its models say str: so do we,
    before the text is lost (rattler's BuildString and conda-lock's writer fail on one later)."""
    for key, value in (
        ("name", entry["name"]),
        ("version", entry["version"]),
        ("platform", entry["platform"]),
        ("url", entry["url"]),
        ("build", entry.get("build", "")),
        ("hash.sha256", hashes["sha256"]),
        ("hash.md5", hashes.get("md5", "")),
    ):
        if not isinstance(value, str) and not (key == "build" and value is None):
            raise InputError(
                path,
                f"{where}.{key}: not a quoted string (YAML read {excerpt(value)}; conda-lock refuses it too)",
                _REGENERATE,
            )


_HEX_DIGITS = {"sha256": 64, "md5": 32}
_NAME = {"conda": re.compile(r"[a-z0-9_][a-z0-9_.+-]*"), "pip": re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")}
_VERSION = re.compile(r"[0-9A-Za-z_.+!-]+")  # what conda and PEP 440 versions are written with


def _entry_problem(p: LockedPackage) -> Optional[str]:
    """What is wrong with an entry's fields, as `field: problem`, or None. Names, versions and
    file names end up in paths of the package cache and the env, so they are held to their grammar."""
    for kind, value in (("sha256", p.sha256), ("md5", p.md5)):
        if value is not None and not re.fullmatch(f"[0-9a-f]{{{_HEX_DIGITS[kind]}}}", value):
            return f"hash.{kind}: {excerpt(value)} is not {_HEX_DIGITS[kind]} hex digits"
    if not _NAME[p.manager].fullmatch(p.name):
        return f"name: {excerpt(p.name)} is not a {p.manager} package name"
    if not _VERSION.fullmatch(p.version):
        return f"version: {excerpt(p.version)} is not a version"
    parts = urlsplit(p.url)
    if not parts.scheme or any(segment in ("..", ".") for segment in unquote(parts.path).split("/")):
        return f"url: {excerpt(p.url)} is not a plain URL of the package's file"
    if p.manager == "conda":
        expected = f"{p.name}-{p.version}-{p.build}"
        if p.stem != expected or p.filename == p.stem:
            return (
                f"url: the file {excerpt(p.filename)} is not {p.name} {p.version} {excerpt(p.build)} "
                f"({excerpt(expected)}.conda or .tar.bz2)"
            )
    else:
        return _pip_url_problem(p)
    return None


_SDIST_SUFFIXES = (".tar.gz", ".zip")


def _pip_url_problem(p: LockedPackage) -> Optional[str]:
    """A pip entry is installed from its URL: an http(s) URL, or a file URL (`--pip-find-links DIR`
    locks those), of a wheel or sdist whose file name is this entry's name and version, so a hand
    edit cannot point the installer at `file:///etc/passwd` or at another package's file."""
    parts = urlsplit(p.url)
    remote = parts.scheme in ("http", "https") and parts.netloc
    local = parts.scheme == "file" and parts.netloc in ("", "localhost")
    if not (remote or local):
        return f"url: {excerpt(scrub_credentials(p.url))} is not an http(s) or file URL"
    filename = unquote(parts.path.rsplit("/", 1)[-1])
    if filename.endswith(".whl") and len(filename.split("-")) in (5, 6):  # PEP 427: name-ver[-build]-py-abi-plat
        name, version = filename.split("-")[:2]
    elif filename.endswith(_SDIST_SUFFIXES):
        stem = filename[: -len(next(s for s in _SDIST_SUFFIXES if filename.endswith(s)))]
        name, _, version = stem.rpartition("-")
    else:
        return f"url: {excerpt(filename)} is not a wheel or sdist (.whl, .tar.gz, .zip)"
    if _normalised(name) != _normalised(p.name) or loose_version(version) != loose_version(p.version):
        return f"url: the file {excerpt(filename)} is not {p.name} {p.version}'s"
    return None


def loose_version(version: str) -> str:
    """Separators and case aside (a wheel's file name writes `-` as `_`), the version as written."""
    return re.sub(r"[-_.]+", ".", version).lower()


def entry_name_key(package: LockedPackage) -> str:
    """What makes two entries of one platform and manager the same package: a conda name as written
    (conda-forge has both `typing-extensions` and `typing_extensions`, a metapackage depending on the
    other), a pip name PEP 503-normalised (`typing_extensions` and `Typing-Extensions` are one
    distribution to pip)."""
    return package.name if package.manager == "conda" else _normalised(package.name)


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
