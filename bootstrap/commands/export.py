"""`python -m bootstrap export [ENV] [-o FILE] [--pinned] [--from-prefix DIR]`.

Docs: docs/lock.md, "`environment.yml`: the export for plain conda".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from bootstrap.commands import argtypes
from bootstrap.errors import EXIT_OK, InputError

if TYPE_CHECKING:
    from bootstrap.export.portable import ExportOptions
    from bootstrap.export.result import ExportResult


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env", nargs="?", metavar="ENV", help="env to export (default: the default env, py310)")
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        type=argtypes.nonempty,
        help="where to write (default: environment.yml; with --pinned '{name}-{platform}.lock'); '-' prints to stdout",
    )
    parser.add_argument(
        "--pinned",
        action="store_true",
        help="the full closure of each platform with hashes, as conda-lock's explicit files",
    )
    parser.add_argument(
        "--from-prefix",
        type=argtypes.path,
        metavar="DIR",
        help="export an existing environment (its conda-meta/history and pip packages) instead of a lock",
    )
    parser.add_argument("--name", help="the `name:` to write (default: the spec's, or the prefix's directory name)")
    parser.add_argument(
        "--channel",
        action="append",
        default=[],
        metavar="C",
        help="write this channel (a name or an http(s) URL) instead of the recorded ones (repeatable), "
        "e.g. the one teammates install from when the lock was made from a local mirror",
    )
    parser.add_argument(
        "--platform",
        type=argtypes.platform,
        action="append",
        default=[],
        metavar="P",
        help="export only this locked platform (repeatable)",
    )
    parser.add_argument(
        "--root", type=argtypes.directory, default=None, help="project root (default: nearest dir with envs/)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print what was written (each file's path, size and sha256) as JSON; notes go to stderr",
    )


def run(args: argparse.Namespace) -> int:
    from bootstrap.export.portable import ExportOptions
    from bootstrap.export.result import write_files

    platforms = tuple(dict.fromkeys(args.platform))  # `--platform X --platform X` is one platform
    options = ExportOptions(name=args.name, channels=tuple(args.channel), platforms=platforms)
    to_stdout = args.output == "-"
    if to_stdout and args.json:
        raise InputError(
            "-o -",
            "prints the file itself on stdout, where --json prints the envelope",
            "write the file with -o FILE, or drop --json",
        )
    output = None if args.output in (None, "-") else Path(args.output)
    if args.from_prefix is not None:
        from bootstrap.export.from_prefix import export_prefix

        if args.env is not None or args.pinned or platforms:
            raise InputError(
                "--from-prefix",
                "cannot be combined with ENV, --pinned or --platform",
                "for an explicit file of an existing env use `conda list --explicit --md5`",
            )
        result = export_prefix(args.from_prefix, options, output)
    else:
        result = _from_lock(args, options, output)

    if to_stdout:
        for text in result.files.values():
            sys.stdout.write(text)
    else:
        write_files(result.files)
        if args.json:
            from bootstrap.report import dumps

            print(dumps("bootstrap.export", result.to_dict()))
        else:
            for path in result.files:
                print(f"wrote {path}")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    return EXIT_OK


def _from_lock(args: argparse.Namespace, options: ExportOptions, output: Optional[Path]) -> ExportResult:
    """The env's lock exported: as an environment.yml, or with --pinned as one explicit file per platform."""
    from bootstrap.export.from_lock import export_env, export_pinned
    from bootstrap.project import Project, find_root

    project = Project(args.root or find_root(Path.cwd()))
    env = project.env_or_default(args.env)
    if not args.pinned:
        return export_env(project, env, options, output)
    if args.output == "-" and len(options.platforms) != 1:
        raise InputError("-o -", "--pinned writes one file per platform", "pick one with --platform P to print it")
    return export_pinned(project, env, options, args.output if args.output != "-" else None)
