"""The wheels of a pip lock entry: which one a target gets.

A package's wheels are ranked the way pip ranks them on the target machine
(`pip debug --verbose` lists that machine's tags, best first); the lock keeps
the best.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from packaging.tags import Tag

    from bootstrap.lock.pip import Target

_MACHINE = {"linux-64": "x86_64", "linux-aarch64": "aarch64", "osx-64": "x86_64", "osx-arm64": "arm64",
            "win-64": "amd64", "win-arm64": "arm64"}
# manylinux's names from before PEP 600, each an alias of the glibc it stands for.
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
_GLIBC = re.compile(r"manylinux_(?P<major>\d+)_(?P<minor>\d+)")


# --------------------------------------------------------------------------- the best wheel


def tag_ranks(target: Target) -> dict[Tag, int]:
    """Each wheel tag the target's CPython accepts -> its rank (0 = best), in pip's order."""
    from packaging import tags

    major, minor = (int(part) for part in target.python_version.split(".")[:2])
    platforms = platform_tags(target)
    ordered = [*tags.cpython_tags((major, minor), abis=[f"cp{major}{minor}"], platforms=platforms),
               *tags.compatible_tags((major, minor), f"cp{major}{minor}", platforms)]
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


def best_wheel(wheels: Sequence[Mapping], ranks: Mapping[Tag, int]) -> Mapping:
    """The wheel (a pylock `wheels` entry) whose best tag ranks first; the first wheel when none
    of them ranks (uv, which knows the target too, chose them)."""
    ranked = [(rank, index) for index, wheel in enumerate(wheels)
              if (rank := _wheel_rank(wheel, ranks)) is not None]
    return wheels[min(ranked)[1]] if ranked else wheels[0]


def _wheel_rank(wheel: Mapping, ranks: Mapping[Tag, int]) -> Optional[int]:
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
