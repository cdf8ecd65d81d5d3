"""`python -m bootstrap doctor [--lock FILE] [--platform SUBDIR] [--json] [--facts FILE] [--save-facts FILE]`.

Host only, any Python >= 3.9, no torch: the NVIDIA driver, the highest CUDA
it supports, every GPU with its compute capability, and whether the locked
torch build will run here (and if not, what to change). Exit 1 when a check
failed, 2 on bad usage.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bootstrap.errors import InputError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lock", type=Path, default=None,
                        help="lock whose torch build to check (default: the project's conda-lock.yml)")
    parser.add_argument("--platform", default=None,
                        help="locked platform to read (default: this host's, or the recorded facts')")
    parser.add_argument("--json", action="store_true", help="print the versioned JSON envelope")
    parser.add_argument("--facts", type=Path, default=None, metavar="FILE",
                        help="evaluate facts recorded with --save-facts instead of probing this host")
    parser.add_argument("--save-facts", type=Path, default=None, metavar="FILE",
                        help="write the gathered facts (JSON) to reproduce this diagnosis elsewhere")
    parser.add_argument("--root", type=Path, default=None, help="project root (default: nearest dir with envs/)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show each check's evidence")


def run(args: argparse.Namespace) -> int:
    from bootstrap.checks.doctor import DoctorOptions, run_doctor
    from bootstrap.checks.model import FORMAT, exit_code, render_table
    from bootstrap.report import dumps

    if args.facts is not None and args.save_facts is not None:
        raise InputError("--save-facts", "does not apply to --facts (the facts are already recorded)",
                         "drop one of them")
    result = run_doctor(DoctorOptions(lock_path=args.lock, platform=args.platform, facts_path=args.facts,
                                      save_facts=args.save_facts, root=args.root))
    if args.json:
        print(dumps(FORMAT, result.to_dict()))
    else:
        lock = f"{result.lock_path.name} [{result.platform}]" if result.lock_path else "no lock"
        print(f"doctor: facts from {result.facts_source}; torch build from {lock}")
        print(render_table(result.checks, show_detail=args.verbose), end="")
    return exit_code(result.checks)
