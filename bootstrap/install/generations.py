"""Generations: every change builds a new directory beside the env, and a symlink switches to it atomically.

The current one and the one before it are kept. A change recycles a retired one (`next_start`), so a
rollback costs the disk of what changed, but only one retired longer than a grace period: a process
started from it (on this machine or another node of a shared file system) may still read it.
Docs: docs/env.md, "Generations and rollback".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from bootstrap.errors import BusyError, InputError, excerpt
from bootstrap.fsutil import atomic_write_text, flocked, remove_tree

PARTIAL = ".partial"
GARBAGE = ".garbage"  # renamed before deletion: a half-deleted generation never looks complete
# conda-build pads the build prefix written into binaries to 255 bytes: a longer prefix cannot replace it
MAX_PREFIX_BYTES = 255
LEFTOVERS = (PARTIAL, GARBAGE, ".spare")  # what killed runs leave, and older bootstraps' ready-made clones
# `<n>.retired` beside generation n: when the stable path stopped pointing at it (ISO 8601, UTC). A
# file of the gens dir, not of the generation: a process may run from it, whose files stay untouched.
RETIRED = ".retired"
# How long a retired generation is kept intact by default: longer than most clusters let a job run,
# so no job started from it sees its files change or go.
RECYCLE_AFTER_S = 72 * 3600.0


@dataclass(frozen=True)
class Layout:
    stable: Path  # what users activate; a symlink once bootstrap manages it

    @property
    def gens_dir(self) -> Path:
        return self.stable.parent / f".{self.stable.name}.gens"

    @property
    def lock_file(self) -> Path:
        return self.stable.parent / f".{self.stable.name}.lock"

    def generations(self) -> list[int]:
        """Complete generation numbers, oldest first."""
        if not self.gens_dir.is_dir():
            return []
        return sorted(int(p.name) for p in self.gens_dir.iterdir() if p.name.isdigit() and p.is_dir())

    def current(self) -> Optional[int]:
        if not self.stable.is_symlink():
            return None
        target = os.readlink(self.stable)
        name = Path(target).name
        return int(name) if name.isdigit() else None

    def path(self, generation: int) -> Path:
        return self.gens_dir / str(generation)

    def retired_at(self, generation: int) -> Optional[float]:
        """When generation `generation` was retired (seconds since the epoch); None when unrecorded."""
        try:
            text = (self.gens_dir / f"{generation}{RETIRED}").read_text().strip()
            return datetime.fromisoformat(text).timestamp()
        except (OSError, ValueError):
            return None

    def mark_retired(self, generation: int, now: Optional[float] = None) -> None:
        stamp = datetime.fromtimestamp(time.time() if now is None else now, timezone.utc)
        atomic_write_text(self.gens_dir / f"{generation}{RETIRED}", stamp.isoformat(timespec="seconds") + "\n")

    def clear_retired(self, generation: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.gens_dir / f"{generation}{RETIRED}").unlink()

    def expired(self, generation: int, grace_s: float, now: Optional[float] = None) -> bool:
        """Whether a retired generation may be recycled or deleted: retired at least `grace_s` ago (any
        retired one when `grace_s` is 0). One with no record may be in use: it is never expired."""
        if grace_s <= 0:
            return True
        retired = self.retired_at(generation)
        return retired is not None and (time.time() if now is None else now) - retired >= grace_s

    def check_managed(self) -> None:
        """Refuse to take over a real directory or file, or a symlink, that bootstrap did not create.

        A symlink of someone else's (to another env, to a scratch disk, dangling) would be read
        through as if it were this env, then replaced by the next change; one re-pointed by hand
        would make the generations it no longer names look retired, and deleted."""
        self.check_outside_generations()
        if self.stable.is_symlink():
            if not self.points_at_own_generation():
                raise InputError(
                    self.stable,
                    f"is a symlink to {os.readlink(self.stable)}, not to one of its generations in {self.gens_dir}",
                    self._foreign_link_fix(),
                )
        elif self.stable.exists():
            raise InputError(
                self.stable,
                "exists and is not an environment managed by bootstrap",
                "choose another --prefix, or move it away (bootstrap never overwrites it)",
            )

    def check_writable(self) -> None:
        """Refuse, before anything is fetched, an env whose directories cannot be written (a read-only
        mount, another user's): a change creates and renames generations in `gens_dir` and switches
        the link beside it, and would fail there with an OSError naming neither."""
        size = len(str(self.stable).encode())
        if size > MAX_PREFIX_BYTES:
            raise InputError(
                f"--prefix {excerpt(str(self.stable))}",
                f"is {size} bytes long, longer than the "
                f"{MAX_PREFIX_BYTES} conda-forge's packages leave room for in their binaries",
                "choose a shorter --prefix",
            )
        existing = next(p for p in (self.stable.parent, *self.stable.parent.parents) if p.exists())
        if not existing.is_dir():
            raise InputError(self.stable, f"{existing} is not a directory", "choose a --prefix in a directory")
        for path in (existing, self.gens_dir):
            if path.is_dir() and not os.access(path, os.W_OK):  # access(2) answers EROFS even to root
                raise InputError(
                    self.stable,
                    f"{path} cannot be written (a read-only file system, or not yours)",
                    "make it writable, or choose a --prefix you can write",
                )

    def check_outside_generations(self) -> None:
        """Refuse a stable path inside a generation of another env (`--prefix .envs/py310/sub`): it would
        live in that one generation only, gone from the env after its next change and deleted with it."""
        parent = Path(os.path.realpath(self.stable.parent))
        for path in (parent, *parent.parents):
            gens_dir = path.parent
            if gens_dir.name.startswith(".") and gens_dir.name.endswith(".gens") and path.name.split(".")[0].isdigit():
                outer = gens_dir.parent / gens_dir.name[1 : -len(".gens")]
                raise InputError(
                    self.stable,
                    f"is inside {path}, a generation of the env {outer}, which that env's next change replaces",
                    f"choose a --prefix outside {outer}",
                )

    def points_at_own_generation(self) -> bool:
        """Whether the stable path is a symlink to `<gens_dir>/<n>`, as `switch` makes it (that may be gone)."""
        if not self.stable.is_symlink():
            return False
        target = Path(self.stable.parent, os.readlink(self.stable))
        return target.name.isdigit() and os.path.realpath(target.parent) == os.path.realpath(self.gens_dir)

    def _foreign_link_fix(self) -> str:
        target = Path(self.stable.parent, os.readlink(self.stable))
        if Layout(target).points_at_own_generation():
            return f"pass --prefix {target} to use that env, or remove the link"
        if self.generations():  # re-pointed by hand; without the link, a change would recycle them
            newest = f"{self.gens_dir.name}/{self.generations()[-1]}"
            return f"point it back at its newest generation: `ln -sfn {newest} {self.stable}`"
        return "remove the link, or choose another --prefix: bootstrap never replaces a link it did not make"


@contextlib.contextmanager
def exclusive(layout: Layout, notify: Callable[[str], None], timeout: float = 3600.0) -> Iterator[int]:
    """Hold the env's flock; a second run waits (saying so) or fails after `timeout` seconds.
    Yields its file descriptor, for the processes that write into a generation to inherit."""
    layout.stable.parent.mkdir(parents=True, exist_ok=True)
    with flocked(
        layout.lock_file,
        notify,
        f"waiting for another `bootstrap env` on {layout.stable} to finish ...",
        timeout=timeout,
    ) as fd:
        yield fd


def remove_leftovers(layout: Layout) -> list[Path]:
    """Delete what interrupted runs left behind: half-built and half-deleted generations (and the
    ready-made clones of an older bootstrap, which no run starts from now)."""
    if not layout.gens_dir.is_dir():
        return []
    leftovers = [p for p in layout.gens_dir.iterdir() if p.name.endswith(LEFTOVERS)]
    for path in leftovers:
        remove_tree(path)
    return leftovers


def tidy_if_idle(layout: Layout) -> list[Path]:
    """For a run that changes nothing: `remove_leftovers`, where there are any and no other run holds
    the env (a partial may be its own). Returns what was removed."""
    try:
        if not any(p.name.endswith(LEFTOVERS) for p in layout.gens_dir.iterdir()):
            return []
        with exclusive(layout, lambda _: None, timeout=0):
            return remove_leftovers(layout)
    except (OSError, BusyError):  # no gens dir, a read-only one, or another run at work
        return []


@dataclass(frozen=True)
class Start:
    """The directory a change is built in, and what it holds before the change."""

    number: int  # the generation it becomes
    partial: Path  # `<number>.partial`
    base: Optional[int]  # the generation it starts from; None: empty
    made: str  # "recycled": `base` itself, renamed; "clone": a hard-linked clone of `base`; "empty"

    @property
    def recycled(self) -> bool:
        return self.made == "recycled"


def next_start(layout: Layout, grace_s: float = 0.0, now: Optional[float] = None) -> Start:
    """Where the next change would start, decided without touching anything: the newest generation
    retired at least `grace_s` ago, else (an env's first change, or one whose retired generations
    may still be in use) a clone of the current one, else nothing."""
    existing = layout.generations()
    number = max(existing, default=0) + 1
    partial = layout.gens_dir / f"{number}{PARTIAL}"
    current = layout.current()
    retired = [g for g in existing if g != current and layout.expired(g, grace_s, now)]
    if retired:  # the garbage collector would delete it after this change: reuse it
        return Start(number, partial, retired[-1], "recycled")
    if current is not None and layout.path(current).is_dir():
        return Start(number, partial, current, "clone")
    return Start(number, partial, None, "empty")


def start(layout: Layout, chosen: Optional[Start] = None) -> Start:
    """Make `chosen.partial` (default: `next_start`) from its base: the retired generation renamed
    (so a kill at any point leaves either it or a partial), a clone of the current one, or empty."""
    chosen = chosen or next_start(layout)
    layout.gens_dir.mkdir(parents=True, exist_ok=True)
    if chosen.base is None:
        chosen.partial.mkdir()
    elif chosen.recycled:
        os.rename(layout.path(chosen.base), chosen.partial)
    else:
        clone_tree(layout.path(chosen.base), chosen.partial)
    return chosen


def clone_tree(source: Path, target: Path, workers: int = min(8, os.cpu_count() or 1)) -> None:
    """`cp -al`: the same tree, every file a hard link to the source's (a copy where linking fails),
    symlinks recreated. The directories are made first, then `workers` threads make the links:
    link(2) is CPU-bound in the kernel, so each core makes its share."""
    links: list[tuple[str, str]] = []
    made_dirs: list[tuple[str, str]] = []
    pending = [(str(source), str(target))]
    while pending:
        directory, out = pending.pop()
        os.mkdir(out)
        made_dirs.append((directory, out))
        with os.scandir(directory) as entries:  # file types from the directory itself: no stat per file
            for entry in entries:
                made = os.path.join(out, entry.name)
                if entry.is_symlink():
                    os.symlink(os.readlink(entry.path), made)
                elif entry.is_dir():
                    pending.append((entry.path, made))
                else:
                    links.append((entry.path, made))

    def link(chunk: list[tuple[str, str]]) -> None:
        for source, made in chunk:
            _link_or_copy(source, made)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(link, [links[i::workers] for i in range(workers)]))
    for directory, out in made_dirs:  # last: a read-only directory must be filled first
        shutil.copymode(directory, out)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:  # a file system without hard links, or a file we may not link (fs.protected_hardlinks)
        shutil.copy2(source, target)


# conda's per-env state that is not a package: requests (`--from-history`), `conda env
# config vars`, the env's own .condarc. Copied into the new generation from the current
# one, so that it reads as if the current one had been updated; a copy of its own,
# since conda (and bootstrap, for the history) append to these files in place.
ENV_STATE = ("conda-meta/history", "conda-meta/state", ".condarc")


def carry_env_state(current: Path, partial: Path) -> None:
    for relative in ENV_STATE:
        source, target = current / relative, partial / relative
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_over(source, target)
        elif target.is_file():
            target.unlink()


def copy_over(source: Path, target: Path) -> None:
    """Copy `source` to `target` as a new inode (copy beside it, rename over it): never through a
    hard link that `target` may share with another generation, and never half-written."""
    temp = target.with_name(f".{target.name}.new")
    shutil.copy2(source, temp)
    os.replace(temp, target)


def discard(partial: Path, settle: float = 0.2, limit: float = 30.0) -> None:
    """Remove a half-built generation once nothing writes into it any more. A failed rattler.install
    returns while link tasks it had started are still running (they cannot be cancelled), and they
    create directories and files (empty ones, on a full disk) after the error: removed too early,
    the partial is re-created behind the removal. So wait until its tree stays the same for
    `settle` seconds (at most `limit`), move it aside, remove it, and remove whatever a late writer
    made again at its name."""
    deadline = time.monotonic() + limit
    seen = _tree_state(partial)
    while seen is not None and time.monotonic() < deadline:
        time.sleep(settle)
        now = _tree_state(partial)
        if now == seen:
            break
        seen = now
    garbage = partial.with_name(f"{partial.name[: -len(PARTIAL)]}{GARBAGE}")
    with contextlib.suppress(FileNotFoundError):
        remove_tree(garbage)
        os.rename(partial, garbage)
    remove_tree(garbage)
    remove_tree(partial)


def _tree_state(top: Path) -> Optional[tuple[int, int]]:
    """How many entries are under `top`, and the newest mtime of its directories; None if it is gone."""
    if not os.path.lexists(top):
        return None
    count, newest = 0, 0
    for root, dirs, files in os.walk(top):
        count += len(dirs) + len(files)
        with contextlib.suppress(OSError):
            newest = max(newest, os.lstat(root).st_mtime_ns)
    return count, newest


def commit(layout: Layout, number: int, partial: Path) -> Path:
    """Make `partial` generation `number` and point the stable path at it, atomically."""
    final = layout.path(number)
    os.replace(partial, final)
    switch(layout, number)
    return final


def switch(layout: Layout, number: int) -> None:
    """Point the stable symlink at generation `number` (symlink to a temp name + rename), recording
    when the one it pointed at was retired. Recorded first: a kill between the two leaves a current
    generation marked, which no run recycles while it is current, and the next retirement re-marks."""
    was = layout.current()
    if was is not None and was != number:
        layout.mark_retired(was)
    relative = os.path.relpath(layout.path(number), layout.stable.parent)
    temp = layout.stable.parent / f".{layout.stable.name}.switch"
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    os.symlink(relative, temp)
    os.replace(temp, layout.stable)
    layout.clear_retired(number)


def previous(layout: Layout) -> int:
    """The generation `rollback` switches to: the newest one older than the current one."""
    current, complete = layout.current(), layout.generations()
    older = [g for g in complete if current is None or g < current]
    newer = [g for g in complete if current is not None and g > current]
    if not older and newer:  # a second --rollback: two generations are kept, and this is the older one
        raise InputError(
            layout.stable,
            f"no earlier generation to roll back to: it points at generation {current}, "
            f"rolled back from {newer[-1]} already, and only the one before the current is kept",
            "`make env` goes forward to the lock again; for an older lock, check it out and run `make env`",
        )
    if not older:
        raise InputError(
            layout.stable,
            "no earlier generation to roll back to (there is none after the first install, "
            "and a change that failed while installing uses up the retired one)",
            "check out the lock you want back and run `make env`",
        )
    return older[-1]


def rollback(layout: Layout) -> int:
    """Switch back to the newest generation older than the current one."""
    number = previous(layout)
    switch(layout, number)
    return number


def collect_garbage(
    layout: Layout, keep: Iterable[Optional[int]], grace_s: float = 0.0, now: Optional[float] = None
) -> list[int]:
    """Delete every complete generation but `keep` (the new current one and the one it replaced) and
    those retired less than `grace_s` ago. One retired with no record (an older bootstrap's) is
    recorded as retired now, and kept for the grace period from here."""
    kept = {g for g in keep if g is not None} | {layout.current()}
    doomed = []
    for number in (g for g in layout.generations() if g not in kept):
        if layout.expired(number, grace_s, now):
            doomed.append(number)
        elif layout.retired_at(number) is None:
            layout.mark_retired(number, now)
    for number in doomed:
        _delete(layout, layout.path(number))
    _forget_gone(layout)
    return doomed


def _forget_gone(layout: Layout) -> None:
    """Remove the retirement records of generations that are gone (deleted, or recycled into another)."""
    complete = set(layout.generations())
    for record in layout.gens_dir.glob(f"*{RETIRED}"):
        number = record.name[: -len(RETIRED)]
        if not (number.isdigit() and int(number) in complete):
            with contextlib.suppress(FileNotFoundError):
                record.unlink()


def _delete(layout: Layout, path: Path) -> None:
    """Rename to `.garbage` first: a kill midway leaves what no run takes for complete."""
    garbage = layout.gens_dir / f"{path.name}{GARBAGE}"
    remove_tree(garbage)  # left by an earlier kill, if any
    os.rename(path, garbage)
    remove_tree(garbage)
