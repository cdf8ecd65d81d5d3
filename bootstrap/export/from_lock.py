"""`export` from a lock: the portable environment.yml of an env, or (`--pinned`) one explicit file per
platform, as `conda-lock render --kind explicit` writes it. Stdlib and pyyaml only, so `export` runs
inside an env too; a lock's freshness check there upgrades to `lock --check` where it can.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from bootstrap.errors import InputError
from bootstrap.export.portable import ExportOptions, check_options, chosen_platforms, portable_from_lock
from bootstrap.export.render import HEADER_MARK, render_environment_yml, render_explicit
from bootstrap.export.result import ExportResult
from bootstrap.lock.content_hash import trusted_platforms
from bootstrap.lock.lockfile import Lock, read_lock
from bootstrap.lock.spec import EnvSpec, read_spec
from bootstrap.project import Project, refuse_input


def export_env(
    project: Project, env: str, options: ExportOptions = ExportOptions(), output: Optional[Path] = None
) -> ExportResult:
    """The portable environment.yml of `env` (`bootstrap export ENV -o FILE`)."""
    check_options(options)
    spec, lock, notes = _spec_and_lock(project, env)
    portable = portable_from_lock(spec, lock, options, source=_source_line(project, spec, lock))
    target = output if output is not None else Path("environment.yml")
    _refuse_inputs([target], project, spec, lock)
    return ExportResult(
        kind="portable",
        name=portable.name,
        source=portable.source,
        platforms=portable.platforms,
        files={target: render_environment_yml(portable)},
        notes=tuple(notes) + portable.notes,
    )


def export_pinned(
    project: Project, env: str, options: ExportOptions = ExportOptions(), template: Optional[str] = None
) -> ExportResult:
    """One explicit file per platform (`bootstrap export ENV --pinned`).

    `template` names the files; `{platform}` and `{name}` are replaced, as in
    `conda-lock render --filename-template`. Default: `{name}-{platform}.lock`.
    """
    check_options(options)
    spec, lock, notes = _spec_and_lock(project, env)
    name = options.name or spec.name
    platforms = chosen_platforms(lock, options.platforms)
    template = template or "{name}-{platform}.lock"
    if "{platform}" not in template and len(platforms) > 1:
        raise InputError(
            "-o",
            f"'{template}' would hold {len(platforms)} platforms in one file",
            f"put {{platform}} in the name, e.g. -o '{name}-{{platform}}.lock', or pick one with --platform",
        )
    files: dict[Path, str] = {}
    for platform in platforms:
        path = Path(template.replace("{platform}", platform).replace("{name}", name))
        files[path] = render_explicit(lock, platform, _explicit_header(name, platform, path, lock, project))
    _refuse_inputs(files, project, spec, lock)
    return ExportResult(
        kind="pinned",
        name=name,
        source=_relative(lock.path, project.root),
        platforms=platforms,
        files=files,
        notes=tuple(notes),
    )


def _explicit_header(name: str, platform: str, path: Path, lock: Lock, project: Project) -> list[str]:
    return [
        f"{HEADER_MARK} --pinned`: {_relative(lock.path, project.root)}, {platform}. Do not edit.",
        f"# platform: {platform}",
        f"# input_hash: {lock.content_hash.get(platform, '')}",
        f"# Create it with `conda create -n {name} --file {path.name}` (conda ignores the `# pip` lines;",
        f"# `micromamba create -n {name} -f {path.name}` and `conda-lock install` install them too).",
    ]


def _refuse_inputs(paths: Iterable[Path], project: Project, spec: EnvSpec, lock: Lock) -> None:
    """`-o conda-lock.yml` (or the spec) would replace the file the export was made from."""
    inputs = {spec.path: "the spec", lock.path: "the lock", project.virtual_packages_path: "the virtual packages file"}
    for path in paths:
        refuse_input(path, "-o", {source: f"{what} this export is made from" for source, what in inputs.items()})


def _spec_and_lock(project: Project, env: str) -> tuple[EnvSpec, Lock, list[str]]:
    project.resolve_envs([env])
    spec = read_spec(project.spec_path(env))
    lock_path = project.lock_path(env)
    if not lock_path.exists():
        raise InputError(lock_path, "no lock for this env", f"run `make lock` (bootstrap lock {env}) first")
    lock = read_lock(lock_path)
    return spec, lock, _check_fresh(project, env, spec, lock)


def _check_fresh(project: Project, env: str, spec: EnvSpec, lock: Lock) -> list[str]:
    """Refuse to share a lock `lock --check` calls stale (its records, not only its inputs: a hand
    edit of a version is caught too); on the env side (no rattler or conda-lock) say what could
    not be checked."""
    try:
        from bootstrap.lock.check import check_env

        result = next(r for r in check_env(project, env) if r.lock_path == lock.path)
    except ImportError as exc:
        vpkgs, default = project.virtual_packages_path, spec.variants[0].name if spec.variants else ""
        if vpkgs.exists() and trusted_platforms(spec.path, vpkgs, lock, default) == set(lock.platforms):
            return []  # spec and virtual packages (as parsed) identical to those the lock was made from
        missing = exc.name or "conda-lock"
        return [
            f"{spec.path.name} changed since {lock.path.name} was written and {missing} is not installed "
            "here to check it; run `python -m bootstrap lock --check` in the tools venv"
        ]
    if not result.fresh:
        first = result.stale[0]
        raise InputError(
            lock.path,
            f"stale for {spec.path.name} ({len(result.stale)} found, first: {first})",
            "relock with `make lock` before exporting",
        )
    return []


def _source_line(project: Project, spec: EnvSpec, lock: Lock) -> str:
    return f"{_relative(spec.path, project.root)} pinned to {_relative(lock.path, project.root)}"


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name  # never a machine path
