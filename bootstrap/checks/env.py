"""Env drift: is the env on disk exactly the locked one? (the `env.*` checks of `verify`)

    prefix (conda-meta/, dist-info, conda-meta/bootstrap) + lock -> env.prefix, env.lock, env.python,
    env.conda, env.pip, env.extra, env.files, env.freshness

Stdlib only (plus pyyaml for the lock): it runs inside envs on Python 3.9.
"""

from __future__ import annotations

import base64
import csv
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

from bootstrap.checks.model import Check, Status
from bootstrap.errors import InputError, ToolError
from bootstrap.fsutil import sha256_file
from bootstrap.install.prefix import (
    InstalledConda,
    InstalledPip,
    InstallRecord,
    conda_records,
    metadata_names,
    normalise,
    pip_distributions,
    python_executable,
    read_install_record,
)
from bootstrap.runner import Runner, run

SHOWN = 4  # problems named in `observed`; `detail` lists all of them
_SKIP_PATH_TYPES = ("directory", "pyc_file")



# --------------------------------------------------------------------------- the env and its commands


@dataclass(frozen=True)
class EnvCommands:
    """The exact commands that repair this env, for remedies (`make env` for the project's own envs)."""

    env: str
    prefix: Path
    standard: bool  # prefix is <root>/.envs/<env>, so the Makefile targets apply
    default: bool  # env is the project's default (no ENV=)
    lock_path: Optional[Path] = None

    def _env_var(self) -> str:
        return "" if self.default else f" ENV={self.env}"

    @property
    def update(self) -> str:
        if self.standard:
            return f"`make env{self._env_var()}`"
        lock = f" --lock {self.lock_path}" if self.lock_path else ""
        return f"`python -m bootstrap env {self.env} --prefix {self.prefix}{lock}`"

    @property
    def recreate(self) -> str:
        if self.standard:
            return f"`make clean-env env{self._env_var()}`"
        gens = self.prefix.parent / f".{self.prefix.name}.gens"
        return f"`rm -rf {self.prefix} {gens}` then {self.update}"

    @property
    def rollback(self) -> str:
        where = "" if self.standard else f" --prefix {self.prefix}"
        return f"`python -m bootstrap env {self.env}{where} --rollback`"


@dataclass(frozen=True)
class EnvState:
    """What verify knows about the env before judging it."""

    prefix: Path
    record: Optional[InstallRecord]
    record_mtime: float
    lock: Any  # bootstrap.lock.lockfile.Lock, or None with `lock_problem`
    lock_path: Optional[Path]
    lock_problem: str
    platform: str
    commands: EnvCommands
    project: Any  # bootstrap.project.Project, or None
    record_problem: str = ""


def resolve_prefix(prefix: Optional[Path], root: Optional[Path]) -> Path:
    """--prefix; else this interpreter's env when `bootstrap env` made it; else <root>/.envs/<default>."""
    if prefix is not None:
        return stable_path(Path(os.path.abspath(prefix)))
    own = Path(sys.prefix)
    if (own / "conda-meta" / "bootstrap").is_file():
        return stable_path(own)
    from bootstrap.project import Project, find_root

    project = Project(root or find_root(Path.cwd()))
    return project.root.absolute() / ".envs" / project.default_env


def stable_path(prefix: Path) -> Path:
    """`.envs/.py310.gens/3` -> `.envs/py310` when that symlink points at it: the path users activate.

    Python resolves its executable's symlinks, so inside an env `sys.prefix`
    is the generation directory, not the stable path the remedies must name.
    """
    gens = prefix.parent.name
    if prefix.name.isdigit() and gens.startswith(".") and gens.endswith(".gens"):
        stable = prefix.parent.parent / gens[1:-len(".gens")]
        if stable.is_symlink() and os.path.realpath(stable) == os.path.realpath(prefix):
            return stable
    return prefix


def is_running_in(prefix: Path) -> bool:
    return os.path.realpath(sys.prefix) == os.path.realpath(prefix)


def read_env_state(prefix: Path, root: Optional[Path] = None, lock_path: Optional[Path] = None) -> EnvState:
    """Everything the env checks need: install record, lock, project, the remedy commands."""
    from bootstrap.lock.lockfile import read_lock
    from bootstrap.project import Project, find_root

    record, record_problem = None, ""
    try:
        record = read_install_record(prefix) if prefix.is_dir() else None
    except (ValueError, TypeError) as exc:  # truncated or hand-edited JSON
        record_problem = f"conda-meta/bootstrap is unreadable ({exc})"
    record_path = prefix / "conda-meta" / "bootstrap"
    mtime = record_path.stat().st_mtime if record is not None else 0.0
    root = root or find_root(prefix.parent)
    project = Project(root) if (Path(root) / "envs").is_dir() else None
    env = record.env if record is not None else (project.default_env if project else "py310")
    if lock_path is None and record is not None and Path(record.lock_path).is_file():
        lock_path = Path(record.lock_path)
    if lock_path is None and project is not None and project.lock_path(env).is_file():
        lock_path = project.lock_path(env)
    lock, problem = None, ""
    if lock_path is None:
        recorded = f" (it was created from {record.lock_path})" if record is not None else ""
        problem = f"no lock found{recorded}"
    else:
        try:
            lock = read_lock(lock_path)
        except InputError as exc:
            problem = str(exc)
    standard = project is not None and prefix.absolute() == (project.root.absolute() / ".envs" / env)
    commands = EnvCommands(env, prefix, standard, project is None or env == project.default_env, lock_path)
    platform = record.platform if record is not None else ""
    return EnvState(prefix, record, mtime, lock, lock_path, problem, platform, commands, project, record_problem)


# --------------------------------------------------------------------------- env checks


def env_checks(state: EnvState, *, deep: bool = False, inside: bool = False, runner: Runner = run) -> List[Check]:
    """env.prefix, env.lock, env.python, env.conda, env.pip, env.extra, env.files, env.freshness."""
    prefix_check = check_prefix(state)
    if prefix_check.status is not Status.OK:
        return [prefix_check]
    checks = [prefix_check, check_lock(state)]
    try:
        installed_conda = conda_records(state.prefix)
        paths = {c.name: _paths_data(c) for c in installed_conda}
    except (ValueError, KeyError, OSError) as exc:  # a truncated or hand-edited conda-meta/*.json
        return checks + [Check("env.conda", Status.FAIL, f"unreadable conda-meta record: {exc}",
                               "valid conda-meta/*.json records", f"recreate the env: {state.commands.recreate}")]
    owned = metadata_names(installed_conda)
    conda_names = {normalise(c.name) for c in installed_conda}
    pip = [d for d in pip_distributions(state.prefix) if d.dist_info.name not in owned and d.name not in conda_names]
    locked = state.lock.for_platform(state.platform) if state.lock is not None else []
    if not locked:
        why = state.lock_problem or f"{state.platform} is not in {state.lock_path}"
        checks += [Check(cid, Status.SKIP, "no locked entries", "the lock's entries", detail=why)
                   for cid in ("env.python", "env.conda", "env.pip", "env.extra")]
    else:
        checks.append(check_python(state, locked, inside, runner))
        checks.append(check_conda(state, locked, installed_conda))
        checks.append(check_pip(state, locked, pip))
        checks.append(check_extra(state, locked, installed_conda, pip))
    checks.append(check_files(state, paths, pip, deep))
    checks.append(check_freshness(state))
    return checks


def check_prefix(state: EnvState) -> Check:
    cid = "env.prefix"
    expected = "an env created by `bootstrap env`"
    if not state.prefix.is_dir():
        return Check(cid, Status.FAIL, f"no environment at {state.prefix}", expected,
                     f"create it: {state.commands.update}")
    if state.record_problem:
        return Check(cid, Status.FAIL, f"{state.prefix}: {state.record_problem}", expected,
                     f"recreate the env: {state.commands.recreate}")
    if state.record is None:
        return Check(cid, Status.FAIL, f"{state.prefix} has no conda-meta/bootstrap record", expected,
                     f"bootstrap never takes over a directory it did not make: move {state.prefix} aside and run "
                     f"{state.commands.update}, or pass --prefix an env that bootstrap made")
    record = state.record
    return Check(cid, Status.OK, f"{state.prefix} (env {record.env}, generation {record.generation}, "
                 f"installed {record.installed_at} by bootstrap {record.bootstrap_version})", expected)


def check_lock(state: EnvState) -> Check:
    cid = "env.lock"
    record = state.record
    if state.lock is None:
        return Check(cid, Status.FAIL, state.lock_problem, "the lock this env was created from",
                     f"pass the lock: `python -m bootstrap verify --lock FILE` (recorded: {record.lock_path})")
    name = f"{state.lock_path} [{state.platform}]"
    if state.platform not in state.lock.platforms:
        return Check(cid, Status.FAIL, f"{name}: platform not locked", f"a lock with {state.platform}",
                     f"add {state.platform} to `platforms:` in envs/{record.env}.yml, `make lock`, then "
                     f"{state.commands.update}")
    current = state.lock.content_hash.get(state.platform, "")
    if current != record.content_hash:
        return Check(cid, Status.FAIL, f"{name}: the lock changed since generation {record.generation} was made",
                     f"content hash {record.content_hash[:12]}", f"apply the new lock: {state.commands.update}",
                     f"lock content hash {current[:12]}, installed from {record.content_hash[:12]}")
    return Check(cid, Status.OK, f"{name}, content hash {current[:12]}", "the lock generation "
                 f"{record.generation} was made from")


def _paths_data(record: InstalledConda) -> List[Mapping[str, Any]]:
    data = json.loads(record.record_path.read_text(encoding="utf-8"))
    paths = (data.get("paths_data") or {}).get("paths")
    if paths is None:  # old records: a bare file list, no hashes
        return [{"_path": p} for p in data.get("files", ())]
    return paths


def check_python(state: EnvState, locked: Sequence[Any], inside: bool, runner: Runner) -> Check:
    """The interpreter runs and is the locked python (`python -V`)."""
    cid = "env.python"
    entry = next((p for p in locked if p.manager == "conda" and p.name == "python"), None)
    if entry is None:
        return Check(cid, Status.SKIP, "no python in the lock", "the locked python", detail=str(state.lock_path))
    expected = f"python {entry.version}"
    if inside:
        import platform

        version, how = platform.python_version(), "this interpreter"
    else:
        version, how = _prefix_python_version(state.prefix, runner)
        if version is None:
            return Check(cid, Status.FAIL, f"{python_executable(state.prefix)} does not run: {how}", expected,
                         f"recreate the env: {state.commands.recreate}")
    if version != entry.version:
        return Check(cid, Status.FAIL, f"python {version} ({how})", expected,
                     f"recreate the env from the lock: {state.commands.recreate}")
    return Check(cid, Status.OK, f"python {version} ({how})", expected)


def _prefix_python_version(prefix: Path, runner: Runner) -> Tuple[Optional[str], str]:
    argv = [str(python_executable(prefix)), "-I", "-S", "-c", "import platform; print(platform.python_version())"]
    try:
        done = runner(argv, timeout=60)
    except ToolError as exc:
        return None, str(exc)
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
        return None, f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"
    return done.stdout.strip(), f"{python_executable(prefix).name} in the env"


def _shown(items: Sequence[str]) -> str:
    more = f" (+{len(items) - SHOWN} more)" if len(items) > SHOWN else ""
    return "; ".join(items[:SHOWN]) + more


def check_conda(state: EnvState, locked: Sequence[Any], installed: Sequence[InstalledConda]) -> Check:
    """Every locked conda record is installed with its version, build and sha256 (`ls conda-meta`)."""
    cid = "env.conda"
    have = {c.name: c for c in installed}
    wanted = [p for p in locked if p.manager == "conda"]
    problems = []
    for entry in wanted:
        got = have.get(entry.name)
        if got is None:
            problems.append(f"{entry.describe()} missing")
        elif (got.version, got.build) != (entry.version, entry.build):
            problems.append(f"{entry.name}: {got.version} {got.build} installed, lock has {entry.version} {entry.build}")
        elif got.sha256 and got.sha256 != entry.sha256:
            problems.append(f"{entry.name}: other artifact (sha256 {got.sha256[:12]}, lock {entry.sha256[:12]})")
    expected = f"{len(wanted)} locked conda packages (name, version, build, sha256)"
    if problems:
        return Check(cid, Status.FAIL, _shown(problems), expected,
                     f"install the locked builds: {state.commands.update}", "; ".join(problems))
    return Check(cid, Status.OK, f"{len(wanted)} match", expected)


def check_pip(state: EnvState, locked: Sequence[Any], pip: Sequence[InstalledPip]) -> Check:
    """Every locked pip distribution is installed at its version, from its wheel, not reinstalled since."""
    cid = "env.pip"
    have = {d.name: d for d in pip}
    wanted = [p for p in locked if p.manager == "pip"]
    problems = []
    for entry in wanted:
        got = have.get(normalise(entry.name))
        if got is None:
            problems.append(f"{entry.name} {entry.version} missing")
        elif got.version != entry.version:
            problems.append(f"{entry.name}: {got.version} installed, lock has {entry.version}")
        elif got.sha256 and got.sha256 != entry.sha256:
            problems.append(f"{entry.name}: other wheel (sha256 {got.sha256[:12]}, lock {entry.sha256[:12]})")
        elif _newer(got.dist_info / "RECORD", state.record_mtime):
            problems.append(f"{entry.name}: reinstalled after `bootstrap env` ({_installer(got)})")
    expected = f"{len(wanted)} locked pip distributions (name, version, sha256)"
    if problems:
        return Check(cid, Status.FAIL, _shown(problems), expected,
                     f"install the locked wheels: {state.commands.update}", "; ".join(problems))
    return Check(cid, Status.OK, f"{len(wanted)} match", expected)


def _newer(path: Path, since: float) -> bool:
    """Written after `since`: an installer writes RECORD anew. Its mtime only, not its ctime, which
    `chmod -R`, `chown`, `cp -a` or a restore from backup move without touching the content."""
    try:
        return path.stat().st_mtime > since
    except OSError:
        return False


def _installer(dist: InstalledPip) -> str:
    try:
        return "by " + (dist.dist_info / "INSTALLER").read_text(encoding="utf-8").strip()
    except OSError:
        return "installer unknown"


def check_extra(state: EnvState, locked: Sequence[Any], installed: Sequence[InstalledConda],
                pip: Sequence[InstalledPip]) -> Check:
    """Nothing is installed that the lock does not list (`pip list` / `ls conda-meta` minus the lock)."""
    cid = "env.extra"
    conda_wanted = {p.name for p in locked if p.manager == "conda"}
    pip_wanted = {normalise(p.name) for p in locked if p.manager == "pip"}
    conda_extra = [f"{c.name} {c.version}" for c in installed if c.name not in conda_wanted]
    pip_extra = [d for d in pip if d.name not in pip_wanted]
    expected = "only locked packages"
    if not conda_extra and not pip_extra:
        return Check(cid, Status.OK, "none", expected)
    items = [f"conda: {c}" for c in conda_extra] + [f"pip: {d.name} {d.version}" for d in pip_extra]
    remedies = []
    if pip_extra:
        remedies.append(f"`pip uninstall -y {' '.join(d.name for d in pip_extra)}`")
    remedies.append(f"{state.commands.update} removes what the lock lacks")
    keep = (f"to keep them, add them to envs/{state.record.env}.yml (pip: for PyPI packages) and run `make lock`")
    return Check(cid, Status.FAIL, f"not in the lock: {_shown(items)}", expected,
                 " or ".join(remedies) + "; " + keep, "; ".join(items))


# --------------------------------------------------------------------------- files


@dataclass(frozen=True)
class FileScan:
    checked: int
    hashed: int
    problems: Tuple[Tuple[str, str, str], ...]  # (owner, path relative to the prefix, what is wrong)


def _b64_to_hex(value: str) -> str:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def _expected_files(prefix: Path, conda_paths: Mapping[str, Sequence[Mapping[str, Any]]],
                    pip: Sequence[InstalledPip]) -> Iterable[Tuple[str, str, str, Optional[str], Optional[int]]]:
    """(owner, absolute path, path type, sha256 (hex, or 'b64:' + RECORD's form), size) of every recorded file."""
    base = str(prefix)
    for name, entries in conda_paths.items():
        for entry in entries:
            kind = entry.get("path_type", "hardlink")
            if kind in _SKIP_PATH_TYPES:
                continue
            digest = entry.get("sha256_in_prefix") or entry.get("sha256")
            yield (f"conda:{name}", os.path.join(base, entry["_path"]), kind, digest, entry.get("size_in_bytes"))
    for dist in pip:
        site = dist.dist_info.parent
        try:
            rows = list(csv.reader((dist.dist_info / "RECORD").read_text(encoding="utf-8").splitlines()))
        except OSError:
            yield (f"pip:{dist.name}", str(dist.dist_info / "RECORD"), "hardlink", None, None)
            continue
        for row in rows:
            if len(row) < 3 or not row[0] or row[0].endswith(".pyc"):
                continue
            algo, _, value = row[1].partition("=")
            digest = "b64:" + value if algo == "sha256" and value else None  # decoded only if the file is hashed
            size = int(row[2]) if row[2].isdigit() else None
            yield (f"pip:{dist.name}", os.path.join(site, row[0]), "hardlink", digest, size)


def scan_files(prefix: Path, conda_paths: Mapping[str, Sequence[Mapping[str, Any]]], pip: Sequence[InstalledPip],
               since: float, deep: bool = False) -> FileScan:
    """Files changed since install: a missing file, a size that differs, or (when its mtime/ctime is
    newer than the install record, or always with `deep`) a sha256 that differs from the record.

    Shell equivalent of `deep`: `sha256sum` of every file listed in conda-meta/*.json and */RECORD.
    """
    checked = 0
    problems: List[Tuple[str, str, str]] = []
    to_hash: List[Tuple[str, str, str]] = []
    for owner, path, kind, digest, size in _expected_files(prefix, conda_paths, pip):
        checked += 1
        if kind == "softlink":
            if not os.path.lexists(path):
                problems.append((owner, path, "missing"))
            continue
        try:
            st = os.stat(path)
        except OSError:
            problems.append((owner, path, "missing"))
            continue
        if size is not None and st.st_size != size:
            problems.append((owner, path, f"size {st.st_size} != {size}"))
        elif digest and (deep or max(st.st_mtime, st.st_ctime) > since):
            to_hash.append((owner, path, _b64_to_hex(digest[4:]) if digest.startswith("b64:") else digest))
    for (owner, path, digest), actual in zip(to_hash, _hash_all([p for _, p, _ in to_hash])):
        if actual != digest:
            problems.append((owner, path, "content differs" if actual else "unreadable"))
    base = str(prefix)
    shown = tuple((owner, os.path.relpath(os.path.normpath(path), base), what) for owner, path, what in problems)
    return FileScan(checked, len(to_hash), shown)


def _hash_all(paths: Sequence[str]) -> List[str]:
    """sha256 of each path ('' if unreadable); threads for many files (hashlib releases the GIL)."""
    def one(path: str) -> str:
        try:
            return sha256_file(path)
        except OSError:
            return ""

    if len(paths) < 64:
        return [one(p) for p in paths]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(one, paths, chunksize=32))


def check_files(state: EnvState, conda_paths: Mapping[str, Sequence[Mapping[str, Any]]],
                pip: Sequence[InstalledPip], deep: bool) -> Check:
    cid = "env.files"
    mode = "sha256 of every file" if deep else "size, then sha256 of files changed since install"
    scan = scan_files(state.prefix, conda_paths, pip, state.record_mtime, deep)
    expected = f"as installed ({mode})"
    if not scan.problems:
        return Check(cid, Status.OK, f"{scan.checked} files unchanged ({scan.hashed} hashed)", expected)
    items = [f"{path} ({owner}, {what})" for owner, path, what in scan.problems]
    remedy = f"restore them: {state.commands.recreate} recreates the env from the lock (the package cache keeps " \
             "it quick)"
    if _older_generation(state.prefix):
        remedy += f", or {state.commands.rollback} returns to the previous generation if that one is intact"
    return Check(cid, Status.FAIL, f"{len(items)} of {scan.checked} files changed: {_shown(items)}", expected,
                 remedy, "; ".join(items))


def _older_generation(prefix: Path) -> bool:
    from bootstrap.install import generations as gens

    layout = gens.Layout(prefix)
    current = layout.current()
    return current is not None and any(g < current for g in layout.generations())


def check_freshness(state: EnvState) -> Check:
    """Does the lock still satisfy the spec (`make lock-check`)? Needs py-rattler: tools side only."""
    cid = "env.freshness"
    expected = "the lock satisfies the spec"
    if state.lock is None or state.project is None:
        return Check(cid, Status.SKIP, "no spec at hand", expected, detail=state.lock_problem or "no project root")
    spec_path = state.project.spec_path(state.record.env)
    if not spec_path.is_file():
        return Check(cid, Status.SKIP, f"no spec {spec_path}", expected)
    if importlib.util.find_spec("rattler") is None:
        return Check(cid, Status.SKIP, "py-rattler is not importable here (env side)", expected,
                     detail="run `make lock-check` from the tools venv")
    from bootstrap.lock.spec import read_spec
    from bootstrap.lock.check import static_staleness

    try:
        stale = [s for s in static_staleness(read_spec(spec_path), state.lock) if s.platform in ("*", state.platform)]
    except InputError as exc:  # the spec itself is malformed: say so, keep the other checks
        return Check(cid, Status.FAIL, str(exc), expected, exc.fix or f"fix {spec_path.name}, then `make lock`")
    if stale:
        items = [str(s) for s in stale]
        return Check(cid, Status.FAIL, f"stale: {_shown(items)}", expected,
                     f"re-lock and apply: `make lock` then {state.commands.update}", "; ".join(items))
    return Check(cid, Status.OK, f"{spec_path.name} satisfied by {state.lock_path.name} [{state.platform}]", expected)
