"""`python -m bootstrap add SPEC... [--env NAME] [--pip|--conda] [--replace] [--no-install] [--dry-run]`
and (`bootstrap/commands/remove.py`) `remove NAME...`: the spec edited, the env relocked for it (every
other locked version kept), `environment.yml` exported, the env updated.

Docs: docs/add.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from bootstrap.commands import argtypes
from bootstrap.commands.env import add_link_option
from bootstrap.commands.lock import add_pip_index_options, parse_indexes, print_lock
from bootstrap.errors import EXIT_OK, BootstrapError
from bootstrap.project import Project, find_root
from bootstrap.report import dumps

if TYPE_CHECKING:
    from bootstrap.lock.change import ChangeOptions, ChangeResult

FORMAT = "bootstrap.change"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "specs",
        nargs="+",
        metavar="SPEC",
        help="requirements to add: a pip requirement (`numpy>=1.26`, `x; sys_platform == 'linux'`) or a conda "
        "match spec (`zlib=1.3`); a name the spec lists already is refused unless --replace",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--pip", action="store_true", help="add to the pip: section")
    where.add_argument("--conda", action="store_true", help="add to the conda dependencies")
    parser.add_argument(
        "--replace",
        action="store_true",
        help="replace the requirement of a name the spec lists already (in place, in its own list)",
    )
    configure_common(parser)


def configure_common(parser: argparse.ArgumentParser) -> None:
    """The options `add` and `remove` share: where the spec is, `lock`'s and `env`'s sources."""
    parser.add_argument("--env", default=None, metavar="NAME", help="the env to change (default: py310)")
    parser.add_argument(
        "--no-install", action="store_true", help="write the spec, locks and export; do not update the env"
    )
    parser.add_argument("--dry-run", action="store_true", help="solve and print what would move; write nothing")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON envelope")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--root", type=argtypes.directory, default=None, help="project root (default: nearest dir with envs/)"
    )
    parser.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="CANONICAL=URL",
        help="serve a channel from an HTTP mirror or a local directory (the solve and the install)",
    )
    parser.add_argument(
        "--repodata-cache", type=argtypes.path, default=None, metavar="DIR", help="repodata cache (default: rattler's)"
    )
    pip = add_pip_index_options(parser.add_argument_group("pip part (uv)"))
    pip.add_argument("--pip-offline", action="store_true", help="use only uv's cache and --pip-find-links")
    pip.add_argument(
        "--index", action="append", default=[], metavar="NAME=URL", help="serve the spec's pip index NAME from URL"
    )
    install = parser.add_argument_group("the install (`env`)")
    install.add_argument(
        "--variant",
        default="auto",
        metavar="auto|NAME",
        help="torch variant to install (default: the one for this host)",
    )
    install.add_argument("--prefix", type=argtypes.path, default=None, help="where the env lives (default: .envs/ENV)")
    install.add_argument(
        "--cache-dir", type=argtypes.path, default=None, help="package cache (default: ~/.cache/bootstrap)"
    )
    add_link_option(install)


def run(args: argparse.Namespace) -> int:
    from bootstrap.lock.change import ADD
    from bootstrap.lock.spec_edit import CONDA, PIP

    manager = PIP if args.pip else CONDA if args.conda else None
    return change(args, ADD, args.specs, change_options(args, manager, args.replace))


def change_options(args: argparse.Namespace, manager: Optional[str], replace: bool) -> ChangeOptions:
    from bootstrap.lock.change import ChangeOptions
    from bootstrap.lock.mirrors import parse_mirrors
    from bootstrap.lock.pip import PipOptions
    from bootstrap.lock.solve import LockOptions

    lock = LockOptions(
        mirrors=parse_mirrors(args.mirror, base=Path.cwd()),
        pip=PipOptions(
            tuple(args.pip_find_links), args.pip_no_index, args.pip_offline, indexes=parse_indexes(args.index)
        ),
        cache_dir=args.repodata_cache,
        dry_run=args.dry_run,
    )
    return ChangeOptions(lock=lock, manager=manager, replace=replace)


def change(args: argparse.Namespace, verb: str, items: list[str], options: ChangeOptions) -> int:
    """Run `add` or `remove`, print what moved, then install unless `--no-install` (or nothing changed)."""
    from bootstrap.lock.change import change_env

    project = Project(args.root or find_root(Path.cwd()))
    env = project.env_or_default(args.env, "--env")
    progress = (lambda _message: None) if args.quiet or args.json else _to_stderr
    done = change_env(project, env, verb, items, options, _export, (_to_stderr, progress))
    if not args.json:
        _print_change(done, project.root)
    installed: Optional[Mapping[str, Any]] = None
    code = EXIT_OK
    if done.changed and not done.dry_run and not args.no_install:
        installed, code = _install(project, env, args)
    elif done.changed and not done.dry_run and not args.json:
        print(f"{env}: the env is left as it was (--no-install); `{_env_command(project, env)}` applies the new lock")
    if args.json:
        print(dumps(FORMAT, {**done.to_dict(), "install": installed}))
    return code


def _export(project: Project, env: str) -> Mapping[Path, str]:
    """`make lock`'s export, on the staged project: `environment.yml` is the default env's."""
    from bootstrap.export.from_lock import export_env

    if env != project.default_env:
        return {}
    return export_env(project, env, output=project.root / "environment.yml").files


def _install(project: Project, env: str, args: argparse.Namespace) -> tuple[Optional[Mapping[str, Any]], int]:
    """The env updated to the new lock, as `bootstrap env` does; a failure leaves the new lock (it is
    valid) and says how to retry."""
    from bootstrap.commands import env as env_command

    env_args = argparse.Namespace(
        env=env,
        lock=None,
        variant=args.variant,
        force=False,
        facts=None,
        prefix=args.prefix,
        platform=None,
        mirror=args.mirror,
        bundle=None,
        cache_dir=args.cache_dir,
        link=args.link,
        recycle_after=args.recycle_after,
        dry_run=False,
        json=args.json,
        root=project.root,
    )
    try:
        result, options = env_command.install(project, env, env_args)
    except BootstrapError as exc:
        message = f"{exc} (the spec and its locks are written; retry the install with `{_env_command(project, env)}`)"
        print(f"error: {message}", file=sys.stderr)
        return {"error": {"type": type(exc).__name__, "message": message, "exit_code": exc.exit_code}}, exc.exit_code
    if not args.json:
        print(env_command.summary(env, result, options))
    return result.to_dict(), EXIT_OK


def _env_command(project: Project, env: str) -> str:
    return "make env" + ("" if env == project.default_env else f" ENV={env}")


def _print_change(done: ChangeResult, root: Path) -> None:
    spec = _relative(done.spec_path, root)
    for edit in done.edits:
        did = {"added": "add", "replaced": "replace", "removed": "remove"}.get(edit.action, "")
        did = f"would {did}" if done.dry_run else edit.action
        if edit.action == "unchanged":
            print(f"{done.env}: {edit.text!r} is listed already in {spec}; nothing to do")
        elif edit.action == "added":
            print(f"{done.env}: {did} {edit.text!r} to {spec} ({edit.manager}: {edit.why})")
        elif edit.action == "replaced":
            print(f"{done.env}: {did} {edit.before!r} with {edit.text!r} in {spec}")
        else:
            print(f"{done.env}: {did} {edit.before!r} from {spec} ({edit.manager})")
    for lock in done.locks:
        print_lock(lock, root)
    exported = [path for path in done.written if path.name == "environment.yml"]
    for path in exported:
        print(f"wrote {_relative(path, root)}")


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
