"""The machine a lock needs (`lock_floor`, pure: the highest glibc or macOS its records and wheel tags
ask for), and this host held against it (`check_host`) before anything is fetched.
Docs: docs/env.md, "The host a lock needs".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional
from urllib.parse import unquote, urlsplit

from bootstrap.compat.host import probe_glibc, probe_macos
from bootstrap.errors import HostError
from bootstrap.lock.lockfile import Lock, LockedPackage
from bootstrap.platforms import host_platform, os_of

GLIBC = "glibc"
MACOS = "macOS"
_VIRTUAL = {"__glibc": GLIBC, "__osx": MACOS}  # the virtual packages that set a floor, and the system each names
_OS_SYSTEM = {"linux": GLIBC, "macos": MACOS}  # the floor that matters on each OS
# PEP 600's aliases: the glibc each legacy manylinux tag stands for.
_LEGACY_MANYLINUX = {"1": (2, 5), "2010": (2, 12), "2014": (2, 17)}
_TAG = re.compile(
    r"(?P<label>manylinux_(?P<glibc>\d+_\d+)|manylinux(?P<legacy>1|2010|2014)"
    r"|macosx_(?P<macos>\d+_\d+))_"
)
_BOUND = re.compile(r"(?:>=|>|==|=)?\s*(\d+(?:\.\d+)*)(?:\.\*)?")
_RELOCK = {GLIBC: "__glibc", MACOS: "__osx"}
_NEWER = {GLIBC: "use a machine with a newer OS", MACOS: "use a newer macOS"}

Version = tuple[int, ...]


@dataclass(frozen=True)
class Need:
    """One minimum the lock asks of the machine, and what in the lock asks it."""

    system: str  # GLIBC | MACOS
    version: Version  # (2, 28)
    by: str  # `torch 2.10.0 wheel manylinux_2_28`, `libgcc 15.1.0 h767d61c_2: __glibc >=2.17,<3.0.a0`

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))


@dataclass(frozen=True)
class Floor:
    """The highest glibc and macOS one platform of a lock needs; None where nothing asks for one."""

    glibc: Optional[Need] = None
    macos: Optional[Need] = None

    def of(self, system: str) -> Optional[Need]:
        return self.glibc if system == GLIBC else self.macos


@dataclass(frozen=True)
class HostSystem:
    """What this machine offers a lock: its OS and the versions a floor is held against."""

    os: str  # bootstrap.platforms.os_of: 'linux', 'macos', 'windows'
    glibc: Optional[str] = None  # "2.36"; None off Linux, or on a C library that is not glibc (musl)
    macos: Optional[str] = None  # "14.5"; None off macOS

    def version_of(self, system: str) -> Optional[str]:
        return self.glibc if system == GLIBC else self.macos


def probe_host_system() -> HostSystem:
    """This machine as a `HostSystem`."""
    return HostSystem(os_of(host_platform()), probe_glibc()[0], probe_macos()[0])


def lock_floor(entries: Iterable[LockedPackage]) -> Floor:
    """The highest need of each system over `entries` (one platform's); the first entry to ask it names it."""
    highest: dict[str, Need] = {}
    for need in (n for entry in entries for n in entry_needs(entry)):
        have = highest.get(need.system)
        if have is None or _key(need.version) > _key(have.version):
            highest[need.system] = need
    return Floor(highest.get(GLIBC), highest.get(MACOS))


def entry_needs(entry: LockedPackage) -> Iterator[Need]:
    """What one conda record's virtual dependencies, or one wheel's platform tags, ask of the machine."""
    if entry.manager == "pip":
        yield from wheel_needs(entry)
        return
    for name, constraint in entry.virtual_dependencies.items():
        bound = lower_bound(constraint) if name in _VIRTUAL else None
        if bound is not None:
            yield Need(_VIRTUAL[name], bound, f"{entry.describe()}: {name} {constraint}")


def wheel_needs(entry: LockedPackage) -> Iterator[Need]:
    """A wheel installs where any one of its tags does, so it needs the lowest of its tags, per system."""
    filename = unquote(urlsplit(entry.url).path.rsplit("/", 1)[-1])
    if not filename.endswith(".whl"):
        return
    tags = filename[: -len(".whl")].rsplit("-", 1)[-1].split(".")
    found = [need for need in map(tag_need, tags) if need is not None]
    for system in sorted({system for system, _, _ in found}):
        _, version, label = min((t for t in found if t[0] == system), key=lambda t: _key(t[1]))
        yield Need(system, version, f"{entry.name} {entry.version} wheel {label}")


def tag_need(tag: str) -> Optional[tuple[str, Version, str]]:
    """(system, version, tag without its architecture) of one platform tag: `manylinux2014_x86_64` ->
    ("glibc", (2, 17), "manylinux2014"); None for a tag that asks no minimum (`any`, `win_amd64`)."""
    match = _TAG.match(tag)
    if match is None:
        return None
    if match["legacy"]:
        return GLIBC, _LEGACY_MANYLINUX[match["legacy"]], match["label"]
    system, numbers = (GLIBC, match["glibc"]) if match["glibc"] else (MACOS, match["macos"])
    return system, tuple(int(n) for n in numbers.split("_")), match["label"]


def lower_bound(constraint: str) -> Optional[Version]:
    """The lowest version a conda version constraint allows, where it sets one: `>=2.17,<3.0.a0` -> (2, 17);
    None for `*` or `<3`. Of alternatives (`|`), the lowest; a `>` bound counts as `>=`."""
    bounds = []
    for alternative in constraint.split("|"):
        parts = [_BOUND.fullmatch(part.strip()) for part in alternative.split(",")]
        found = [tuple(int(n) for n in m.group(1).split(".")) for m in parts if m is not None]
        if not found:
            return None  # this alternative allows any old version
        bounds.append(max(found, key=_key))
    return min(bounds, key=_key)


def host_problem(floor: Floor, platform: str, host: HostSystem) -> Optional[str]:
    """Why `host` cannot run `platform`'s part of a lock with `floor`, or None. A host of another OS
    than the platform's is not what the floor is about (`--dry-run --platform` for another machine)."""
    system = _OS_SYSTEM.get(os_of(platform))
    if system is None or host.os != os_of(platform):
        return None
    need, have = floor.of(system), host.version_of(system)
    if need is None or (have is None and system == MACOS):  # a Mac that does not say its version: let it try
        return None
    asked = f"{platform} needs {system} >= {need.version_text} ({need.by})"
    if have is None:
        return f"{asked}, and this host's C library is not glibc (musl?): use a glibc-based Linux or a container of one"
    if _key(_parse(have)) >= _key(need.version):
        return None
    relock = f"relock for an older {_RELOCK[system]} in envs/virtual-packages.yml"
    if system == GLIBC and need.by.startswith("torch "):  # PyPI has no torch >= 2.7 wheel below manylinux_2_28
        relock = f"pin torch < 2.7 in the spec and {relock}"
    return f"{asked}, this host has {have}: {_NEWER[system]}, or {relock}"


def check_host(lock: Lock, platform: str, host: HostSystem) -> None:
    """A HostError if `host` is older than what the lock's entries for `platform` need."""
    problem = host_problem(lock_floor(lock.for_platform(platform)), platform, host)
    if problem is not None:
        raise HostError(f"{lock.path.name}: {problem}")


def _parse(text: str) -> Version:
    """`2.36` -> (2, 36); `14.5.1` -> (14, 5, 1); up to the first part that is not a number."""
    numbers = []
    for part in text.strip().split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


def _key(version: Version) -> Version:
    """Comparable: trailing zeros dropped, so 11.0 == 11."""
    end = len(version)
    while end and version[end - 1] == 0:
        end -= 1
    return version[:end]
