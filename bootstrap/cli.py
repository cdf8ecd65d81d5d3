"""The thin command line: parse, call one core function, render, exit.

Each verb lives in `bootstrap/commands/<verb>.py` with two functions:
`configure(parser)` adds its options and `run(args) -> int` does the work
and returns the exit code. Errors derived from `BootstrapError` are caught
here, once: one line on stderr, a traceback only with `--debug`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

from bootstrap import __version__
from bootstrap.errors import BootstrapError

# verb -> (module under bootstrap.commands, one-line help)
VERBS = {
    "lock": ("lock", "solve the specs in envs/ for every platform and write the lock"),
    "env": ("env", "create or update an environment from its lock, without conda"),
    "cache": ("cache", "what the package cache holds; --prune keeps only what this project's locks install"),
    "bundle": ("bundle", "every artifact a lock installs, with the lock, in one tar for nodes without internet"),
    "verify": ("verify", "inside the env: does it match the lock, and does this machine's CUDA stack run it?"),
    "doctor": ("doctor", "host only, no torch: driver, max CUDA, GPUs, and whether the locked torch build fits"),
    "bench": ("bench", "measure how well the input pipeline keeps the GPU busy, tune the DataLoader, give verdicts"),
    "export": ("export", "write the environment.yml to share (portable, or --pinned per platform)"),
    "monitor": ("monitor", "live per-GPU utilisation, memory, power and processes (NVML)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bootstrap",
        description="Reproducible conda environments for teams that train PyTorch on NVIDIA GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"bootstrap {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for verb, (module_name, help_text) in VERBS.items():
        module = importlib.import_module(f"bootstrap.commands.{module_name}")
        verb_parser = sub.add_parser(verb, help=help_text, description=help_text)
        verb_parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        module.configure(verb_parser)
        verb_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args))
    except BootstrapError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
