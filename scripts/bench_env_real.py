"""`make bench-env-real` (`bench_env.py --real`): `bootstrap env` against the peers' way at real size.

The lock's real pip part for linux-64 (torch and its CUDA wheels, from conda-lock.yml) on top of the
bench-env fixture's conda part (a runnable CPython 3.10, pip and 28 generic packages), installed

  bootstrap     `bootstrap env --link auto` (its default)
  peers' way    raw rattler.install with its default link mode (hard links), then `uv pip install`
                with its default link mode (hard links on Linux), each from a cache of its own

from the same checked wheels, fetched once into the package cache given (`--wheels-cache`, default
bootstrap's own: several GB the first time, from PyPI) and warmed once on both sides, interleaved
run by run. Rows: a fresh create, a no-op rerun, and the disk a second env from the same lock adds
(`du` over the envs and the caches together, which counts a hard-linked inode once).
Targets (issue 36): fresh create <= 1.15x the peers' way, no-op rerun <= 0.3 s, a second env <= 5 %
of an env's size.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml
from bench_env import PACKAGES, REPO, du_mb, package, paired, raw_install, solved_records

from bootstrap.install.env import EnvOptions, create_or_update
from bootstrap.install.fetch import archive_path, fetch_archives
from bootstrap.install.plan import locked_entries
from bootstrap.lock.lockfile import LockedPackage, read_lock
from bootstrap.lock.mirrors import Mirror
from bootstrap.lock.pip import PipOptions, uv_binary
from bootstrap.lock.solve import LockOptions, lock_env
from bootstrap.prefix import python_executable
from tests.fixtures.conda_channel import build_channel, pip_spec
from tests.fixtures.project import make_project
from tests.fixtures.runnable_env import find_interpreter, runnable_python_spec

RUNS = 5
LOCK = REPO / "conda-lock.yml"
PLATFORM = "linux-64"


def pip_part() -> tuple[list[LockedPackage], list[dict]]:
    """The lock's pip entries for linux-64, parsed and as the lock writes them."""
    entries = [e for e in locked_entries(read_lock(LOCK), PLATFORM) if e.manager == "pip"]
    raw = yaml.safe_load(LOCK.read_text(encoding="utf-8"))["package"]
    return entries, [p for p in raw if p["manager"] == "pip" and p["platform"] == PLATFORM]


def fetch_once(entries: list[LockedPackage], store: Path) -> dict[str, Path]:
    """The checked wheels in `store`, downloading those it lacks; says what a download took."""
    missing = [e for e in entries if not archive_path(store, e).is_file()]
    started = time.perf_counter()
    wheels = fetch_archives(entries, store)
    seconds = time.perf_counter() - started
    if missing:
        fetched = sum(wheels[e.name].stat().st_size for e in missing)
        print(
            f"fetched {len(missing)} wheels, {fetched / 1e9:.2f} GB in {seconds:.0f} s "
            f"({fetched / 1e6 / seconds:.0f} MB/s), into {store}",
            flush=True,
        )
    return wheels


def link_into(store: Path, cache: Path, entries: list[LockedPackage]) -> None:
    """The store's checked wheels, with their verification stamps, in the bench's package cache: hard
    links where one file system holds both, else copies that keep their mtimes."""
    for entry in entries:
        source, target = archive_path(store, entry).parent, archive_path(cache, entry).parent
        target.mkdir(parents=True)
        for path in source.iterdir():
            if path.name.startswith(".part-"):
                continue
            try:
                os.link(path, target / path.name)
            except OSError:
                shutil.copy2(path, target / path.name)


class RealBench:
    """The fixture's conda part and the lock's pip part in one lock, the caches of both sides warmed."""

    def __init__(self, tmp: Path, runs: int, store: Path) -> None:
        interpreter = find_interpreter("3.10")
        if interpreter is None:
            raise SystemExit("bench-env --real: needs a CPython 3.10 on this machine (the lock's wheels are cp310)")
        self.tmp, self.runs = tmp, runs
        entries, raw_entries = pip_part()
        wheels = fetch_once(entries, store)
        specs = [runnable_python_spec(interpreter=interpreter), pip_spec(), *(package(i) for i in range(PACKAGES))]
        channel = build_channel(tmp / "channel", specs)
        conda = (f"python={interpreter.short}.*", "pip", *(s.name for s in specs[2:]))
        self.project = make_project(tmp / "proj", platforms=(PLATFORM,), conda=conda, pip=())
        self.channel = channel
        self.mirror = Mirror.parse(f"conda-forge={channel}")
        lock_env(self.project, "py310", LockOptions(mirrors=(self.mirror,), cache_dir=tmp / "repodata"))
        self.lock_path = self.project.lock_path("py310")
        data = yaml.safe_load(self.lock_path.read_text(encoding="utf-8"))
        data["package"] += raw_entries
        self.lock_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        self.cache, self.envs = tmp / "cache", tmp / "envs"
        link_into(store, self.cache, entries)
        self.records = solved_records(channel, list(conda))
        self.requirements = tmp / "requirements.txt"  # what bootstrap hands uv: the checked wheels, pinned
        self.requirements.write_text(
            "".join(f"{e.name} @ {archive_path(self.cache, e).as_uri()} --hash=sha256:{e.sha256}\n" for e in entries)
        )
        n_files = sum(len(s.files) + len(s.symlinks) for s in specs)
        size = sum(w.stat().st_size for w in wheels.values())
        print(
            f"real-size env: {len(specs)} conda packages ({n_files} files, the fixture's) + {len(entries)} wheels "
            f"from conda-lock.yml ({PLATFORM}, {size / 1e9:.2f} GB); {runs} interleaved runs per scenario",
            flush=True,
        )

    def ours(self, name: str) -> EnvOptions:
        return EnvOptions("py310", self.lock_path, self.envs / name, PLATFORM, self.cache, mirrors=(self.mirror,))

    def peers(self, prefix: Path) -> None:
        """Raw rattler, then uv, each with its default link mode, from caches of their own."""
        raw_install(self.records, prefix, self.tmp / "raw-cache" / "pkgs", copies=False)
        subprocess.run(
            [
                uv_binary(PipOptions()),
                "pip",
                "install",
                "--python",
                str(python_executable(prefix)),
                "--cache-dir",
                str(self.tmp / "raw-uv"),
                "--no-deps",
                "--require-hashes",
                "--no-index",
                "-r",
                str(self.requirements),
            ],
            check=True,
            capture_output=True,
            cwd="/",
        )

    def fresh(self) -> None:
        """Fresh creates from warm caches: each side's first install (extracting, unpacking) untimed."""
        self.mode = create_or_update(self.ours("warm")).link
        self.peers(self.tmp / "raw-envs" / "warm")
        self.steps: list[dict[str, float]] = []
        self.fresh_pairs = paired(
            lambda i: self.steps.append(create_or_update(self.ours(f"o{i}")).seconds),
            lambda i: self.peers(self.tmp / "raw-envs" / f"r{i}"),
            self.runs,
        )

    def noop(self) -> None:
        """`python -m bootstrap env` again on an env it made (interpreter start included), against
        rattler.install and `uv pip install` again on the peers' env."""
        command = [sys.executable, "-m", "bootstrap", "env", "--root", str(self.project.root), "--prefix"]
        where = ["--platform", PLATFORM, "--cache-dir", str(self.cache), "--mirror", f"conda-forge={self.channel}"]

        # As a user's `make env` runs: with the bytecode Python caches (see bench_env's no-op).
        child_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

        def cli(_index: int) -> None:
            subprocess.run(
                [*command, str(self.envs / "warm"), *where], check=True, capture_output=True, cwd=REPO, env=child_env
            )

        cli(0)  # writes the bytecode caches, as a user's first `make env` does
        self.noop_pairs = paired(cli, lambda _i: self.peers(self.tmp / "raw-envs" / "warm"), self.runs)

    def second_env_disk(self) -> None:
        """MB a second env from the same lock adds over the envs and the caches of each side, and an env's size."""
        ours = [self.cache, self.envs]
        before = du_mb(*ours)
        create_or_update(self.ours("disk"))
        self.disk_ours = (du_mb(*ours) - before, du_mb(self.envs / ".disk.gens"))
        peers = [self.tmp / "raw-cache", self.tmp / "raw-uv", self.tmp / "raw-envs"]
        before = du_mb(*peers)
        self.peers(self.tmp / "raw-envs" / "disk")
        self.disk_peers = (du_mb(*peers) - before, du_mb(self.tmp / "raw-envs" / "disk"))

    def report(self) -> None:
        print(f"{'scenario':<28}{'bootstrap':>11}{'peers':>14}{'ratio':>8}{'overhead':>12}{'runs':>6}")
        print(
            spread_row("fresh create, warm cache", *self.fresh_pairs)
            + f"   bootstrap --link auto ({self.mode.used if self.mode else '?'}) against rattler and uv, "
            "each with its default link mode (hard links)"
        )
        print(spread_row("no-op rerun", *self.noop_pairs) + "   bootstrap's includes interpreter start")
        fresh = statistics.median(o / r for o, r in zip(*self.fresh_pairs))
        noop = statistics.median(self.noop_pairs[0])
        share = 100 * self.disk_ours[0] / self.disk_ours[1]
        print(
            f"targets: fresh create {fresh:.2f}x <= 1.15x {verdict(fresh <= 1.15)}; no-op {noop:.2f} s <= 0.3 s "
            f"{verdict(noop <= 0.3)}; second env {share:.1f}% <= 5% {verdict(share <= 5)}"
        )
        print("ratio, overhead: medians over the pairs, each bootstrap run against the peers' run beside it")
        medians = {k: statistics.median(s.get(k, 0.0) for s in self.steps) for k in self.steps[-1]}
        print("bootstrap fresh create, medians: " + ", ".join(f"{k} {v:.3f}s" for k, v in medians.items()))
        for side, (added, size) in (("bootstrap", self.disk_ours), ("peers' way", self.disk_peers)):
            print(
                f"disk, second env from the same lock, {side}: +{added:.1f} MB over envs and caches, "
                f"{100 * added / size:.1f}% of the env's {size:.1f} MB"
            )


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def spread_row(name: str, ours_t: list[float], peers_t: list[float]) -> str:
    """bench_env's row, and the lowest and highest ratio of a pair."""
    ratios = [o / p for o, p in zip(ours_t, peers_t)]
    extra = statistics.median(o - p for o, p in zip(ours_t, peers_t))
    return (
        f"{name:<28}{statistics.median(ours_t):>10.3f}s{statistics.median(peers_t):>13.3f}s"
        f"{statistics.median(ratios):>7.2f}x{extra * 1000:>+9.0f} ms{len(ours_t):>6}"
        f"   pairs {min(ratios):.2f}-{max(ratios):.2f}x"
    )


def main_real(tmp: Path, runs: int, store: Path) -> int:
    bench = RealBench(tmp, runs, store)
    bench.fresh()
    bench.noop()
    bench.second_env_disk()
    bench.report()
    return 0
