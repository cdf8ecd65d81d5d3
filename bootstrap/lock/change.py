"""`bootstrap add` and `remove`: a requirement written into (or taken out of) an env's spec, and the
env relocked for it, every other locked version kept. All or nothing: the spec, every variant's
lock and the export are made in a staging copy of the project, then written together over the
real files; bad input or a failed solve leaves every file as it was. Docs: docs/add.md.
"""

from __future__ import annotations

import difflib
import re
import shutil
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence
from urllib.parse import unquote, urlsplit

from bootstrap.errors import BootstrapError, InputError, SolveError, excerpt
from bootstrap.fsutil import flocked, write_together
from bootstrap.lock.check import check_syntax
from bootstrap.lock.lockfile import Lock, read_lock
from bootstrap.lock.solve import LockOptions, LockResult, lock_env
from bootstrap.lock.spec import EnvSpec, read_spec
from bootstrap.lock.spec_edit import CONDA, PIP, Entry, SpecText, requirement_name, same_package
from bootstrap.lock.variants import variant_locks
from bootstrap.project import Project
from bootstrap.report import result

ADD, REMOVE = "add", "remove"
# What a staged export writes: (project, env) -> {path in that project: text}; `export` sits above this layer.
Exporter = Callable[[Project, str], Mapping[Path, str]]


@dataclass(frozen=True)
class ChangeOptions:
    lock: LockOptions = LockOptions()
    manager: Optional[str] = None  # CONDA or PIP: `--conda` / `--pip`; None: decided per package
    replace: bool = False  # `add --replace`: a listed name's requirement is replaced


@result
class Edit:
    """One line of the spec changed."""

    action: str  # "added", "replaced", "removed", or "unchanged" (listed already, exactly so)
    manager: str
    name: str
    text: str  # the requirement as written now ("" once removed)
    before: str  # as it was ("" for one added)
    why: str  # why that list: "--pip", "listed in pip:", "conda-forge has it", ...

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "manager": self.manager,
            "name": self.name,
            "text": self.text,
            "before": self.before,
            "why": self.why,
        }


@result
class ChangeResult:
    verb: str
    env: str
    spec_path: Path
    edits: tuple[Edit, ...]
    locks: tuple[LockResult, ...]  # each variant's relock (empty when nothing changed)
    written: tuple[Path, ...]  # every file replaced, the spec first
    dry_run: bool = False
    # The wall time of the whole change (the edit, each variant's relock, the export, the write), beside
    # each lock's own steps: what is not pip resolution in it is the conda side's share (bench_add.py).
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return any(edit.action != "unchanged" for edit in self.edits)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verb": self.verb,
            "env": self.env,
            "spec_path": str(self.spec_path),
            "dry_run": self.dry_run,
            "edits": [edit.to_dict() for edit in self.edits],
            "locks": [lock.to_dict() for lock in self.locks],
            "written": [str(path) for path in self.written],
            "seconds": {"total": round(self.seconds, 3)},
        }


@dataclass
class _Staged:
    """The spec's text as edited so far, and what each edit did."""

    text: str
    edits: list[Edit] = field(default_factory=list)


def change_env(
    project: Project,
    env: str,
    verb: str,
    items: Sequence[str],
    options: ChangeOptions = ChangeOptions(),
    export: Optional[Exporter] = None,
    feedback: tuple[Callable[[str], None], Callable[[str], None]] = (lambda _m: None, lambda _m: None),
) -> ChangeResult:
    """`add` (items: requirements) or `remove` (items: names) on `env`'s spec; the env relocked and
    `export` run on the result, everything written together (nothing with `dry_run`).
    `feedback`: (why the run waits, one line as each long phase starts)."""
    notify, progress = feedback
    project.resolve_envs([env])
    spec_path = project.spec_path(env)
    waiting = f"waiting for another `bootstrap lock` or `{verb}` of {env} to finish"
    with nullcontext() if options.lock.dry_run else flocked(spec_path, notify, waiting):
        started = time.perf_counter()  # once the lock is held: another run's wait is not this one's time
        spec = _valid_before(project, env)
        text = spec_path.read_bytes().decode("utf-8")
        staged = _Staged(text)
        if verb == ADD:
            _add_all(project, env, spec, staged, items, options)
        else:
            _remove_all(project, env, spec, staged, items)
        if staged.text == text:
            return ChangeResult(
                verb=verb,
                env=env,
                spec_path=spec_path,
                edits=tuple(staged.edits),
                locks=(),
                written=(),
                seconds=time.perf_counter() - started,
            )
        locks, files = _relock_staged(project, env, staged, options, export, progress)
        if not options.lock.dry_run:
            write_together(files)
        seconds = time.perf_counter() - started
    return ChangeResult(
        verb=verb,
        env=env,
        spec_path=spec_path,
        edits=tuple(staged.edits),
        locks=locks,
        written=tuple(path for path, _ in files) if not options.lock.dry_run else (),
        dry_run=options.lock.dry_run,
        seconds=seconds,
    )


def _valid_before(project: Project, env: str) -> EnvSpec:
    """The spec as it is, which must be valid before it is edited: an edit must not hide what was wrong."""
    path = project.spec_path(env)
    try:
        spec = read_spec(path)
        check_syntax(spec, [variant for variant, _ in variant_locks(project, env, spec)])
    except InputError as exc:
        raise InputError(exc.where, exc.problem, f"{exc.fix + '; ' if exc.fix else ''}fix the spec first") from None
    return spec


# --------------------------------------------------------------------------- add


def _add_all(
    project: Project, env: str, spec: EnvSpec, staged: _Staged, items: Sequence[str], options: ChangeOptions
) -> None:
    sources = _Sources(project, env, spec, options.lock)
    seen: dict[str, str] = {}
    for item in items:
        text = item.strip()
        name = _parsed_name(spec.path, text)
        if name in seen:
            raise InputError(spec.path, f"add: {seen[name]!r} and {text!r} name one package", "give it once")
        seen[name] = text
        doc = SpecText(spec.path, staged.text)
        listed = doc.named(name)
        if listed:
            staged.text = _add_listed(doc, staged, listed[0], text, options)
            continue
        manager, why = _manager(name, text, sources, options.manager)
        _check_syntax_for(spec.path, manager, text)
        staged.text = doc.insert(manager, text)
        staged.edits.append(Edit(action="added", manager=manager, name=name, text=text, before="", why=why))


def _add_listed(doc: SpecText, staged: _Staged, entry: Entry, text: str, options: ChangeOptions) -> str:
    """A name the spec lists already: unchanged when it is the same requirement, replaced with
    `--replace`, else refused."""
    where = f"{doc.path.name}:{entry.first_line + 1}"
    if options.manager not in (None, entry.manager):
        raise InputError(
            doc.path,
            f"add --{options.manager}: {entry.name} is listed in {_section(entry.manager)} ({where}: {entry.text!r})",
            f"`remove {entry.name}` first to move it to {_section(options.manager)}",
        )
    if _squeezed(entry.text) == _squeezed(text):
        staged.edits.append(_edit("unchanged", entry, entry.text, "listed already"))
        return staged.text
    if not options.replace:
        raise InputError(
            doc.path,
            f"add {text!r}: {entry.name} is listed already as {entry.text!r} ({where}, {_section(entry.manager)})",
            f"`add --replace {_shell(text)}` replaces it",
        )
    _check_syntax_for(doc.path, entry.manager, text)
    staged.edits.append(_edit("replaced", entry, text, f"listed in {_section(entry.manager)}"))
    return doc.replace(entry, text)


def _edit(action: str, entry: Entry, text: str, why: str) -> Edit:
    return Edit(action=action, manager=entry.manager, name=entry.name, text=text, before=entry.text, why=why)


def _manager(name: str, text: str, sources: _Sources, forced: Optional[str]) -> tuple[str, str]:
    """Which list a new requirement goes to, and why: as forced; the manager the lock already
    installs it with (a dependency of something listed); the channel where it has the package;
    else the pip indexes. A package none of them has is bad input, with the nearest names."""
    if forced is not None:
        sources.check_has(forced, name, text)
        return forced, f"--{forced}"
    locked = sources.locked_manager(name)
    if locked is not None:
        return locked, f"locked already as a {locked} package"
    if sources.channel_has(name):
        return CONDA, f"{sources.channel_label} has it"
    sources.check_has(PIP, name, text, also_conda=True)
    return PIP, f"not on {sources.channel_label}"


class _Sources:
    """Where packages come from, asked only as far as a decision needs: the env's locks, the
    channel's repodata (the lock's own sources, mirrors and cache), the pip find-links and indexes."""

    def __init__(self, project: Project, env: str, spec: EnvSpec, options: LockOptions) -> None:
        self.spec, self.options = spec, options
        self.locks = [lock for _, path in variant_locks(project, env, spec) if (lock := _read(path)) is not None]
        self.channel_label = ", ".join(spec.channels)
        self._conda: Optional[set[str]] = None

    def locked_manager(self, name: str) -> Optional[str]:
        for lock in self.locks:
            for entry in lock.packages:
                if same_package(requirement_name(entry.manager, entry.name), name):
                    return entry.manager
        return None

    def conda_names(self) -> set[str]:
        if self._conda is None:
            from bootstrap.lock.conda import channel_names

            self._conda = channel_names(self.spec, self.spec.platforms, self.options.mirrors, self.options.cache_dir)
        return self._conda

    def channel_has(self, name: str) -> bool:
        return any(same_package(known, name) for known in self.conda_names())

    def pip_names(self) -> tuple[set[str], bool]:
        """The names the find-links and file:// indexes hold, and whether that is every name uv
        could find (no other index asked)."""
        names: set[str] = set()
        for link in self.options.pip.find_links:
            names |= _wheel_names(_local_dir(link))
        for url in self.options.pip.indexes.values():
            names |= _project_dirs(_local_dir(url))
        return names, self.options.pip.no_index

    def check_has(self, manager: str, name: str, text: str, also_conda: bool = False) -> None:
        """InputError, with the nearest names, when `manager`'s sources surely lack `name`
        (`also_conda`: the channel was asked first, and lacks it too)."""
        if manager == CONDA:
            if not self.channel_has(name):
                pip = self.pip_names()[0]
                other = " (the pip find-links have it: --pip)" if any(same_package(p, name) for p in pip) else ""
                self._missing(name, text, f"{self.channel_label} has no package {name!r}{other}", self.conda_names())
            return
        pip, complete = self.pip_names()
        if complete and not any(same_package(known, name) for known in pip):
            where = "the pip find-links (--pip-no-index)"
            if also_conda:
                problem, names = (
                    f"neither {self.channel_label} nor {where} have a package {name!r}",
                    pip | self.conda_names(),
                )
            else:
                other = f" ({self.channel_label} has it: --conda)" if self.channel_has(name) else ""
                problem, names = f"{where} have no package {name!r}{other}", pip
            self._missing(name, text, problem, names)

    def _missing(self, name: str, text: str, problem: str, names: set[str]) -> None:
        close = difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.6)
        nearest = f"nearest: {', '.join(close)}" if close else "check the name"
        raise InputError(self.spec.path, f"add {text!r}: {problem}", nearest)


def _read(path: Path) -> Optional[Lock]:
    try:
        return read_lock(path) if path.exists() else None
    except InputError:
        return None  # the relock names it


def _local_dir(link: str) -> Optional[Path]:
    if "://" not in link:
        return Path(link)
    parts = urlsplit(link)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def _wheel_names(directory: Optional[Path]) -> set[str]:
    if directory is None or not directory.is_dir():
        return set()
    return {requirement_name(PIP, p.name.split("-", 1)[0]) for p in directory.iterdir() if p.suffix == ".whl"}


def _project_dirs(directory: Optional[Path]) -> set[str]:
    if directory is None or not directory.is_dir():
        return set()
    return {requirement_name(PIP, p.name) for p in directory.iterdir() if p.is_dir()}


def _parsed_name(path: Path, text: str) -> str:
    """The name `text` requires, as a pip requirement or a conda match spec; InputError when it is neither."""
    from packaging.requirements import InvalidRequirement, Requirement

    if not text or text.startswith("-"):
        raise InputError(path, f"add: {excerpt(text)} is not a requirement", "e.g. `numpy>=1.26` or `zlib=1.3`")
    try:
        return requirement_name(PIP, Requirement(text).name)
    except InvalidRequirement:
        pass
    try:
        _conda_spec(path, text)
    except InputError as exc:
        reason = exc.problem.partition(" match spec: ")[2] or exc.problem
        raise InputError(
            path,
            f"add {excerpt(text)}: neither a pip requirement nor a conda match spec ({reason})",
            "e.g. `numpy>=1.26` (either), `zlib=1.3` (conda) or `tqdm; sys_platform == 'linux'` (pip)",
        ) from None
    return requirement_name(CONDA, text)


def _conda_spec(path: Path, text: str) -> None:
    from bootstrap.lock.conda import match_specs

    match_specs(EnvSpec(path=path, name="add", channels=(), platforms=(), conda=(text,)))


def _check_syntax_for(path: Path, manager: str, text: str) -> None:
    """`text` must parse as a requirement of the list it goes to: `numpy=1.26` is a conda match spec
    (pip's is `numpy==1.26`), `numpy; sys_platform == 'linux'` a pip requirement."""
    if manager == CONDA:
        try:
            _conda_spec(path, text)
        except InputError as exc:
            raise InputError(path, f"add --conda: {exc.problem.partition(': ')[2]}", exc.fix) from None
        return
    from bootstrap.lock.pip import pip_requirements

    try:
        pip_requirements(EnvSpec(path=path, name="add", channels=(), platforms=(), conda=(), pip=(text,)))
    except InputError as exc:
        raise InputError(path, f"add --pip: {exc.problem.partition(': ')[2]}", exc.fix) from None


# --------------------------------------------------------------------------- remove


def _remove_all(project: Project, env: str, spec: EnvSpec, staged: _Staged, names: Sequence[str]) -> None:
    for given in names:
        name = requirement_name(PIP, given) if given.strip() else ""
        doc = SpecText(spec.path, staged.text)
        listed = doc.named(name) if name else []
        if not listed:
            raise InputError(
                spec.path, f"remove {given!r}: not listed in the spec", _not_listed_fix(project, env, doc, name)
            )
        for entry in reversed(listed):  # the later line first: the earlier one's place stays valid
            doc = SpecText(spec.path, staged.text)
            entry = next(e for e in doc.named(name) if e.first_line == entry.first_line)
            staged.text = doc.remove(entry)
            staged.edits.append(_edit("removed", entry, "", f"listed in {_section(entry.manager)}"))


def _not_listed_fix(project: Project, env: str, doc: SpecText, name: str) -> str:
    listed = sorted({e.name for e in doc.entries})
    close = difflib.get_close_matches(name, listed, n=3, cutoff=0.6)
    locked = _Sources(project, env, read_spec(doc.path), LockOptions()).locked_manager(name) if name else None
    if locked:
        return f"{name} is in the lock as a dependency of what the spec lists; it leaves when they no longer need it"
    return f"nearest: {', '.join(close)}" if close else f"the spec lists {', '.join(listed)}"


# --------------------------------------------------------------------------- relock, staged


def _relock_staged(
    project: Project,
    env: str,
    staged: _Staged,
    options: ChangeOptions,
    export: Optional[Exporter],
    progress: Callable[[str], None],
) -> tuple[tuple[LockResult, ...], list[tuple[Path, bytes]]]:
    """Each variant relocked from the edited spec in a staging copy of the project, and the bytes of
    every file to replace, by its real path: the spec, each lock, the export."""
    with tempfile.TemporaryDirectory(prefix="bootstrap-change-") as tmp:
        shadow = _stage(project, Path(tmp) / "project")
        spec_path = shadow.spec_path(env)
        spec_path.write_bytes(staged.text.encode("utf-8"))
        try:
            spec = read_spec(spec_path)
            check_syntax(spec, [variant for variant, _ in variant_locks(shadow, env, spec)])
            results = lock_env(shadow, env, options.lock, progress=progress)
            exported = export(shadow, env) if export is not None and not options.lock.dry_run else {}
        except SolveError as exc:
            raise _conflict(_relocated(exc, shadow.root, project.root), staged, project.spec_path(env)) from None
        except BootstrapError as exc:
            raise _relocated(exc, shadow.root, project.root) from None
        files = [(project.spec_path(env), spec_path.read_bytes())]
        files += [(_real(r.path, shadow.root, project.root), r.path.read_bytes()) for r in results if r.written]
        files += [(_real(path, shadow.root, project.root), text.encode("utf-8")) for path, text in exported.items()]
        locks = tuple(replace(r, path=_real(r.path, shadow.root, project.root)) for r in results)
    return locks, files


def _stage(project: Project, root: Path) -> Project:
    """A copy of what a relock and an export read: every spec, lock and virtual-packages file."""
    (root / "envs").mkdir(parents=True)
    for path in project.envs_dir.glob("*.yml"):
        if path.is_file():
            shutil.copyfile(path, root / "envs" / path.name)
    top = project.lock_path(project.default_env)
    if top.is_file():
        shutil.copyfile(top, root / top.name)
    return Project(root, project.default_env)


def _real(path: Path, shadow: Path, real: Path) -> Path:
    return real / path.relative_to(shadow)


def _relocated(exc: BootstrapError, shadow: Path, real: Path) -> BootstrapError:
    """`exc` with the staging copy's paths put back to the project's."""
    fix = str(shadow), str(real)
    if isinstance(exc, InputError):
        return InputError(exc.where.replace(*fix), exc.problem.replace(*fix), exc.fix.replace(*fix))
    moved = type(exc)(str(exc).replace(*fix)) if type(exc).__init__ is BootstrapError.__init__ else exc
    return moved


# uv's words for a requirement nothing in the indexes matches (rattler's: "No candidates were found for NAME")
_NO_VERSION = (
    r"\b{name} was not found in the"
    r"|(only {name}\S* (is|are) available|no versions? of {name}\b)[^.]*you require {name}\b"
)


def _conflict(exc: BootstrapError, staged: _Staged, spec_path: Path) -> BootstrapError:
    """A failed solve, as bad input naming what the new requirements conflict with: the other
    requirements of the spec that the solver's explanation names."""
    message = str(exc)
    new = [edit for edit in staged.edits if edit.action in ("added", "replaced")]
    if not new:
        return exc
    asked = ", ".join(repr(edit.text) for edit in new)
    unmatched = [e.name for e in new if re.search(rf"No candidates were found for {re.escape(e.name)}\b", message)]
    unmatched += [e.name for e in new if re.search(_NO_VERSION.format(name=re.escape(e.name)), message)]
    if unmatched:
        problem = f"nothing on the channel or the pip indexes matches {', '.join(unmatched)}"
        return InputError(spec_path, f"add {asked}: {problem}: {_why(message)}", "check the name and the version")
    mentioned = {edit.name for edit in new}
    doc = SpecText(spec_path, staged.text)
    others = sorted(
        {
            e.text
            for e in doc.entries
            if e.name not in mentioned and re.search(rf"\b{re.escape(e.name)}\b(?!:)", message)
        }
    )
    conflicts = f"conflicts with {', '.join(map(repr, others))}" if others else "cannot be solved with the spec"
    return InputError(
        spec_path, f"add {asked}: {conflicts}: {_why(message)}", "relax it, or `remove` what it conflicts with"
    )


def _why(message: str) -> str:
    """The solver's explanation, without the file it already names."""
    message = re.sub(r"^\S+\.ya?ml: ", "", message)
    return re.sub(r" \((relax|check)[^()]*\)$", "", message)


def _section(manager: str) -> str:
    return "pip:" if manager == PIP else "the conda dependencies"


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _shell(text: str) -> str:
    import shlex

    return shlex.quote(text)
