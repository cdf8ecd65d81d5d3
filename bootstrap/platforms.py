"""The one platform vocabulary: conda subdirs (`linux-64`, `linux-aarch64`, `osx-arm64`, `win-64`), their
OS, and the key the compat tables use; `host_platform()` is this machine's subdir. The shell's copy in
scripts/tools-venv.sh is held to this table by tests/test_platforms.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class Platform:
    subdir: str  # conda's name: 'linux-64'
    os: str  # 'linux', 'macos' or 'windows': the driver-number series, the wheels' OS
    compat_key: str  # the compat tables' key: 'linux_x86_64'
    machines: tuple[str, ...]  # platform.machine(), lowercased, on that OS


PLATFORMS = (
    Platform("linux-64", "linux", "linux_x86_64", ("x86_64", "amd64")),
    Platform("linux-aarch64", "linux", "linux_aarch64", ("aarch64", "arm64")),
    Platform("linux-ppc64le", "linux", "linux_ppc64le", ("ppc64le",)),
    Platform("osx-64", "macos", "macos", ("x86_64",)),
    Platform("osx-arm64", "macos", "macos", ("arm64",)),
    Platform("win-64", "windows", "windows_x86_64", ("amd64", "x86_64")),
    Platform("win-arm64", "windows", "windows_aarch64", ("arm64",)),
)
KNOWN_PLATFORMS = tuple(p.subdir for p in PLATFORMS)
_BY_SUBDIR = {p.subdir: p for p in PLATFORMS}
# sys.platform -> OS; any other OS keeps its own name in the subdir (`freebsd13-amd64`).
_SYS_PLATFORM_OS = {"linux": "linux", "darwin": "macos", "win32": "windows"}
# Where platform.machine() names none of the OS's subdirs, the subdir it has always got.
_FALLBACK = {"macos": "osx-64", "windows": "win-64"}
# Other spellings `compat_key` accepts: sys.platform values and the OS names.
_ALIASES = {"linux": "linux_x86_64", "win32": "windows_x86_64", "darwin": "macos", "macos": "macos"}
# The compat key -> subdir direction: the first subdir of each key, but macOS's key stands for
# both of its subdirs and means Apple silicon unless only the Intel one is locked.
_SUBDIR_OF_KEY = {**{p.compat_key: p.subdir for p in reversed(PLATFORMS)}, "macos": "osx-arm64"}


def host_platform(sys_platform: Optional[str] = None, machine: Optional[str] = None) -> str:
    """This machine as a conda subdir: `linux-64`, `osx-arm64`, `win-64`, ... (defaults: `sys.platform`,
    `platform.machine()`). Shell equivalent: `uname -sm`."""
    if sys_platform is None:
        import sys

        sys_platform = sys.platform
    if machine is None:
        import platform

        machine = platform.machine()
    machine = machine.lower()
    os_name = _SYS_PLATFORM_OS.get("linux" if sys_platform.startswith("linux") else sys_platform)
    for candidate in PLATFORMS:
        if candidate.os == os_name and machine in candidate.machines:
            return candidate.subdir
    if os_name in _FALLBACK:
        return _FALLBACK[os_name]
    return f"{'linux' if os_name == 'linux' else sys_platform}-{machine}"


def os_of(subdir: str) -> str:
    """'linux', 'macos' or 'windows' for a conda subdir; any other system counts as Linux, whose
    driver numbers NVIDIA's other Unix drivers share."""
    known = _BY_SUBDIR.get(subdir)
    if known is not None:
        return known.os
    return "macos" if subdir.startswith("osx-") else "windows" if subdir.startswith("win-") else "linux"


def compat_key(platform: str) -> str:
    """A conda subdir (or a compat key, or sys.platform's name) -> the compat tables' key:
    'linux-64' -> 'linux_x86_64', 'osx-64' -> 'macos'. A platform the table lacks stays as it is."""
    name = platform.lower()
    known = _BY_SUBDIR.get(name)
    if known is not None:
        return known.compat_key
    return _ALIASES.get(name, name)


def conda_subdir(key: str, locked: Sequence[str] = ()) -> str:
    """A compat key -> its conda subdir ('linux_x86_64' -> 'linux-64'). macOS's key is osx-arm64
    unless `locked` has only osx-64. A key the table lacks stays as it is."""
    if key == "macos" and "osx-arm64" not in locked and "osx-64" in locked:
        return "osx-64"
    return _SUBDIR_OF_KEY.get(key, key)
