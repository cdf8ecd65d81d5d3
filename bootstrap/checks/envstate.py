"""What `verify` knows about an env before judging it: its prefix (`--prefix`, this interpreter's env,
or <root>/.envs/<default>), install record, lock and project, and the exact commands that repair it.
Stdlib only (plus pyyaml for the lock): it runs inside envs on Python 3.9.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from bootstrap.errors import InputError
from bootstrap.prefix import InstallRecord, read_install_record

if TYPE_CHECKING:
    from bootstrap.lock.lockfile import Lock
    from bootstrap.project import Project


@dataclass(frozen=True)
class EnvCommands:
    """The exact commands that repair this env, for remedies (`make env` for the project's own envs)."""

    env: str
    prefix: Path
    standard: bool  # prefix is <root>/.envs/<env>, so the Makefile targets apply
    default: bool  # env is the project's default (no ENV=)
    lock_path: Optional[Path] = None
    variant: str = ""  # the variant whose own prefix this is (.envs/<env>/<variant>); "" in the one-prefix layout

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

    def switch(self, variant: str) -> str:
        """What installs `variant` of the env's spec and runs from it: in its own prefix beside this one,
        or (another --prefix) in place of the one installed."""
        if self.standard and self.variant:
            return (
                f"`make env{self._env_var()} VARIANT={variant}` installs it in its own prefix; "
                f'`eval "$(python -m bootstrap shell {self.env})"` activates the one this host picks'
            )
        if self.standard:
            return f"`make env{self._env_var()} VARIANT={variant}` installs it in place"
        return f"`python -m bootstrap env {self.env} --prefix {self.prefix} --variant {variant}` installs it in place"

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
    lock: Optional[Lock]  # None with `lock_problem`
    lock_path: Optional[Path]
    lock_problem: str
    platform: str
    commands: EnvCommands
    project: Optional[Project]
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
    return default_prefix(project, project.default_env)


def default_prefix(project: Project, env: str) -> Path:
    """The prefix of `env` on this host: `.envs/<env>`, or for an env installed a prefix per variant,
    that of the variant this host picks; the env's own directory when the pick cannot be made here,
    which the checks then report as no env."""
    prefix = project.env_prefix(env)
    if prefix.is_symlink() or not prefix.is_dir() or (prefix / "conda-meta").is_dir():
        return prefix
    try:
        from bootstrap.install.variant import VariantRequest, choose_variant
        from bootstrap.platforms import host_platform

        return project.env_prefix(env, choose_variant(VariantRequest(project, env, host_platform())).name)
    except (ImportError, InputError):  # no pyyaml here, or nothing fits: verify names no prefix of a variant
        return prefix


def stable_path(prefix: Path) -> Path:
    """`.envs/.py310.gens/3` -> `.envs/py310` when that symlink points at it: the path users activate.

    Python resolves its executable's symlinks, so inside an env `sys.prefix`
    is the generation directory, not the stable path the remedies must name.
    """
    gens = prefix.parent.name
    if prefix.name.isdigit() and gens.startswith(".") and gens.endswith(".gens"):
        stable = prefix.parent.parent / gens[1 : -len(".gens")]
        if stable.is_symlink() and os.path.realpath(stable) == os.path.realpath(prefix):
            return stable
    return prefix


def is_running_in(prefix: Path) -> bool:
    return os.path.realpath(sys.prefix) == os.path.realpath(prefix)


def read_env_state(prefix: Path, root: Optional[Path] = None, lock_path: Optional[Path] = None) -> EnvState:
    """Everything the env checks need: install record, lock, project, the remedy commands."""
    from bootstrap.lock.lockfile import read_lock
    from bootstrap.project import Project, find_root

    # A lock named on the command line is the user's input: unreadable, it is bad usage (exit 2).
    # A lock found through the install record or the project is the env's state: unreadable, it
    # is a failed env.lock check with its remedy, and the other checks still run.
    explicit_lock = read_lock(lock_path) if lock_path is not None else None
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
    lock, problem = explicit_lock, ""
    if lock_path is None:
        recorded = f" (it was created from {record.lock_path})" if record is not None else ""
        problem = f"no lock found{recorded}"
    elif lock is None:
        try:
            lock = read_lock(lock_path)
        except InputError as exc:
            problem = str(exc)
    variant = record.variant if record is not None else ""
    own = project is not None and variant and Path(os.path.abspath(prefix)) == project.env_prefix(env, variant)
    standard = own or (project is not None and Path(os.path.abspath(prefix)) == project.env_prefix(env))
    default = project is None or env == project.default_env
    commands = EnvCommands(env, prefix, bool(standard), default, lock_path, variant if own else "")
    platform = record.platform if record is not None else ""
    return EnvState(prefix, record, mtime, lock, lock_path, problem, platform, commands, project, record_problem)
