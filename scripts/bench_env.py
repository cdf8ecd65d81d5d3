"""`make bench-env`: what `bootstrap env` costs over raw `rattler.install`, side by side.

A fixture env of ~30 packages / ~5,000 files (a runnable python, pip and 28
generic packages, a third of their files with prefix placeholders) is locked
from a local channel. Each scenario runs bootstrap and raw rattler.install on
the same records, interleaved run by run (which side goes first alternates),
each run after a `sync` so none pays for the write-back of the one before.
The development VM's disk speed drifts by 5x over minutes (a raw fresh
create takes 0.15 s or 0.9 s), so read the ratios, which compare neighbours:
medians, and the medians of the per-pair ratio and difference.

  fresh create, warm cache   bootstrap env --link copy -> new prefix | rattler.install with copies ->
                             new prefix; again with bootstrap's check of its cached copies switched
                             off, to size it
  fresh create, linked       bootstrap env --link auto (reflinks or hard links, whichever the file
                             system has) | rattler.install with its default link mode (hard links)
  second env, disk           `du` over the envs and the package cache together, before and after a
                             second env from the same lock, --link auto and --link copy
  no-op rerun                `python -m bootstrap env` (interpreter start included) | rattler.install again
  first change (clone)       pkg07 1.0 -> 1.1 on new envs: bootstrap starts from a hard-linked clone
                             of generation 1 | rattler in place; "clone alone" times that clone by
                             itself (one directory entry per file), "a copy instead" `cp -a` of the
                             same generation (it grows with the bytes, see --big-mb)
  later changes              pkg07 1.1 -> 1.2 -> ...: bootstrap updates the retired generation
                             (two changes behind) | rattler in place (one change behind)

Updates only move forward: toggling between two locks would hand bootstrap a
retired generation that is already the target.
Except in the linked and disk scenarios both sides copy (bootstrap --link copy; rattler with hard
links off), so those rows compare the same work.
Targets (issue 19): fresh create <= 1.15x raw, no-op rerun <= 0.3 s whole process, any change <= 2x raw.
Issue 36: a linked fresh create <= 1.15x rattler's default; a second env adds <= 5 % of an env's size.
`--real` measures the same at real size instead (scripts/bench_env_real.py; opt-in: it fetches the
lock's torch and CUDA wheels once, several GB).
"""

from __future__ import annotations

import argparse
import contextlib
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

import rattler  # noqa: E402

from bootstrap import aio  # noqa: E402
from bootstrap.install.env import EnvOptions, create_or_update  # noqa: E402
from bootstrap.install.generations import clone_tree  # noqa: E402
from bootstrap.lock.mirrors import Mirror  # noqa: E402
from bootstrap.lock.solve import LockOptions, lock_env  # noqa: E402
from tests.fixtures.conda_channel import PLACEHOLDER, PackageSpec, build_channel, pip_spec  # noqa: E402
from tests.fixtures.project import make_project  # noqa: E402
from tests.fixtures.runnable_env import SHORT, runnable_python_spec  # noqa: E402

PACKAGES, FILES_EACH = 28, 178
RUNS = 15
REAL_RUNS = 5  # --real: each side links several GB of wheels a run


def package(index: int, version: str = "1.0") -> PackageSpec:
    name = f"pkg{index:02d}"
    files = {
        f"share/{name}/f{i:04d}.txt": f"{name} {version} {i}\n" + (f"prefix={PLACEHOLDER}\n" if i % 3 == 0 else "")
        for i in range(FILES_EACH)
    }
    placeholders = {p for i, p in enumerate(sorted(files)) if i % 3 == 0}
    return PackageSpec(name, version, noarch="generic", files=files, prefix_placeholder_files=placeholders)


def timed(action) -> float:
    os.sync()  # no run pays for the write-back of the one before it
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def pair(index: int, ours, raw) -> tuple[float, float]:
    """Time both actions back to back, bootstrap first on even runs and raw first on odd ones,
    so neither side always inherits what the other left in the page cache or the journal."""
    if index % 2:
        raw_t = timed(raw)
        return timed(ours), raw_t
    ours_t = timed(ours)
    return ours_t, timed(raw)


def paired(ours, raw, runs: int) -> tuple[list[float], list[float]]:
    """`pair` the two actions `runs` times; each call gets the run index."""
    pairs = [pair(index, lambda: ours(index), lambda: raw(index)) for index in range(runs)]
    return [o for o, _ in pairs], [r for _, r in pairs]


@contextlib.contextmanager
def seal_check_off():
    """bootstrap trusting its cached copies unchecked (never so outside this script): one lstat a file."""
    from bootstrap.install import store

    real = store.seal_holds
    store.seal_holds = lambda _cache_dir, _entry: True
    try:
        yield
    finally:
        store.seal_holds = real


def solved_records(channel: Path, specs: list[str]) -> list:
    return aio.run(
        rattler.solve(
            sources=[rattler.Channel(channel.as_uri())],
            specs=[rattler.MatchSpec(s) for s in specs],
            platforms=["linux-64", "noarch"],
            virtual_packages=[],
        )
    )


def raw_install(records, prefix: Path, cache: Path, copies: bool) -> None:
    config = rattler.Config.from_toml("allow-hard-links = false\n") if copies else None
    # installed_packages=None: rattler reads the prefix's conda-meta itself, faster than handing it records
    aio.run(
        rattler.install(
            records, prefix, cache_dir=cache, show_progress=False, execute_link_scripts=False, config=config
        )
    )


def client_build() -> float:
    """What raw_install's config costs before linking anything: py-rattler builds a client from it."""
    from rattler.networking.client import Client

    config = rattler.Config.from_toml("allow-hard-links = false\n")
    return statistics.median(timed(lambda: Client.from_config(config)) for _ in range(9))


def verdicts(fresh, noop, first, later) -> str:
    """The targets of the module's docstring, met or not, on the medians above."""

    def ratio(pairs) -> float:
        return statistics.median(o / r for o, r in zip(*pairs))

    checks = [
        ("fresh create", ratio(fresh), 1.15, "x"),
        ("no-op", statistics.median(noop[0]), 0.3, " s"),
        ("first change", ratio(tuple(zip(*first))), 2.0, "x"),
        ("later changes", ratio(tuple(zip(*later))), 2.0, "x"),
    ]
    return "targets: " + "; ".join(
        f"{name} {value:.2f}{unit} <= {limit:g}{unit} {'met' if value <= limit else 'MISSED'}"
        for name, value, limit, unit in checks
    )


def du_mb(*paths: Path) -> float:
    """MB allocated under `paths` together: an inode hard-linked from several of them counts once."""
    done = subprocess.run(["du", "-skc", *map(str, paths)], check=True, capture_output=True, text=True)
    return int(done.stdout.splitlines()[-1].split()[0]) / 1024


def row(name: str, ours_t: list[float], raw_t: list[float]) -> str:
    ratio = statistics.median(o / r for o, r in zip(ours_t, raw_t))
    extra = statistics.median(o - r for o, r in zip(ours_t, raw_t))
    return (
        f"{name:<28}{statistics.median(ours_t):>10.3f}s{statistics.median(raw_t):>13.3f}s{ratio:>7.2f}x"
        f"{extra * 1000:>+9.0f} ms{len(ours_t):>6}"
    )


@contextlib.contextmanager
def scratch_dir(parent: Path | None):
    """A temporary directory removed however the run ends. After Ctrl-C, rattler's install threads
    write into it for a moment more, so the removal is tried again until they have stopped."""
    path = tempfile.mkdtemp(prefix="bench-env-", dir=parent)
    try:
        yield path
    finally:
        for _ in range(50):
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                break
            time.sleep(0.1)


def at_least(low: int):
    """An argparse type: an integer >= `low`, refused before any fixture is built."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text}")
        return value

    parse.__name__ = "int"  # argparse's "invalid int value" for what is no integer
    return parse


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # pkg07 is the package the change scenarios move forward, so there are at least 8.
    parser.add_argument(
        "--packages",
        type=at_least(8),
        default=PACKAGES,
        help=f"generic packages of {FILES_EACH} files each besides python and pip (default {PACKAGES}, at least 8)",
    )
    parser.add_argument(
        "--runs", type=at_least(1), default=None, help=f"pairs per scenario (default {RUNS}, with --real {REAL_RUNS})"
    )
    parser.add_argument(
        "--big-mb",
        type=at_least(0),
        default=0,
        metavar="MB",
        help="add a package holding one file of MB megabytes, as CUDA libraries are (default none)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the fixture, caches and envs go (default: $TMPDIR); a tmpfs there takes "
        "the disk's drift out and leaves the CPU overhead",
    )
    parser.add_argument(
        "--real",
        action="store_true",
        help="the real-size scenario instead (scripts/bench_env_real.py): the lock's torch and CUDA wheels, "
        "fetched once from PyPI (several GB), beside rattler and uv with their default link modes",
    )
    parser.add_argument(
        "--wheels-cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --real: the package cache the wheels are fetched into once (default bootstrap's, as `make env`)",
    )
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = REAL_RUNS if args.real else RUNS
    if args.dir is not None and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: no such directory")
    return args


class Bench:
    """The fixture env locked from its local channel, the caches both sides share, and each scenario's
    figures as it is measured (in the order of the module's docstring, the seal check last)."""

    def __init__(self, tmp: Path, packages: int, runs: int, big_mb: int) -> None:
        self.tmp, self.runs = tmp, runs
        specs = [runnable_python_spec(), pip_spec(), *(package(i) for i in range(packages))]
        if big_mb:
            specs.append(PackageSpec("bigdata", "1.0", noarch="generic", files={"lib/libbig.so": bytes(big_mb << 20)}))
        self.updates = [f"1.{k}" for k in range(1, runs + 2)]  # 1.1 for first changes, then `runs` later ones
        channel = build_channel(tmp / "channel", specs + [package(7, v) for v in self.updates])
        self.names = [f"pkg{i:02d}" for i in range(packages)] + (["bigdata"] if big_mb else [])
        self.project = make_project(tmp / "proj", platforms=("linux-64",), conda=self.conda_specs("1.0"), pip=())
        self.mirror = Mirror.parse(f"conda-forge={channel}")
        self.relock()
        n_files = sum(len(s.files) + len(s.symlinks) for s in specs)
        print(f"fixture env: {len(specs)} packages, {n_files} files; {runs} interleaved runs per scenario", flush=True)
        self.cache, self.raw_cache = tmp / "cache", tmp / "raw-cache"
        self.records = {v: solved_records(channel, list(self.conda_specs(v))) for v in ["1.0", *self.updates]}
        self.stable, self.raw_prefix = tmp / "stable", tmp / "raw-stable"
        self.lock_path = self.project.lock_path("py310")
        self.locks: dict[str, str] = {}
        self.steps: dict[str, list[dict[str, float]]] = {}  # how each kind of change spent its time, run by run

    def conda_specs(self, version: str) -> tuple[str, ...]:
        return (f"python={SHORT}.*", "pip", *[n if n != "pkg07" else f"pkg07 {version}" for n in self.names])

    def relock(self) -> None:
        lock_env(self.project, "py310", LockOptions(mirrors=(self.mirror,), cache_dir=self.tmp / "repodata"))

    def ours(self, prefix: Path, link: str = "copy", cache: Path | None = None) -> EnvOptions:
        # Nothing runs from the bench's envs between its runs: a retired generation is recycled at once.
        return EnvOptions(
            "py310",
            self.lock_path,
            prefix,
            "linux-64",
            cache or self.cache,
            mirrors=(self.mirror,),
            link=link,
            recycle_after_s=0,
        )

    def raw(self, version: str, prefix: Path, copies: bool = True) -> None:
        # Linking, raw rattler has a cache of its own: its hard links would change the inodes of
        # bootstrap's sealed copies, which bootstrap would then hash before trusting them again.
        raw_install(self.records[version], prefix, (self.cache if copies else self.raw_cache) / "pkgs", copies)

    def fresh(self) -> None:
        """Fresh creates on caches warmed once; raw with hard links too."""
        create_or_update(self.ours(self.tmp / "warm"))
        self.raw("1.0", self.tmp / "warm-raw")
        self.raw("1.0", self.tmp / "warm-raw-linked", copies=False)
        self.breakdown: dict[str, float] = {}
        self.fresh_pairs = paired(
            lambda i: self.breakdown.update(create_or_update(self.ours(self.tmp / f"o{i}")).seconds),
            lambda i: self.raw("1.0", self.tmp / f"r{i}"),
            self.runs,
        )
        self.fresh_hard = statistics.median(
            timed(lambda: self.raw("1.0", self.tmp / f"h{i}", copies=False)) for i in range(self.runs)
        )

    def linked(self) -> None:
        """Fresh creates, both sides linking from the cache: bootstrap's auto against rattler's default."""
        self.linked_mode = create_or_update(self.ours(self.tmp / "warm-linked", "auto")).link
        self.linked_pairs = paired(
            lambda i: create_or_update(self.ours(self.tmp / f"l{i}", "auto")),
            lambda i: self.raw("1.0", self.tmp / f"lr{i}", copies=False),
            self.runs,
        )

    def second_env_disk(self) -> None:
        """MB that a second env from the same lock adds to the envs and the package cache together (`du`
        counts a hard-linked inode once), and one env's own size, per link mode."""
        self.disk: dict[str, tuple[float, float]] = {}
        for link in ("auto", "copy"):
            root = self.tmp / f"disk-{link}"
            cache = root / "cache"
            shutil.copytree(self.cache / "archives", cache / "archives")  # checked archives: no download to time
            create_or_update(self.ours(root / "envs" / "a", link, cache))
            before = du_mb(root)
            create_or_update(self.ours(root / "envs" / "b", link, cache))
            self.disk[link] = (du_mb(root) - before, du_mb(root / "envs" / ".b.gens"))

    def noop(self) -> None:
        """`python -m bootstrap env` again on an env it made, against rattler.install again in-process."""
        create_or_update(self.ours(self.stable))
        self.raw("1.0", self.raw_prefix)
        # As a user's `make env` runs: with the bytecode Python caches (a CI's PYTHONDONTWRITEBYTECODE
        # would have every run compile the modules it imports again); the untimed first run writes it.
        child_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

        def cli(prefix: Path) -> None:
            """`python -m bootstrap env` on `prefix`, in a new interpreter."""
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bootstrap",
                    "env",
                    "--root",
                    str(self.project.root),
                    "--prefix",
                    str(prefix),
                    "--platform",
                    "linux-64",
                    "--cache-dir",
                    str(self.cache),
                ],
                check=True,
                capture_output=True,
                cwd=REPO,
                env=child_env,
            )

        cli(self.stable)
        self.noop_pairs = paired(lambda _i: cli(self.stable), lambda _i: self.raw("1.0", self.raw_prefix), self.runs)
        self.bare = statistics.median(
            timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True, env=child_env))
            for _ in range(self.runs)
        )

    def lock_each_version(self) -> None:
        """Every version locked once (not timed) and extracted + sealed once, so neither side pays extraction below."""
        spec_path = self.project.spec_path("py310")
        text = spec_path.read_text()
        for version in ["1.0", *self.updates]:
            spec_path.write_text(text.replace("pkg07 1.0", f"pkg07 {version}"))
            self.relock()
            self.locks[version] = self.lock_path.read_text()
            create_or_update(self.ours(self.tmp / "warm"))

    def change(self, prefix: Path, version: str, made: str) -> None:
        self.lock_path.write_text(self.locks[version])
        result = create_or_update(self.ours(prefix))
        assert result.made == made, (version, result)
        self.steps.setdefault(made, []).append(result.seconds)

    def first_changes(self) -> None:
        """First change of an env: from a hard-linked clone of its only generation; new envs per run."""
        self.first, self.clone, self.copy = [], [], []
        for i in range(self.runs):
            name = f"first{i}"
            self.lock_path.write_text(self.locks["1.0"])  # a bootstrap env and a raw one at the first lock, untimed
            create_or_update(self.ours(self.tmp / name))
            self.raw("1.0", self.tmp / f"{name}-raw")
            env, raw_env = self.tmp / name, self.tmp / f"{name}-raw"
            self.first.append(
                pair(
                    i,
                    lambda: self.change(env, self.updates[0], made="clone"),
                    lambda: self.raw(self.updates[0], raw_env),
                )
            )
            current = Path(os.path.realpath(env))
            self.clone.append(timed(lambda: clone_tree(current, self.tmp / f"clone{i}")))
            self.copy.append(
                timed(
                    lambda: subprocess.run(
                        ["cp", "-a", str(current), str(self.tmp / f"copy{i}")], check=True, capture_output=True
                    )
                )
            )
            shutil.rmtree(self.tmp / f"copy{i}")  # a full second env each: 0.3 GB at 15 runs, 8 GB with --big-mb 512

    def later_changes(self) -> None:
        """Later changes: the stable env moves forward one version per run, recycling its retired generation."""
        self.change(self.stable, self.updates[0], made="clone")
        self.raw(self.updates[0], self.raw_prefix)
        self.later = [
            pair(
                i,
                lambda: self.change(self.stable, version, made="recycled"),
                lambda: self.raw(version, self.raw_prefix),
            )
            for i, version in enumerate(self.updates[1:])
        ]

    def unsealed(self) -> None:
        self.lock_path.write_text(self.locks["1.0"])
        with seal_check_off():  # to size it: the rest of the overhead is bootstrap's bookkeeping; last, so its
            self.unsealed_pairs = paired(
                lambda i: create_or_update(self.ours(self.tmp / f"u{i}")),  # envs weigh on no other scenario
                lambda i: self.raw("1.0", self.tmp / f"ur{i}"),
                self.runs,
            )

    def report(self) -> None:
        print(f"{'scenario':<28}{'bootstrap':>11}{'raw (copies)':>14}{'ratio':>8}{'overhead':>12}{'runs':>6}")
        print(row("fresh create, warm cache", *self.fresh_pairs) + f"   raw with hard links: {self.fresh_hard:.3f}s")
        print(row("  the same, seal check off", *self.unsealed_pairs) + "   (sizes the check of the cached copies)")
        print(
            row("fresh create, linked", *self.linked_pairs)
            + f"   bootstrap --link auto ({self.linked_mode.used}) against raw with its default (hard links)"
        )
        print(row("no-op rerun", *self.noop_pairs))
        print(
            row("first change (clone)", *zip(*self.first)) + f"   clone alone: {statistics.median(self.clone):.3f}s, "
            f"a copy (`cp -a`) instead: {statistics.median(self.copy):.3f}s"
        )
        print(row("later changes (recycled)", *zip(*self.later)))
        print(verdicts(self.fresh_pairs, self.noop_pairs, self.first, self.later))
        print("ratio, overhead: medians over the pairs, each bootstrap run against the raw run right after it")
        print("bootstrap fresh create, last run: " + ", ".join(f"{k} {v:.3f}s" for k, v in self.breakdown.items()))
        for made, runs_seconds in self.steps.items():  # `link` is rattler's linking and what bootstrap does around it
            medians = {k: statistics.median(s.get(k, 0.0) for s in runs_seconds) for k in runs_seconds[-1]}
            print(
                f"bootstrap change from a {made} generation, medians: "
                + ", ".join(f"{k} {v:.3f}s" for k, v in medians.items())
            )
        print(
            f"no-op rerun includes interpreter start ({self.bare:.3f} s for `python -c pass`); raw no-op is in-process"
        )
        print(
            f"raw's rattler.install builds an HTTP client each call ({client_build() * 1000:.1f} ms, TLS set up); "
            "bootstrap's link step, which never downloads, gives rattler one that cannot (env.link_config)"
        )
        print(
            f"disk: bootstrap's env with its rollback generation {du_mb(self.stable.parent / '.stable.gens'):.1f} MB, "
            f"raw env {du_mb(self.raw_prefix):.1f} MB"
        )
        for link, (added, size) in self.disk.items():
            print(
                f"disk, second env from the same lock, --link {link}: +{added:.1f} MB over envs and cache, "
                f"{100 * added / size:.1f}% of the env's {size:.1f} MB"
            )


def main(argv: list[str]) -> int:
    args = arguments(argv)
    if args.real:
        from bench_env_real import main_real

        from bootstrap.install.cache import default_cache_dir

        with scratch_dir(args.dir) as tmp_name:
            return main_real(Path(tmp_name), args.runs, args.wheels_cache or default_cache_dir())
    with scratch_dir(args.dir) as tmp_name:
        bench = Bench(Path(tmp_name), args.packages, args.runs, args.big_mb)
        bench.fresh()
        bench.linked()
        bench.second_env_disk()
        bench.noop()
        bench.lock_each_version()
        bench.first_changes()
        bench.later_changes()
        bench.unsealed()
        bench.report()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        aio.interrupted()
        print("\nbench-env: interrupted", file=sys.stderr)
        sys.exit(130)
    except subprocess.CalledProcessError as exc:  # e.g. `cp -a` on a full --dir: its last words, not a page of them
        said = exc.stderr if isinstance(exc.stderr, str) else (exc.stderr or b"").decode(errors="replace")
        last = said.strip().splitlines()[-1:] or [f"exit {exc.returncode}"]
        print(f"bench-env: {' '.join(map(str, exc.cmd[:3]))} ... failed: {last[0]}", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:
        from bootstrap.fsutil import out_of_space

        if not out_of_space(exc):
            raise
        print(
            "bench-env: no space left on device for the fixture, its caches and every run's envs (2.5 GB at the "
            "defaults): free some, or give --dir a larger file system",
            file=sys.stderr,
        )
        sys.exit(1)
