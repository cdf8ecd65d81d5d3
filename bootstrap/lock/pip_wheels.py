"""The wheels of a pip lock entry: which one a target gets (ranked as pip ranks the target's tags), and
the version specifier of each dependency edge from its METADATA's `Requires-Dist`, as conda-lock
writes them.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:
    from packaging.markers import Marker
    from packaging.requirements import Requirement
    from packaging.tags import Tag

    from bootstrap.lock.remote_zip import RemoteFile

_MACHINE = {
    "linux-64": "x86_64",
    "linux-aarch64": "aarch64",
    "osx-64": "x86_64",
    "osx-arm64": "arm64",
    "win-64": "amd64",
    "win-arm64": "arm64",
}
# manylinux's names from before PEP 600, each an alias of the glibc it stands for.
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
_GLIBC = re.compile(r"manylinux_(?P<major>\d+)_(?P<minor>\d+)")
_METADATA_TIMEOUT_S = 15
_METADATA_WORKERS = 8
_METADATA_MAX_BYTES = 4 << 20


# --------------------------------------------------------------------------- the best wheel


@dataclass(frozen=True)
class Target:
    """The machine uv resolves for, and whose wheel tags rank the wheels (`lock.pip.target_for` makes one)."""

    platform: str
    python_version: str
    python_platform: str
    env: Mapping[str, str]


def tag_ranks(target: Target) -> dict[Tag, int]:
    """Each wheel tag the target's CPython accepts -> its rank (0 = best), in pip's order."""
    from packaging import tags

    major, minor = (int(part) for part in target.python_version.split(".")[:2])
    platforms = platform_tags(target)
    ordered = [
        *tags.cpython_tags((major, minor), abis=[f"cp{major}{minor}"], platforms=platforms),
        *tags.compatible_tags((major, minor), f"cp{major}{minor}", platforms),
    ]
    ranks: dict[Tag, int] = {}
    for rank, tag in enumerate(ordered):
        ranks.setdefault(tag, rank)
    return ranks


def platform_tags(target: Target) -> list[str]:
    """The target's wheel platform tags, best first: `manylinux_2_28_x86_64`, `macosx_14_0_arm64`, `win_amd64`."""
    from packaging import tags

    machine = _MACHINE.get(target.platform, "")
    if target.platform.startswith("win-"):
        return [f"win_{machine}"]
    if target.platform.startswith("osx-"):
        return list(tags.mac_platforms(_macos_version(target.env["MACOSX_DEPLOYMENT_TARGET"]), machine))
    glibc = _GLIBC.search(target.python_platform)
    return _manylinux_tags(machine, int(glibc.group("minor")) if glibc else 17)


def _macos_version(text: str) -> tuple[int, int]:
    """`14.0` -> (14, 0); `14` -> (14, 0)."""
    major, _, minor = text.partition(".")
    return int(major), int(minor.split(".")[0] or 0)


def _manylinux_tags(machine: str, glibc_minor: int) -> list[str]:
    oldest = 5 if machine == "x86_64" else 17  # the first manylinux each architecture had
    out = []
    for minor in range(glibc_minor, oldest - 1, -1):
        out.append(f"manylinux_2_{minor}_{machine}")
        if minor in _LEGACY_MANYLINUX:
            out.append(f"{_LEGACY_MANYLINUX[minor]}_{machine}")
    return [*out, f"linux_{machine}"]


def best_wheel(wheels: Sequence[Mapping[str, Any]], ranks: Mapping[Tag, int]) -> Mapping[str, Any]:
    """The wheel (a pylock `wheels` entry) whose best tag ranks first; the first wheel when none
    of them ranks (uv, which knows the target too, chose them)."""
    ranked = [(rank, index) for index, wheel in enumerate(wheels) if (rank := _wheel_rank(wheel, ranks)) is not None]
    return wheels[min(ranked)[1]] if ranked else wheels[0]


def _wheel_rank(wheel: Mapping[str, Any], ranks: Mapping[Tag, int]) -> Optional[int]:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import InvalidVersion

    try:
        _, _, _, wheel_tags = parse_wheel_filename(wheel.get("name") or wheel_filename(wheel["url"]))
    except (InvalidWheelFilename, InvalidVersion):
        return None
    found = [ranks[tag] for tag in wheel_tags if tag in ranks]
    return min(found) if found else None


def wheel_filename(url: str) -> str:
    """`torch-2.8.0+cu128-cp310-...whl` from a URL that may quote the `+`."""
    from urllib.parse import unquote, urlsplit

    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])


# --------------------------------------------------------------------------- Requires-Dist


def read_metadata_all(urls: Mapping[str, str], offline: bool) -> dict[str, Optional[str]]:
    """Each wheel's METADATA text by package name, None where it cannot be read; read in threads,
    as each is a request to the index."""
    if not urls:
        return {}
    with ThreadPoolExecutor(max_workers=min(_METADATA_WORKERS, len(urls))) as pool:
        futures = {name: pool.submit(read_metadata, url, offline) for name, url in urls.items()}
        return {name: future.result() for name, future in futures.items()}


def read_metadata(url: str, offline: bool) -> Optional[str]:
    """The METADATA of the wheel at `url`: from the archive for `file://`, from the index's
    `<url>.metadata` (PEP 658) for http(s) unless offline; None where neither answers."""
    from urllib.parse import urlsplit
    from urllib.request import url2pathname

    parts = urlsplit(url)
    if parts.scheme == "file":
        return _metadata_in_archive(url2pathname(parts.path))
    if parts.scheme in ("http", "https") and not offline:
        return _metadata_beside(url) or _metadata_in_remote_archive(url)
    return None


def _metadata_in_archive(path_or_file: Union[str, RemoteFile]) -> Optional[str]:
    import zipfile

    try:
        with zipfile.ZipFile(path_or_file) as archive:
            names = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
            return archive.read(names[0]).decode("utf-8", "replace") if len(names) == 1 else None
    except (OSError, zipfile.BadZipFile):
        return None


def _metadata_in_remote_archive(url: str) -> Optional[str]:
    """The METADATA member of the wheel at `url`, read with Range requests (its tail, central
    directory and that member: a few hundred KB of a 900 MB torch wheel), where the index serves
    no `.metadata` file; None where the server takes no Range requests."""
    import http.client

    from bootstrap.lock.remote_zip import RemoteFile

    try:
        return _metadata_in_archive(RemoteFile(url, _METADATA_TIMEOUT_S))
    except (OSError, ValueError, http.client.HTTPException):
        return None


def _metadata_beside(url: str) -> Optional[str]:
    """GET `<wheel url>.metadata` (PEP 658), sending no credentials of its own (no ~/.netrc):
    a locked URL carries none, and the metadata only refines an edge uv already resolved."""
    import http.client
    from urllib.parse import urlsplit, urlunsplit
    from urllib.request import urlopen

    parts = urlsplit(url)
    metadata_url = urlunsplit(parts._replace(path=parts.path + ".metadata", fragment=""))
    try:
        with urlopen(metadata_url, timeout=_METADATA_TIMEOUT_S) as response:
            data: bytes = response.read(_METADATA_MAX_BYTES)
            return data.decode("utf-8", "replace")
    except (OSError, ValueError, http.client.HTTPException):  # 404, offline, timeout: the edge stays '*'
        return None


def dependency_specifiers(
    children: Iterable[str], metadata: Optional[str], environment: Mapping[str, str]
) -> dict[str, str]:
    """Each child (as uv names it) -> the specifier the parent's `Requires-Dist` gives it on the
    target, e.g. `==12.8.4.1`; `'*'` without one or without the parent's METADATA.

    Lines whose marker holds without extras count first; a child that only an extra brings
    (uv resolved `parent[extra]`) takes the lines that hold under one of the parent's extras.
    """
    from email.parser import HeaderParser

    headers = HeaderParser().parsestr(metadata or "")
    requirements = [r for r in map(_requirement, headers.get_all("Requires-Dist") or []) if r is not None]
    base = dict(environment, extra="")
    with_extras = [dict(environment, extra=extra) for extra in headers.get_all("Provides-Extra") or []]
    return {child: _specifier_of(child, requirements, ([base], with_extras)) for child in sorted(children)}


def _specifier_of(child: str, requirements: list[Requirement], stages: Sequence[Sequence[Mapping[str, str]]]) -> str:
    from packaging.utils import canonicalize_name

    name = canonicalize_name(child)
    for environments in stages:
        holding = [
            r.specifier for r in requirements if canonicalize_name(r.name) == name and _holds(r.marker, environments)
        ]
        if holding:
            combined = holding[0]
            for specifier in holding[1:]:
                combined &= specifier
            return str(combined) or "*"
    return "*"


def _holds(marker: Optional[Marker], environments: Sequence[Mapping[str, str]]) -> bool:
    from packaging.markers import UndefinedComparison, UndefinedEnvironmentName

    try:
        return marker is None or any(marker.evaluate(dict(e)) for e in environments)
    except (UndefinedComparison, UndefinedEnvironmentName):  # a marker packaging cannot decide
        return False


def _requirement(text: str) -> Optional[Requirement]:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement:  # one bad line in someone's METADATA leaves that edge '*'
        return None
