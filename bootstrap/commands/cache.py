"""`python -m bootstrap cache [--prune] [--cache-dir DIR] [--json]`: what the package cache holds, and pruning it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bootstrap.commands import argtypes
from bootstrap.errors import EXIT_OK
from bootstrap.project import Project, find_root
from bootstrap.report import dumps


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prune", action="store_true", help="remove what no lock of this project installs (old locks, other projects)"
    )
    parser.add_argument(
        "--cache-dir", type=argtypes.path, default=None, help="package cache (default: ~/.cache/bootstrap)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--root", type=argtypes.directory, default=None, help="project root (default: nearest dir with envs/)"
    )


def run(args: argparse.Namespace) -> int:
    from bootstrap.install.cache import CacheReport, default_cache_dir, prune_for_project, usage

    cache_dir = (args.cache_dir or default_cache_dir()).absolute()
    pruned = None
    if args.prune:
        project = Project(args.root or find_root(Path.cwd()))
        pruned = prune_for_project(project, cache_dir, lambda line: print(line, file=sys.stderr, flush=True))
    now = usage(cache_dir)
    if args.json:
        print(dumps("bootstrap.cache", CacheReport(cache_dir=cache_dir, usage=tuple(now), pruned=pruned).to_dict()))
        return EXIT_OK
    if pruned is not None:
        freed = sum(u.bytes for u in pruned.removed)
        print(
            f"removed {', '.join(f'{u.entries} {u.kind}' for u in pruned.removed) or 'nothing'}: "
            f"{size_text(freed)} freed; kept what {', '.join(Path(p).name for p in pruned.kept_for)} install(s)"
        )
        stuck = [u for u in pruned.left if u.entries]
        if stuck:
            print(
                f"could not remove {', '.join(f'{u.entries} {u.kind}' for u in stuck)} "
                f"({size_text(sum(u.bytes for u in stuck))}): another user's? ask them, or their admin, to prune"
            )
    print(
        f"{cache_dir}: {size_text(sum(u.bytes for u in now))}" + ("" if cache_dir.exists() else " (does not exist yet)")
    )
    for u in now:
        print(f"  {u.kind:9} {u.entries:6} entries  {size_text(u.bytes):>10}")
    return EXIT_OK


def size_text(nbytes: int) -> str:
    """Binary units, labelled as such: the terminal's progress bar (rich) counts in MiB too."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"
