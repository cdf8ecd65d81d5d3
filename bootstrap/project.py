"""Where a project's specs and locks live: `envs/<env>.yml`, `envs/virtual-packages.yml`,
`conda-lock.yml` (the default env), `envs/<env>.conda-lock.yml` (the others) and
`envs/<env>.<variant>.conda-lock.yml` (their other torch variants). Docs: docs/design.md, "Layout".
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Union

from bootstrap.errors import EXCERPT_CHARS, InputError, excerpt

DEFAULT_ENV = "py310"
VIRTUAL_PACKAGES_FILE = "virtual-packages.yml"
LOCK_SUFFIX = ".conda-lock.yml"
# An env is named by its spec's file name: no separators, spaces or control characters to smuggle into
# a path or a message, and short enough to quote whole.
ENV_NAME_CHARS = 64
ENV_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,%d}" % (ENV_NAME_CHARS - 1))
_NAME_CHAR = re.compile(r"[A-Za-z0-9._-]")
_NOT_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def name_problem(name: str) -> Optional[str]:
    """Why `name` is no env name (the first thing ENV_NAME finds wrong with it), or None when it is one."""
    if ENV_NAME.fullmatch(name):
        return None
    bad = next((c for c in name if not _NAME_CHAR.fullmatch(c)), None)
    if bad is not None:
        return f"{excerpt(bad)} is not an ASCII letter, digit, '.', '_' or '-'"
    if len(name) > ENV_NAME_CHARS:
        return f"it is {len(name)} characters long, more than {ENV_NAME_CHARS}"
    return f"it starts with {excerpt(name[:1])}, not a letter or digit" if name else "it is empty"


def _renamed(name: str, taken: set[str]) -> str:
    """A name within the rule, close to `name` and none of `taken` (folded to lower case): the fix a
    message suggests for a spec file named against it."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    base = _NOT_NAME_CHARS.sub("-", ascii_name).lstrip("._-")[: ENV_NAME_CHARS - 4].rstrip("-") or "env"
    candidates = [base, *(f"{base}-{n}" for n in range(1, len(taken) + 2))]
    return next(c for c in candidates if c.lower() not in taken)


@dataclass(frozen=True)
class Project:
    root: Path
    default_env: str = DEFAULT_ENV

    @property
    def envs_dir(self) -> Path:
        return self.root / "envs"

    @property
    def virtual_packages_path(self) -> Path:
        return self.envs_dir / VIRTUAL_PACKAGES_FILE

    def env_prefix(self, env: str, variant: str = "") -> Path:
        """Where `env` is installed: `.envs/<env>`; for a variant of an env whose spec declares
        variants, `.envs/<env>/<variant>`, each variant with its own generations, so that installing
        one never touches another. Every verb that finds an env's prefix asks here."""
        prefix = Path(os.path.abspath(self.root)) / ".envs" / env
        return prefix / variant if variant else prefix

    def spec_path(self, env: str) -> Path:
        return self.envs_dir / f"{env}.yml"

    def lock_path(self, env: str) -> Path:
        if env == self.default_env:
            return self.root / "conda-lock.yml"
        return self.envs_dir / f"{env}{LOCK_SUFFIX}"

    def variant_lock_path(self, env: str, variant: Optional[str]) -> Path:
        """The lock of one variant of `env`: None (or the default variant) is the env's own lock."""
        if variant is None:
            return self.lock_path(env)
        clash = self._spec_named(f"{env}.{variant}")
        if clash is not None:
            where = "" if clash.stem == f"{env}.{variant}" else " on macOS and Windows, whose file names ignore case"
            raise InputError(
                clash,
                f"an env named '{clash.stem}' would share its lock with variant '{variant}' of {env}{where}",
                "rename the env or the variant",
            )
        return self.envs_dir / f"{env}.{variant}{LOCK_SUFFIX}"

    def _spec_named(self, env: str) -> Optional[Path]:
        """The spec of `env`, or of an env whose name differs from it only in case (their locks would be
        one file where file names ignore case); None when there is none."""
        exact = self.spec_path(env)
        if exact.exists():
            return exact
        folded = exact.name.lower()
        return next((p for p in sorted(self.envs_dir.glob("*.yml")) if p.name.lower() == folded), None)

    def env_names(self) -> list[str]:
        """Every env that has a spec in envs/, default first. A spec file whose name breaks the rule
        `env NAME` applies is bad input: no verb may lock, list or advise an env it would then refuse."""
        specs = sorted(
            p
            for p in self.envs_dir.glob("*.yml")
            if p.name != VIRTUAL_PACKAGES_FILE and not p.name.endswith(LOCK_SUFFIX)
        )
        for path in specs:
            self._check_spec_file_name(path, {p.stem.lower() for p in specs})
        return sorted((p.stem for p in specs), key=lambda n: n != self.default_env)

    def _check_spec_file_name(self, path: Path, taken: set[str]) -> None:
        why = name_problem(path.stem)
        if why is None:
            return
        # the file's own name only where it prints as itself and is short enough to read whole
        shown = path if path.name.isprintable() and len(path.name) <= EXCERPT_CHARS else self.envs_dir
        raise InputError(
            shown,
            f"{excerpt(path.stem)} is no env name: {why}",
            f"rename the file, e.g. to {_renamed(path.stem, taken)}.yml, or move it out of envs/",
        )

    def env_or_default(self, env: Optional[str], where: str = "ENV") -> str:
        """The env a command names, or the default env when it names none. An empty name (`env ''`,
        an unset `$ENV` in a script) is a mistake, never a way to say "the default"."""
        if env is None:
            return self.default_env
        self._check_env_name(env, where)
        return env

    def _check_env_name(self, env: str, where: str) -> None:
        if not env.strip():
            raise InputError(
                where,
                f"empty env name {env!r}",
                f"name an env (e.g. {self.default_env}) or leave {where} out for the default",
            )
        if not ENV_NAME.fullmatch(env):
            raise InputError(
                where,
                f"env name {excerpt(env)} is not the name of a spec in envs/",
                f"letters, digits, '.', '_' and '-', at most {ENV_NAME_CHARS} (e.g. {self.default_env})",
            )

    def resolve_envs(self, requested: list[str], where: str = "ENV") -> list[str]:
        """The envs a command acts on: those requested (checked to exist) or all of them."""
        for env in requested:
            self._check_env_name(env, where)
        known = self.env_names()
        if not known:
            raise InputError(
                self.envs_dir, "no env specs (*.yml) found", "run from the project root or pass --root DIR"
            )
        for env in requested:
            if env not in known:
                raise InputError(self.spec_path(env), f"unknown env '{env}'", f"known envs: {', '.join(known)}")
        by_folded: dict[str, str] = {}
        for env in known:
            other = by_folded.setdefault(env.lower(), env)
            if other != env:
                raise InputError(
                    self.spec_path(env),
                    f"envs '{other}' and '{env}' differ only in case",
                    "rename one: macOS and Windows would keep one spec and one lock for both",
                )
        return list(requested) or known


def find_root(start: Path) -> Path:
    """The nearest directory at or above `start` that holds envs/ (like git finds .git)."""
    for candidate in [start, *start.parents]:
        if (candidate / "envs").is_dir():
            return candidate
    return start


def default_lock_path(root: Optional[Path]) -> Optional[Path]:
    """The default env's lock (conda-lock.yml) of the project at `root`, or of the one found from the
    current directory; None when there is none."""
    project = Project(root or find_root(Path.cwd()))
    path = project.lock_path(project.default_env)
    return path if path.is_file() else None


def project_files(root: Path) -> dict[Path, str]:
    """The files of the project at `root` that commands read and only `lock` or a person writes:
    path -> what it is, as a message says it ("the project's lock conda-lock.yml")."""
    project = Project(root)
    files = {project.lock_path(project.default_env): "the project's lock conda-lock.yml"}
    if project.envs_dir.is_dir():
        for path in sorted(project.envs_dir.glob("*.yml")):
            what = (
                "virtual packages file"
                if path.name == VIRTUAL_PACKAGES_FILE
                else "lock"
                if path.name.endswith(LOCK_SUFFIX)
                else "spec"
            )
            files[path] = f"the project's {what} envs/{path.name}"
    return files


def refuse_input(path: Union[str, os.PathLike[str]], flag: str, inputs: Optional[Mapping[Path, str]] = None) -> None:
    """InputError when writing `path` (through a symlink) would replace a file commands read: one of
    `inputs` (path -> what it is, "the lock this export is made from"), or a lock, spec or virtual
    packages file of the project `path` lies in; or, new or not, a .yml file in its envs/ folder,
    which every verb would read as a spec. Every output option checks it, so a slip of the shell
    (`--save-facts conda-lock.yml`, `cd envs && bootstrap export`) loses nothing."""
    real = Path(os.path.realpath(path))
    if os.path.isfile(path):  # a new file replaces nothing; a FIFO or /dev/stdout is written to, never replaced
        for source, what in [*(inputs or {}).items(), *project_files(find_root(real.parent)).items()]:
            if os.path.isfile(source) and os.path.samefile(real, source):
                raise InputError(path, f"is {what}", f"give {flag} another file")
    if real.suffix in (".yml", ".yaml") and real.parent == Project(find_root(real.parent)).envs_dir.resolve():
        # every verb reads each envs/*.yml as an env's spec: a new one there breaks them all
        raise InputError(
            path,
            "is in the project's envs/ folder, where every .yml file is read as an env spec",
            f"give {flag} a file outside envs/, e.g. environment.yml at the project's top",
        )
