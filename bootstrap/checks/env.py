"""Env drift: is the env on disk exactly the locked one? (the `env.*` checks of `verify`)

The env's state comes first (`checks.envstate`), the file scan lives in `checks.files`. Stdlib only
(plus pyyaml for the lock): it runs inside envs on Python 3.9.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from bootstrap.checks.envstate import EnvState
from bootstrap.checks.files import check_files, paths_data
from bootstrap.errors import InputError, ToolError
from bootstrap.prefix import (
    InstalledConda,
    InstalledPip,
    InstallRecord,
    conda_records,
    metadata_names,
    normalise,
    pip_distributions,
    python_executable,
)
from bootstrap.report import Check, Status, shown
from bootstrap.runner import Runner, run

if TYPE_CHECKING:
    from bootstrap.lock.lockfile import LockedPackage


def env_checks(
    state: EnvState, *, deep: bool = False, inside: bool = False, runner: Runner = run, hash_changed: bool = True
) -> list[Check]:
    """env.prefix, env.lock, env.python, env.conda, env.pip, env.extra, env.files, env.freshness;
    `hash_changed` off: env.files by sizes and times alone (`scan_files`)."""
    prefix_check = check_prefix(state)
    record = state.record
    if prefix_check.status is not Status.OK or record is None:  # an env that passes has its record
        return [prefix_check]
    checks = [prefix_check, check_lock(state, record)]
    try:
        installed_conda = conda_records(state.prefix)
        paths = {c.name: paths_data(c) for c in installed_conda}
    except (ValueError, KeyError, OSError) as exc:  # a truncated or hand-edited conda-meta/*.json
        return checks + [
            Check(
                "env.conda",
                Status.FAIL,
                f"unreadable conda-meta record: {exc}",
                "valid conda-meta/*.json records",
                f"recreate the env: {state.commands.recreate}",
            )
        ]
    owned = metadata_names(installed_conda)
    conda_names = {normalise(c.name) for c in installed_conda}
    pip = [d for d in pip_distributions(state.prefix) if d.dist_info.name not in owned and d.name not in conda_names]
    locked = state.lock.for_platform(state.platform) if state.lock is not None else []
    if not locked:
        why = state.lock_problem or f"{state.platform} is not in {state.lock_path}"
        checks += [
            Check(cid, Status.SKIP, "no locked entries", "the lock's entries", detail=why)
            for cid in ("env.python", "env.conda", "env.pip", "env.extra")
        ]
    else:
        checks.append(check_python(state, locked, inside, runner))
        checks.append(check_conda(state, locked, installed_conda))
        checks.append(check_pip(state, locked, pip))
        checks.append(check_extra(state, record.env, locked, installed_conda, pip))
    checks.append(check_files(state, paths, pip, deep, hash_changed))
    checks.append(check_freshness(state, record.env))
    return checks


def check_prefix(state: EnvState) -> Check:
    cid = "env.prefix"
    expected = "an env created by `bootstrap env`"
    if not state.prefix.is_dir():
        return Check(
            cid, Status.FAIL, f"no environment at {state.prefix}", expected, f"create it: {state.commands.update}"
        )
    if state.record_problem:
        return Check(
            cid,
            Status.FAIL,
            f"{state.prefix}: {state.record_problem}",
            expected,
            f"recreate the env: {state.commands.recreate}",
        )
    if state.record is None:
        return Check(
            cid,
            Status.FAIL,
            f"{state.prefix} has no conda-meta/bootstrap record",
            expected,
            f"bootstrap never takes over a directory it did not make: move {state.prefix} aside and run "
            f"{state.commands.update}, or pass --prefix an env that bootstrap made",
        )
    record = state.record
    return Check(
        cid,
        Status.OK,
        f"{state.prefix} (env {record.env}, generation {record.generation}, "
        f"installed {record.installed_at} by bootstrap {record.bootstrap_version})",
        expected,
    )


def check_lock(state: EnvState, record: InstallRecord) -> Check:
    cid = "env.lock"
    if state.lock is None:
        return Check(
            cid,
            Status.FAIL,
            state.lock_problem,
            "the lock this env was created from",
            f"pass the lock: `python -m bootstrap verify --lock FILE` (recorded: {record.lock_path})",
        )
    name = f"{state.lock_path} [{state.platform}]"
    if state.platform not in state.lock.platforms:
        return Check(
            cid,
            Status.FAIL,
            f"{name}: platform not locked",
            f"a lock with {state.platform}",
            f"add {state.platform} to `platforms:` in envs/{record.env}.yml, `make lock`, then {state.commands.update}",
        )
    current = state.lock.content_hash.get(state.platform, "")
    if current != record.content_hash:
        return Check(
            cid,
            Status.FAIL,
            f"{name}: the lock changed since generation {record.generation} was made",
            f"content hash {record.content_hash[:12]}",
            f"apply the new lock: {state.commands.update}",
            f"lock content hash {current[:12]}, installed from {record.content_hash[:12]}",
        )
    return Check(
        cid, Status.OK, f"{name}, content hash {current[:12]}", f"the lock generation {record.generation} was made from"
    )


def check_python(state: EnvState, locked: Sequence[LockedPackage], inside: bool, runner: Runner) -> Check:
    """The interpreter runs and is the locked python (`python -V`)."""
    cid = "env.python"
    entry = next((p for p in locked if p.manager == "conda" and p.name == "python"), None)
    if entry is None:
        return Check(cid, Status.SKIP, "no python in the lock", "the locked python", detail=str(state.lock_path))
    expected = f"python {entry.version}"
    version: Optional[str]
    if inside:
        import platform

        version, how = platform.python_version(), "this interpreter"
    else:
        version, how = _prefix_python_version(state.prefix, runner)
        if version is None:
            return Check(
                cid,
                Status.FAIL,
                f"{python_executable(state.prefix)} does not run: {how}",
                expected,
                f"recreate the env: {state.commands.recreate}",
            )
    if version != entry.version:
        return Check(
            cid,
            Status.FAIL,
            f"python {version} ({how})",
            expected,
            f"recreate the env from the lock: {state.commands.recreate}",
        )
    return Check(cid, Status.OK, f"python {version} ({how})", expected)


def _prefix_python_version(prefix: Path, runner: Runner) -> tuple[Optional[str], str]:
    argv = [str(python_executable(prefix)), "-I", "-S", "-c", "import platform; print(platform.python_version())"]
    try:
        done = runner(argv, timeout=60)
    except ToolError as exc:
        return None, str(exc)
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
        return None, f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"
    return done.stdout.strip(), f"{python_executable(prefix).name} in the env"


def check_conda(state: EnvState, locked: Sequence[LockedPackage], installed: Sequence[InstalledConda]) -> Check:
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
            problems.append(
                f"{entry.name}: {got.version} {got.build} installed, lock has {entry.version} {entry.build}"
            )
        elif got.sha256 and got.sha256 != entry.sha256:
            problems.append(f"{entry.name}: other artifact (sha256 {got.sha256[:12]}, lock {entry.sha256[:12]})")
    expected = f"{len(wanted)} locked conda packages (name, version, build, sha256)"
    if problems:
        return Check(
            cid,
            Status.FAIL,
            shown(problems),
            expected,
            f"install the locked builds: {state.commands.update}",
            "; ".join(problems),
        )
    return Check(cid, Status.OK, f"{len(wanted)} match", expected)


def check_pip(state: EnvState, locked: Sequence[LockedPackage], pip: Sequence[InstalledPip]) -> Check:
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
        return Check(
            cid,
            Status.FAIL,
            shown(problems),
            expected,
            f"install the locked wheels: {state.commands.update}",
            "; ".join(problems),
        )
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


def check_extra(
    state: EnvState,
    env: str,
    locked: Sequence[LockedPackage],
    installed: Sequence[InstalledConda],
    pip: Sequence[InstalledPip],
) -> Check:
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
    keep = f"to keep them, add them to envs/{env}.yml (pip: for PyPI packages) and run `make lock`"
    return Check(
        cid,
        Status.FAIL,
        f"not in the lock: {shown(items)}",
        expected,
        " or ".join(remedies) + "; " + keep,
        "; ".join(items),
    )


def check_freshness(state: EnvState, env: str) -> Check:
    """Does the lock still satisfy the spec (`make lock-check`)? Needs py-rattler: tools side only."""
    cid = "env.freshness"
    expected = "the lock satisfies the spec"
    if state.lock is None or state.project is None:
        return Check(cid, Status.SKIP, "no spec at hand", expected, detail=state.lock_problem or "no project root")
    spec_path = state.project.spec_path(env)
    if not spec_path.is_file():
        return Check(cid, Status.SKIP, f"no spec {spec_path}", expected)
    if importlib.util.find_spec("rattler") is None:
        return Check(
            cid,
            Status.SKIP,
            "py-rattler is not importable here (env side)",
            expected,
            detail="run `make lock-check` from the tools venv",
        )
    from bootstrap.lock.check import static_staleness
    from bootstrap.lock.spec import read_spec

    try:
        spec = read_spec(spec_path).for_lock(state.lock)
        stale = [s for s in static_staleness(spec, state.lock) if s.platform in ("*", state.platform)]
    except InputError as exc:  # the spec itself is malformed: say so, keep the other checks
        return Check(cid, Status.FAIL, str(exc), expected, exc.fix or f"fix {spec_path.name}, then `make lock`")
    if stale:
        items = [str(s) for s in stale]
        return Check(
            cid,
            Status.FAIL,
            f"stale: {shown(items)}",
            expected,
            f"re-lock and apply: `make lock` then {state.commands.update}",
            "; ".join(items),
        )
    return Check(cid, Status.OK, f"{spec_path.name} satisfied by {state.lock.path.name} [{state.platform}]", expected)
