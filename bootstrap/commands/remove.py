"""`python -m bootstrap remove NAME... [--env NAME] [--no-install] [--dry-run]`: `add`'s inverse; what
only those packages needed leaves the lock with them.

Docs: docs/add.md.
"""

from __future__ import annotations

import argparse

from bootstrap.commands.add import change, change_options, configure_common


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "names", nargs="+", metavar="NAME", help="packages the spec lists (conda or pip) to take out of it"
    )
    configure_common(parser)


def run(args: argparse.Namespace) -> int:
    from bootstrap.lock.change import REMOVE

    return change(args, REMOVE, args.names, change_options(args, None, False))
