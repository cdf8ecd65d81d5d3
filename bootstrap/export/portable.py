"""The portability rules of `export` (pure): a lock or an existing environment -> what a shared
environment.yml says (`PortableEnv`), before rendering.
Docs: docs/lock.md, "`environment.yml`: the export for plain conda".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence
from urllib.parse import urlsplit

from bootstrap.errors import InputError
from bootstrap.install.history import CONDA_NAME
from bootstrap.lock.lockfile import Lock
from bootstrap.lock.spec import ANACONDA_ORG, EnvSpec, check_channel, is_env_name
from bootstrap.urls import scrub_credentials

# conda platform -> (sys_platform, platform_machine) as PEP 508 markers see them.
_MARKER_ENV = {
    "linux-64": ("linux", "x86_64"),
    "linux-aarch64": ("linux", "aarch64"),
    "linux-ppc64le": ("linux", "ppc64le"),
    "osx-64": ("darwin", "x86_64"),
    "osx-arm64": ("darwin", "arm64"),
    "win-64": ("win32", "AMD64"),
    "win-arm64": ("win32", "ARM64"),
}
_PIP_REQ = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?P<extras>\[[^\]]*\])?\s*"
    r"(?P<rest>[^;]*?)\s*(?:;\s*(?P<marker>.+?))?\s*$"
)
_SUBDIR_SUFFIX = re.compile(r"/(noarch|(?:linux|osx|win|emscripten|wasi|zos)-[A-Za-z0-9_]+)/?$")
_ANACONDA_TOKEN = re.compile(r"/t/[^/]+")


@dataclass(frozen=True)
class ExportOptions:
    name: Optional[str] = None  # the `name:` of the export (default: the spec's / the prefix's)
    channels: tuple[str, ...] = ()  # replace the channels (e.g. a local channel by the one the team uses)
    platforms: tuple[str, ...] = ()  # a subset of the locked platforms


@dataclass(frozen=True)
class Line:
    """One entry of `dependencies:` (or of its `pip:` list), with an optional YAML comment."""

    text: str
    comment: str = ""


@dataclass(frozen=True)
class PortableEnv:
    """What a portable environment.yml says, before rendering."""

    name: str
    channels: tuple[str, ...]
    platforms: tuple[str, ...]
    conda: tuple[Line, ...]
    pip: tuple[Line, ...]
    source: str  # one line for the header, e.g. "envs/py310.yml pinned to conda-lock.yml"
    notes: tuple[str, ...] = ()  # things the user should know; the command prints them on stderr
    from_lock: bool = True  # a lock also has a --pinned form; an existing environment does not


def check_options(options: ExportOptions) -> None:
    """`--name` and `--channel` as conda will read them back, and nothing a teammate should not get."""
    if options.name is not None and not is_env_name(options.name):
        raise InputError(
            "--name",
            f"{options.name!r} is not an environment name conda accepts",
            "use letters, digits, '.', '-' and '_', e.g. --name py310",
        )
    for channel in options.channels:
        parts = urlsplit(channel)
        if not channel.strip() or any(c.isspace() for c in channel) or ("://" in channel and not parts.netloc):
            raise InputError(
                "--channel", f"{channel!r} is not a channel", "give a channel name (conda-forge) or an http(s) URL"
            )
        check_channel("--channel", channel)


def portable_from_lock(
    spec: EnvSpec, lock: Lock, options: ExportOptions = ExportOptions(), source: str = ""
) -> PortableEnv:
    """The spec's requested specs pinned to the versions `lock` holds (pure)."""
    platforms = chosen_platforms(lock, options.platforms)
    conda = tuple(_pin_conda(text, lock, platforms) for text in spec.conda)
    pip: list[Line] = []
    for text in spec.pip:
        pip.extend(_pin_pip(text, lock, platforms))
    channels = portable_channels(options.channels or spec.channels, bool(options.channels))
    return PortableEnv(
        options.name or spec.name,
        channels,
        platforms,
        conda,
        tuple(pip),
        source or f"{spec.path.name} pinned to {lock.path.name}",
        _index_notes(lock, platforms),
    )


def chosen_platforms(lock: Lock, requested: Sequence[str]) -> tuple[str, ...]:
    for platform in requested:
        if platform not in lock.platforms:
            raise InputError(
                "--platform",
                f"'{platform}' is not locked in {lock.path.name} ({', '.join(lock.platforms)})",
                "add it to the spec's platforms and relock, or pick a locked one",
            )
    return tuple(dict.fromkeys(requested)) or tuple(lock.platforms)


def _pin_conda(text: str, lock: Lock, platforms: Sequence[str]) -> Line:
    match = CONDA_NAME.match(text.strip())
    if match is None:
        raise InputError(lock.path, f"cannot read a package name from the spec entry '{text}'", "fix the spec")
    name = match.group("name").lower()
    if name.startswith("__"):
        return Line(text.strip())  # a virtual package is a requirement on the machine, never locked
    prefix = channel_prefix(text)  # `https://conda.anaconda.org/conda-forge::x` -> `conda-forge::`
    versions = {}
    for platform in platforms:
        found = [p for p in lock.for_platform(platform, "conda") if p.name == name]
        if not found:
            raise InputError(
                lock.path, f"{platform}: '{text}' is not locked", "the lock is stale: relock with `make lock`"
            )
        versions[platform] = found[0].version
    return conda_line(prefix + name, versions, requested_build(text))


def conda_line(name: str, versions: Mapping[str, str], build: Optional[str] = None) -> Line:
    """`name=version`, or one constraint covering every platform's version (see the module doc);
    with the build the spec asked for, if any (`=version=build`)."""
    distinct = sorted(set(versions.values()), key=_version_key)
    if len(distinct) == 1:
        return Line(f"{name}={distinct[0]}" + (f"={build}" if build else ""))
    comment = "locked: " + ", ".join(f"{v} ({', '.join(p for p in versions if versions[p] == v)})" for v in distinct)
    common = _common_prefix([v.split(".") for v in distinct])
    if common:
        return Line(f"{name}={'.'.join(common)}.*" + (f"={build}" if build else ""), comment)
    return Line(f"{name}>={distinct[0]},<={distinct[-1]}" + (f" {build}" if build else ""), comment)


_BRACKET_BUILD = re.compile(r"\[[^\]]*\bbuild(?:_string)?\s*=\s*['\"]?([^'\",\]\s]+)")
_SPACE_AFTER_OPERATOR = re.compile(r"([<>=!~,|])\s+")


def requested_build(spec: str) -> Optional[str]:
    """The build a conda match spec asks for: `pytorch * cuda*`, `libblas=*=*mkl`, `x[build=cpu*]`.
    Unlike a locked build string, it chooses a variant (CUDA or CPU, MKL or OpenBLAS), so a
    portable export keeps it: without it conda would pick the variant the team ruled out."""
    text = spec.split("#", 1)[0].strip()
    bracket = _BRACKET_BUILD.search(text)
    if bracket:
        build = bracket.group(1)
    else:
        match = CONDA_NAME.match(text)
        rest = re.sub(r"\[.*\]", "", text[match.end() :] if match else "").strip()
        if rest.startswith("=") and not rest.startswith("=="):  # name=version=build
            build = rest[1:].partition("=")[2].strip()
        else:  # name version build (conda reads `>= 1.0` as `>=1.0`)
            words = _SPACE_AFTER_OPERATOR.sub(r"\1", rest).split()
            build = words[1] if len(words) == 2 else ""
    return build if build and build != "*" else None


def _common_prefix(split_versions: list[list[str]]) -> list[str]:
    common: list[str] = []
    for parts in zip(*split_versions):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return common


def _version_key(version: str) -> list[tuple[int, int, str]]:
    """An approximation of conda's VersionOrder, enough to order a few versions of one package."""
    parts = re.findall(r"\d+|[A-Za-z]+", version)
    return [(1, int(p), "") if p.isdigit() else (0, 0, p.lower()) for p in parts]


def _pin_pip(text: str, lock: Lock, platforms: Sequence[str]) -> list[Line]:
    match = _PIP_REQ.match(text)
    if match is None or match.group("rest").startswith("@"):
        return [Line(text)]  # a direct reference (`name @ URL`) is already exact
    name, extras, marker = match.group("name"), match.group("extras") or "", match.group("marker")
    key = canonical_pip(name)
    versions = {}
    for platform in platforms:
        found = [p for p in lock.for_platform(platform, "pip") if canonical_pip(p.name) == key]
        if found:
            versions[platform] = found[0].version
        elif marker is None:
            raise InputError(
                lock.path,
                f"{platform}: pip requirement '{text}' is not locked",
                "the lock is stale: relock with `make lock`",
            )
    if not versions:
        return [Line(text)]  # excluded everywhere by its own marker
    distinct = sorted(set(versions.values()), key=_version_key)
    if len(distinct) == 1:
        return [Line(_requirement(name, extras, distinct[0], marker))]
    lines = []
    for group, platform_marker in _platform_groups(versions):
        combined = platform_marker if marker is None else f"({marker}) and ({platform_marker})"
        lines.append(Line(_requirement(name, extras, versions[group[0]], combined), f"locked for {', '.join(group)}"))
    return sorted(lines, key=lambda line: line.comment)


def _requirement(name: str, extras: str, version: str, marker: Optional[str]) -> str:
    return f"{name}{extras}=={version}" + (f"; {marker}" if marker else "")


def canonical_pip(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _platform_groups(versions: Mapping[str, str]) -> list[tuple[list[str], str]]:
    """Platforms that can share one marker, and that marker: one group per OS, or per platform
    when two platforms of one OS are locked at different versions.

    Each marker is a single `sys_platform ==` comparison (or one `and` with
    `platform_machine`): conda-lock 4.0.3's parser cannot evaluate `or` unions
    of them, and evaluates only `sys_platform` (`platform_machine` counts as true).
    """
    groups = []
    for os_name in sorted({_MARKER_ENV[p][0] for p in versions}):
        same_os = [p for p in versions if _MARKER_ENV[p][0] == os_name]
        if len({versions[p] for p in same_os}) == 1:
            groups.append((same_os, f'sys_platform == "{os_name}"'))
        else:
            groups += [
                ([p], f'sys_platform == "{os_name}" and platform_machine == "{_MARKER_ENV[p][1]}"') for p in same_os
            ]
    return groups


def _index_notes(lock: Lock, platforms: Sequence[str]) -> tuple[str, ...]:
    hosts = sorted(
        {
            urlsplit(scrub_credentials(p.url)).netloc or "local files"
            for platform in platforms
            for p in lock.for_platform(platform, "pip")
            if not p.url.startswith("https://files.pythonhosted.org/")
        }
    )
    if not hosts:
        return ()
    return (
        f"some pip packages were locked from {', '.join(hosts)}, not PyPI; the portable file installs "
        "them from the teammate's index (use --pinned for the exact artifacts)",
    )


# --------------------------------------------------------------------------- channels


def portable_channels(channels: Iterable[str], overridden: bool) -> tuple[str, ...]:
    out: list[str] = []
    for channel in channels:
        short = portable_channel(channel)
        if _is_local(short):
            raise InputError(
                "channels",
                f"'{short}' is a local directory; a shared environment.yml cannot name it",
                "pass --channel NAME (e.g. --channel conda-forge) for the channel teammates install from"
                if not overridden
                else "give --channel a channel name or an http(s) URL",
            )
        if short not in out:
            out.append(short)
    return tuple(out)


def portable_channel(channel: str) -> str:
    """`https://user:pw@conda.anaconda.org/t/TOKEN/conda-forge/linux-64/` -> `conda-forge`."""
    text = scrub_credentials(channel.strip()).rstrip("/")
    text = _ANACONDA_TOKEN.sub("", text) if "://" in text else text
    text = _SUBDIR_SUFFIX.sub("", text) if "://" in text else text
    if text.startswith(ANACONDA_ORG + "/"):
        return text[len(ANACONDA_ORG) + 1 :]
    return text


def channel_prefix(spec: str) -> str:
    match = CONDA_NAME.match(spec.strip())
    channel = match.group("channel") if match else None
    if channel:
        channel = portable_channel(channel)
    return f"{channel}::" if channel and re.fullmatch(r"[A-Za-z0-9_.\-]+", channel) else ""


def _is_local(channel: str) -> bool:
    return channel.startswith(("file:", "/", "./", "../", "~")) or bool(re.match(r"^[A-Za-z]:[\\/]", channel))
