"""Read and validate env specs (`envs/<env>.yml`) and `envs/virtual-packages.yml`.

Parsing and structural checks only (stdlib + pyyaml), so the env side reads specs too; match-spec
and PEP 508 syntax are checked where the engines are imported (`bootstrap.lock.conda`,
`bootstrap.lock.pip`). Docs: docs/lock.md, "Specs".
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional
from urllib.parse import urlsplit

from bootstrap.errors import InputError, excerpt
from bootstrap.lock.spec_text import check_spec_text
from bootstrap.lock.variants import META_VARIANT, PYPI, Variant, effective_pip, read_indexes, read_variants
from bootstrap.platforms import KNOWN_PLATFORMS
from bootstrap.urls import has_credentials, has_query, plain_url, scrub_credentials
from bootstrap.yamlfile import load_yaml, read_text

if TYPE_CHECKING:
    from bootstrap.lock.lockfile import Lock

SPEC_KEYS = ("name", "channels", "platforms", "dependencies", "pip-indexes", "variants")
_VIRTUAL_VERSION = re.compile(r"[0-9]+(\.[0-9A-Za-z_]+)*")  # "2.28", "12.8", "14.0", "0"
ANACONDA_ORG = "https://conda.anaconda.org"
_CHANNEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://\S+")  # a `name @ URL` requirement's URL, up to a blank
_ENV_NAME = re.compile(r"[^/\\\s:#]+")  # what `conda create -n` accepts (no /, space, :, #)

# Channels teams must not mix in: Anaconda's `defaults` (licence terms and a
# different ABI from conda-forge) and the deprecated `pytorch`/`nvidia` channels
# (pytorch stopped publishing at 2.5; the official builds are PyPI wheels).
FORBIDDEN_CHANNELS = {
    "defaults": "Anaconda's defaults channel mixes badly with conda-forge",
    "main": "part of Anaconda's defaults",
    "r": "part of Anaconda's defaults",
    "msys2": "part of Anaconda's defaults",
    "anaconda": "Anaconda's defaults under another name",
    "pytorch": "deprecated: PyTorch stopped publishing conda packages at 2.5; lock torch from PyPI in the pip: section",
    "nvidia": "deprecated for PyTorch: the CUDA libraries come with the PyPI torch wheels",
    "nodefaults": "conda-lock rejects it, and bootstrap never adds defaults",
}


@dataclass(frozen=True)
class EnvSpec:
    """One environment as the spec file states it."""

    path: Path
    name: str
    channels: tuple[str, ...]
    platforms: tuple[str, ...]
    conda: tuple[str, ...]
    pip: tuple[str, ...] = ()
    indexes: Mapping[str, str] = field(default_factory=dict)  # `pip-indexes:` name -> URL
    variants: tuple[Variant, ...] = ()  # none: one build of torch, locked as the spec says
    variant: Optional[Variant] = None  # set on the spec one variant is locked from (`for_variant`)

    @property
    def channel_urls(self) -> tuple[str, ...]:
        return tuple(canonical_channel(c) for c in self.channels)

    @property
    def torch_index_name(self) -> Optional[str]:
        """The `pip-indexes:` name the torch family comes from, when the variant names one other than the default."""
        return None if self.variant is None or self.variant.index == PYPI else self.variant.index

    @property
    def torch_index(self) -> Optional[str]:
        """The URL the torch family comes from, when the variant names an index other than the default."""
        name = self.torch_index_name
        return None if name is None else self.indexes[name]

    def for_lock(self, lock: Lock) -> EnvSpec:
        """What `lock` was locked from: the variant its metadata names, if the spec has it."""
        name = lock.custom.get(META_VARIANT, "")
        return self.for_variant(next((v for v in self.variants if v.name == name), None))

    def for_variant(self, variant: Optional[Variant]) -> EnvSpec:
        """What `variant` is locked from: the torch pin applied, its platforms only (None: this spec)."""
        if variant is None:
            return self
        return replace(self, platforms=variant.platforms, pip=effective_pip(self.pip, variant), variant=variant)


@dataclass(frozen=True)
class VirtualPackage:
    name: str
    version: str
    build: str = ""


@dataclass(frozen=True)
class VirtualPackages:
    """conda-lock's virtual-packages.yml: the machine each platform is solved for."""

    path: Path
    by_platform: dict[str, tuple[VirtualPackage, ...]] = field(default_factory=dict)

    def for_platform(self, platform: str) -> tuple[VirtualPackage, ...]:
        if platform not in self.by_platform:
            raise InputError(
                self.path,
                f"subdirs.{platform}: missing",
                f"add the virtual packages {platform} is solved for (e.g. __glibc, __cuda, __osx)",
            )
        return self.by_platform[platform]

    def for_variant(self, variant: Optional[Variant]) -> VirtualPackages:
        """The machines `variant` is solved for: its overrides applied where the package can exist."""
        if variant is None or not variant.virtual_packages:
            return self
        by_platform = {}
        for platform in variant.platforms:
            base = {vp.name: vp for vp in self.for_platform(platform)}
            for name, version in variant.virtual_packages.items():
                if version is None:
                    base.pop(name, None)
                else:
                    number, _, build = version.partition(" ")
                    base[name] = VirtualPackage(name, number, build.strip())
            by_platform[platform] = tuple(base.values())
        return replace(self, by_platform=by_platform)

    def version_of(self, platform: str, name: str) -> Optional[str]:
        for vp in self.for_platform(platform):
            if vp.name == name:
                return vp.version
        return None


def canonical_channel(channel: str) -> str:
    """`conda-forge` -> `https://conda.anaconda.org/conda-forge`; URLs lose a trailing slash."""
    if "://" in channel:
        return channel.rstrip("/")
    return f"{ANACONDA_ORG}/{channel.strip('/')}"


def read_spec(path: Path) -> EnvSpec:
    """Parse and structurally validate one env spec file."""
    text = read_text(path)
    data = load_yaml(path, text)
    if not isinstance(data, dict):
        raise InputError(path, "expected a mapping with name, channels, platforms, dependencies")
    unknown = sorted(set(map(str, data)) - set(SPEC_KEYS))
    if unknown:
        raise InputError(path, f"unknown key {excerpt(unknown[0])}", f"allowed keys: {', '.join(SPEC_KEYS)}")

    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise InputError(path, "name: must be a non-empty string")
    if not is_env_name(name):
        # `export` writes it as `name:` and into `--pinned` file names (`{name}-{platform}.lock`).
        raise InputError(
            path,
            f"name: {excerpt(name)} is not an environment name conda accepts",
            "use letters, digits, '.', '-' and '_', e.g. `name: py310`",
        )
    channels = _string_list(path, data, "channels")
    if not channels:
        raise InputError(path, "channels: empty", "add `channels: [conda-forge]`")
    for channel in channels:
        check_channel(path, channel)
    platforms = _string_list(path, data, "platforms")
    if not platforms:
        raise InputError(path, "platforms: missing", "add e.g. `platforms: [linux-64, osx-arm64, win-64]`")
    for platform in platforms:
        if platform not in KNOWN_PLATFORMS:
            raise InputError(
                path, f"platforms: unknown platform {excerpt(platform)}", f"use one of {', '.join(KNOWN_PLATFORMS)}"
            )
    check_spec_text(path, text, tuple(platforms))  # what conda-lock reads line by line before it parses the YAML
    conda, pip = _dependencies(path, data.get("dependencies"), tuple(channels))
    indexes = read_indexes(path, data.get("pip-indexes"))
    variants = read_variants(path, data.get("variants"), tuple(platforms), indexes, tuple(pip))
    return EnvSpec(path, name, tuple(channels), tuple(platforms), tuple(conda), tuple(pip), indexes, variants)


def is_env_name(name: str) -> bool:
    return bool(_ENV_NAME.fullmatch(name)) and name not in (".", "..")


def _string_list(path: Path, data: dict[str, Any], key: str) -> list[str]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InputError(path, f"{key}: must be a list of strings")
    for v in value:
        if v != v.strip():
            # conda-lock reads this file too (its content hash), taking the name as written:
            # were it stripped here only, one platform would have two names and the lock no hash.
            raise InputError(
                path,
                f"{key}: {excerpt(scrub_credentials(v))} has spaces around it",
                "drop the spaces inside the quotes",
            )
    out = list(value)
    twice = sorted(v for v, n in Counter(out).items() if n > 1)
    if twice:
        raise InputError(path, f"{key}: {excerpt(twice[0])} is listed twice", "list it once")
    return out


def check_channel(path: object, channel: str) -> None:
    """Refuse a channel with credentials in it, or one teams must not mix in (FORBIDDEN_CHANNELS)."""
    if has_credentials(channel):
        raise InputError(
            path,
            f"channels: {excerpt(scrub_credentials(channel), 200)} carries credentials",
            "keep secrets out of specs: use ~/.netrc, or a --mirror URL on the command line",
        )
    if not _channel_syntax_ok(channel):
        raise InputError(
            path,
            f"channels: {excerpt(channel)} is not a channel",
            "give a channel name (conda-forge, nvidia/label/cuda-12.4.0) or an http(s) or file URL",
        )
    key = channel.rstrip("/").rsplit("/", 1)[-1] if channel.startswith(ANACONDA_ORG) else channel
    if "repo.anaconda.com" in channel:
        key = "defaults"
    if key in FORBIDDEN_CHANNELS:
        raise InputError(
            path, f"channels: {excerpt(channel)} is not allowed: {FORBIDDEN_CHANNELS[key]}", "use conda-forge"
        )


def _channel_syntax_ok(channel: str) -> bool:
    """What rattler's Channel parses to the channel meant: a name (with label path) or an http(s) or
    file URL with a host or path; rattler would take `conda forge` as `conda%20forge`."""
    if "://" not in channel:
        return bool(_CHANNEL_NAME.fullmatch(channel))
    parts = urlsplit(channel)
    if any(c.isspace() for c in channel) or parts.scheme not in ("http", "https", "file"):
        return False
    return bool(parts.netloc) if parts.scheme != "file" else bool(parts.path.strip("/"))


def _dependencies(path: Path, deps: object, channels: tuple[str, ...]) -> tuple[list[str], list[str]]:
    if not isinstance(deps, list) or not deps:
        raise InputError(path, "dependencies: must be a non-empty list", "list at least `python=3.10.*` and `pip`")
    conda: list[str] = []
    pip: list[str] = []
    for index, item in enumerate(deps):
        where = f"dependencies[{index}]"
        if isinstance(item, str) and item.strip():
            _check_dependency_channel(path, where, item.strip(), channels)
            conda.append(item.strip())
        elif isinstance(item, dict) and list(item) == ["pip"]:
            pip.extend(_pip_section(path, where, item["pip"]))
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            raise InputError(
                path,
                f"{where}: {excerpt(item)} is a number, not a conda spec",
                "quote it: YAML reads an unquoted 3.10 as the number 3.1",
            )
        else:
            raise InputError(path, f"{where}: expected a conda spec string or a `pip:` list, got {excerpt(item)}")
    # `conda-forge::python=3.10.*` names python too
    names = {re.split(r"[\s=<>!~\[]", spec, maxsplit=1)[0].rsplit("::", 1)[-1].lower() for spec in conda}
    if pip and "pip" not in names:
        raise InputError(path, "dependencies: a pip: section needs `pip` in the conda dependencies", "add `- pip`")
    if pip and "python" not in names:
        raise InputError(path, "dependencies: a pip: section needs `python`", "add e.g. `- python=3.10.*`")
    return conda, pip


# The channel a conda match spec names: `channel::name` (up to the first `::`: the channel may be a
# URL) or `name[channel=...]`.
_SPEC_CHANNEL = re.compile(r"^(?P<prefix>\S+?)::|\[[^\]]*\bchannel\s*=\s*['\"]?(?P<bracket>[^'\",\]\s]+)")


def _check_dependency_channel(path: Path, where: str, text: str, channels: tuple[str, ...]) -> None:
    """A conda dependency that names its channel names one of `channels:` (where the channel rules
    hold), without credentials: the solve takes its packages from `channels:` only, and an export
    that kept `pytorch::x` would take them from a channel the spec refuses."""
    if has_credentials(text):
        raise InputError(
            path,
            f"{where}: {excerpt(scrub_credentials(text), 200)} carries credentials",
            "keep secrets out of specs: use ~/.netrc, or a --mirror URL on the command line",
        )
    match = _SPEC_CHANNEL.search(text)
    if match is None:
        return
    named = match.group("prefix") or match.group("bracket")
    channel = named.rstrip("/")
    head, _, subdir = channel.rpartition("/")
    if head and (subdir in KNOWN_PLATFORMS or subdir == "noarch"):  # `conda-forge/linux-64::x`
        channel = head
    if canonical_channel(channel) not in {canonical_channel(c) for c in channels}:
        raise InputError(
            path,
            f"{where}: {excerpt(text)} names the channel {excerpt(named)}, which is not among "
            f"channels: ({', '.join(channels)})",
            "drop the channel from the dependency, or name one listed under channels:",
        )


def _pip_section(path: Path, where: str, items: object) -> list[str]:
    if not isinstance(items, list):
        raise InputError(path, f"{where}.pip: must be a list of requirement strings")
    out = []
    for index, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise InputError(path, f"{where}.pip[{index}]: must be a requirement string like 'torch==2.10.*'")
        if item.lstrip().startswith("-"):
            raise InputError(
                path,
                f"{where}.pip[{index}]: pip options ({excerpt(item.split()[0])}) are not supported",
                "list requirements only: an index for torch goes in `pip-indexes:` and a variant's `index:`, "
                "a mirror of PyPI in `pip-indexes: {pypi: URL}` or UV_DEFAULT_INDEX",
            )
        if has_credentials(item):  # a `name @ URL` would carry them into the lock and the export
            raise InputError(
                path,
                f"{where}.pip[{index}]: {excerpt(scrub_credentials(item.strip()), 200)} carries credentials",
                "keep secrets out of specs: use ~/.netrc",
            )
        url = _URL.search(item)
        if url and has_query(url.group()):  # where a signed URL keeps its token; a lock holds plain URLs
            raise InputError(
                path,
                f"{where}.pip[{index}]: the URL {excerpt(plain_url(url.group()), 200)} has a "
                "query or fragment (?... or #...)",
                "give the wheel's plain URL; secrets go in ~/.netrc",
            )
        out.append(item.strip())
    return out


def read_virtual_packages(path: Path) -> VirtualPackages:
    """Parse conda-lock's virtual-packages.yml (`subdirs: {plat: {packages: {__x: "ver [build]"}}}`)."""
    data = load_yaml(path)
    subdirs = data.get("subdirs") if isinstance(data, dict) else None
    if not isinstance(subdirs, dict) or set(data) != {"subdirs"}:
        raise InputError(
            path, "expected exactly one top-level key `subdirs`", "see conda-lock's virtual-packages.yml format"
        )
    by_platform = {}
    for platform, entry in subdirs.items():
        if platform not in KNOWN_PLATFORMS:
            raise InputError(
                path, f"subdirs: unknown platform {excerpt(platform)}", f"use one of {', '.join(KNOWN_PLATFORMS)}"
            )
        packages = entry.get("packages") if isinstance(entry, dict) else None
        if not isinstance(packages, dict) or set(entry) != {"packages"}:
            raise InputError(path, f"subdirs.{platform}: expected `packages: {{__name: version}}`")
        by_platform[platform] = tuple(_virtual_package(path, platform, n, v) for n, v in packages.items())
    return VirtualPackages(path, by_platform)


def _virtual_package(path: Path, platform: str, name: object, value: object) -> VirtualPackage:
    where = f"subdirs.{platform}.packages.{name}"
    if not isinstance(name, str) or not name.startswith("__"):
        raise InputError(path, f"{where}: virtual package names start with '__'")
    if isinstance(value, float):
        raise InputError(
            path,
            f"{where}: {excerpt(value)} is a number, not a version",
            f'quote it: {name}: "{value}" (YAML reads an unquoted 12.10 as the number 12.1)',
        )
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise InputError(path, f'{where}: expected a version string like "12.8"')
    version, _, build = str(value).strip().partition(" ")
    if not _VIRTUAL_VERSION.fullmatch(version):
        raise InputError(path, f"{where}: {excerpt(version)} is not a version", 'write it like "2.28" or "12.8"')
    return VirtualPackage(name, version, build.strip())
