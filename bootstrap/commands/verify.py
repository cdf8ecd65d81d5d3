"""`python -m bootstrap verify [--prefix DIR] [--lock FILE] [--json] [--deep] [--no-bench] [--facts FILE]
[--distributed] ...`: is the env exactly the locked one, and does this machine run it?
Exit 1 when a check failed, 2 on bad usage. Docs: docs/checks.md.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from bootstrap.commands import argtypes
from bootstrap.errors import InputError

if TYPE_CHECKING:
    from bootstrap.checks.verify import VerifyResult


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prefix",
        type=argtypes.path,
        default=None,
        help="env to verify (default: this interpreter's env if bootstrap made it, else .envs/py310)",
    )
    parser.add_argument(
        "--lock", type=argtypes.path, default=None, help="lock to compare with (default: the env's own)"
    )
    parser.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    parser.add_argument(
        "--deep",
        action="store_true",
        help="sha256 every installed file (default: size, and sha256 of files changed since install)",
    )
    parser.add_argument("--no-bench", dest="bench", action="store_false", help="skip the acceptance benchmark")
    parser.add_argument(
        "--bench-budget", type=float, default=None, metavar="SECONDS", help="time for the short benchmark (default 20)"
    )
    parser.add_argument(
        "--facts",
        type=argtypes.path,
        default=None,
        metavar="FILE",
        help="re-evaluate the host, driver and torch rules on facts recorded with --save-facts",
    )
    parser.add_argument(
        "--save-facts",
        type=argtypes.path,
        default=None,
        metavar="FILE",
        help="write the gathered facts (host, NVIDIA, torch) for `--facts` elsewhere",
    )
    parser.add_argument(
        "--root", type=argtypes.directory, default=None, help="project root (default: found from the env)"
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="under torchrun: every rank verifies, all-reduce checked and timed, one report on rank 0",
    )
    parser.add_argument(
        "--prolog",
        action="store_true",
        help="pre-job check (Slurm prolog, init container): no bench, no torch import, files by size and "
        "time; one line of at most 256 characters; exit 0 ok, 1 drain-worthy failure, 2 bad input",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show each check's evidence")


def run(args: argparse.Namespace) -> int:
    from bootstrap.bench.config import MAX_BUDGET_S
    from bootstrap.checks.verify import BENCH_BUDGET_S, VerifyOptions, run_verify
    from bootstrap.report import FORMAT, dumps, render_table

    if args.facts is not None:
        clash = [
            flag
            for flag, value in (
                ("--prefix", args.prefix),
                ("--deep", args.deep),
                ("--save-facts", args.save_facts),
                ("--distributed", args.distributed),
            )
            if value
        ]
        if clash:
            raise InputError(
                clash[0],
                "does not apply to --facts, which re-evaluates recorded facts without the env",
                f"drop {clash[0]} or --facts",
            )
    if args.prolog:
        _refuse_with_prolog(args)
    if args.bench_budget is not None and not 0 < args.bench_budget <= MAX_BUDGET_S:  # NaN fails this too
        raise InputError(
            "--bench-budget", f"{args.bench_budget} is not a number of seconds in (0, {MAX_BUDGET_S:g}]", "e.g. 20"
        )
    options = VerifyOptions(
        prefix=args.prefix,
        lock_path=args.lock,
        deep=args.deep,
        bench=args.bench and not args.prolog,
        bench_budget_s=args.bench_budget or BENCH_BUDGET_S,
        facts_path=args.facts,
        save_facts=args.save_facts,
        root=args.root,
        prolog=args.prolog,
    )

    def render(result: VerifyResult) -> None:
        if args.prolog:
            from bootstrap.checks.prolog import prolog_line

            print(prolog_line(result.checks, str(result.prefix)))
        elif args.json:
            print(dumps(FORMAT, result.to_dict()))
        else:
            print(_header(result))
            print(render_table(result.checks, show_detail=args.verbose), end="")

    if args.distributed:
        from bootstrap.checks.distributed import run_verify_distributed

        if args.save_facts is not None:
            raise InputError(
                "--save-facts",
                "records one host's facts; every rank would write the file",
                "run `python -m bootstrap verify --save-facts FILE` on the host, without torchrun",
            )
        return run_verify_distributed(options, render).exit_code
    result = run_verify(options)
    render(result)
    return result.exit_code


def _refuse_with_prolog(args: argparse.Namespace) -> None:
    """--prolog checks this node's env as a job would start it, quickly, in one line: no other output."""
    for flag, value in (
        ("--json", args.json),
        ("--facts", args.facts),
        ("--save-facts", args.save_facts),
        ("--distributed", args.distributed),
        ("--deep", args.deep),
        ("--bench-budget", args.bench_budget),
    ):
        if value:
            raise InputError(flag, "does not apply to --prolog, a quick pre-job check in one line", f"drop {flag}")


def _header(result: VerifyResult) -> str:
    if result.prefix is None:
        return f"verify: recorded facts from {result.facts_source}"
    where = "this interpreter's env" if result.inside else "from outside the env: torch checks skipped"
    return f"verify: {result.prefix} ({where}) against {result.lock_path or 'no lock'}"
