"""`make bench-env`: what `bootstrap env` costs over raw `rattler.install`, side by side.

A fixture env of ~30 packages / ~5,000 files (a runnable python, pip and 28
generic packages, a third of their files with prefix placeholders) is locked
from a local channel. Three scenarios, each timed for bootstrap and for raw
rattler.install on the same records in the same run, median of 3:

  fresh create, warm cache   bootstrap env -> new prefix | rattler.install -> new prefix
  no-op rerun                `python -m bootstrap env` (interpreter start included) | rattler.install again
  one-package update         bootstrap env after a relock | rattler.install with installed_packages, in place

Raw rattler is timed twice: with our link mode (copies; hard links off, see
bootstrap/env.py) and with its default (hard links into the cache).
Targets (issue 3): overhead <= 10 % over raw rattler; no-op rerun <= 1 s.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import rattler  # noqa: E402

from bootstrap.env import EnvOptions, create_or_update  # noqa: E402
from bootstrap.lock import LockOptions, lock_env  # noqa: E402
from bootstrap.mirrors import Mirror  # noqa: E402
from tests.fixtures.conda_channel import PLACEHOLDER, PackageSpec, build_channel, pip_spec  # noqa: E402
from tests.fixtures.project import make_project  # noqa: E402
from tests.fixtures.runnable_env import SHORT, runnable_python_spec  # noqa: E402

PACKAGES, FILES_EACH = 28, 178
RUNS = 5


def package(index: int, version: str = "1.0") -> PackageSpec:
    name = f"pkg{index:02d}"
    files = {f"share/{name}/f{i:04d}.txt": f"{name} {version} {i}\n" + (f"prefix={PLACEHOLDER}\n" if i % 3 == 0 else "")
             for i in range(FILES_EACH)}
    placeholders = {p for i, p in enumerate(sorted(files)) if i % 3 == 0}
    return PackageSpec(name, version, noarch="generic", files=files, prefix_placeholder_files=placeholders)


def median_time(action, runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def solved_records(channel: Path, specs: list[str]) -> list:
    return asyncio.run(rattler.solve(sources=[rattler.Channel(channel.as_uri())], specs=[rattler.MatchSpec(s) for s in specs],
                                     platforms=["linux-64", "noarch"], virtual_packages=[]))


def raw_install(records, prefix: Path, cache: Path, copies: bool, installed=None) -> None:
    config = rattler.Config.from_toml("allow-hard-links = false\n") if copies else None
    asyncio.run(rattler.install(records, prefix, cache_dir=cache, installed_packages=installed,
                                show_progress=False, execute_link_scripts=False, config=config))


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-env-") as tmp_name:
        tmp = Path(tmp_name)
        specs = [runnable_python_spec(), pip_spec(), *(package(i) for i in range(PACKAGES))]
        channel = build_channel(tmp / "channel", specs + [package(7, "1.1")])
        names = [f"pkg{i:02d}" for i in range(PACKAGES)]
        conda = (f"python={SHORT}.*", "pip", *[n if n != "pkg07" else "pkg07 1.0" for n in names])
        project = make_project(tmp / "proj", platforms=("linux-64",), conda=conda, pip=())
        mirror = Mirror.parse(f"conda-forge={channel}")
        lock_env(project, "py310", LockOptions(mirrors=(mirror,), cache_dir=tmp / "repodata"))
        n_files = sum(len(s.files) + len(s.symlinks) for s in specs)
        print(f"fixture env: {len(specs)} packages, {n_files} files; median of {RUNS} runs", flush=True)

        cache = tmp / "cache"
        records_v1 = solved_records(channel, list(conda))
        records_v2 = solved_records(channel, [c if c != "pkg07 1.0" else "pkg07 1.1" for c in conda])

        def ours(prefix: Path) -> EnvOptions:
            return EnvOptions("py310", project.lock_path("py310"), prefix, "linux-64", cache, mirrors=(mirror,))

        # Warm both caches once.
        create_or_update(ours(tmp / "warm"))
        raw_install(records_v1, tmp / "warm-raw", cache / "pkgs", copies=True)

        counter = iter(range(1000))
        breakdown = {}
        fresh_ours = median_time(lambda: breakdown.update(create_or_update(ours(tmp / f"o{next(counter)}")).seconds))
        fresh_raw_copy = median_time(lambda: raw_install(records_v1, tmp / f"r{next(counter)}", cache / "pkgs", True))
        fresh_raw_hard = median_time(lambda: raw_install(records_v1, tmp / f"h{next(counter)}", cache / "pkgs", False))

        stable = tmp / "stable"
        create_or_update(ours(stable))
        argv = [sys.executable, "-m", "bootstrap", "env", "--root", str(project.root), "--prefix", str(stable),
                "--platform", "linux-64", "--cache-dir", str(cache)]
        noop_ours = median_time(lambda: subprocess.run(argv, check=True, capture_output=True, cwd=REPO))
        raw_prefix = tmp / "raw-stable"
        raw_install(records_v1, raw_prefix, cache / "pkgs", True)
        noop_raw = median_time(lambda: raw_install(records_v1, raw_prefix, cache / "pkgs", True))
        bare = median_time(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))

        # One-package update: pkg07 1.0 -> 1.1, then back, alternating so each run changes one package.
        spec_path = project.spec_path("py310")
        text = spec_path.read_text()
        flip = {"v": 1}

        def relock_ours() -> None:
            version = "1.1" if flip["v"] == 1 else "1.0"
            spec_path.write_text(text.replace("pkg07 1.0", f"pkg07 {version}"))
            lock_env(project, "py310", LockOptions(mirrors=(mirror,), cache_dir=tmp / "repodata"))

        def update_ours() -> None:
            create_or_update(ours(stable))
            flip["v"] *= -1

        update_times = []
        for _ in range(RUNS):
            relock_ours()
            started = time.perf_counter()
            update_ours()
            update_times.append(time.perf_counter() - started)
        update_ours_t = statistics.median(update_times)

        def update_raw() -> None:
            installed = [rattler.PrefixRecord.from_path(p) for p in (raw_prefix / "conda-meta").glob("*.json")]
            target = records_v2 if flip["r"] == 1 else records_v1
            raw_install(target, raw_prefix, cache / "pkgs", True, installed=installed)
            flip["r"] *= -1

        flip["r"] = 1
        update_raw_t = median_time(update_raw)

        rows = [
            ("fresh create, warm cache", fresh_ours, fresh_raw_copy, fresh_raw_hard),
            ("no-op rerun", noop_ours, noop_raw, None),
            ("one-package update", update_ours_t, update_raw_t, None),
        ]
        print(f"{'scenario':<26}{'bootstrap':>11}{'raw (copies)':>14}{'ratio':>8}{'raw (hard links)':>18}")
        for name, ours_t, raw_t, hard_t in rows:
            hard = f"{hard_t:>17.3f}s" if hard_t is not None else f"{'':>18}"
            print(f"{name:<26}{ours_t:>10.3f}s{raw_t:>13.3f}s{ours_t / raw_t:>7.2f}x{hard}")
        print("bootstrap fresh create, last run: " + ", ".join(f"{k} {v:.3f}s" for k, v in breakdown.items()))
        print(f"no-op rerun includes interpreter start ({bare:.3f} s for `python -c pass`); raw no-op is in-process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
