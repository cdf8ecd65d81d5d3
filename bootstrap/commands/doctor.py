"""`python -m bootstrap doctor [--env NAME | --lock FILE] [--platform SUBDIR] [--json] [--facts FILE]
[--save-facts FILE]`: host only, no torch. Exit 1 when a check failed, 2 on bad usage.
Docs: docs/checks.md.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from bootstrap.commands import argtypes
from bootstrap.errors import InputError

if TYPE_CHECKING:
    from bootstrap.checks.doctor import DoctorResult
    from bootstrap.compat.pick import Pick


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env",
        default=None,
        metavar="NAME",
        help="env whose torch variants to judge (default: the project's default env)",
    )
    parser.add_argument(
        "--lock",
        type=argtypes.path,
        default=None,
        help="judge this one lock instead of the env's (e.g. a lock from elsewhere)",
    )
    parser.add_argument(
        "--platform",
        type=argtypes.platform,
        default=None,
        help="locked platform to read (default: this host's, or the recorded facts')",
    )
    parser.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    parser.add_argument(
        "--facts",
        type=argtypes.path,
        default=None,
        metavar="FILE",
        help="evaluate facts recorded with --save-facts instead of probing this host",
    )
    parser.add_argument(
        "--save-facts",
        type=argtypes.path,
        default=None,
        metavar="FILE",
        help="write the gathered facts (JSON) to reproduce this diagnosis elsewhere",
    )
    parser.add_argument(
        "--fleet",
        type=argtypes.path,
        default=None,
        metavar="DIR",
        help="judge the facts files (*.json, one per host, from --save-facts) of a whole cluster at once",
    )
    parser.add_argument(
        "--root", type=argtypes.directory, default=None, help="project root (default: nearest dir with envs/)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show each check's evidence")


def run(args: argparse.Namespace) -> int:
    from bootstrap.checks.doctor import DoctorOptions, run_doctor
    from bootstrap.report import FORMAT, dumps, exit_code, render_table

    if args.fleet is not None:
        return _fleet(args)
    if args.facts is not None and args.save_facts is not None:
        raise InputError(
            "--save-facts", "does not apply to --facts (the facts are already recorded)", "drop one of them"
        )
    result = run_doctor(
        DoctorOptions(
            lock_path=args.lock,
            env=args.env,
            platform=args.platform,
            facts_path=args.facts,
            save_facts=args.save_facts,
            root=args.root,
        )
    )
    if args.json:
        print(dumps(FORMAT, result.to_dict()))
    else:
        lock = f"{result.lock_path.name} [{result.platform}]" if result.lock_path else "no lock"
        print(f"doctor: facts from {result.facts_source}; torch build from {lock}")
        print(render_table(result.checks, show_detail=args.verbose), end="")
        if result.variants and result.pick is not None:
            print("\n".join(_variant_lines(result, result.pick)))
    return exit_code(result.checks)


def _fleet(args: argparse.Namespace) -> int:
    """`doctor --fleet DIR`: many hosts' recorded facts; a file left out is named on stderr, one line each."""
    import sys

    from bootstrap.checks.fleet import FleetOptions, fleet_lines, run_fleet
    from bootstrap.report import dumps

    clash = [
        flag
        for flag, value in (
            ("--facts", args.facts),
            ("--save-facts", args.save_facts),
            ("--lock", args.lock),
            ("--platform", args.platform),
        )
        if value is not None
    ]
    if clash:
        raise InputError(
            clash[0], "does not apply to --fleet, which judges each host's recorded facts", f"drop {clash[0]}"
        )
    result = run_fleet(FleetOptions(directory=args.fleet, env=args.env, root=args.root))
    for left in result.left_out:
        print(f"doctor --fleet: left out: {left.why}", file=sys.stderr)
    if args.json:
        print(dumps("bootstrap.fleet", result.to_dict()))
    else:
        print("\n".join(fleet_lines(result)))
    return result.exit_code


def _variant_lines(result: DoctorResult, pick: Pick) -> list[str]:
    """Every variant's verdict, the pick starred, and why."""
    *rows, why = pick.lines()
    install = f"; `make env ENV={result.env}` installs it" if pick.chosen is not None else ""
    return [f"variants of {result.env} on this host [{result.platform}]:", *(f"  {row}" for row in rows), why + install]
