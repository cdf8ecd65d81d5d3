"""`python -m bootstrap lock [ENV ...] [--variant V ...] [--platform P ...] [--mirror CANONICAL=URL ...]
[--index NAME=URL ...] [--update PKG ... | --upgrade] [--check] [--dry-run] [--json] [--quiet]`.

Docs: docs/lock.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Union

from bootstrap.commands import argtypes
from bootstrap.errors import EXIT_FAILED, EXIT_OK, InputError
from bootstrap.project import Project, find_root
from bootstrap.report import dumps

if TYPE_CHECKING:
    from bootstrap.lock.check import CheckResult
    from bootstrap.lock.solve import LockResult


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("envs", nargs="*", metavar="ENV", help="envs to lock (default: every envs/*.yml)")
    parser.add_argument(
        "--platform",
        type=argtypes.platform,
        action="append",
        default=[],
        metavar="P",
        help="relock (or --check) only this platform (repeatable); the others are kept",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="V",
        help="relock (or --check) only this variant of the env's torch builds (repeatable)",
    )
    parser.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="CANONICAL=URL",
        help="serve a channel from an HTTP mirror or a local directory; the lock keeps canonical URLs",
    )
    moves = parser.add_argument_group("what a relock may move (default: only what the spec's changes need)")
    moves.add_argument(
        "--update",
        nargs="+",
        action="extend",
        default=[],
        metavar="PKG",
        help="move these conda or pip packages (and what they need) to the newest the spec allows; "
        "every other locked version is kept if the spec allows it (name ENVs before --update)",
    )
    moves.add_argument(
        "--upgrade",
        action="store_true",
        help="solve from scratch: every package may move to the newest the spec allows",
    )
    parser.add_argument(
        "--check", action="store_true", help="offline: exit 0 if the locks satisfy the specs, 1 if stale (no solve)"
    )
    parser.add_argument("--dry-run", action="store_true", help="solve and print the diff, write nothing")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the result (what moved per platform, or each stale entry) as one JSON envelope",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress lines on stderr (each solve and resolve as it starts)"
    )
    parser.add_argument(
        "--root", type=argtypes.directory, default=None, help="project root (default: nearest dir with envs/)"
    )
    parser.add_argument("--cache-dir", type=argtypes.path, default=None, help="repodata cache (default: rattler's)")
    pip = add_pip_index_options(parser.add_argument_group("pip part (uv)"))
    pip.add_argument("--pip-offline", action="store_true", help="use only uv's cache and --pip-find-links")
    pip.add_argument(
        "--index",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="serve the spec's pip index NAME (or `pypi`, the default index) from URL, which may carry "
        "credentials: used, never written (repeatable)",
    )


def add_pip_index_options(group: argparse._ArgumentGroup) -> argparse._ArgumentGroup:
    """Where uv looks for wheels besides PyPI (or UV_INDEX_URL): `lock` and `bundle`."""
    group.add_argument(
        "--pip-find-links",
        type=argtypes.find_links,
        action="append",
        default=[],
        metavar="DIR_OR_URL",
        help="also look for wheels here (repeatable)",
    )
    group.add_argument("--pip-no-index", action="store_true", help="do not use PyPI / UV_INDEX_URL")
    return group


def run(args: argparse.Namespace) -> int:
    project = Project(args.root or find_root(Path.cwd()))
    envs = project.resolve_envs(args.envs)
    if args.variant and not args.envs:  # `lock --variant cu130`: the envs that declare it
        envs = _declaring(project, envs, args.variant)
    if args.check:
        ignored = [
            flag
            for flag, given in (
                ("--mirror", args.mirror),
                ("--dry-run", args.dry_run),
                ("--cache-dir", args.cache_dir),
                ("--pip-offline", args.pip_offline),
                ("--pip-find-links", args.pip_find_links),
                ("--pip-no-index", args.pip_no_index),
                ("--index", args.index),
                ("--update", args.update),
                ("--upgrade", args.upgrade),
            )
            if given
        ]
        if ignored:
            raise InputError(
                " ".join(ignored), "--check reads no channel and writes nothing", f"drop {' and '.join(ignored)}"
            )
        return _check(project, envs, tuple(args.platform), tuple(args.variant), args.json)
    return _lock(project, envs, args)


def _declaring(project: Project, envs: list[str], variants: list[str]) -> list[str]:
    """The envs whose specs declare every variant named; all of them when none does, so that the
    unknown name is refused as one line naming the default env and its variants."""
    from bootstrap.lock.spec import read_spec

    declaring = [env for env in envs if set(variants) <= {v.name for v in read_spec(project.spec_path(env)).variants}]
    return declaring or envs[:1]


def _check(
    project: Project, envs: list[str], platforms: tuple[str, ...], variants: tuple[str, ...], as_json: bool
) -> int:
    from bootstrap.lock.check import CheckRun, check_env

    results = []
    for env in envs:
        for result in check_env(project, env, platforms, variants):
            results.append(result)
            if not as_json:
                _print_check(result, project.root)
    checked = CheckRun(envs=tuple(results))
    if as_json:
        print(dumps("bootstrap.lock-check", checked.to_dict()))
    return EXIT_OK if checked.fresh else EXIT_FAILED


def _print_check(result: CheckResult, root: Path) -> None:
    name = _relative(result.lock_path, root)
    if result.fresh:
        print(f"{_title(result)}: {name} is fresh")
        return
    problems = f"{len(result.stale)} problem{'s' if len(result.stale) > 1 else ''}"
    print(f"{_title(result)}: {name} is stale ({problems}); relock with `make lock`")
    for stale in result.stale:
        print(f"  {stale}")


def _lock(project: Project, envs: list[str], args: argparse.Namespace) -> int:
    from bootstrap.lock.mirrors import parse_mirrors
    from bootstrap.lock.pip import PipOptions
    from bootstrap.lock.solve import LockOptions, LockRun, check_inputs, drop_orphan_locks, lock_env

    options = LockOptions(
        platforms=tuple(args.platform),
        mirrors=parse_mirrors(args.mirror, base=Path.cwd()),
        variants=tuple(args.variant),
        pip=PipOptions(
            tuple(args.pip_find_links), args.pip_no_index, args.pip_offline, indexes=parse_indexes(args.index)
        ),
        cache_dir=args.cache_dir,
        dry_run=args.dry_run,
        update=tuple(args.update),
        upgrade=args.upgrade,
    )
    _check_index_names(project, envs, options.pip.indexes)
    if options.cache_dir is not None:  # before the solve: rattler would report it as a failed fetch
        from bootstrap.install.cache import check_cache_dir

        check_cache_dir(options.cache_dir)
    check_inputs(project, envs, options)  # every env before any is solved or written
    results, dropped = [], []
    for env in envs:
        for result in lock_env(
            project, env, options, notify=_to_stderr, progress=(lambda _message: None) if args.quiet else _to_stderr
        ):
            results.append(result)
            if not args.json:
                print_lock(result, project.root)
        for lock in drop_orphan_locks(project, env, options):
            dropped.append(lock)
            if not args.json:
                print(
                    f"{env} [{lock.variant}]: {'deleted' if lock.deleted else 'would delete'} "
                    f"{_relative(lock.path, project.root)} ({lock.why})"
                )
    if args.json:
        print(
            dumps(
                "bootstrap.lock", LockRun(dry_run=args.dry_run, envs=tuple(results), dropped=tuple(dropped)).to_dict()
            )
        )
    sys.stdout.flush()
    return EXIT_OK


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def print_lock(result: LockResult, root: Path) -> None:
    verb = "wrote" if result.written else "would write"
    timing = ", ".join(f"{k} {v:.2f}s" for k, v in result.seconds.items())
    print(f"{_title(result)}: {verb} {_relative(result.path, root)} ({timing})")
    for diff in result.diffs:
        counts = result.counts[diff.platform]
        summary = "unchanged" if diff.empty else f"+{len(diff.added)} -{len(diff.removed)} ~{len(diff.changed)}"
        print(
            f"  {diff.platform:<10} {counts['conda']:>3} conda {counts['pip']:>3} pip   "
            f"{'new' if result.new else summary}"
        )
        if result.new:
            continue
        for line in diff.added:
            print(f"      + {line}")
        for line in diff.removed:
            print(f"      - {line}")
        for line in diff.changed:
            print(f"      ~ {line}")


def _title(result: Union[LockResult, CheckResult]) -> str:
    """`py310`, or `py310 [cu130]` for one variant of it."""
    return f"{result.env} [{result.variant}]" if result.variant else result.env


def parse_indexes(texts: list[str]) -> dict[str, str]:
    """`--index NAME=URL` as name -> URL; the URL is scrubbed wherever it is shown."""
    from bootstrap.urls import scrub_argument

    out = {}
    for text in texts:
        name, sep, url = (part.strip() for part in text.partition("="))
        if not sep or not name or url.partition("://")[0] not in ("http", "https", "file"):
            raise InputError(
                "--index",
                f"'{scrub_argument(text)}' is not NAME=URL",
                "an http(s) or file URL, e.g. --index pytorch-cu126=https://mirror.internal/whl/cu126",
            )
        if name in out:
            raise InputError("--index", f"index '{name}' is given twice", "give one --index per name")
        out[name] = url.rstrip("/")
    return out


def _check_index_names(project: Project, envs: list[str], indexes: Mapping[str, str]) -> None:
    from bootstrap.lock.spec import read_spec
    from bootstrap.lock.variants import PYPI

    known = {PYPI}.union(*(read_spec(project.spec_path(env)).indexes for env in envs))
    for name in indexes:
        if name not in known:
            raise InputError(
                "--index",
                f"no spec of {', '.join(envs)} names the index '{name}'",
                f"name one of {', '.join(sorted(known))}",
            )


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
