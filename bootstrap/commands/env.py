"""`python -m bootstrap env [ENV] [--variant auto|NAME [--force]] [--facts FILE] [--lock FILE] [--prefix DIR]
[--platform P] [--mirror C=URL ...] [--bundle FILE] [--link auto|reflink|hardlink|copy] [--dry-run] [--rollback]
[--json]`."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shlex
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from bootstrap.commands import argtypes
from bootstrap.errors import EXIT_OK, InputError
from bootstrap.install.generations import RECYCLE_AFTER_S
from bootstrap.install.linkmode import MODES
from bootstrap.project import Project, find_root
from bootstrap.report import dumps

if TYPE_CHECKING:
    from rich.progress import TaskID

    from bootstrap.install.env import EnvOptions, EnvResult, Feedback
    from bootstrap.install.fetch import FetchSize
    from bootstrap.install.linkmode import LinkUse
    from bootstrap.install.variant import VariantChoice
    from bootstrap.lock.lockfile import LockedPackage


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env", nargs="?", default=None, help="env to create (default: the project's default, py310)")
    parser.add_argument(
        "--variant",
        default="auto",
        metavar="auto|all|NAME",
        help="torch variant to install, into its own prefix .envs/ENV/NAME (default auto: the one `doctor` "
        "picks for this host; all: every locked variant, for a tree that hosts of several kinds share)",
    )
    parser.add_argument("--force", action="store_true", help="install --variant NAME even where it will not run")
    parser.add_argument(
        "--facts",
        type=argtypes.path,
        default=None,
        metavar="FILE",
        help="pick the variant for facts recorded with `doctor --save-facts` instead of this host's",
    )
    parser.add_argument(
        "--lock",
        type=argtypes.path,
        default=None,
        help="lock file (default: the lock of the env's variant in the project)",
    )
    parser.add_argument("--prefix", type=argtypes.path, default=None, help="where the env lives (default: .envs/ENV)")
    parser.add_argument(
        "--platform", type=argtypes.platform, default=None, help="locked platform to install (default: this machine's)"
    )
    parser.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="CANONICAL=URL",
        help="fetch URLs under CANONICAL from an HTTP mirror or a local directory",
    )
    parser.add_argument(
        "--bundle",
        type=argtypes.path,
        default=None,
        metavar="FILE",
        help="take the artifacts from this bundle (`bootstrap bundle`): no channel or index needed",
    )
    parser.add_argument(
        "--cache-dir", type=argtypes.path, default=None, help="package cache (default: ~/.cache/bootstrap)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (with --rollback: the generation it would switch to); change nothing",
    )
    add_link_option(parser)
    parser.add_argument("--rollback", action="store_true", help="switch back to the previous generation")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--root", type=argtypes.directory, default=None, help="project root (default: nearest dir with envs/)"
    )


def add_link_option(parser: argparse._ActionsContainer) -> None:
    """`--link` and `--recycle-after`, for every verb that installs (`env`, and `add`/`remove` after
    their relock)."""
    parser.add_argument(
        "--recycle-after",
        type=argtypes.hours,
        default=RECYCLE_AFTER_S / 3600,
        metavar="HOURS",
        help=f"recycle or delete a retired generation only once it was retired this long (default "
        f"{RECYCLE_AFTER_S / 3600:g}: jobs started from it may still read it; 0 where none can)",
    )
    parser.add_argument(
        "--link",
        choices=MODES,
        default="auto",
        help="how the env's files come from the package caches (default auto: reflinks where the file "
        "system has them, else hard links, else copies; copy for a team that edits files inside its envs)",
    )


def run(args: argparse.Namespace) -> int:
    project = Project(args.root or find_root(Path.cwd()))
    env = project.env_or_default(args.env)
    if args.lock is None:
        project.resolve_envs([env])
    _check_variant_flags(args)
    if args.rollback:
        return _rollback(project, env, args)
    if args.variant == "all":
        return _install_all(project, env, args)
    result, options = install(project, env, args)
    if args.json:
        print(dumps("bootstrap.env", result.to_dict()))
    else:
        print(_summary(env, result, options))
    return EXIT_OK


def _rollback(project: Project, env: str, args: argparse.Namespace) -> int:
    from bootstrap.install.env import rollback

    prefix = _prefix(project, env, args, _variant_of(project, env, args))
    done = rollback(prefix, dry_run=args.dry_run)
    notes = _edited_in(prefix, done.generation)
    if args.json:
        print(dumps("bootstrap.env", {**done.to_dict(), "notes": notes}))
    elif done.dry_run:
        print(f"{env}: {prefix} would point at generation {done.generation} (now {done.was}); nothing changed")
    else:
        print(f"{env}: {prefix} now points at generation {done.generation}")
    for note in notes:
        print(f"note: {note}")
    return EXIT_OK


def _install_all(project: Project, env: str, args: argparse.Namespace) -> int:
    """`--variant all`: every variant locked for the platform, each into its own prefix, whether or not
    it runs on this host (a login node preparing a tree its compute nodes share)."""
    from bootstrap.install.variant import locked_variants
    from bootstrap.platforms import host_platform

    names, passed = locked_variants(project, env, args.platform or host_platform())
    for line in passed:
        print(f"note: {line}", file=sys.stderr, flush=True)
    done = []
    for name in names:
        one = argparse.Namespace(**{**vars(args), "variant": name or "auto", "force": bool(name)})
        result, options = install(project, env, one)
        if result.variant is not None and name:
            why = "--variant all installs every locked variant, whether or not it runs on this host"
            result = dataclasses.replace(result, variant=dataclasses.replace(result.variant, how="all", why=why))
        done.append(result.to_dict())
        if not args.json:
            print(_summary(env, result, options))
    if args.json:
        print(dumps("bootstrap.env", {"variants": done, "passed_over": passed}))
    return EXIT_OK


def summary(env: str, result: EnvResult, options: EnvOptions) -> str:
    """What `env` prints for `result`: the plan or what changed, the variant, notes, how to activate."""
    return _summary(env, result, options)


def _prefix(project: Project, env: str, args: argparse.Namespace, variant: str = "") -> Path:
    """`--prefix`, else where the project keeps `env` (its `variant`'s own prefix, for an env with variants)."""
    if args.prefix is not None:
        # abspath, not Path.absolute(): `--prefix ../envs/x` from a directory deleted later must not leave
        # `<cwd>/../envs/x` (which then resolves no more) in every shebang and text file of the env.
        return Path(os.path.abspath(args.prefix))
    if variant:
        from bootstrap.install.variant import check_variant_layout

        check_variant_layout(project, env)
    return project.env_prefix(env, variant)


def _variant_of(project: Project, env: str, args: argparse.Namespace) -> str:
    """The variant whose prefix `--rollback` acts on: the one `--variant` names or auto picks, or the
    one `--lock FILE` was locked for; "" for an env without variants."""
    from bootstrap.platforms import host_platform

    if args.lock is None:
        return _choose(project, env, args.platform or host_platform(), args).name
    return _locked_variant(args.lock)


def install(project: Project, env: str, args: argparse.Namespace) -> tuple[EnvResult, EnvOptions]:
    """Create or update `env` from its lock as `args` (this verb's options) say; `add` and `remove`
    apply their relock with it."""
    from bootstrap.install.bundle import Bundle
    from bootstrap.install.cache import default_cache_dir
    from bootstrap.install.env import EnvOptions, create_or_update
    from bootstrap.lock.content_hash import spec_changed_since
    from bootstrap.lock.mirrors import parse_mirrors
    from bootstrap.platforms import host_platform

    platform = args.platform or host_platform()
    choice = None if args.lock is not None else _choose(project, env, platform, args)
    lock_path: Path = args.lock if choice is None else choice.lock_path
    prefix = _prefix(project, env, args, choice.name if choice is not None else _locked_variant(lock_path))
    bundle = Bundle.open(args.bundle.absolute()) if args.bundle is not None else None
    if bundle is not None and choice is not None and not bundle.has_lock(choice.lock_path):
        held = ", ".join(Path(e["lock"]).name for e in bundle.index["envs"])
        raise InputError(
            args.bundle,
            f"holds {held}, not {choice.lock_path.name} (variant {choice.name or 'none'}, {choice.how})",
            f"bundle it: `bootstrap bundle {env} --variant {choice.name}`, "
            "or install one the bundle holds with --variant NAME",
        )
    made_for = bundle.platforms(lock_path) if bundle is not None else ()
    if made_for and platform not in made_for:  # before any fetch: every artifact would be sought online
        target = "--platform" if args.platform else "this machine"
        raise InputError(
            args.bundle,
            f"made for {', '.join(made_for)}, {target} is {platform}",
            f"make the bundle with `bootstrap bundle --platform {platform}`",
        )
    options = EnvOptions(
        env=env,
        lock_path=lock_path.absolute(),
        prefix=prefix,
        platform=platform,
        cache_dir=(args.cache_dir or default_cache_dir()).absolute(),
        mirrors=parse_mirrors(args.mirror, base=Path.cwd()),
        bundle=bundle,
        dry_run=args.dry_run,
        show_progress=sys.stderr.isatty() and not args.json,
        variant=choice,
        link=args.link,
        recycle_after_s=args.recycle_after * 3600,
    )
    with progress_feedback(sys.stderr.isatty(), quiet=args.json) as feedback:
        result = create_or_update(options, feedback)
    stale = None if args.lock is not None else spec_changed_since(project, env, options.lock_path, platform)
    if stale is not None:
        result = dataclasses.replace(result, notes=(*result.notes, stale))
    return result, options


def _locked_variant(lock_path: Path) -> str:
    """The variant `--lock FILE` was locked for ("" when none), whose prefix it installs into."""
    from bootstrap.lock.lockfile import read_lock
    from bootstrap.lock.variants import META_VARIANT

    return str(read_lock(lock_path).custom.get(META_VARIANT, ""))


def _choose(project: Project, env: str, platform: str, args: argparse.Namespace) -> VariantChoice:
    """The variant to install; a variant passed over is told on stderr at once, before a fetch that may
    take minutes (the plan and --json say it too)."""
    from bootstrap.install.variant import VariantRequest, choose_variant

    choice = choose_variant(VariantRequest(project, env, platform, args.variant, args.force, args.facts))
    if not args.json and not args.dry_run:
        for line in choice.skipped_lines():
            print(f"note: {line}", file=sys.stderr, flush=True)
    return choice


def _edited_in(prefix: Path, generation: int) -> list[str]:
    """A note if files of `generation` changed since it was made: generations share inodes (hard
    links from the package cache, the clone of an env's first change), so an edit written in place
    in a later one is in this one too, and a rollback must not bring it back unsaid."""
    from bootstrap.checks.files import edited_files
    from bootstrap.install.generations import Layout

    try:
        scan = edited_files(Layout(prefix).path(generation))
    except (OSError, ValueError, InputError):  # unreadable records: `verify` says what is wrong
        return []
    if not scan.problems:
        return []
    items = [f"{path} ({owner})" for owner, path, _ in scan.problems]
    shown = ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")
    return [
        f"{len(items)} file(s) of generation {generation} were edited after it was made, through a link that a "
        f"later generation or env shares: {shown}; `make env` goes forward to the lock, `make clean-env env` "
        "rebuilds it with every file as packaged, `verify` lists them"
    ]


def _check_variant_flags(args: argparse.Namespace) -> None:
    if args.variant == "all" and (args.rollback or args.facts is not None or args.force or args.lock is not None):
        flag = next(
            f
            for f, on in (
                ("--rollback", args.rollback),
                ("--facts", args.facts is not None),
                ("--force", args.force),
                ("--lock", args.lock is not None),
            )
            if on
        )
        raise InputError(
            flag,
            "does not apply to --variant all, which installs every locked variant, each into its own prefix",
            "drop one of them, or name one variant",
        )
    if args.lock is not None and (args.variant != "auto" or args.facts is not None):
        flag = "--facts" if args.variant == "auto" else "--variant"
        raise InputError(flag, "does not apply to --lock FILE, which names the lock to install", "drop one of them")
    if args.force and args.variant == "auto":
        raise InputError(
            "--force",
            "applies to --variant NAME only (auto installs a variant that runs here)",
            "name the variant: --variant NAME --force",
        )


PLAIN_EVERY_S = 5.0  # a progress line this often when stderr is a log (CI, Slurm, `| tee`), not a terminal


@contextlib.contextmanager
def progress_feedback(tty: bool, quiet: bool = False) -> Iterator[Feedback]:
    """How downloads show on stderr: on a TTY a bar with bytes, speed and ETA (rattler draws its own
    for linking); elsewhere the total before the first download and a plain line every
    `PLAIN_EVERY_S`; with `quiet` (`--json`) neither. Retries and the "waiting for another run"
    notice are printed either way."""
    from bootstrap.install.download import Watch
    from bootstrap.install.env import Feedback

    one_at_a_time = threading.Lock()

    def to_stderr(line: str) -> None:  # called from the fetching threads: print() writes the newline apart
        with one_at_a_time:
            print(line, file=sys.stderr, flush=True)

    if quiet or not tty:
        meter = None if quiet else _PlainMeter(to_stderr)
        watch = Watch(retrying=to_stderr) if meter is None else Watch(meter.sized, meter.moved, to_stderr)
        yield Feedback(waiting=to_stderr, watch=watch, fetched=meter.fetched if meter is not None else Feedback.fetched)
        if meter is not None:
            meter.finish()
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=True) as progress:
        task: dict[str, TaskID] = {}
        count = {"done": 0, "of": 0}

        def started(total: int) -> None:
            count["of"] = total
            task["id"] = progress.add_task(f"fetching {total} packages and wheels", total=None)

        def sized(nbytes: int, files: int, unknown: int) -> None:
            progress.console.print(_size_line(nbytes, files, unknown))
            progress.update(task["id"], total=nbytes or None)

        def moved(nbytes: int) -> None:
            progress.update(task["id"], advance=nbytes)

        def fetched(entry: LockedPackage) -> None:
            count["done"] += 1
            progress.update(task["id"], description=f"fetched {count['done']} of {count['of']}: {entry.name}")

        yield Feedback(
            notify=progress.console.print,
            waiting=progress.console.print,
            fetch_started=started,
            fetched=fetched,
            watch=Watch(sized, moved, progress.console.print),
        )


def _size_line(nbytes: int, files: int, unknown: int) -> str:
    from bootstrap.commands.cache import size_text

    return f"fetching {files} file{'s' if files != 1 else ''}, {size_text(nbytes)}" + (
        f" ({unknown} of unknown size)" if unknown else ""
    )


class _PlainMeter:
    """Download progress as plain lines, for a log: the total, then bytes done every `PLAIN_EVERY_S`."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit, self.lock = emit, threading.Lock()
        self.total = self.done = self.files = self.fetched_files = 0
        self.started: Optional[float] = None
        self.last = 0.0

    def sized(self, nbytes: int, files: int, unknown: int) -> None:
        self.total, self.files = nbytes, files
        self.emit(_size_line(nbytes, files, unknown))

    def fetched(self, _entry: LockedPackage) -> None:
        with self.lock:
            self.fetched_files += 1

    def moved(self, nbytes: int) -> None:
        import time

        with self.lock:
            now = time.monotonic()
            if self.started is None:
                self.started = self.last = now
            self.done += nbytes
            if now - self.last < PLAIN_EVERY_S:
                return
            self.last = now
            line = self._line(now - self.started)
        self.emit(line)

    def finish(self) -> None:
        """The last line, once the downloads are done: a log's reader sees where the bytes ended."""
        import time

        with self.lock:
            line = None if self.started is None else self._line(time.monotonic() - self.started) + " (done)"
        if line:
            self.emit(line)

    def _line(self, elapsed: float) -> str:
        from bootstrap.commands.cache import size_text

        speed = self.done / max(elapsed, 1e-9)
        of = f" of {size_text(self.total)}" if self.total else ""
        files = f", {self.fetched_files} of {self.files} files" if self.files else ""
        return f"fetched {size_text(max(self.done, 0))}{of}, {size_text(int(speed))}/s{files}"


def _summary(env: str, result: EnvResult, options: EnvOptions) -> str:
    if result.dry_run:
        head = f"{env}: plan for {result.prefix} [{result.platform}]" + (
            f": generation {result.generation} {_built_from(result)}" if result.made else ": nothing to do"
        )
    elif not result.changed:
        head = f"{env}: {result.prefix} is up to date with {options.lock_path.name} [{result.platform}]"
    else:
        head = (
            f"{env}: {result.prefix} -> generation {result.generation} from {options.lock_path.name} "
            f"[{result.platform}] in {result.seconds.get('total', 0):.2f} s"
        )
    lines = [head, *_variant_lines(result.variant, result.dry_run)]
    changes = result.plan.lines()
    shown = changes if len(changes) <= 40 else changes[:40] + [f"... and {len(changes) - 40} more (--json lists all)"]
    lines += [f"  {line}" for line in shown]
    if result.size is not None and result.size.files:
        lines.append(f"  {_weight_line(result.size, result.dry_run)}")
    lines += [f"note: {note}" for note in result.notes]
    if result.changed:
        if result.base is not None:
            lines.append(f"built {_built_from(result)}; `--rollback` switches back to the previous one")
        if result.link is not None:
            lines.append(_link_line(result.link))
        python = result.prefix / ("python.exe" if result.platform.startswith("win-") else "bin/python")
        lines.append(f"activate: conda activate {shlex.quote(str(result.prefix))}   or run {shlex.quote(str(python))}")
        if result.variant is not None and result.variant.name and result.prefix.name == result.variant.name:
            lines.append(
                f'on each host of this tree: eval "$(python -m bootstrap shell {env})" activates the variant it '
                f"picks, `python -m bootstrap shell {env} --exec CMD` runs CMD in it"
            )
    return "\n".join(lines)


def _weight_line(size: FetchSize, dry_run: bool) -> str:
    """`size: 9 packages and wheels, 2.7 GiB; 2.6 GiB of it to download (7 not in the cache)`."""
    from bootstrap.commands.cache import size_text

    unknown = f", {size.unknown} of unknown size" if size.unknown else ""
    fetch = "to download" if dry_run else "downloaded"
    fetched = (
        f"{size_text(size.download_bytes)} of it {fetch} ({size.download_files} not in the cache{unknown})"
        if size.download_files
        else "all in the package cache"
    )
    return f"size: {size.files} packages and wheels, {size_text(size.nbytes)}; {fetched}"


_LINKED = {"reflink": "reflinks", "hardlink": "hard links", "copy": "copies"}


def _link_line(link: LinkUse) -> str:
    """How the files came from the cache, e.g. `files: hard links from the package cache (--link auto)`."""
    return f"files: {_LINKED[link.used]} from the package cache (--link {link.requested})"


def _variant_lines(choice: Optional[VariantChoice], dry_run: bool) -> list[str]:
    """Which variant, and why; a dry run shows every variant's verdict too, the one installed starred."""
    if choice is None or not choice.name:
        return []
    lines = [f"variant {choice.name} ({choice.lock_path.name}, {choice.how}): {choice.why}"]
    if dry_run and choice.pick is not None:
        lines += [f"  {line}" for line in choice.pick.lines(starred=choice.name)[:-1]]
    lines += [f"note: {line}" for line in choice.skipped_lines()]
    if choice.pick is not None and choice.pick.note:
        lines.append(f"note: {choice.pick.note}")
    return lines


def _built_from(result: EnvResult) -> str:
    """How the generation is had: the plan's actions are against that directory."""
    return {
        "recycled": f"by updating retired generation {result.base}",
        "clone": f"from a clone of generation {result.base}",
    }.get(result.made, "as a new env")
