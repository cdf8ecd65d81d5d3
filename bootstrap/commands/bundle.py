"""`python -m bootstrap bundle [ENV ...] [--variant V ...] [--platform P ...] [--mirror CANONICAL=URL ...]
[--tools-python X.Y ...] [--no-tools] [-o FILE] [--json]`."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bootstrap.commands import argtypes
from bootstrap.commands.cache import size_text
from bootstrap.commands.lock import add_pip_index_options
from bootstrap.errors import EXIT_OK, InputError
from bootstrap.project import Project, find_root
from bootstrap.report import dumps

if TYPE_CHECKING:
    from bootstrap.lock.pip_wheels import Target


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("envs", nargs="*", metavar="ENV", help="envs to bundle (default: the project's default, py310)")
    parser.add_argument(
        "--platform",
        type=argtypes.platform,
        action="append",
        default=[],
        metavar="P",
        help="locked platform to bundle (repeatable; default: this machine's)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="V",
        help="torch variant to bundle (repeatable; default: each env's default variant); "
        "on the node `make env BUNDLE=FILE VARIANT=V`",
    )
    parser.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="CANONICAL=URL",
        help="fetch URLs under CANONICAL from an HTTP mirror or a local directory",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=argtypes.path,
        default=None,
        help="the bundle to write (default: bundle-ENV-PLATFORM.tar here)",
    )
    parser.add_argument(
        "--cache-dir", type=argtypes.path, default=None, help="package cache (default: ~/.cache/bootstrap)"
    )
    parser.add_argument(
        "--tools-python",
        action="append",
        default=[],
        metavar="X.Y",
        help="bundle the tools venv's wheels for this python3 of the nodes (repeatable; default: this one's)",
    )
    parser.add_argument(
        "--no-tools",
        action="store_true",
        help="leave the tools venv's wheels out (the nodes have one, or reach a PyPI mirror)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_pip_index_options(parser.add_argument_group("the tools venv's wheels (uv)"))
    parser.add_argument(
        "--root", type=argtypes.directory, default=None, help="project root (default: nearest dir with envs/)"
    )


def run(args: argparse.Namespace) -> int:
    from bootstrap.commands.env import progress_feedback
    from bootstrap.install.bundle import BundleOptions, make_bundle
    from bootstrap.install.cache import default_cache_dir
    from bootstrap.lock.mirrors import parse_mirrors
    from bootstrap.lock.pip import PipOptions
    from bootstrap.platforms import host_platform

    project = Project(args.root or find_root(Path.cwd()))
    envs = project.resolve_envs(list(dict.fromkeys(args.envs)) or [project.default_env])  # each once, as platforms
    platforms = tuple(dict.fromkeys(args.platform)) or (host_platform(),)
    output = args.output or Path(f"bundle-{'+'.join(envs)}-{'+'.join(platforms)}.tar")
    options = BundleOptions(
        locks=_locks(project, envs, tuple(dict.fromkeys(args.variant))),
        platforms=platforms,
        output=output.absolute(),
        cache_dir=(args.cache_dir or default_cache_dir()).absolute(),
        mirrors=parse_mirrors(args.mirror, base=Path.cwd()),
        tools=() if args.no_tools else _tools_targets(project, platforms, args.tools_python),
        pip=PipOptions(find_links=tuple(args.pip_find_links), no_index=args.pip_no_index),
    )
    with progress_feedback(sys.stderr.isatty(), quiet=args.json) as feedback:
        result = make_bundle(
            options,
            started=feedback.fetch_started,
            fetched=feedback.fetched,
            waiting=feedback.waiting,
            watch=feedback.watch,
        )
    if args.json:
        print(dumps("bootstrap.bundle-result", result.to_dict()))
    else:
        tools = ", ".join(f"Python {t.python_version} on {t.platform}" for t in options.tools) or "--no-tools"
        print(
            f"{', '.join(result.envs)} [{', '.join(result.platforms)}]: "
            f"{result.artifacts} conda archives and wheels, "
            f"{result.tools_wheels} wheels of the tools venv ({tools}), {size_text(result.size)} in {result.path}"
        )
        print(
            f"on the node: make env BUNDLE={result.path.name}   "
            f"(or python -m bootstrap env --bundle {result.path.name})"
        )
    return EXIT_OK


def _locks(project: Project, envs: list[str], variants: tuple[str, ...]) -> tuple[tuple[str, Path], ...]:
    """(env, lock path) of each lock to bundle: the variants named, else each env's default one."""
    from bootstrap.lock.spec import read_spec
    from bootstrap.lock.variants import variant_locks

    out = []
    for env in envs:
        locks = variant_locks(project, env, read_spec(project.spec_path(env)), variants)
        out += [(env, path.absolute()) for _, path in (locks if variants else locks[:1])]
    return tuple(out)


def _tools_targets(project: Project, platforms: tuple[str, ...], pythons: list[str]) -> tuple[Target, ...]:
    """What the nodes' python3 and platform are: the tools venv is built there from these wheels.
    Windows has none: `bootstrap env` runs on POSIX only."""
    from bootstrap.lock.pip import target_for
    from bootstrap.lock.spec import read_virtual_packages

    virtual_packages = read_virtual_packages(project.virtual_packages_path)
    versions = tuple(dict.fromkeys(pythons)) or ("%d.%d" % sys.version_info[:2],)
    for version in versions:
        if not re.fullmatch(r"3\.\d+", version) or int(version.split(".")[1]) < 10:
            raise InputError(
                "--tools-python",
                f"'{version}' is not a Python the tools run on",
                "give X.Y, 3.10 or newer (py-rattler and conda-lock need it)",
            )
    return tuple(target_for(p, v, virtual_packages) for p in platforms if not p.startswith("win-") for v in versions)
