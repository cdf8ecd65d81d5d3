"""`make bench-prolog`: the pre-job check, `verify --no-bench --prolog`, end to end on a ~20,000-file env.

The env is bench-verify's (scripts/bench_verify.py): 10 conda packages of 1,000 files and a
10,000-file wheel, locked from a local channel and created with `bootstrap env`, so its install record
and lock match. Each command is a whole process, as a Slurm prolog or an init container starts it:

  inside the env      <env>/bin/python -m bootstrap verify --no-bench --prolog
  from the tools venv python -m bootstrap verify --no-bench --prolog --prefix <env>

then, with every file of the env given a modification time after the install record (a worst case
for the file check), the prolog beside `verify --no-bench`, which compares those files' sha256.
Runs alternate (one warm-up each, then RUNS timed rounds); medians are reported. Target (issue 37):
the prolog <= 1 s, whole process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_verify import build_env  # noqa: E402  (the same env bench-verify measures)

RUNS = 7
TARGET_S = 1.0


def timed(argv: list, codes: tuple = (0,)) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in codes:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return elapsed, done.stdout.strip()


def rounds(commands: dict, codes: tuple = (0,)) -> dict:
    """Median wall time of each command over RUNS alternating rounds, after one warm-up each."""
    for argv in commands.values():
        timed(argv, codes)
    times: dict = {name: [] for name in commands}
    for _ in range(RUNS):
        for name, argv in commands.items():
            times[name].append(timed(argv, codes)[0])
    return times


def show(times: dict) -> None:
    for name, values in times.items():
        print(f"  {name:44s} {statistics.median(values):6.2f} s  (range {min(values):.2f}-{max(values):.2f} s)")


def touch_all(prefix: Path) -> int:
    """Give every file the env's packages installed a modification time after its install record (the
    records themselves, conda-meta/ and *.dist-info/, left as they are); how many."""
    later = (prefix / "conda-meta" / "bootstrap").stat().st_mtime + 60
    count = 0
    for folder, dirs, files in os.walk(prefix.resolve()):
        dirs[:] = [d for d in dirs if d != "conda-meta" and not d.endswith(".dist-info")]
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.utime(path, (later, later))
                count += 1
    return count


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no stray arguments
    with tempfile.TemporaryDirectory(prefix="bench-prolog-") as tmp_name:
        prefix = build_env(Path(tmp_name))
        python = str(prefix / "bin" / "python")
        inside = [python, "-m", "bootstrap", "verify", "--no-bench", "--prolog"]
        tools = [sys.executable, "-m", "bootstrap", "verify", "--no-bench", "--prolog", "--prefix", str(prefix)]
        _, line = timed(inside)
        print(
            f"env: {prefix}; python {sys.version.split()[0]}, {RUNS} alternating runs after a warm-up, median wall time"
        )
        print(f"the prolog's line: {line}")
        intact = rounds(
            {
                "prolog, inside the env": inside,
                "prolog, from the tools venv": tools,
                "python -c pass": [python, "-c", "pass"],
            }
        )
        show(intact)
        touched = touch_all(prefix)
        _, line = timed(inside)
        print(f"every file touched ({touched} files newer than the install record): {line}")
        after = rounds(
            {
                "prolog, inside the env, every file touched": inside,
                "verify --no-bench (hashes them), inside": [python, "-m", "bootstrap", "verify", "--no-bench"],
            },
            codes=(0, 1),
        )
        show(after)
        worst = max(
            statistics.median(intact["prolog, inside the env"]),
            statistics.median(intact["prolog, from the tools venv"]),
            statistics.median(after["prolog, inside the env, every file touched"]),
        )
        verdict = "met" if worst <= TARGET_S else "MISSED"
        print(f"slowest prolog median {worst:.2f} s; target <= {TARGET_S:g} s: {verdict}")
        return 0 if worst <= TARGET_S else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nbench-prolog: interrupted", file=sys.stderr)
        sys.exit(130)
