"""`make bench-add`: `bootstrap add` of one pip package against relocking a hand edit.

In a scratch copy of the project (the committed specs and locks, restored
before every run), over several interleaved rounds, times

  A. `python -m bootstrap add --pip PKG --no-install --json` on py310 (the
     spec, its cu128 and cu130 locks, environment.yml), and
  B. the same line written into envs/py310.yml by hand (the text A wrote),
     then `python -m bootstrap lock py310 --json`: the workflow `add` replaces.
     (`lock --update PKG` refuses a name no lock holds yet; the plain relock
     is the same minimal one: every version the spec still allows is kept.)

each as its own process, A first in odd rounds and B first in even ones, so
that drift of the shared machine or of PyPI moves both sides of a pair. The
conda channel is a conda-forge repodata snapshot served as a mirror
(`--snapshot DIR` or BENCH_LOCK_SNAPSHOT, which `make bench-add` sets to the
developers' one); the pip part asks PyPI, with a uv cache of the scratch
directory's own, warmed by one uncounted `add` first.

From each verb's own `--json` seconds: add's conda part is its whole change
(`seconds.total`: the edit, the relocks, the export, the write) less the
pip resolution of every variant; the pip part is that pip resolution, set
beside the relock's own (a ratio per pair of runs).

Targets (issue 38): add's conda part <= 1 s; its pip part no slower than
the relock of the same package (median ratio <= 1).
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

from bootstrap.lock.spec_edit import PIP, SpecText, requirement_name  # noqa: E402  (after sys.path)

ENV = "py310"
PACKAGE = "tomli-w"  # small, pure Python, and not in the committed spec (checked below)


def restore(root: Path, spec_text: str | None = None) -> None:
    """The committed spec and locks again (the spec as `spec_text` when given), and no export."""
    shutil.rmtree(root / "envs", ignore_errors=True)
    shutil.copytree(REPO / "envs", root / "envs")
    shutil.copy(REPO / "conda-lock.yml", root / "conda-lock.yml")
    (root / "environment.yml").unlink(missing_ok=True)
    if spec_text is not None:
        (root / "envs" / f"{ENV}.yml").write_text(spec_text)


def bootstrap(argv: list[str], root: Path, snapshot: Path) -> tuple[dict, float]:
    """Run one verb with `--json` against the snapshot mirror: its envelope, and the process's wall time."""
    command = [sys.executable, "-m", "bootstrap", *argv, "--json", "--quiet", "--root", str(root)]
    command += ["--mirror", f"conda-forge={snapshot}"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"bench-add: `{' '.join(argv)}` failed (exit {done.returncode}):\n{done.stderr.strip()}")
    return json.loads(done.stdout), wall


def locks_of(envelope: dict) -> list[dict]:
    return envelope["locks"] if "locks" in envelope else envelope["envs"]


def pip_s(envelope: dict) -> float:
    return sum(lock["seconds"].get("pip_resolve", 0.0) for lock in locks_of(envelope))


def solve_write_s(envelope: dict) -> float:
    """Conda solves, and the write once: each variant's lock carries the time of the one write of all."""
    locks = locks_of(envelope)
    return sum(lock["seconds"].get("conda_solve", 0.0) for lock in locks) + max(
        (lock["seconds"].get("write", 0.0) for lock in locks), default=0.0
    )


def spread(values: list[float], digits: int = 2) -> str:
    return (
        f"median {statistics.median(values):.{digits}f} (min {min(values):.{digits}f}, "
        f"max {max(values):.{digits}f}, n={len(values)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--snapshot",
        type=Path,
        default=os.environ.get("BENCH_LOCK_SNAPSHOT") or None,
        metavar="DIR",
        help="a conda-forge repodata snapshot (<subdir>/repodata.json), served as a mirror of conda-forge "
        "(default: $BENCH_LOCK_SNAPSHOT, which `make bench-add` sets)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved pairs of runs (default 5)")
    parser.add_argument("--package", default=PACKAGE, help=f"the pip package to add (default {PACKAGE})")
    args = parser.parse_args()
    if args.snapshot is None or not args.snapshot.is_dir():
        where = "no --snapshot DIR given" if args.snapshot is None else f"{args.snapshot} is no directory"
        print(
            f"bench-add: {where}: the relocks need a conda-forge snapshot (`make bench-add` passes one)",
            file=sys.stderr,
        )
        return 2
    spec = REPO / "envs" / f"{ENV}.yml"
    if SpecText(spec, spec.read_text()).named(requirement_name(PIP, args.package)):
        print(f"bench-add: envs/{ENV}.yml lists {args.package} already: pick a package it lacks", file=sys.stderr)
        return 2
    snapshot = args.snapshot.resolve()
    add = ["add", "--env", ENV, "--pip", args.package, "--no-install"]
    relock = ["lock", ENV]
    with tempfile.TemporaryDirectory(prefix="bench-add-") as tmp:
        os.environ["UV_CACHE_DIR"] = str(Path(tmp, "uv-cache"))
        root = Path(tmp, "proj")
        root.mkdir()
        restore(root)
        first, _ = bootstrap(add, root, snapshot)  # warms the uv cache; its spec is B's hand edit
        by_hand = (root / "envs" / f"{ENV}.yml").read_text()
        print(
            f"bootstrap add --pip {args.package} --no-install on {ENV} ({len(first['locks'])} variant locks), "
            f"against `lock {ENV}` after the same line written by hand; conda part from "
            f"the snapshot mirror, pip part from PyPI; {args.rounds} interleaved rounds after one warm-up add "
            f"(which wrote {len(first['written'])} files)"
        )
        conda, add_pip, lock_pip, ratios, add_wall, lock_wall, add_solve, lock_solve = ([] for _ in range(8))
        for n in range(args.rounds):
            order = ("add", "lock") if n % 2 == 0 else ("lock", "add")
            for side in order:
                if side == "add":
                    restore(root)
                    done, wall = bootstrap(add, root, snapshot)
                    conda.append(done["seconds"]["total"] - pip_s(done))
                    add_pip.append(pip_s(done))
                    add_solve.append(solve_write_s(done))
                    add_wall.append(wall)
                else:
                    restore(root, by_hand)
                    done, wall = bootstrap(relock, root, snapshot)
                    lock_pip.append(pip_s(done))
                    lock_solve.append(solve_write_s(done))
                    lock_wall.append(wall)
            ratios.append(add_pip[-1] / lock_pip[-1])
            print(
                f"  round {n + 1} ({' then '.join(order)}): add process {add_wall[-1]:.2f} s, conda part "
                f"{conda[-1]:.3f} s, pip {add_pip[-1]:.2f} s | lock process {lock_wall[-1]:.2f} s, "
                f"pip {lock_pip[-1]:.2f} s | pip add / lock {ratios[-1]:.2f}",
                flush=True,
            )
    conda_median, ratio_median = statistics.median(conda), statistics.median(ratios)
    print(f"add process wall, s:                 {spread(add_wall)}")
    print(f"lock process wall, s:                {spread(lock_wall)}")
    print(f"add conda part, s:                   {spread(conda, 3)}")
    print(f"  of which conda solves + write, s:  {spread(add_solve, 3)} (lock's {spread(lock_solve, 3)})")
    print(f"add pip part, s:                     {spread(add_pip)}")
    print(f"lock pip part, s:                    {spread(lock_pip)}")
    print(f"pip part, add / lock:                {spread(ratios)}")
    within = " (the range spans 1.00: within the noise)" if min(ratios) <= 1.0 <= max(ratios) else ""
    print(
        f"targets: add conda part {conda_median:.3f} s <= 1 s {'met' if conda_median <= 1.0 else 'MISSED'}; "
        f"pip part add / lock {ratio_median:.2f}x <= 1.00x "
        f"{'met' if ratio_median <= 1.0 else 'MISSED' + within}"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nbench-add: interrupted", file=sys.stderr)
        sys.exit(130)
