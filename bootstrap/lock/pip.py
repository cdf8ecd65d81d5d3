"""The pip part of a lock: uv resolves the spec's `pip:` section per target platform.

uv is told the target explicitly (`--python-version`, `--python-platform` from the virtual packages),
so markers are evaluated for the target, not this host. Docs: docs/lock.md, "What `lock` does".
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from bootstrap.errors import FetchError, InputError, SolveError, ToolError, one_line
from bootstrap.lock.lockfile import LockedPackage
from bootstrap.lock.pip_wheels import Target, best_wheel, dependency_specifiers, read_metadata_all, tag_ranks
from bootstrap.lock.spec import EnvSpec, VirtualPackages
from bootstrap.lock.variants import PYPI, torch_family
from bootstrap.runner import Completed, Runner, run
from bootstrap.urls import has_credentials, has_query, plain_url, scrub_credentials

_ARCH = {"linux-64": "x86_64", "linux-aarch64": "aarch64", "osx-64": "x86_64", "osx-arm64": "aarch64"}
_WINDOWS = {"win-64": "x86_64-pc-windows-msvc", "win-arm64": "aarch64-pc-windows-msvc"}
_VIA = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==\S+\s+# via (?P<parents>.+)$")
_Wheel = tuple[str, str, str, str]  # name, version, wheel URL, sha256

if TYPE_CHECKING:
    from packaging.requirements import Requirement


@dataclass(frozen=True)
class PipOptions:
    """Where uv looks for wheels. Defaults: PyPI (or UV_INDEX_URL), online."""

    find_links: tuple[str, ...] = ()
    no_index: bool = False
    offline: bool = False
    uv: Optional[str] = None  # path to the uv binary; default: beside this interpreter, then PATH
    indexes: Mapping[str, str] = field(default_factory=dict)  # `--index NAME=URL`: over the spec's `pip-indexes:`
    no_deps: bool = False  # the requirements name every package already (a hash-pinned file)

    def index_url(self, spec: EnvSpec, name: str) -> Optional[str]:
        """Where index `name` is served: `--index` first (it may carry credentials), then the spec."""
        return self.indexes.get(name) or spec.indexes.get(name)

    def index_args(self, spec: EnvSpec) -> list[str]:
        default = self.index_url(spec, PYPI)
        args = ["--default-index", default] if default else []
        for link in self.find_links:
            args += ["--find-links", link]
        if self.no_index:
            args.append("--no-index")
        if self.offline:
            args.append("--offline")
        return args


def target_for(platform: str, python_version: str, virtual_packages: VirtualPackages) -> Target:
    """Map a conda platform + its virtual packages to uv's `--python-platform` and env."""
    if platform in _WINDOWS:
        return Target(platform, python_version, _WINDOWS[platform], {})
    if platform.startswith("linux-") and platform in _ARCH:
        glibc = virtual_packages.version_of(platform, "__glibc")
        if glibc is None:
            raise InputError(
                virtual_packages.path,
                f"subdirs.{platform}.packages.__glibc: missing",
                'the pip part needs it to pick manylinux wheels, e.g. __glibc: "2.28"',
            )
        major, _, minor = glibc.partition(".")
        return Target(platform, python_version, f"{_ARCH[platform]}-manylinux_{major}_{minor or 0}", {})
    if platform.startswith("osx-") and platform in _ARCH:
        osx = virtual_packages.version_of(platform, "__osx")
        if osx is None:
            raise InputError(
                virtual_packages.path,
                f"subdirs.{platform}.packages.__osx: missing",
                'the pip part needs the oldest macOS to support, e.g. __osx: "14.0"',
            )
        return Target(platform, python_version, f"{_ARCH[platform]}-apple-darwin", {"MACOSX_DEPLOYMENT_TARGET": osx})
    raise InputError(
        "--platform",
        f"{platform}: the pip part cannot be resolved for this platform",
        "remove the pip: section or the platform",
    )


# PEP 508 marker values of each conda platform (what `python -c "import platform, sys, os; ..."` prints there).
_MARKER_PLATFORM = {
    "linux": {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"},
    "osx": {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix"},
    "win": {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt"},
}
_MARKER_MACHINE = {
    "linux-64": "x86_64",
    "linux-aarch64": "aarch64",
    "osx-64": "x86_64",
    "osx-arm64": "arm64",
    "win-64": "AMD64",
    "win-arm64": "ARM64",
}


def marker_environment(platform: str, python_version: str) -> dict[str, str]:
    """The environment PEP 508 markers are evaluated in on `platform` with CPython `python_version`
    (`3.10.19`), e.g. to tell whether `colorama; sys_platform == 'win32'` applies there."""
    family = _MARKER_PLATFORM.get(platform.split("-")[0], {})
    return {
        **family,
        "platform_machine": _MARKER_MACHINE.get(platform, ""),
        "python_version": ".".join(python_version.split(".")[:2]),
        "python_full_version": python_version,
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }


def uv_binary(options: PipOptions) -> str:
    if options.uv:
        return options.uv
    beside = Path(sys.executable).with_name("uv")
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        raise ToolError("uv not found beside this Python or on PATH; run `make tools`")
    return found


def resolve_pip(
    spec: EnvSpec,
    target: Target,
    options: PipOptions = PipOptions(),
    runner: Runner = run,
    prefer: Sequence[LockedPackage] = (),
) -> list[LockedPackage]:
    """Resolve `spec.pip` for `target`: each wheel's URL and sha256, with dependency edges, each
    constrained as the parent's METADATA says (`'*'` where it cannot be read).
    `prefer`: locked wheels whose versions uv keeps where the requirements still allow them."""
    if not spec.pip:
        return []
    uv = uv_binary(options)
    with tempfile.TemporaryDirectory(prefix="bootstrap-pip-") as tmp:
        base = [
            uv,
            "pip",
            "compile",
            _write_input(Path(tmp), spec, options),
            "--quiet",
            "--python-version",
            target.python_version,
            "--python-platform",
            target.python_platform,
            "--only-binary",
            ":all:",
            "--no-header",
            "--no-python-downloads",  # nothing is built, so no interpreter of that version is needed
            # ... nor found: without an interpreter named uv looks for one of --python-version, running
            # every python on PATH to ask its version (a pyenv shim is a shell script each time).
            *(["--python", sys.executable] if sys.executable else []),
            *(["--no-deps"] if options.no_deps else []),
            *options.index_args(spec),
        ]
        _write_preferences(Path(tmp), prefer)
        done = runner([*base, "--format", "pylock.toml", "-o", "pylock.toml"], env=target.env, cwd=tmp, timeout=600)
        _raise_for(done, spec, target, options)
        wheels = _parse_pylock(Path(tmp, "pylock.toml").read_text(encoding="utf-8"), target)
        # pylock.toml carries no dependency edges; uv's annotated output does.
        # The second run reads only uv's cache (--offline), so it adds little;
        # uv may not serve a `name @ URL` wheel from its cache, so that one asks again online.
        # Without the edges every dependency would be locked as needed by nothing (stale).
        annotate = [*base, "--annotation-style", "line", *_pinned_output(Path(tmp), wheels)]
        annotated = runner(
            annotate if options.offline else [*annotate, "--offline"], env=target.env, cwd=tmp, timeout=120
        )
        if annotated.returncode != 0 and not options.offline:
            annotated = runner(annotate, env=target.env, cwd=tmp, timeout=600)
        _raise_for(annotated, spec, target, options)
        edges = parse_via_annotations(Path(tmp, _ANNOTATED).read_text(encoding="utf-8"))
    metadata = read_metadata_all({name: url for name, _, url, _ in wheels}, options.offline)
    environment = marker_environment(target.platform, target.python_version)
    return [
        LockedPackage(
            name=name,
            version=version,
            manager="pip",
            platform=target.platform,
            url=url,
            sha256=sha256,
            dependencies=dependency_specifiers(edges.get(name, ()), metadata.get(name), environment),
        )
        for name, version, url, sha256 in wheels
    ]


_INPUT_PROJECT = "bootstrap-lock-input"
_ANNOTATED = "annotated.txt"


def _write_preferences(directory: Path, prefer: Sequence[LockedPackage]) -> None:
    """Seed uv's output file with the locked versions. Like pip-compile, `uv pip compile -o FILE`
    keeps each version FILE names while the requirements allow it (`--upgrade-package` is the
    same as leaving it out), and uv (0.13) reads a pylock.toml there as well as a requirements file."""
    if not prefer:
        return
    lines = ['lock-version = "1.0"', 'created-by = "bootstrap"']
    for package in prefer:
        lines += [
            "",
            "[[packages]]",
            f"name = {_toml_string(package.name)}",
            f"version = {_toml_string(package.version)}",
        ]
    directory.joinpath("pylock.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _pinned_output(directory: Path, wheels: Sequence[_Wheel]) -> list[str]:
    """uv arguments that make the annotation run resolve the versions the pylock run chose: its
    output file, written beforehand with them, holds its preferences, which the same requirements
    always allow. Otherwise it would pick the newest versions, not the preferred ones, and the
    edges would be those of other versions."""
    directory.joinpath(_ANNOTATED).write_text(
        "".join(f"{wheel[0]}=={wheel[1]}\n" for wheel in wheels), encoding="utf-8"
    )
    return ["-o", _ANNOTATED]


def _write_input(directory: Path, spec: EnvSpec, options: PipOptions) -> str:
    """The requirements uv compiles, written in `directory`; returns the file name. A variant whose
    torch family comes from its own index needs a pyproject.toml: only there can uv tie packages to
    an index (`tool.uv.sources`), and an `explicit` index serves nothing else, so numpy and the
    rest still come from the default index."""
    index = spec.torch_index_name
    url = options.index_url(spec, index) if index else None
    if not url:
        directory.joinpath("requirements.in").write_text("\n".join(spec.pip) + "\n", encoding="utf-8")
        return "requirements.in"
    lines = [
        "[project]",
        f'name = "{_INPUT_PROJECT}"',
        'version = "0"',
        "dependencies = [",
        *(f"  {_toml_string(r)}," for r in spec.pip),
        "]",
        "",
        "[[tool.uv.index]]",
        f'name = "{index}"',
        f"url = {_toml_string(url)}",
        "explicit = true",
        "",
        "[tool.uv.sources]",
        *(f'{name} = {{ index = "{index}" }}' for name in torch_family(spec.pip)),
    ]
    directory.joinpath("pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return "pyproject.toml"


def _toml_string(text: str) -> str:
    import json

    return json.dumps(text)  # a JSON string is a TOML basic string


def _raise_for(done: Completed, spec: EnvSpec, target: Target, options: PipOptions) -> None:
    if done.returncode == 0:
        return
    message = scrub_credentials(done.stderr.strip())  # uv hides a password, not an anaconda.org /t/TOKEN
    where = f"{spec.path}: pip: for {target.platform} (Python {target.python_version}, {target.python_platform})"
    if "No solution found" in message or "not satisfiable" in message or "Because " in message:
        raise SolveError(f"{where}: cannot be satisfied: {one_line(message)} (relax or fix the pip: requirements)")
    if "Failed to fetch" in message or "error sending request" in message or "dns error" in message.lower():
        raise FetchError(f"{where}: cannot reach the package index{_unreached_index(spec, options, message)}")
    raise ToolError(f"{where}: uv failed: {one_line(message)}")


def _unreached_index(spec: EnvSpec, options: PipOptions, message: str) -> str:
    """uv's last line and the fix, for the index `message` says uv could not reach: the variant's torch
    index where the message names its URL (served elsewhere with `lock --index NAME=URL`, or moved in
    the spec's `pip-indexes:`), else the default index (UV_INDEX_URL, what `bundle` reads too)."""
    last = message.splitlines()[-1]
    name = spec.torch_index_name
    if name:
        url = scrub_credentials(options.index_url(spec, name) or "")
        if url and url in message:
            return (
                f" {name}: {last} (offline? serve it from a mirror: `--index {name}=URL`, or fix "
                f"`pip-indexes: {{{name}: URL}}` in {spec.path.name})"
            )
    return f": {last} (offline? point UV_INDEX_URL at a PyPI mirror)"


def _parse_pylock(text: str, target: Target) -> list[_Wheel]:
    """(name, version, wheel url, sha256) for each package of a PEP 751 pylock.toml."""
    if sys.version_info >= (3, 11):
        import tomllib  # novermin: only reached on 3.11+
    else:
        import tomli as tomllib

    ranks = tag_ranks(target)
    out = []
    for package in tomllib.loads(text).get("packages", []):
        # With --python-platform uv lists only wheels usable on the target, but in no order that
        # favours it (py3-none-any before manylinux_2_28, macosx_11_0 before macosx_14_0); a
        # requirement `name @ URL` comes as an `archive` instead, whatever the target.
        wheels, archive = package.get("wheels") or [], package.get("archive") or {}
        wheel = best_wheel(wheels, ranks) if wheels else archive
        if not wheels and not (_lockable_url(archive.get("url", "")) and _fits(archive["url"], target)):
            at = f" at {archive['url']}" if archive.get("url") else ""
            raise SolveError(f"{package['name']} {package.get('version')}: no wheel for {target.python_platform}{at}")
        # uv drops user:password@ itself, not anaconda.org's /t/TOKEN/ nor a signed URL's query
        if has_credentials(wheel["url"]) or has_query(wheel["url"]):
            raise SolveError(
                f"{package['name']} {package['version']}: "
                f"the wheel's URL {plain_url(wheel['url'])} "
                "carries a token or a query, which the lock (committed, shared) would hold (serve "
                "the index without one in its URLs; uv reads credentials from ~/.netrc)"
            )
        out.append((package["name"], package["version"], wheel["url"], wheel["hashes"]["sha256"]))
    return out


# Wheel platform tags by conda platform: (prefixes, suffixes) one of the wheel's tags must have.
_WHEEL_PLATFORMS = {
    "linux-64": (("manylinux", "musllinux", "linux"), ("x86_64",)),
    "linux-aarch64": (("manylinux", "musllinux", "linux"), ("aarch64",)),
    "osx-64": (("macosx",), ("x86_64", "universal2", "intel")),
    "osx-arm64": (("macosx",), ("arm64", "universal2")),
    "win-64": (("win",), ("amd64",)),
    "win-arm64": (("win",), ("arm64",)),
}


def _fits(url: str, target: Target) -> bool:
    """Whether the wheel at `url` can be installed on the target's platform (by its file name's tags)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        _, _, _, tags = parse_wheel_filename(url.rsplit("/", 1)[-1])
    except InvalidWheelFilename:
        return False
    prefixes, suffixes = _WHEEL_PLATFORMS.get(target.platform, ((), ()))
    return any(t.platform == "any" or (t.platform.startswith(prefixes) and t.platform.endswith(suffixes)) for t in tags)


def parse_via_annotations(text: str) -> dict[str, set[str]]:
    """Dependency edges from uv's `--annotation-style line` output: parent -> children."""
    edges: dict[str, set[str]] = {}
    for line in text.splitlines():
        match = _VIA.match(line.strip())
        if not match:
            continue
        child = match.group("name").lower()
        for parent in match.group("parents").split(","):
            parent = parent.strip()
            if parent and not parent.startswith(("-r", _INPUT_PROJECT)):
                edges.setdefault(parent.lower(), set()).add(child)
    return edges


def resolve_all(
    spec: EnvSpec,
    targets: Sequence[Target],
    options: PipOptions = PipOptions(),
    runner: Runner = run,
    prefer: Optional[Mapping[str, Sequence[LockedPackage]]] = None,
) -> dict[str, list[LockedPackage]]:
    """Resolve every target in parallel threads (each is a uv subprocess waiting on the network);
    `prefer`: by platform, the locked wheels to keep (see `resolve_pip`)."""
    from concurrent.futures import ThreadPoolExecutor

    prefer = prefer or {}
    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        futures = {
            t.platform: pool.submit(resolve_pip, spec, t, options, runner, prefer.get(t.platform, ())) for t in targets
        }
        return {platform: future.result() for platform, future in futures.items()}


def pip_requirements(spec: EnvSpec) -> list[Requirement]:
    """The spec's pip: entries as `packaging` Requirements; bad syntax, or a URL that cannot be
    locked with a hash, names the entry."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for text in spec.pip:
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise InputError(
                spec.path, f"pip: '{text}' is not a valid requirement: {one_line(exc)}", "write e.g. `torch==2.10.*`"
            ) from None
        if requirement.url and not _lockable_url(requirement.url):
            raise InputError(
                spec.path,
                f"pip: '{text}': only a wheel over http(s) can be locked with its hash",
                "name a .whl URL, or publish the package to an index (UV_INDEX_URL, --pip-find-links)",
            )
        out.append(requirement)
    return out


def _lockable_url(url: str) -> bool:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and parts.path.endswith(".whl")
