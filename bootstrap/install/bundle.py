"""Offline bundles: every artifact a lock installs, the lock and the tools venv's wheels, in one tar.

Made through the fetcher (hash-checked; the same locks give the same bytes) and installed as
`env`'s first source. Docs: docs/env.md, "Bundles: nodes without a mirror".
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import tarfile
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

from bootstrap import __version__
from bootstrap.errors import InputError, IntegrityError
from bootstrap.fsutil import disk_full, flock_held, out_of_space
from bootstrap.install.cache import cache_lock
from bootstrap.install.download import Source, Watch
from bootstrap.install.fetch import archive_path, check_mirrors, fetch_archives
from bootstrap.install.plan import locked_entries
from bootstrap.lock.lockfile import LockedPackage, read_lock
from bootstrap.lock.mirrors import Mirror
from bootstrap.lock.pip import PipOptions, resolve_pip
from bootstrap.lock.pip_wheels import Target
from bootstrap.lock.spec import EnvSpec
from bootstrap.report import result

FORMAT = "bootstrap.bundle"
VERSION = 1
INDEX = "bundle.json"
SUMS = "SHA256SUMS"
TOOLS_REQUIREMENTS = Path(__file__).resolve().parents[2] / "scripts" / "requirements-tools.txt"


@dataclass(frozen=True)
class BundleOptions:
    locks: tuple[tuple[str, Path], ...]  # (env, lock file)
    platforms: tuple[str, ...]
    output: Path
    cache_dir: Path
    mirrors: tuple[Mirror, ...] = ()
    tools: tuple[Target, ...] = ()  # the Pythons and platforms to bundle the tools venv's wheels for
    tools_requirements: Path = TOOLS_REQUIREMENTS  # the tools venv's pins
    pip: PipOptions = PipOptions()  # where uv finds the tools' wheels (PyPI by default)


@result
class BundleResult:
    path: Path
    envs: tuple[str, ...]
    platforms: tuple[str, ...]
    artifacts: int  # conda archives and wheels of the envs
    tools_wheels: int  # wheels of the tools venv, all Pythons and platforms
    size: int  # bytes of the tar

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "envs": list(self.envs),
            "platforms": list(self.platforms),
            "artifacts": self.artifacts,
            "tools_wheels": self.tools_wheels,
            "bytes": self.size,
        }


def make_bundle(
    options: BundleOptions,
    started: Callable[[int], None] = lambda _total: None,
    fetched: Optional[Callable[[LockedPackage], None]] = None,
    waiting: Callable[[str], None] = lambda _line: None,
    watch: Optional[Watch] = None,
) -> BundleResult:
    """Fetch and verify every artifact the locks install on `options.platforms`, and the tools
    venv's wheels, into the store; then write the tar beside `options.output` and rename it
    there: a failure leaves no half-written bundle."""
    check_output(options.output)
    envs, entries = _locked(options)
    tools = {tools_tag(t): tools_wheels(options.tools_requirements, t, options.pip) for t in options.tools}
    members = [(e, f"artifacts/{e.sha256}/{e.filename}") for e in entries]
    members += [(w, f"tools/{tag}/{w.filename}") for tag, wheels in tools.items() for w in wheels]
    unique = list({entry.sha256: entry for entry, _ in members}.values())
    started(len(unique))
    try:
        with cache_lock(options.cache_dir, waiting, shared=True):  # no prune between the fetch and the tar
            fetch_archives(unique, options.cache_dir, options.mirrors, progress=fetched, watch=watch)  # verified
            index = {
                "format": FORMAT,
                "version": VERSION,
                "bootstrap_version": __version__,
                "envs": envs,
                "artifacts": [
                    {
                        "url": e.url,
                        "sha256": e.sha256,
                        "member": member,
                        "manager": e.manager,
                        "size": archive_path(options.cache_dir, e).stat().st_size,
                    }
                    for e, member in members[: len(entries)]
                ],
                "tools": [
                    {
                        "python": t.python_version,
                        "platform": t.platform,
                        "member": f"tools/{tools_tag(t)}",
                        "wheels": [w.filename for w in tools[tools_tag(t)]],
                    }
                    for t in options.tools
                ],
            }
            locks = [(lock_path, env["lock"]) for (_, lock_path), env in zip(options.locks, envs)]
            size = _write(options, index, locks, members)
    except OSError as exc:
        if not out_of_space(exc):
            raise
        raise disk_full(
            f"bundling into {options.output}",
            {"bundle": options.output.parent, "package cache": options.cache_dir},
            "nothing was written",
            "free space, or pass -o or --cache-dir on another disk",
            cause=exc,
        ) from None
    return BundleResult(
        path=options.output,
        envs=tuple(e["env"] for e in envs),
        platforms=options.platforms,
        artifacts=len(entries),
        tools_wheels=len(members) - len(entries),
        size=size,
    )


def _locked(options: BundleOptions) -> tuple[list[dict[str, Any]], list[LockedPackage]]:
    """What the bundle says of each env, and the artifacts of them all (each once, in a fixed order)."""
    envs: list[dict[str, Any]] = []
    artifacts: dict[str, LockedPackage] = {}
    locks = []
    for env, lock_path in options.locks:
        lock = read_lock(lock_path)
        locks.append(lock)
        for platform in options.platforms:
            for entry in locked_entries(lock, platform):
                artifacts.setdefault(entry.sha256, entry)
        envs.append(
            {
                "env": env,
                "lock": f"locks/{env}/{lock_path.name}",
                "platforms": list(options.platforms),
                "content_hash": {p: lock.content_hash.get(p, "") for p in options.platforms},
            }
        )
    check_mirrors(options.mirrors, *locks)  # a typo'd one would fetch from the channel it was meant to replace
    return envs, sorted(artifacts.values(), key=lambda e: (e.manager, e.name, e.filename, e.sha256))


def check_output(output: Path) -> None:
    """Before anything is fetched: `output` can become a bundle, and is not something else."""
    try:
        _check_output(output)
    except PermissionError as exc:  # a directory on the way we may not look into
        raise InputError("-o", f"{output}: {exc.strerror}", "pass -o in a directory you can write") from None


def _check_output(output: Path) -> None:
    if output.suffix != ".tar":
        raise InputError("-o", f"{output}: a bundle is a .tar file", "name it e.g. bundle-py310-linux-64.tar")
    if output.is_dir():
        raise InputError("-o", f"{output} is a directory", "name the .tar file to write")
    if not output.parent.is_dir():
        raise InputError("-o", f"{output.parent} is not a directory", "create it first, or pass another -o")
    if not os.access(output.parent, os.W_OK):
        raise InputError("-o", f"{output.parent} is not writable", "pass -o in a directory you can write")


def _write(
    options: BundleOptions,
    index: dict[str, Any],
    locks: list[tuple[Path, str]],
    members: list[tuple[LockedPackage, str]],
) -> int:
    """The tar, under a temporary name of its own beside `options.output` (flock-held while written,
    so a later run can tell a killed run's leftover from a live one) until complete and synced;
    its size."""
    _remove_stale_parts(options.output)
    fd, name = tempfile.mkstemp(dir=options.output.parent, prefix=f".{options.output.name}.", suffix=".part")
    part = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            flock_held(handle.fileno())  # without locks on this file system, a killed run's leftover stays
            # dereference: a symlinked lock (or store entry) goes in as its bytes, not as a link to this host's path
            with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT, dereference=True) as tar:
                _add_bytes(tar, INDEX, (json.dumps(index, indent=1, sort_keys=True) + "\n").encode())
                _add_bytes(tar, SUMS, "".join(f"{e.sha256}  {member}\n" for e, member in members).encode())
                for path, member in locks:
                    tar.add(path, arcname=member, filter=_anonymous)
                for entry, member in members:
                    tar.add(archive_path(options.cache_dir, entry), arcname=member, filter=_anonymous)
            handle.flush()
            os.fsync(handle.fileno())
            os.chmod(part, 0o644)  # mkstemp's 0600 would keep teammates from reading it
            os.replace(part, options.output)
            return os.fstat(handle.fileno()).st_size
    except OSError as exc:
        if out_of_space(exc):
            raise
        raise InputError(
            "-o", f"cannot write {options.output}: {exc.strerror or exc}", "pass -o in a directory you can write"
        ) from None
    finally:
        part.unlink(missing_ok=True)


def _remove_stale_parts(output: Path, grace_s: float = 60.0) -> None:
    """Temporary tars of runs that were killed (SIGKILL, a job's time limit): nobody holds their
    flock, and they are older than `grace_s` (a live run creates its file a moment before it
    takes the flock)."""
    for stale in output.parent.glob(f".{output.name}.*.part"):
        try:
            with open(stale, "rb") as handle:
                if time.time() - os.fstat(handle.fileno()).st_mtime < grace_s:
                    continue
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                stale.unlink()
        except OSError:
            continue  # a live run's, or gone already


def tools_tag(target: Target) -> str:
    """`cp311-linux-64`: what scripts/tools-venv.sh looks for, from the node's python3 and uname."""
    return f"cp{target.python_version.replace('.', '')}-{target.platform}"


def tools_wheels(requirements: Path, target: Target, pip: PipOptions) -> list[LockedPackage]:
    """The wheels `pip install --no-deps -r requirements` picks on `target`: uv resolves the file's pins for
    the target's Python and platform (pip's `download --platform` evaluates markers for this host), and
    each wheel must carry one of the file's hashes, so the node's `--require-hashes` install takes it.
    No dependencies beyond the pins: the file leaves out on purpose what the tools never import."""
    pins, hashes = _read_requirements(requirements)
    spec = EnvSpec(path=requirements, name="tools", channels=(), platforms=(target.platform,), conda=(), pip=pins)
    wheels = resolve_pip(spec, target, replace(pip, no_deps=True))
    for wheel in wheels:
        if wheel.sha256 not in hashes:
            raise IntegrityError(
                f"{requirements}: uv picked {wheel.filename} for {tools_tag(target)}, whose sha256 is "
                "not among the file's hashes (regenerate it: `make tools-requirements`)"
            )
    return wheels


def _read_requirements(path: Path) -> tuple[tuple[str, ...], set[str]]:
    """The pins (`name==version ; marker`) and every `--hash=sha256:` of a hash-pinned requirements file."""
    text = path.read_text(encoding="utf-8").replace("\\\n", " ")
    pins: list[str] = []
    hashes: set[str] = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):  # comments (`# via ...`), options
            continue
        requirement, *options = line.split(" --hash=")
        pins.append(requirement.strip())
        hashes.update(option.strip().partition(":")[2] for option in options)
    return tuple(pins), hashes


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Nothing of the machine or the moment it was made on: the same locks make the same bytes."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    info.mode = 0o644
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = _anonymous(tarfile.TarInfo(name))
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


# --------------------------------------------------------------------------- reading one


class Bundle:
    """A bundle opened for reading: its index, and where each artifact's bytes lie in the tar."""

    def __init__(self, path: Path, index: dict[str, Any], members: dict[str, tuple[int, int]]) -> None:
        self.path = path
        self.index = index
        self._members = members  # member name -> (offset of its data, size)
        self._by_sha256 = {a["sha256"]: a["member"] for a in index["artifacts"]}

    @classmethod
    def open(cls, path: Path) -> Bundle:
        """Read the tar's headers (no data) and its index; a file that is not a bundle, or not all
        of one, is an InputError."""
        remedy = "pass a file `bootstrap bundle` wrote"
        try:
            if path.exists() and not path.is_file():  # tarfile would wait on a FIFO and read /dev/zero
                raise InputError(path, "not a regular file (a directory, a FIFO, a device, ...)", remedy)
            with tarfile.open(path, "r:") as tar:
                members = {m.name: (m.offset_data, m.size) for m in tar if m.isfile()}
                found = tar.extractfile(INDEX) if INDEX in members else None
                index = json.loads(found.read()) if found is not None else None
        except FileNotFoundError:
            raise InputError(path, "no such bundle", "make one with `make bundle` on a connected host") from None
        except (tarfile.TarError, OSError, ValueError) as exc:
            if _gzipped(path):  # gunzip takes only a name it knows the suffix of (.gz, .tgz)
                name = path.name if path.name.endswith((".gz", ".tgz")) else f"{path.name}.gz"
                rename = "" if name == path.name else f"mv {path.name} {name} && "
                remedy = f"it is gzip-compressed: `{rename}gunzip {name}` first"
            raise InputError(path, f"not a readable bundle ({exc})", remedy) from None
        if not isinstance(index, dict) or index.get("format") != FORMAT:
            raise InputError(path, f"no {INDEX} of format '{FORMAT}' in it", remedy)
        if index.get("version") != VERSION:
            raise InputError(
                f"{path}:{INDEX}",
                f"version {index.get('version')!r} is not {VERSION}",
                "make the bundle again with this bootstrap",
            )
        _check_index(path, index, members)
        return cls(path, index, members)

    def has_lock(self, lock_path: Path) -> bool:
        """Whether the bundle was made from a lock of this name (one per env and variant)."""
        return any(Path(env["lock"]).name == lock_path.name for env in self.index["envs"])

    def platforms(self, lock_path: Path) -> tuple[str, ...]:
        """The platforms the bundle was made for, of the locks named like `lock_path` (of every lock
        when none is: an env installed from `--lock FILE`); none if its index lists no lock."""
        listed = self.index.get("envs", [])
        envs = [e for e in listed if Path(e["lock"]).name == lock_path.name] or listed
        return tuple(dict.fromkeys(str(p) for e in envs for p in e["platforms"]))

    def source(self, entry: LockedPackage) -> Optional[Source]:
        """Where `entry`'s bytes are in the bundle, by the lock's sha256; None if it has none."""
        member = self._by_sha256.get(entry.sha256)
        if member is None:
            return None
        offset, size = self._members[member]
        return Source(
            f"{self.path}:{member}",
            lambda: _Slice(self.path, offset, size),
            "the bundle is damaged: make it again with `make bundle`",
            mismatch="the bundle was damaged, or bundle.json edited: make it again with `make bundle`",
            size=lambda: size,
        )

    def lacks(self) -> str:
        """What to add to the error when the bundle lacks an artifact and its URL fails too."""
        made_from = ", ".join(
            f"{e['lock']} [{', '.join(map(str, e['platforms']))}]" for e in self.index.get("envs", [])
        )
        return (
            f"; it is not in the bundle {self.path} either, made from {made_from or 'no lock'}: "
            "make the bundle again from this lock with `make bundle`"
        )


def _check_index(path: Path, index: dict[str, Any], members: dict[str, tuple[int, int]]) -> None:
    """The fields `Bundle` reads have their types, and every artifact the index lists is in the tar."""
    where, remedy = f"{path}:{INDEX}", "make the bundle again with `make bundle`"
    artifacts, envs = index.get("artifacts"), index.get("envs", [])
    if not isinstance(artifacts, list):
        raise InputError(where, "`artifacts` is not a list", remedy)
    for number, artifact in enumerate(artifacts):
        for key in ("sha256", "member"):
            if not isinstance(artifact, dict) or not isinstance(artifact.get(key), str):
                raise InputError(where, f"artifacts[{number}].{key} is not a string", remedy)
    if not isinstance(envs, list) or not all(
        isinstance(e, dict) and isinstance(e.get("lock"), str) and isinstance(e.get("platforms"), list) for e in envs
    ):
        raise InputError(where, "`envs` is not a list of {env, lock, platforms, ...}", remedy)
    missing = [a["member"] for a in artifacts if a["member"] not in members]
    if missing:
        raise InputError(
            path,
            f"damaged: {len(missing)} of the {len(artifacts)} artifacts its {INDEX} lists are "
            f"not in it, e.g. '{missing[0]}' (a truncated copy?)",
            "copy it again, or make it again",
        )


def _gzipped(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == b"\x1f\x8b"
    except OSError:
        return False


class _Slice:
    """A read-only file over one member's bytes: each reader opens the tar itself (threads fetch at once)."""

    def __init__(self, path: Path, offset: int, size: int) -> None:
        self._file = open(path, "rb")
        self._file.seek(offset)
        self._left = size

    def read(self, n: int) -> bytes:
        data = self._file.read(min(n, self._left))
        self._left -= len(data)
        return data

    def __enter__(self) -> _Slice:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()
