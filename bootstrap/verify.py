"""`verify`: is this env exactly the locked one, and does this machine's NVIDIA stack run it?

    prefix (conda-meta/, dist-info, conda-meta/bootstrap) + lock      -> env.*
    NVML facts, torch build (imported inside the env, else the lock)  -> nvidia.*, torch.cuda_build, cuda.*
    torch inside the env: import, CUDA, devices, matmul/conv, pinning -> torch.*
    host facts (shared with doctor)                                   -> host.*
    the acceptance benchmark on a small budget                        -> bench.*

It runs inside the env (Python 3.9 possible; stdlib, pyyaml and, lazily,
torch and pynvml) or from the tools venv with `--prefix`, where the torch
checks are skipped and the CUDA rules use the env's installed torch
version. `run_verify` returns a `VerifyResult`; it never prints.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from bootstrap.checks import Check, Status, exit_code
from bootstrap.compat import DriverFacts, TorchTarget, evaluate, torch_target_from_lock_entry
from bootstrap.doctor import (
    LoaderNeeds,
    conda_subdir,
    default_lock_path,
    gather_facts,
    host_checks,
    load_facts,
    lock_torch_target,
    nvidia_checks,
    save_facts,
)
from bootstrap.errors import InputError, ToolError
from bootstrap.prefix import (
    InstalledConda,
    InstalledPip,
    InstallRecord,
    conda_records,
    normalise,
    pip_distributions,
    python_executable,
    read_install_record,
)
from bootstrap.probe import Facts, current_platform, probe_torch
from bootstrap.runner import Runner, run

SHOWN = 4  # problems named in `observed`; `detail` lists all of them
MATMUL_N = 512
# Relative to the largest reference value: TF32 (the default for conv, optional for matmul) stays near 1e-3;
# a miscomputing GPU is off by order 1.
COMPUTE_RTOL = 1e-2
PINNED_BYTES = 16 << 20
BENCH_BUDGET_S = 20.0  # the default workload needs ~12 s of setup + windows on 2 cores
_SKIP_PATH_TYPES = ("directory", "pyc_file")


@dataclass(frozen=True)
class VerifyOptions:
    prefix: Optional[Path] = None  # None: sys.prefix when bootstrap made it, else <root>/.envs/<default env>
    lock_path: Optional[Path] = None  # None: the lock the env was created from
    deep: bool = False  # sha256 of every installed file instead of size + change time
    bench: bool = True
    bench_budget_s: float = BENCH_BUDGET_S
    facts_path: Optional[Path] = None  # re-evaluate recorded facts (host/driver/torch rules only)
    save_facts: Optional[Path] = None
    root: Optional[Path] = None  # project root; None: found from the prefix or the current directory
    needs: LoaderNeeds = field(default_factory=LoaderNeeds)


@dataclass(frozen=True)
class VerifyResult:
    checks: Tuple[Check, ...]
    prefix: Optional[Path]
    lock_path: Optional[Path]
    inside: bool  # verified the interpreter's own env (torch checks ran)
    facts: Optional[Facts]
    facts_source: str
    seconds: Dict[str, float] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return exit_code(self.checks)

    def extra(self) -> Dict[str, Any]:
        return {
            "prefix": None if self.prefix is None else str(self.prefix),
            "lock": None if self.lock_path is None else str(self.lock_path),
            "inside": self.inside,
            "facts_source": self.facts_source,
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            "facts": None if self.facts is None else self.facts.to_dict(),
        }


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
    lock: Any  # bootstrap.lockfile.Lock, or None with `lock_problem`
    lock_path: Optional[Path]
    lock_problem: str
    platform: str
    commands: EnvCommands
    project: Any  # bootstrap.project.Project, or None
    record_problem: str = ""


def resolve_prefix(options: VerifyOptions) -> Path:
    """--prefix; else this interpreter's env when `bootstrap env` made it; else <root>/.envs/<default>."""
    if options.prefix is not None:
        return stable_path(Path(os.path.abspath(options.prefix)))
    own = Path(sys.prefix)
    if (own / "conda-meta" / "bootstrap").is_file():
        return stable_path(own)
    from bootstrap.project import Project, find_root

    project = Project(options.root or find_root(Path.cwd()))
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


def read_env_state(prefix: Path, options: VerifyOptions) -> EnvState:
    from bootstrap.lockfile import read_lock
    from bootstrap.project import Project, find_root

    record, record_problem = None, ""
    try:
        record = read_install_record(prefix) if prefix.is_dir() else None
    except (ValueError, TypeError) as exc:  # truncated or hand-edited JSON
        record_problem = f"conda-meta/bootstrap is unreadable ({exc})"
    record_path = prefix / "conda-meta" / "bootstrap"
    mtime = record_path.stat().st_mtime if record is not None else 0.0
    root = options.root or find_root(prefix.parent)
    project = Project(root) if (Path(root) / "envs").is_dir() else None
    env = record.env if record is not None else (project.default_env if project else "py310")
    lock_path = options.lock_path
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
        paths = {c.name: _paths_data(c) for c in installed_conda}  # parsed once for both uses below
    except (ValueError, KeyError, OSError) as exc:  # a truncated or hand-edited conda-meta/*.json
        return checks + [Check("env.conda", Status.FAIL, f"unreadable conda-meta record: {exc}",
                               "valid conda-meta/*.json records", f"recreate the env: {state.commands.recreate}")]
    owned = conda_owned_dist_infos(paths)
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
                     f"verify checks envs that bootstrap installed: create one with {state.commands.update} "
                     "(or pass --prefix to the env it made)")
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


def conda_owned_dist_infos(paths: Mapping[str, Sequence[Mapping[str, Any]]]) -> set:
    """Names of the .dist-info directories that conda packages installed (pip as a conda package, ...)."""
    owned = set()
    for entries in paths.values():
        for entry in entries:
            for part in entry.get("_path", "").split("/"):
                if part.endswith(".dist-info"):
                    owned.add(part)
                    break
    return owned


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
    try:
        st = path.stat()
    except OSError:
        return False
    return max(st.st_mtime, st.st_ctime) > since


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


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
            return _sha256(path)
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
    from bootstrap import generations as gens

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
    from bootstrap.spec import read_spec
    from bootstrap.staleness import static_staleness

    try:
        stale = [s for s in static_staleness(read_spec(spec_path), state.lock) if s.platform in ("*", state.platform)]
    except InputError as exc:  # the spec itself is malformed: say so, keep the other checks
        return Check(cid, Status.FAIL, str(exc), expected, exc.fix or f"fix {spec_path.name}, then `make lock`")
    if stale:
        items = [str(s) for s in stale]
        return Check(cid, Status.FAIL, f"stale: {_shown(items)}", expected,
                     f"re-lock and apply: `make lock` then {state.commands.update}", "; ".join(items))
    return Check(cid, Status.OK, f"{spec_path.name} satisfied by {state.lock_path.name} [{state.platform}]", expected)


# --------------------------------------------------------------------------- torch (inside the env)


@dataclass(frozen=True)
class TorchFound:
    """The env's torch: imported (a GPU to test) or only located, with its build read from torch/version.py."""

    module: Any  # the imported torch; None when not imported
    version: Optional[str]
    location: Optional[str]  # the directory holding the torch package (site-packages)
    target: Optional[TorchTarget]
    how: str  # how the build was read, or why there is none


def find_torch(import_it: bool, torch_module: Any = None) -> TorchFound:
    """Locate the torch this interpreter would import; import it only when `import_it` (or one is given).

    Without a GPU to test, importing torch (1-2 s, and as long again at
    exit) buys nothing the rules need: the version and CUDA build are plain
    literals in torch/version.py, the very values `torch.version` exposes.
    """
    torch_module = torch_module if torch_module is not None else sys.modules.get("torch")  # already paid for
    if torch_module is None and not import_it:
        located = _torch_from_version_file()
        if located is not None:
            return located
    torch = torch_module
    if torch is None:
        try:
            import torch  # heavy: inside the env, and only with a GPU to test
        except (ImportError, OSError) as exc:  # OSError: a shared library of a CUDA wheel is missing or broken
            return TorchFound(None, None, None, None, f"import torch: {exc}")
    target, _ = probe_torch(torch)
    location = os.path.dirname(os.path.dirname(os.path.realpath(getattr(torch, "__file__", "") or "")))
    return TorchFound(torch, str(torch.__version__), location, target, "imported")


def _torch_from_version_file() -> Optional[TorchFound]:
    """torch's build from torch/version.py without running torch/__init__; None when it cannot be read."""
    import ast

    spec = importlib.util.find_spec("torch")
    if spec is None:
        return TorchFound(None, None, None, None, "torch is not installed in this interpreter")
    if not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    try:
        tree = ast.parse((package / "version.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    values: Dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    version = values.get("__version__")
    if not isinstance(version, str):
        return None
    public, _, local = version.partition("+")
    cuda, hip = values.get("cuda"), values.get("hip")
    how = "read from torch/version.py (not imported: no NVIDIA GPU to test)"
    unknown = f"ROCm build (HIP {hip}): the NVIDIA rules do not apply" if hip else ""
    target = TorchTarget(version=public, cuda=None if hip else cuda, variant=local or ("" if cuda else "cpu"),
                         platform=current_platform(), source=f"installed torch, {how}", confidence="high",
                         unknown=unknown)
    return TorchFound(None, version, str(package.parent.resolve()), target, how)


def check_torch_import(found: TorchFound, state: Optional[EnvState]) -> Check:
    """The env's own torch: the locked version, from the env, not from PYTHONPATH or a user site."""
    cid = "torch.import"
    entry = _locked_torch(state)
    expected = f"torch {entry.version} from {state.prefix}" if entry is not None else "the env's torch"
    if found.version is None:
        if entry is None:
            return Check(cid, Status.SKIP, "no torch", expected, detail=found.how)
        return Check(cid, Status.FAIL, found.how, expected, f"recreate the env: {state.commands.recreate}")
    where = found.location or "?"
    observed = f"torch {found.version} from {where}"
    detail = "" if found.module is not None else found.how
    outside = state is not None and not where.startswith(os.path.realpath(state.prefix) + os.sep)
    shadow = ("`unset PYTHONPATH` and `export PYTHONNOUSERSITE=1` so the env's torch is the one imported "
              "(`python -c 'import torch; print(torch.__file__)'`)")
    if entry is None:
        if outside:
            return Check(cid, Status.WARN, observed + " (outside the env)", "torch from the lock",
                         f"add torch to envs/{state.record.env}.yml under pip: and `make lock`, or {shadow}", detail)
        return Check(cid, Status.OK, observed, expected, detail=detail)
    if outside:
        return Check(cid, Status.FAIL, observed + " (outside the env)", expected, shadow, detail)
    if found.version != entry.version:
        return Check(cid, Status.FAIL, observed, expected, f"install the locked wheel: {state.commands.update}",
                     detail)
    return Check(cid, Status.OK, observed, expected, detail=detail)


def _locked_torch(state: Optional[EnvState]) -> Any:
    if state is None or state.lock is None:
        return None
    return next((p for p in state.lock.for_platform(state.platform, "pip") if p.name.lower() == "torch"), None)


def installed_torch_target(state: EnvState) -> Tuple[Optional[TorchTarget], str]:
    """From outside the env: the torch version installed in the prefix, refined by the lock's entry."""
    entry = _locked_torch(state)
    dist = next((d for d in pip_distributions(state.prefix) if d.name == "torch"), None)
    if dist is None:
        return None, f"no torch installed in {state.prefix}"
    url = entry.url if entry is not None and entry.version == dist.version else ""
    deps = entry.dependencies if entry is not None and entry.version == dist.version else None
    target = torch_target_from_lock_entry(dist.version, state.platform, url=url, dependencies=deps)
    return target, ""


def _visible_devices(environ: Mapping[str, str], nvml_count: int) -> Tuple[int, str]:
    """How many GPUs CUDA_VISIBLE_DEVICES leaves torch (CUDA stops at the first invalid entry)."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return nvml_count, ""
    count = 0
    for item in value.split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            break
        count += 1
    return min(count, nvml_count), f"CUDA_VISIBLE_DEVICES={value!r}"


def device_checks(torch: Any, nvidia: DriverFacts, target: Optional[TorchTarget],
                  locked: Optional[TorchTarget] = None, environ: Mapping[str, str] = os.environ) -> List[Check]:
    """CUDA available, device count vs NVML, cuDNN, NCCL, pinned memory, matmul + conv on each GPU.

    GPU-only code against the real torch.cuda API; without a driver or
    with a CPU build everything is a skip with the reason.
    """
    ids = ("torch.cuda_available", "torch.device_count", "torch.cudnn", "torch.nccl", "torch.pinned_memory",
           "torch.gpu")
    if target is None or target.unknown:
        why = target.unknown if target is not None else "torch is not importable here"
        return [Check(cid, Status.SKIP, "no NVIDIA torch build", "a CUDA build", detail=why) for cid in ids]
    if target.cuda is None:
        host = "" if nvidia.gpus else "; no NVIDIA GPU here: " + (nvidia.reason or "the driver reports none")
        return [Check(cid, Status.SKIP, "CPU build of torch", "a CUDA build", detail="torch is a CPU build" + host)
                for cid in ids]
    if not nvidia.has_driver or not nvidia.gpus:
        why = "no NVIDIA driver (CPU mode): " + (nvidia.reason or "no GPU reported")
        return [Check(cid, Status.SKIP, "no NVIDIA GPU", "a GPU to test", detail=why) for cid in ids]
    if torch is None:
        return [Check(cid, Status.SKIP, "torch not imported", "a GPU to test", detail="torch could not be imported")
                for cid in ids]
    visible, visible_note = _visible_devices(environ, len(nvidia.gpus))
    available = bool(torch.cuda.is_available())
    if not available:
        remedy = (f"{visible_note} hides every GPU: `unset CUDA_VISIBLE_DEVICES`" if visible_note and not visible
                  else "see the cuda.driver row; check that `nvidia-smi` works and /dev/nvidia* are readable "
                       "(containers: `docker run --gpus all`, NVIDIA Container Toolkit)")
        first = Check("torch.cuda_available", Status.FAIL, "torch.cuda.is_available() is False",
                      f"True ({len(nvidia.gpus)} GPU(s) per NVML)", remedy)
        return [first] + [Check(cid, Status.SKIP, "CUDA unavailable", "", detail="torch cannot use CUDA")
                          for cid in ids[1:]]
    checks = [Check("torch.cuda_available", Status.OK, f"True (CUDA {torch.version.cuda})", "True")]
    count = int(torch.cuda.device_count())
    checks.append(_count_check(count, visible, visible_note, len(nvidia.gpus)))
    checks.append(_library_check(torch, "torch.cudnn", target.cudnn, (locked or target).cudnn, target))
    checks.append(_library_check(torch, "torch.nccl", target.nccl, (locked or target).nccl, target))
    checks.append(pinned_check(torch))
    for index in range(count):
        checks += compute_checks(torch, index)
    return checks


def _count_check(count: int, visible: int, note: str, nvml: int) -> Check:
    cid = "torch.device_count"
    expected = f"{visible} ({nvml} per NVML" + (f", {note})" if note else ")")
    if count == visible:
        return Check(cid, Status.OK, str(count), expected)
    remedy = (f"{note} hides some GPUs: `unset CUDA_VISIBLE_DEVICES`" if note and visible < nvml
              else "`nvidia-smi -L` lists every GPU; one torch cannot open is held in exclusive-process mode by "
                   "another job or needs a reset (`sudo nvidia-smi -r -i N`); containers: `docker run --gpus all`")
    return Check(cid, Status.FAIL, str(count), expected, remedy)


def _library_check(torch: Any, cid: str, found: Optional[str], wanted: Optional[str], target: TorchTarget) -> Check:
    name = "cuDNN" if cid.endswith("cudnn") else "NCCL"
    if name == "NCCL" and not sys.platform.startswith("linux"):
        return Check(cid, Status.SKIP, "n/a", "NCCL", detail="torch ships NCCL on Linux only")
    expected = f"{name} {wanted}" if wanted else f"{name} available"
    if not found:
        return Check(cid, Status.FAIL, f"{name} not available to torch {target.label}", expected,
                     "reinstall the locked wheels (nvidia-cudnn-*/nvidia-nccl-*): `make env`, or recreate the env")
    if wanted and not (wanted.startswith(found) or found.startswith(wanted)):
        return Check(cid, Status.WARN, f"{name} {found}", expected,
                     "the nvidia-* wheel differs from the one torch was built with: install the lock's wheels "
                     "(`make env`)")
    return Check(cid, Status.OK, f"{name} {found}", expected)


def pinned_check(torch: Any, device: str = "cuda:0") -> Check:
    """Page-locked host memory: allocate 16 MiB, copy host -> GPU -> host non-blocking, compare."""
    cid = "torch.pinned_memory"
    expected = f"{PINNED_BYTES >> 20} MiB pinned, round trip through {device} intact"
    try:
        host = (torch.arange(PINNED_BYTES, dtype=torch.int32) % 251).to(torch.uint8).pin_memory()
        back = torch.empty_like(host).pin_memory()
        back.copy_(host.to(device, non_blocking=True), non_blocking=True)
        torch.cuda.synchronize(device)
        ok = bool(host.is_pinned()) and bool(torch.equal(back, host))
    except Exception as exc:  # noqa: BLE001 - see _compare: any CUDA error is a verdict, not a traceback
        return Check(cid, Status.FAIL, _first_line(exc), expected,
                     "raise the locked-memory limit: `ulimit -l unlimited` (docker: `--ulimit memlock=-1`)")
    if not ok:
        return Check(cid, Status.FAIL, "round trip corrupted the data", expected,
                     "the GPU or its PCIe link corrupts transfers: run `dcgmi diag -r 2` and drain the GPU")
    return Check(cid, Status.OK, "allocated and copied", expected)


def compute_checks(torch: Any, index: int, device: Optional[str] = None) -> List[Check]:
    """A matmul and a convolution on one device, compared with a float64 CPU reference."""
    device = device or f"cuda:{index}"
    prefix = f"torch.gpu{index}"
    where = _device_label(torch, index, device)
    gen = torch.Generator().manual_seed(index)
    a, b = (torch.randn(MATMUL_N, MATMUL_N, generator=gen) for _ in range(2))
    x, w = torch.randn(8, 16, 32, 32, generator=gen), torch.randn(32, 16, 3, 3, generator=gen)
    conv = torch.nn.functional.conv2d
    return [
        _compare(torch, f"{prefix}.matmul", device, where, f"{MATMUL_N}x{MATMUL_N} fp32 matmul",
                 lambda: a.to(device) @ b.to(device), a.double() @ b.double()),
        _compare(torch, f"{prefix}.conv", device, where, "3x3 fp32 conv2d (8x16x32x32)",
                 lambda: conv(x.to(device), w.to(device), padding=1), conv(x.double(), w.double(), padding=1)),
    ]


def _device_label(torch: Any, index: int, device: str) -> str:
    """'cuda:1 (NVIDIA H200)': torch numbers GPUs fastest-first by default, NVML in PCI order."""
    if not device.startswith("cuda"):
        return device
    try:
        return f"{device} ({torch.cuda.get_device_name(index)})"
    except Exception:  # noqa: BLE001 - the name is decoration; the compute checks report the error itself
        return device


def _compare(torch: Any, cid: str, device: str, where: str, what: str, run_on_device: Callable[[], Any],
             reference: Any) -> Check:
    expected = f"{what} on {where} within {COMPUTE_RTOL:g} of the CPU (float64) result"
    try:
        out = run_on_device()
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        error = float((out.to("cpu").double() - reference).abs().max() / reference.abs().max())
    except Exception as exc:  # noqa: BLE001 - CUDA errors come as RuntimeError, AssertionError, AcceleratorError
        return Check(cid, Status.FAIL, _first_line(exc), expected, _runtime_remedy(str(exc), cid))
    observed = f"max relative error {error:.1e}"
    if not error <= COMPUTE_RTOL:  # also catches NaN
        return Check(cid, Status.FAIL, observed, expected,
                     "this GPU computes wrong results: drain it and run `dcgmi diag -r 3` (or gpu-burn)")
    return Check(cid, Status.OK, observed, expected)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _runtime_remedy(message: str, cid: str) -> str:
    lowered = message.lower()
    gpu = cid.split(".")[1]
    if "no kernel image" in lowered:
        return f"this torch build has no kernel for the GPU: apply the remedy of cuda.arch.{gpu}"
    if "out of memory" in lowered:
        return "the GPU is full: `nvidia-smi` lists the processes holding its memory"
    if "cudnn" in lowered:
        return "cuDNN failed: install the lock's nvidia-cudnn wheel (`make env`)"
    return "check `nvidia-smi` and the kernel log (`sudo dmesg | grep -i xid`) for GPU errors"


# --------------------------------------------------------------------------- bench


def bench_checks(enabled: bool, inside: bool, budget_s: float, nvml: Any = None,
                 bench: Optional[Callable[..., Any]] = None) -> List[Check]:
    """The acceptance benchmark on a small budget, its verdicts as checks (`python -m bootstrap bench --budget S`).

    `bench` is `bootstrap.bench.run_bench` (tests pass a stand-in). On a
    CPU-only host the figures size the host rather than accept a GPU, so
    its failures are reported as warnings there.
    """
    cid = "bench"
    expected = "the acceptance benchmark passes"
    if not enabled:
        return [Check(cid, Status.SKIP, "--no-bench", expected, detail="skipped on request")]
    if not inside:
        return [Check(cid, Status.SKIP, "not inside the env", expected,
                      detail="run `python -m bootstrap verify` with the env's python to benchmark it")]
    rerun = f"`python -m bootstrap --debug bench --budget {budget_s:g}` shows the traceback"
    try:
        from bootstrap.bench import BenchOptions, run_bench
    except ImportError as exc:
        return [Check(cid, Status.SKIP, "bench: not available", expected, detail=str(exc))]
    try:
        result = (bench or run_bench)(BenchOptions(budget_s=budget_s, nvml_module=nvml))
    except InputError as exc:
        return [Check(cid, Status.FAIL, f"could not start: {exc}", expected, rerun)]
    except Exception as exc:  # noqa: BLE001 - a crashed bench is a failed check; the rest must still report
        return [Check(cid, Status.FAIL, f"crashed: {type(exc).__name__}: {_first_line(exc)}", expected, rerun)]
    device = result.device or {}
    on_cpu = device.get("type") != "cuda"
    best = result.best.label if result.best is not None else "no winner"
    observed = (f"{device.get('name', '?')} ({device.get('type', '?')}), {result.seconds:.0f} s of a "
                f"{result.budget_s:g} s budget, best loader: {best}" + (" (interrupted)" if result.partial else ""))
    checks = [Check(cid, Status.OK, observed, expected, detail="; ".join(result.notes))]
    for check in result.checks:
        if on_cpu and check.status is Status.FAIL:
            check = Check(check.id, Status.WARN, check.observed, check.expected, check.remedy,
                          "host run on the CPU: a sizing figure, not a GPU acceptance verdict; " + check.detail)
        checks.append(check)
    return checks


# --------------------------------------------------------------------------- verify


def run_verify(options: VerifyOptions, *, nvml: Any = None, runner: Runner = run,
               torch_module: Any = None) -> VerifyResult:
    """Every check for one env on this machine (or for recorded facts with `facts_path`)."""
    if options.facts_path is not None:
        return replay(options)
    seconds: Dict[str, float] = {}
    started = time.perf_counter()
    prefix = resolve_prefix(options)
    inside = is_running_in(prefix)
    state = read_env_state(prefix, options)
    checks = env_checks(state, deep=options.deep, inside=inside, runner=runner)
    seconds["env"] = _lap(started)
    facts = gather_facts(nvml=nvml, runner=runner, disk_path=str(prefix if prefix.is_dir() else Path.cwd()))
    seconds["facts"] = _lap(started, seconds)
    # torch is imported only inside the env and only with a GPU to test (or when the caller passes one).
    found = find_torch(bool(facts.nvidia.gpus), torch_module) if inside else None
    if found is not None:
        facts = Facts(facts.host, facts.nvidia, found.target, found.how, facts.python, facts.platform)
    else:
        facts = Facts(facts.host, facts.nvidia, None, f"verifying {prefix} from another interpreter ({sys.prefix})",
                      facts.python, facts.platform)
    seconds["torch_import"] = _lap(started, seconds)
    locked_target, locked_why = None, "no lock"
    if state.lock is not None:
        platform = state.platform or conda_subdir(facts.platform, state.lock.platforms)
        locked_target, locked_why = lock_torch_target(state.lock, platform)
    if found is not None:
        target, target_why = found.target, found.how
    elif state.record is not None:
        target, target_why = installed_torch_target(state)
    else:  # no env yet: judge the build the lock would install, as doctor does
        target, target_why = locked_target, locked_why
    checks += nvidia_checks(facts.nvidia)
    if found is not None:
        checks.append(check_torch_import(found, state if state.record is not None else None))
    checks += evaluate(facts.nvidia, target) if target is not None else \
        [Check("torch.cuda_build", Status.SKIP, "no torch", "a torch build", detail=target_why)]
    if found is not None:
        checks += device_checks(found.module, facts.nvidia, found.target, locked_target)
    else:
        checks.append(Check("torch.gpu", Status.SKIP, "not inside the env", "CUDA, matmul, conv and pinned memory",
                            detail=f"{facts.torch_reason}: run `{python_executable(prefix)} -m bootstrap verify` "
                                   "for them"))
    seconds["torch"] = _lap(started, seconds)
    checks += host_checks(facts.host, facts.nvidia, options.needs)
    checks += bench_checks(options.bench, inside, options.bench_budget_s, nvml)
    seconds["bench"] = _lap(started, seconds)
    if options.save_facts is not None:
        save_facts(facts, options.save_facts)
    seconds["total"] = time.perf_counter() - started
    return VerifyResult(tuple(checks), prefix, state.lock_path, inside, facts, "this host", seconds)


def _lap(started: float, seconds: Optional[Dict[str, float]] = None) -> float:
    return time.perf_counter() - started - sum((seconds or {}).values())


def replay(options: VerifyOptions) -> VerifyResult:
    """`verify --facts FILE`: the host, NVIDIA and CUDA rules on recorded facts; no env, no device, no bench."""
    from bootstrap.lockfile import read_lock

    facts = load_facts(options.facts_path)
    source = str(options.facts_path)
    lock_path = options.lock_path or default_lock_path(options.root)
    target, why = facts.torch, facts.torch_reason
    if target is None and lock_path is not None:
        lock = read_lock(lock_path)
        target, why = lock_torch_target(lock, conda_subdir(facts.platform, lock.platforms))
    checks = [Check("env", Status.SKIP, "recorded facts", "the env itself",
                    detail=f"re-evaluating {source}: the env checks need the env (run verify inside it)")]
    checks += nvidia_checks(facts.nvidia)
    checks += evaluate(facts.nvidia, target) if target is not None else \
        [Check("torch.cuda_build", Status.SKIP, "no torch", "a torch build", detail=why or "no lock at hand")]
    checks.append(Check("torch.gpu", Status.SKIP, "recorded facts", "a live GPU",
                        detail="CUDA, matmul, conv and pinned memory need the machine itself"))
    checks += host_checks(facts.host, facts.nvidia, options.needs)
    checks.append(Check("bench", Status.SKIP, "recorded facts", "the acceptance benchmark",
                        detail="the benchmark needs the machine itself"))
    return VerifyResult(tuple(checks), None, lock_path, False, facts, source)

