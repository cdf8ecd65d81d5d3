"""Torch builds locked side by side: a spec's `pip-indexes:` and `variants:` keys.

Each variant is locked into its own conda-lock file (`Project.variant_lock_path`) from its effective
spec: the torch pin applied, solved for the virtual packages with the overrides applied.
Docs: docs/lock.md, "Variants: torch builds side by side".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Protocol
from urllib.parse import urlsplit

from bootstrap.errors import InputError, excerpt
from bootstrap.platforms import os_of
from bootstrap.urls import has_credentials, scrub_credentials

if TYPE_CHECKING:
    from bootstrap.project import Project

META_VARIANT = "bootstrap.variant"  # a lock's custom_metadata key: which variant it holds (absent: none declared)
PYPI = "pypi"  # the default index: PyPI, or UV_DEFAULT_INDEX / UV_INDEX_URL, or `pip-indexes: {pypi: URL}`
TORCH_FAMILY = ("torch", "torchvision", "torchaudio")
VARIANT_KEYS = ("name", "index", "torch", "virtual-packages", "platforms")
# No dot: it separates env and variant in lock file names; short enough for a file name with the env's.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# A virtual package as rattler reads one: `__cuda`, a version of bounded numbers, an optional build string.
_VIRTUAL = re.compile(r"__[a-z][a-z0-9_]*")
_VERSION = re.compile(r"[0-9]{1,18}(\.[0-9A-Za-z_]{1,18})*( [0-9A-Za-z_.]{1,64})?")
# PEP 440 specifier clauses (`==2.10.*`, `>=2.11,<2.15`), checked without `packaging`, which the env side lacks;
# the lock checks the requirement it makes from them in full.
_SPECIFIER = re.compile(
    r"(===|==|!=|<=|>=|<|>|~=)\s*[0-9][0-9A-Za-z.*+!_-]*(\s*,\s*(===|==|!=|<=|>=|<|>|~=)\s*"
    r"[0-9][0-9A-Za-z.*+!_-]*)*"
)
# `name[extras] specifier ; marker`: the parts of a requirement the torch pin keeps
_REQUIREMENT = re.compile(r"(?P<name>[A-Za-z0-9._-]+)\s*(?P<extras>\[[^\]]*\])?[^;]*(?P<marker>;.*)?", re.S)
# The OS families on which each virtual package can exist; a package not listed exists everywhere.
_VIRTUAL_OS = {
    "__cuda": ("linux", "windows"),
    "__glibc": ("linux",),
    "__linux": ("linux",),
    "__osx": ("macos",),
    "__unix": ("linux", "macos"),
    "__win": ("windows",),
}


@dataclass(frozen=True)
class Variant:
    """One torch build of an env: the platforms it is locked for and what differs from the spec."""

    name: str
    platforms: tuple[str, ...]
    index: str = PYPI
    torch: str = ""  # a PEP 440 specifier replacing the spec's torch requirement; "" keeps it
    virtual_packages: Mapping[str, Optional[str]] = field(default_factory=dict)  # None: removed
    default: bool = False

    @property
    def as_written(self) -> bool:
        """The spec as written: conda-lock's own content hash of the spec file holds for this lock."""
        return not self.torch and not self.virtual_packages and self.index == PYPI


def read_indexes(path: Path, value: object) -> dict[str, str]:
    """`pip-indexes:` as name -> URL (without a trailing slash)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(
            path,
            "pip-indexes: expected a mapping of name: URL",
            "e.g. `pip-indexes: {pytorch-cu126: https://download.pytorch.org/whl/cu126}`",
        )
    out = {}
    for name, url in value.items():
        where = f"pip-indexes.{name}"
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InputError(
                path,
                f"pip-indexes: {excerpt(name)} is not an index name",
                "use letters, digits, '-' and '_', at most 64",
            )
        if not isinstance(url, str) or not re.match(r"(https?|file)://\S+$", url.strip()):
            raise InputError(
                path,
                f"{where}: {excerpt(url)} is not an index URL",
                "give the simple index, e.g. https://download.pytorch.org/whl/cu126",
            )
        parts = urlsplit(url.strip()) if isinstance(url, str) else None
        if parts is not None and (parts.query or parts.fragment or (parts.scheme != "file" and not parts.hostname)):
            # a simple index is a host and a path; a query is where tokens hide (`?token=...`)
            raise InputError(
                path,
                f"{where}: {excerpt(scrub_credentials(url.split('?')[0].split('#')[0]), 200)} "
                "has no host, or a query or fragment: not a simple index URL",
                f"give the index's host and path; secrets go in ~/.netrc or `--index {name}=URL`",
            )
        if has_credentials(url):
            raise InputError(
                path,
                f"{where}: {excerpt(scrub_credentials(url.strip()), 200)} carries credentials",
                f"keep secrets out of specs: ~/.netrc, or `--index {name}=URL` on the command line",
            )
        out[name] = url.strip().rstrip("/")
    return out


def read_variants(
    path: Path, value: object, platforms: tuple[str, ...], indexes: Mapping[str, str], pip: tuple[str, ...]
) -> tuple[Variant, ...]:
    """`variants:` checked against the spec's platforms, indexes and pip section."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise InputError(
            path,
            "variants: expected a non-empty list of `- name: ...` entries",
            "or drop the key for one build of torch",
        )
    if not any(_requirement_name(p) == "torch" for p in pip):
        raise InputError(
            path,
            "variants: the pip: section has no torch requirement for the variants to vary",
            "add e.g. `- torch==2.10.*` under `pip:`",
        )
    variants = tuple(_variant(path, i, raw, platforms, indexes) for i, raw in enumerate(value))
    names = [v.name for v in variants]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(path, f"variants: two variants are named {excerpt(twice[0])}", "give each its own name")
    by_folded: dict[str, str] = {}
    for name in names:
        other = by_folded.setdefault(name.lower(), name)
        if other != name:  # their lock files are one file where names ignore case
            raise InputError(
                path,
                f"variants: {excerpt(other)} and {excerpt(name)} differ only in case",
                "rename one: macOS and Windows would keep one lock file for both",
            )
    return (replace(variants[0], default=True),) + variants[1:]


def _variant(
    path: Path, index: int, raw: object, spec_platforms: tuple[str, ...], indexes: Mapping[str, str]
) -> Variant:
    where = f"variants[{index}]"
    if not isinstance(raw, dict):
        raise InputError(path, f"{where}: expected a mapping with a name", "e.g. `- name: cu128`")
    unknown = sorted(set(map(str, raw)) - set(VARIANT_KEYS))
    if unknown:
        raise InputError(path, f"{where}: unknown key {excerpt(unknown[0])}", f"allowed: {', '.join(VARIANT_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InputError(
            path,
            f"{where}.name: {excerpt(name)} is not a variant name",
            "use letters, digits, '-' and '_', at most 64 (e.g. cu128, cpu)",
        )
    where = f"variants[{index}] ({name})"
    index_name = raw.get("index", PYPI)
    if not isinstance(index_name, str) or (index_name != PYPI and index_name not in indexes):
        known = ", ".join([PYPI, *indexes])
        raise InputError(
            path,
            f"{where}.index: unknown index {excerpt(index_name)}",
            f"name one of {known}, or add it under `pip-indexes:`",
        )
    virtual = _virtual_packages(path, where, raw.get("virtual-packages"))
    return Variant(
        name=name,
        platforms=_platforms(path, where, raw.get("platforms"), spec_platforms, virtual),
        index=index_name,
        torch=_torch_pin(path, where, raw.get("torch")),
        virtual_packages=virtual,
    )


def _torch_pin(path: Path, where: str, value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise InputError(path, f'{where}.torch: expected a version pin like "==2.10.*"')
    pin = value.strip()
    if pin[:1].isdigit():
        pin = f"=={pin}"  # a bare version means ==
    if not _SPECIFIER.fullmatch(pin) or not _pep440(pin):
        raise InputError(
            path, f"{where}.torch: {excerpt(value)} is not a version pin", 'write e.g. "==2.10.*" or ">=2.11,<2.15"'
        )
    return pin


def _pep440(pin: str) -> bool:
    """What `packaging` (and so uv and pip) reads as a specifier set: `~=2` and `==2.*.1` are not."""
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:  # an env without packaging: the pattern alone
        return True
    try:
        SpecifierSet(pin)
    except InvalidSpecifier:
        return False
    return True


def _virtual_packages(path: Path, where: str, value: object) -> dict[str, Optional[str]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(path, f'{where}.virtual-packages: expected a mapping like {{__cuda: "12.6"}}')
    out: dict[str, Optional[str]] = {}
    for name, version in value.items():
        if not isinstance(name, str) or not _VIRTUAL.fullmatch(name):
            raise InputError(
                path,
                f"{where}.virtual-packages: {excerpt(name)} is not a virtual package",
                "their names are '__' and lowercase letters, digits and '_', e.g. __cuda",
            )
        if isinstance(version, float):
            raise InputError(
                path,
                f"{where}.virtual-packages.{name}: {excerpt(version)} is a number",
                f'quote it: {name}: "{version}" (YAML reads 12.10 as 12.1)',
            )
        if version is not None and not (
            isinstance(version, (str, int)) and not isinstance(version, bool) and _VERSION.fullmatch(str(version))
        ):
            raise InputError(
                path,
                f"{where}.virtual-packages.{name}: {excerpt(version)} is not a version",
                'write it like "12.8", or null to solve without it',
            )
        out[name] = None if version is None else str(version)
    return out


def _platforms(
    path: Path, where: str, value: object, spec_platforms: tuple[str, ...], virtual: Mapping[str, Optional[str]]
) -> tuple[str, ...]:
    """The variant's platforms: those named, else every platform of the spec that can have its
    virtual packages (a `__cuda` variant is not locked for macOS)."""
    wanted = [name for name, version in virtual.items() if version is not None]
    possible = tuple(p for p in spec_platforms if all(_can_have(p, name) for name in wanted))
    if value is None:
        if not possible:
            raise InputError(
                path,
                f"{where}.virtual-packages: no platform of the spec can have "
                f"{', '.join(wanted)} ({', '.join(spec_platforms)})",
                "add a platform that can, or drop the virtual package",
            )
        return possible
    if not isinstance(value, list) or not value or not all(isinstance(p, str) for p in value):
        raise InputError(path, f"{where}.platforms: expected a non-empty list of the spec's platforms")
    for number, platform in enumerate(value):
        if platform in value[:number]:
            raise InputError(path, f"{where}.platforms: {excerpt(platform)} is listed twice", "list it once")
        if platform not in spec_platforms:
            raise InputError(
                path,
                f"{where}.platforms: {excerpt(platform)} is not among the spec's platforms",
                f"use some of {', '.join(spec_platforms)}",
            )
        if platform not in possible:
            missing = next(name for name in wanted if not _can_have(platform, name))
            raise InputError(
                path, f"{where}.platforms: {platform} cannot have {missing}", "drop the platform or the virtual package"
            )
    return tuple(p for p in spec_platforms if p in value)


def is_variant_name(text: str) -> bool:
    return _NAME.fullmatch(text) is not None


def _can_have(platform: str, virtual_package: str) -> bool:
    return os_of(platform) in _VIRTUAL_OS.get(virtual_package, (os_of(platform),))


def effective_pip(pip: tuple[str, ...], variant: Variant) -> tuple[str, ...]:
    """The spec's pip: section with the variant's torch pin in place of the torch requirement's
    (its extras and marker kept)."""
    if not variant.torch:
        return pip
    out = []
    for text in pip:
        match = _REQUIREMENT.fullmatch(text.strip())
        if match and _requirement_name(text) == "torch":
            text = f"{match['name']}{match['extras'] or ''}{variant.torch}{match['marker'] or ''}"
        out.append(text)
    return tuple(out)


def torch_family(pip: tuple[str, ...]) -> tuple[str, ...]:
    """The torch packages the spec lists (they come from the variant's index together)."""
    names = {_requirement_name(p) for p in pip}
    return tuple(name for name in TORCH_FAMILY if name in names)


def _requirement_name(text: str) -> str:
    return re.split(r"[\s\[=<>!~;@(]", text.strip(), maxsplit=1)[0].lower().replace("_", "-")


def check_variant_platforms(
    env: str, variants: tuple[Optional[Variant], ...], platforms: tuple[str, ...], named: bool
) -> None:
    """`--platform` against the variants acted on: each variant named by `--variant` (`named`) must be
    locked for every platform asked for, and otherwise some variant must be, else nothing would be
    locked or checked and the run would say nothing."""
    locked = [v for v in variants if v is not None]
    for platform in platforms if locked else ():
        lacking = [v for v in locked if platform not in v.platforms]
        if named and lacking:
            raise InputError(
                "--platform",
                f"variant {excerpt(lacking[0].name)} of {env} is not locked for "
                f"{platform} (only {', '.join(lacking[0].platforms)})",
                f"drop --platform {platform}, or add it to that variant's `platforms:`",
            )
        if len(lacking) == len(locked):
            raise InputError(
                "--platform",
                f"no variant of {env} is locked for {platform}",
                f"drop --platform {platform}, or add it to a variant's `platforms:`",
            )


class _Declaring(Protocol):
    """A spec as `variant_locks` reads it (`lock.spec.EnvSpec`, which imports this module)."""

    @property
    def path(self) -> Path: ...
    @property
    def variants(self) -> tuple[Variant, ...]: ...


def variant_locks(
    project: Project, env: str, spec: _Declaring, names: tuple[str, ...] = ()
) -> list[tuple[Optional[Variant], Path]]:
    """(variant, lock path) of each variant of `env` (`spec` read from its file), default first;
    a spec without variants has one lock, `(None, project.lock_path(env))`. `names` picks some."""
    if not spec.variants:
        if names:
            raise InputError(
                spec.path,
                f"variants: none declared, so there is no variant {excerpt(names[0])}",
                "drop --variant, or declare variants in the spec",
            )
        return [(None, project.lock_path(env))]
    known = [v.name for v in spec.variants]
    for name in names:
        if name not in known:
            raise InputError("--variant", f"{env} has no variant {excerpt(name)}", f"known: {', '.join(known)}")
    return [
        (v, project.lock_path(env) if v.default else project.variant_lock_path(env, v.name))
        for v in spec.variants
        if not names or v.name in names
    ]
