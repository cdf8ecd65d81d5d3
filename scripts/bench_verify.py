"""`make bench-verify`: `verify --no-bench` wall time against `python -m torch.utils.collect_env`.

A fixture env the size of a real torch env (~20,000 files: 10 conda packages
of 1,000 files, a third with prefix placeholders, and a 10,000-file wheel
standing in for torch's) is locked from a local channel and created with
`bootstrap env`. A `.pth` file lets the env's python import this
interpreter's torch, numpy, pyyaml and pynvml, so both commands run with the
same interpreter binary and the same torch, inside the same env:

  verify        <env>/bin/python -m bootstrap verify --no-bench
  collect_env   <env>/bin/python -m torch.utils.collect_env

Runs alternate (one warm-up each, then RUNS timed rounds); medians are
compared. The env's `pip` is the fixture's stub, so collect_env's `pip list`
costs less than with a real pip: the comparison favours collect_env. For
context, collect_env is also timed in this interpreter's own venv (real pip),
and verify with torch already imported, which is what a GPU host pays before
the device checks (without a GPU verify reads torch/version.py instead).
Target (issue 4): verify <= 0.8 x collect_env.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bootstrap.cli import main as bootstrap  # noqa: E402
from tests.fixtures.conda_channel import (  # noqa: E402
    PLACEHOLDER,
    PackageSpec,
    build_channel,
    pip_spec,
)
from tests.fixtures.env_project import offline_sources  # noqa: E402
from tests.fixtures.project import make_project  # noqa: E402
from tests.fixtures.runnable_env import SHORT, runnable_python_spec  # noqa: E402
from tests.fixtures.wheels import WheelSpec, build_wheelhouse  # noqa: E402

PACKAGES, FILES_EACH, WHEEL_FILES = 10, 1000, 10000
RUNS = 7
TARGET = 0.8


def package(index: int) -> PackageSpec:
    name = f"pkg{index:02d}"
    files = {
        f"share/{name}/f{i:04d}.txt": f"{name} {i}\n" + (f"prefix={PLACEHOLDER}\n" if i % 3 == 0 else "")
        for i in range(FILES_EACH)
    }
    placeholders = {p for i, p in enumerate(sorted(files)) if i % 3 == 0}
    return PackageSpec(name, "1.0", noarch="generic", files=files, prefix_placeholder_files=placeholders)


def build_env(tmp: Path) -> Path:
    channel = build_channel(
        tmp / "channel", [runnable_python_spec(), pip_spec(), *(package(i) for i in range(PACKAGES))]
    )
    bulk = {f"bulkwheel/sub{i // 500:02d}/m{i:05d}.py": f"X = {i}\n" for i in range(WHEEL_FILES)}
    wheels = build_wheelhouse(tmp / "wheels", [WheelSpec("bulkwheel", "1.0", files=bulk), WheelSpec("gamma", "0.5")])
    conda = (f"python={SHORT}.*", "pip", *[f"pkg{i:02d}" for i in range(PACKAGES)])
    project = make_project(tmp / "proj", platforms=("linux-64",), conda=conda, pip=("bulkwheel", "gamma"))
    quiet = ["--cache-dir", str(tmp / "cache")]
    assert bootstrap(["lock", *offline_sources(project, channel, wheels), *quiet]) == 0
    assert (
        bootstrap(
            ["env", "--root", str(project.root), "--platform", "linux-64", "--mirror", f"conda-forge={channel}", *quiet]
        )
        == 0
    )
    prefix = project.root / ".envs" / "py310"
    site = next(prefix.glob("lib/python*/site-packages"))
    (site / "zz-host-site.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    return prefix


def timed(argv: list) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return elapsed


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no stray arguments
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp_name:
        prefix = build_env(Path(tmp_name))
        python = str(prefix / "bin" / "python")
        commands = {
            "verify": [python, "-m", "bootstrap", "verify", "--no-bench"],
            "collect_env": [python, "-m", "torch.utils.collect_env"],
            # Context: what verify costs where it must import torch (a GPU host), device work excluded.
            "verify, torch imported": [
                python,
                "-c",
                ("import sys, torch; from bootstrap.cli import main; sys.exit(main(['verify', '--no-bench']))"),
            ],
            "collect_env (own venv, real pip)": [sys.executable, "-m", "torch.utils.collect_env"],
        }
        report = json.loads(
            subprocess.run(
                [*commands["verify"], "--json"], cwd=REPO, capture_output=True, text=True, check=False
            ).stdout
        )
        files = next(c for c in report["checks"] if c["id"] == "env.files")["observed"]
        for argv in commands.values():
            timed(argv)  # warm-up: page cache, .pyc files
        times: dict = {name: [] for name in commands}
        for _ in range(RUNS):
            for name, argv in commands.items():
                times[name].append(timed(argv))
        medians = {name: statistics.median(values) for name, values in times.items()}
        ratio = medians["verify"] / medians["collect_env"]
        print(f"env: {prefix} ({files}); python {SHORT}, {RUNS} alternating runs after a warm-up, median wall time")
        for name, values in times.items():
            spread = f"{min(values):.2f}-{max(values):.2f}"
            print(f"  {name:34s} {medians[name]:6.2f} s  (range {spread} s)")
        print(f"  verify stages (one --json run): {report['extra']['seconds']}")
        print(f"  summary of verify's checks: {report['summary']}")
        verdict = "meets" if ratio <= TARGET else "misses"
        print(f"verify / collect_env = {ratio:.2f} ({verdict} the <= {TARGET} target)")
        return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nbench-verify: interrupted", file=sys.stderr)
        sys.exit(130)
