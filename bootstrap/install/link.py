"""The conda part of a change: rattler links the locked packages into the generation being built, each
from a sealed extracted copy in the cache (`store.sealed_copies`) or from its checked archive.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional, Sequence, Union
from urllib.parse import urlsplit

from bootstrap import aio
from bootstrap.errors import InputError, ToolError
from bootstrap.fsutil import atomic_write_text
from bootstrap.install import store
from bootstrap.install.fetch import archive_path
from bootstrap.lock.lockfile import LockedPackage

if TYPE_CHECKING:
    import rattler

Fetch = Callable[[Sequence[LockedPackage]], Mapping[str, Path]]


@dataclass(frozen=True)
class LinkTarget:
    partial: Path  # the generation being built
    stable: Path  # the path users activate, which the linked files name
    platform: str
    cache_dir: Path
    show_progress: bool = False
    mode: str = "copy"  # reflink, hardlink or copy (`linkmode.choose`)


class _Vanished(Exception):
    """A sealed copy found a moment ago is gone (another env's run removed it)."""


def link_conda(
    conda: Sequence[LockedPackage],
    to_link: Sequence[LockedPackage],
    archives: Mapping[str, Path],
    target: LinkTarget,
    fetch: Fetch,
    full_validation: bool = False,
) -> None:
    """Make `target.partial` hold exactly `conda`. `to_link` come from their checked `archives`, or
    else from their sealed copies; should one of those vanish before rattler is done, the archives
    of all of them are fetched and checked (`fetch`) and rattler runs again, which converges.
    With `full_validation` (another run is extracting, so copies that failed their seal were left
    to it), rattler re-hashes every copy it links from and extracts again what does not match."""
    from_archives = dict(archives)
    for attempt in (1, 2):
        try:
            _rattler_install(conda, to_link, from_archives, target, full_validation)
            break
        except Exception as exc:  # noqa: BLE001 - whatever rattler failed with, a vanished copy may be the cause
            from_copies = [e for e in to_link if e.name not in from_archives]
            if attempt == 1 and from_copies:
                from_archives.update(fetch(from_copies))
                continue
            raise _link_error(exc, target) from None
    extracted = [e for e in to_link if e.name in from_archives]
    # Hard links just made from the sealed copies changed their inodes' ctimes, not their files.
    linked = [e for e in to_link if e.name not in from_archives] if target.mode == "hardlink" else []
    store.seal(target.cache_dir, extracted, linked)
    _restore_canonical_urls(target.partial, extracted)


def clobbered(target: LinkTarget) -> list[str]:
    """A note when two packages ship one path: rattler keeps one copy and moves the others to
    `__clobbers__/<package>/<path>` (conda warns of the same as a ClobberWarning)."""
    moved = target.partial / CLOBBERS
    if not moved.is_dir():
        return []
    found = sorted(str(p.relative_to(moved)) for p in moved.rglob("*") if not p.is_dir())
    shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    return [
        f"{len(found)} file(s) are shipped by more than one package: the env keeps one copy of each path, the "
        f"others are in {target.stable / CLOBBERS} ({shown})"
    ]


CLOBBERS = "__clobbers__"  # rattler's name


def _link_error(exc: Exception, target: LinkTarget) -> Exception:
    message = " ".join(str(exc).replace(str(target.partial), str(target.stable)).split())  # rattler's causes, one line
    if "cannot be longer than the placeholder prefix" in message:  # rattler's words
        return InputError(
            f"--prefix {target.stable}",
            f"is {len(str(target.stable).encode())} bytes long, "
            f"longer than a package's binary files leave room for: {message}",
            "choose a shorter --prefix; conda-forge's packages have room for 255 bytes",
        )
    return ToolError(f"linking into {target.stable} failed: {message}")


def _rattler_install(
    conda: Sequence[LockedPackage],
    to_link: Sequence[LockedPackage],
    archives: Mapping[str, Path],
    target: LinkTarget,
    full_validation: bool,
) -> None:
    """rattler.install of `conda` into `target.partial`. A record is read from the archive of a package
    to extract, else from its extracted copy's index.json (cheaper than the archive or the conda-meta
    record, whose file list a CUDA package makes long), else from the record the generation holds."""

    import rattler

    pkgs = target.cache_dir / "pkgs"
    linking = {e.name for e in to_link}

    async def record(entry: LockedPackage) -> Union[rattler.RepoDataRecord, rattler.PrefixRecord]:
        if entry.name in archives:
            return await rattler.RepoDataRecord.from_package_archive(archives[entry.name])
        found = _from_copy(entry, target.cache_dir)
        if found is not None:
            return found
        if entry.name in linking:
            raise _Vanished(entry.describe())
        return rattler.PrefixRecord.from_path(target.partial / "conda-meta" / f"{entry.stem}.json")

    async def install() -> None:
        await rattler.install(
            [await record(e) for e in conda],
            target.partial,
            cache_dir=pkgs,
            platform=rattler.Subdir(target.platform),
            execute_link_scripts=False,
            show_progress=target.show_progress,
            alternative_target_prefix=target.stable,
            config=link_config((e.url for e in conda), target.mode),
            package_cache=rattler.PackageCache.new_layered(
                [pkgs],
                validation_mode=rattler.ValidationMode.full() if full_validation else rattler.ValidationMode.skip(),
            ),
        )

    aio.run(install())


def _from_copy(entry: LockedPackage, cache_dir: Path) -> Optional[rattler.RepoDataRecord]:
    import rattler

    index = store.extracted_dir(cache_dir, entry) / "info" / "index.json"
    if not entry.md5 or not index.is_file():
        return None
    archive = archive_path(cache_dir, entry)
    package = rattler.PackageRecord.from_index_json(
        index, size=archive.stat().st_size if archive.is_file() else None, sha256=entry.sha256, md5=entry.md5
    )
    return rattler.RepoDataRecord(package, entry.filename, entry.url, _channel_of(entry.url))


def link_config(conda_urls: Iterable[str], mode: str = "copy") -> rattler.Config:
    """rattler's config for linking the packages at `conda_urls` by `mode` (`linkmode.choose`).

    Each mode allows rattler that link alone, so a file it cannot link that way is copied,
    never linked some other way: a reflink shares no writes, a hard link shares the inode with
    the cache (whose seal then notices an edit made through it, `store.seal_holds`), a copy
    shares nothing.

    And a client that never goes online: what rattler links was fetched and checked by
    bootstrap (through its mirrors, with its speed floor) or is a sealed copy in the cache.
    So every host of the lock is sent to a `file://` URL, which rattler's client refuses
    before any request, and a client that never connects needs no TLS set up. Where
    rattler's config cannot name a host, it gets the usual client, verification on."""
    import rattler

    copies = (
        f"allow-hard-links = {str(mode == 'hardlink').lower()}\nallow-ref-links = {str(mode == 'reflink').lower()}\n"
    )
    origins = sorted({origin for origin in map(_origin, conda_urls) if origin is not None})
    offline = "".join(f'{_toml_string(origin)} = ["file:///dev/null/bootstrap-links-offline"]\n' for origin in origins)
    try:
        return rattler.Config.from_toml(f"{copies}tls-no-verify = true\n[mirrors]\n{offline}")
    except ValueError:  # a host its URL parser refuses (so it could not download from there either)
        return rattler.Config.from_toml(copies)


def _origin(url: str) -> Optional[str]:
    """`https://user:token@Host:8443/conda-forge/linux-64/x.conda` -> `https://Host:8443`; None for a
    `file:` URL (rattler reads those itself) or one without a host. Credentials are left out: the
    HTTP client moves them into a header before rattler's mirror table sees the URL."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}" if parts.scheme != "file" and host else None


def _toml_string(text: str) -> str:
    """`text` as a TOML basic string: `"`, `\\` and control characters escaped, the rest as it is."""
    return '"' + "".join(f"\\u{ord(c):04x}" if c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7F else c for c in text) + '"'


def _restore_canonical_urls(prefix: Path, linked: Sequence[LockedPackage]) -> None:
    """rattler recorded our verified local archive as the source; record the lock's URL instead."""
    for entry in linked:
        path = prefix / "conda-meta" / f"{entry.name}-{entry.version}-{entry.build}.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        data["url"], data["channel"], data["fn"] = entry.url, _channel_of(entry.url), entry.filename
        # Compact: with `indent`, json falls back to its pure-Python encoder.
        atomic_write_text(path, json.dumps(data) + "\n", fsync=False)


def _channel_of(url: str) -> str:
    """`https://host/conda-forge/linux-64/x.conda` -> `https://host/conda-forge`."""
    return url.rsplit("/", 2)[0]
