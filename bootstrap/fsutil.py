"""File-system helpers with the reliability rules of docs/design.md."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence, Union

from bootstrap.errors import BootstrapError, BusyError, DiskFullError, InputError
from bootstrap.project import refuse_input

PathLike = Union[str, "os.PathLike[str]"]
MIB = 1 << 20  # bytes in a MiB: every *_mib figure (NVML, statvfs, /dev/shm, bench) divides by this one


def atomic_write_text(path: PathLike, text: str, fsync: bool = True, mtime_ns: Optional[int] = None) -> None:
    """Write `text` to `path` so that readers see the old or the new file, never half."""
    atomic_write_bytes(path, text.encode("utf-8"), fsync, mtime_ns)


def write_target(path: PathLike) -> Path:
    """The file a write to `path` replaces: a symlink's final target (a lock or an environment.yml
    linked from elsewhere stays linked and gets the new text), else `path` itself."""
    if os.path.islink(path) and not is_special(path):  # /dev/stdout's target is no path, only a descriptor
        return Path(os.path.realpath(path))
    return Path(path)


def is_special(path: PathLike) -> bool:
    """True for an existing file that is neither a regular file nor a directory (a FIFO, a
    terminal, /dev/stdout): written to directly, since it cannot be replaced by a rename."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


# The most bytes read of a spec, a lock or a facts file: the committed locks are about 100 KB,
# so no real input comes near, and an endless file (/dev/zero, a FIFO) cannot fill memory.
MAX_INPUT_BYTES = 16 * MIB


def read_input_text(path: PathLike, fix_missing: str = "check the path or create it") -> str:
    """The UTF-8 text of an input file, or an InputError naming it: a missing file, a directory,
    anything but a regular file (a FIFO, /dev/zero, a terminal), more than MAX_INPUT_BYTES."""
    try:
        # O_NONBLOCK: opening a FIFO nobody writes to returns at once instead of waiting for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise InputError(path, "file not found", fix_missing) from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(path, "is a directory, not a file", "name the file")
        if not stat.S_ISREG(mode):
            raise InputError(path, "not a regular file (a FIFO, a device, ...)", "name the file itself")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(
            path,
            f"larger than {MAX_INPUT_BYTES // MIB} MiB, far more than a spec, a lock or a facts file holds",
            "check what wrote it",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # as open() in text mode reads it


def check_output(path: PathLike, flag: str) -> Path:
    """The file an output option (`--save-facts`, `--out`, `--csv`) will write, checked before any
    work is done so a typo costs nothing; creates nothing. A symlink is followed; a FIFO or
    /dev/stdout is accepted (written directly); a project's lock or spec is refused."""
    if str(path) == "":
        raise InputError(flag, "an empty path", "give a file name")
    target = write_target(path)
    if target.is_dir():
        raise InputError(path, "is a directory", f"give {flag} a file name")
    refuse_input(path, flag)
    if is_special(target):
        return target
    parent = target.parent
    if not parent.exists():
        raise InputError(
            path, f"cannot write: directory {parent} does not exist", f"create it or give {flag} another file"
        )
    if not parent.is_dir():
        raise InputError(path, f"cannot write: {parent} is not a directory", f"give {flag} another file")
    if not os.access(parent, os.W_OK):
        raise InputError(
            path, f"cannot write in {parent} (no permission, or a read-only file system)", f"give {flag} another file"
        )
    return target


def check_directory(path: Path, where: str) -> None:
    """A directory to write in (bench's samples, its report): existing, or creatable under a writable
    parent. Creates nothing."""
    if path.exists() and not path.is_dir():
        raise InputError(where, f"{path} is not a directory", "give a directory (it is created if missing)")
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(where, f"cannot create {path}: {probe} is not a directory", "give another directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(
            where, f"cannot write in {probe} (no permission, or a read-only file system)", "give another directory"
        )


def atomic_write_bytes(path: PathLike, data: bytes, fsync: bool = True, mtime_ns: Optional[int] = None) -> None:
    """Write `data` to `path` so that readers see the old or the new file, never half.

    The temp file lives in the same directory so the final `os.replace` is a
    rename on one file system; it is fsynced first (unless `fsync=False`) so a
    crash cannot leave an empty file behind the new name. The new file is a
    new inode with the old one's mode: a hard link to the old file elsewhere
    keeps the old bytes. Skip the fsync for files inside a generation being
    built: its rename is the commit, and the package files beside them are
    not fsynced either. A symlink is written through; a special file (a FIFO,
    /dev/stdout) is written directly, never replaced. `mtime_ns`: the new file's
    mtime (and atime), set before it takes the name.
    """
    target = write_target(path)
    if is_special(target):
        with open(target, "wb") as handle:
            handle.write(data)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        if mtime_ns is not None:
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def overwrite_unshared(path: PathLike, data: bytes) -> None:
    """Write `data` over the file at `path` in place, unless another name links its inode (a hard
    link from a package cache) or it is a symlink: then as a new inode (`atomic_write_bytes`), so
    the other names keep their bytes. Neither is fsynced: for files inside a generation being
    built, which a crash discards whole. In place spares a rename per file, the dearer step."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    except OSError:  # a symlink (ELOOP), or none there
        atomic_write_bytes(path, data, fsync=False)
        return
    with os.fdopen(fd, "wb") as handle:
        if os.fstat(fd).st_nlink == 1:
            handle.write(data)
            handle.truncate()
            return
    atomic_write_bytes(path, data, fsync=False)


def write_together(files: Sequence[tuple[Path, bytes]]) -> None:
    """Every file or none: each is written to a hidden staging file beside its target (an atomic write,
    so a failure leaves nothing half-written), then all are renamed over their targets. A FIFO or
    /dev/stdout is written directly in the second step; a symlink is written through. An OSError
    names the path it was given for, never a staging or temp file."""
    staged: list[tuple[Optional[Path], Path, bytes, Path]] = []
    try:
        for path, data in files:
            target = write_target(path)
            stage = None if is_special(target) else target.with_name(f".{target.name}.{os.getpid()}.staged")
            staged.append((stage, target, data, path))
            if stage is not None:
                with _naming(path):
                    atomic_write_bytes(stage, data)
    except BaseException:
        _unstage(staged)
        raise
    for done, (stage, target, data, path) in enumerate(staged):
        try:
            with _naming(path):
                _put(stage, target, data)
        except BaseException:
            _unstage(staged[done:])
            raise


def _put(stage: Optional[Path], target: Path, data: bytes) -> None:
    """The staged file renamed over `target` with its mode; `data` written directly where there is none."""
    if stage is None:
        atomic_write_bytes(target, data)
        return
    if target.exists():
        os.chmod(stage, stat.S_IMODE(target.stat().st_mode))
    os.replace(stage, target)


def _unstage(staged: Sequence[tuple[Optional[Path], Path, bytes, Path]]) -> None:
    for stage, _, _, _ in staged:
        if stage is not None:
            stage.unlink(missing_ok=True)


@contextlib.contextmanager
def _naming(path: PathLike) -> Iterator[None]:
    """An OSError inside re-raised as the same error about `path`."""
    try:
        yield
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc


def sha256_file(path: PathLike, chunk: int = MIB) -> str:
    """Hex sha256 of a file, read in chunks (`sha256sum FILE`)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


# How engines spell ENOSPC/EDQUOT/EFBIG in their messages: rattler (Rust's io::Error) and uv say
# "No space left on device (os error 28)", Python's OSError "[Errno 28] No space left on device".
_OUT_OF_SPACE = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT), "os error 28", "os error 122")
_TOO_LARGE = (os.strerror(errno.EFBIG), "os error 27")


def out_of_space(exc: BaseException) -> bool:
    """True if `exc`, or an exception it was raised from, says a disk or quota is full, or a file
    reached the file size limit (`ulimit -f`): the same remedy-less end for what was being written."""
    return _says(exc, (errno.ENOSPC, errno.EDQUOT, errno.EFBIG), _OUT_OF_SPACE + _TOO_LARGE)


def _says(exc: BaseException, errnos: tuple[int, ...], texts: tuple[str, ...]) -> bool:
    seen: Optional[BaseException] = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in errnos:
            return True
        if any(text in str(seen) for text in texts):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def free_space(path: PathLike) -> tuple[Path, int]:
    """(mount point, bytes free to this user) of the file system `path` is, or would be, on."""
    existing = Path(os.path.abspath(path))
    while not existing.exists():
        existing = existing.parent
    mount = existing
    while not os.path.ismount(mount):
        mount = mount.parent
    return mount, shutil.disk_usage(existing).free


def space_report(places: Mapping[str, PathLike]) -> str:
    """`/ (env and package cache: 812 MiB free), /tmp (bundle: 3 MiB free)` for {what: path}: each
    file system once, with what lives on it."""
    mounts: dict[Path, tuple[int, list[str]]] = {}  # mount point -> (bytes free, what lives there)
    for what, path in places.items():
        mount, free = free_space(path)
        mounts.setdefault(mount, (free, []))[1].append(what)
    return ", ".join(
        f"{mount} ({' and '.join(whats)}: {free / MIB:.0f} MiB free)" for mount, (free, whats) in mounts.items()
    )


def disk_full(
    doing: str, places: Mapping[str, PathLike], outcome: str, fix: str, cause: Optional[BaseException] = None
) -> DiskFullError:
    """The one line for ENOSPC: `no space left on device while DOING on <space_report(places)>;
    OUTCOME (FIX)`, with the free space as it is now that the caller has removed what it half-wrote.
    When `cause` says EFBIG, the line names the file size limit instead, and how to raise it."""
    if cause is not None and _says(cause, (errno.EFBIG,), _TOO_LARGE):
        return DiskFullError(
            f"a file reached the file size limit ({_file_size_limit()}) while {doing}; {outcome} "
            "(raise the limit, e.g. `ulimit -f unlimited`, and run again)"
        )
    return DiskFullError(f"no space left on device while {doing} on {space_report(places)}; {outcome} ({fix})")


def _file_size_limit() -> str:
    """`ulimit -f: 1048576 bytes`, this process's soft limit; `ulimit -f` alone where it is unknown
    (no `resource` module) or unlimited (a child process hit its own)."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return "ulimit -f"
    return "ulimit -f" if limit == resource.RLIM_INFINITY else f"ulimit -f: {limit} bytes"


def write_failed(
    exc: OSError, path: PathLike, flag: str, outcome: str, directory: Optional[PathLike] = None
) -> BootstrapError:
    """The one line for an output file (`flag`'s) that could not be written: a DiskFullError (with the free
    space of `directory`, default its parent) when a disk or quota is full, else an InputError; both say
    what became of it (`outcome`) and to pick another file."""
    if out_of_space(exc):
        return disk_full(
            f"writing {path}",
            {flag: directory or Path(path).parent},
            outcome,
            f"free space or give {flag} another file",
            cause=exc,
        )
    return InputError(path, f"cannot write: {exc.strerror or exc}; {outcome}", f"give {flag} another file")


def remove_tree(path: PathLike) -> None:
    """`rm -rf path`, also through read-only directories (a package may ship one; a non-root
    user cannot unlink inside it until it is writable). What still cannot go is left for
    the caller's next attempt; a missing `path` is fine."""
    try:
        _rmtree_past_vanished(path)
    except FileNotFoundError:
        return
    except OSError:
        _make_directories_writable(path)
        shutil.rmtree(path, ignore_errors=True)


def _rmtree_past_vanished(path: PathLike) -> None:
    """rmtree, for which an entry that another process removed meanwhile (a writer's temp file) is
    what it was after, and no reason to stop before the rest of the tree."""

    def hook(_function: Callable[..., object], _path: str, error: BaseException) -> None:
        if not isinstance(error, FileNotFoundError):
            raise error

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=hook)  # novermin: only reached on 3.12+, where onerror is deprecated
    else:
        shutil.rmtree(path, onerror=lambda function, where, info: hook(function, where, info[1]))


def _make_directories_writable(top: PathLike) -> None:
    pending = [os.fspath(top)]
    while pending:
        directory = pending.pop()
        with contextlib.suppress(OSError):  # before listing it: it may not even be readable
            os.chmod(directory, stat.S_IMODE(os.lstat(directory).st_mode) | stat.S_IRWXU)
            with os.scandir(directory) as entries:
                pending.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))


def locks_unsupported(exc: OSError) -> bool:
    """flock(2) refused by the file system itself, not by a holder: NFS mounted `nolock` (ENOLCK),
    Lustre without `-o flock` (ENOSYS), some FUSE and SMB mounts (EOPNOTSUPP)."""
    return exc.errno in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)


def flock_held(fd: int) -> bool:
    """An exclusive flock on `fd`, waited for; False, and none taken, on a file system without locks."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        if not locks_unsupported(exc):
            raise
        return False
    return True


@contextlib.contextmanager
def flocked(
    path: Path, notify: Callable[[str], None], waiting: str, shared: bool = False, timeout: float = 3600.0
) -> Iterator[int]:
    """Hold an flock on `path` (created if need be; only read access is needed, so a read-only
    file such as a spec can be locked), exclusive or shared with other shared holders (`flock -s`).
    Held the other way by someone else: say `waiting` through `notify` and wait for it, up to
    `timeout` seconds, then BusyError. Yields the locked file descriptor: a child process that
    inherits it holds the lock too, until both have exited or it is released. On a file system
    without locks, says so through `notify` and goes on unlocked: refusing would leave such a cluster
    (Lustre, NFS mounted nolock) with no way to install at all."""
    import fcntl

    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    with open(os.open(path, os.O_RDONLY | os.O_CREAT, 0o644), "rb") as handle:
        deadline = time.monotonic() + timeout
        told, locked = False, True
        while True:
            try:
                fcntl.flock(handle, mode | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if locks_unsupported(exc):
                    notify(
                        f"note: {path.parent} has no file locks ({exc.strerror}): nothing keeps another "
                        "bootstrap from working there at the same time; run one at a time"
                    )
                    locked = False
                    break
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if not told:
                notify(waiting)
                told = True
            if time.monotonic() > deadline:
                raise BusyError(
                    f"{path}: still held by another bootstrap after {timeout:.0f} s; is one stuck? "
                    "(`fuser` shows the holder)"
                )
            time.sleep(0.2)
        try:
            yield handle.fileno()
        finally:
            if locked:
                fcntl.flock(handle, fcntl.LOCK_UN)
