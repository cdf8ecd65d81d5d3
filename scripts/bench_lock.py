"""`make bench-lock`: where the time of `bootstrap lock` goes, and how fast `--check` is.

Relocks every env and torch variant (py310: cu128 x 3 platforms and cu130 on
linux-64; py39: cu128 x 3 platforms) against a conda-forge repodata snapshot
(as a mirror of conda-forge: `--snapshot DIR`, or BENCH_LOCK_SNAPSHOT, which
`make bench-lock` sets to the developers' one) into a scratch copy of the project, twice: with a
cold uv cache, then warm, printing each variant's conda and pip time. Then,
each from the committed locks again, a one-package `lock --update numpy`
beside a full relock (`lock --upgrade`). Prints conda
solve / pip resolution / write per run and how many lock entries moved (one
per package and platform), and the wall time of `python -m bootstrap lock
--check` (interpreter start included) over several runs, on the committed
locks as they are and again after a cosmetic edit of every spec and of
virtual-packages.yml (a comment, the keys reordered, blank lines: nothing
that is locked changes, so the check must stay on its fast path). Needs PyPI
for the pip part; `--check-only` times the two `--check` cases alone,
offline.

Targets (issue 2): conda solve + write <= 1 s for all six; --check <= 0.5 s with every variant present
(issue 23: after a cosmetic edit too).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bootstrap import aio  # noqa: E402
from bootstrap.lock.mirrors import Mirror  # noqa: E402
from bootstrap.lock.solve import LockOptions, lock_env  # noqa: E402  (after sys.path)
from bootstrap.project import Project  # noqa: E402

UPDATED = "numpy"  # a pip package both envs lock: `lock --update` moves it alone


def scratch_project(tmp: Path) -> Project:
    root = tmp / "proj"
    shutil.copytree(REPO / "envs", root / "envs")
    shutil.copy(REPO / "conda-lock.yml", root / "conda-lock.yml")
    return Project(root)


def restore_locks(project: Project) -> None:
    """The committed locks again, so each relock below starts from the same ones."""
    shutil.copy(REPO / "conda-lock.yml", project.root / "conda-lock.yml")
    for path in (REPO / "envs").glob("*.conda-lock.yml"):
        shutil.copy(path, project.envs_dir / path.name)


def lock_all(project: Project, snapshot: Path, label: str, per_variant: bool = False, **moves) -> dict:
    """Relock every env (`moves`: LockOptions' update / upgrade); print where the time went, and with
    `per_variant` each variant's share."""
    options = LockOptions(mirrors=(Mirror.parse(f"conda-forge={snapshot}"),), **moves)
    totals = {"conda_solve": 0.0, "pip_resolve": 0.0, "write": 0.0}
    moved = 0
    for env in project.env_names():
        for result in lock_env(project, env, options):
            for key, value in result.seconds.items():
                totals[key] += value
            moved += sum(len(d.added) + len(d.removed) + len(d.changed) for d in result.diffs)
            if per_variant:
                print(
                    f"  variant {env} [{result.variant}] ({len(result.platforms)} platforms): conda solve "
                    f"{result.seconds['conda_solve']:.3f} s, pip resolve {result.seconds['pip_resolve']:.2f} s"
                )
    print(
        f"{label:<22} conda solve {totals['conda_solve']:6.3f} s   pip resolve {totals['pip_resolve']:6.2f} s   "
        f"write {totals['write']:6.3f} s   conda solve + write {totals['conda_solve'] + totals['write']:6.3f} s   "
        f"moved {moved:3d} entries"
    )
    return totals


def cosmetic_edit(project: Project) -> None:
    """Every spec and virtual-packages.yml said differently, meaning the same: a comment on top, the
    top-level keys in reverse order, a blank line between entries. (The rewritten YAML is written by
    hand from the parsed data so that no YAML writer's choices decide what counts as cosmetic.)"""
    import yaml

    for path in [*project.envs_dir.glob("*.yml"), project.virtual_packages_path]:
        if path.name.endswith(".conda-lock.yml"):
            continue
        data = yaml.safe_load(path.read_text())
        parts = [f"{json.dumps(key)}: {json.dumps(value)}" for key, value in reversed(list(data.items()))]
        path.write_text(
            "# a comment, and the keys in another order: nothing locked changes\n\n" + "\n\n".join(parts) + "\n"
        )


def report_check(label: str, times: list[float], baseline: float) -> None:
    print(
        f"{label}  median {statistics.median(times):.3f} s  min {min(times):.3f} s  max {max(times):.3f} s "
        f"over {len(times)} runs; bare `python -c pass` {baseline:.3f} s -> check costs "
        f"{statistics.median(times) / baseline:.1f}x an empty interpreter start"
    )


def time_check(project: Project, runs: int = 7) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "bootstrap", "lock", "--check", "--root", str(project.root)],
            check=True,
            capture_output=True,
            cwd=REPO,
        )
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check-only",
        action="store_true",
        help="time `lock --check` alone (as committed, then after a cosmetic edit); offline",
    )
    parser.add_argument(
        "--snapshot",
        type=Path,
        default=os.environ.get("BENCH_LOCK_SNAPSHOT") or None,
        metavar="DIR",
        help="a conda-forge repodata snapshot (<subdir>/repodata.json) to solve against as a mirror of conda-forge "
        "(default: $BENCH_LOCK_SNAPSHOT, which `make bench-lock` sets)",
    )
    args = parser.parse_args()
    if not args.check_only and (args.snapshot is None or not args.snapshot.is_dir()):
        where = "no --snapshot DIR given" if args.snapshot is None else f"{args.snapshot} is no directory"
        print(
            f"bench-lock: {where}: the relocks need a conda-forge snapshot (`make bench-lock` passes one)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-lock-") as tmp:
        os.environ["UV_CACHE_DIR"] = str(Path(tmp, "uv-cache"))
        project = scratch_project(Path(tmp))
        if not args.check_only:
            print(
                "bootstrap lock, every env and variant (7 platform locks), conda part from the snapshot mirror, "
                "pip part from PyPI"
            )
            lock_all(project, args.snapshot, "cold uv cache")
            lock_all(project, args.snapshot, "warm uv cache", per_variant=True)
            restore_locks(project)
            lock_all(project, args.snapshot, f"lock --update {UPDATED}", update=(UPDATED,))
            restore_locks(project)
            lock_all(project, args.snapshot, "lock --upgrade", upgrade=True)
            restore_locks(project)
        baseline = min(time_check_python())
        variants = len(list(project.envs_dir.glob("*.conda-lock.yml"))) + 1
        report_check(f"lock --check ({variants} locks)", time_check(project), baseline)
        cosmetic_edit(project)
        report_check(f"lock --check after a cosmetic edit ({variants} locks)", time_check(project), baseline)
    return 0


def time_check_python(runs: int = 7) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - started)
    return times


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        aio.interrupted()
        print("\nbench-lock: interrupted", file=sys.stderr)
        sys.exit(130)
