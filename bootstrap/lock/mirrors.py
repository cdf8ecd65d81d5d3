"""`--mirror CANONICAL=URL`: serve a channel's data from an HTTP(S) mirror (py-rattler's mirror
middleware) or a local directory (sparse repodata bound to the canonical channel); the lock keeps the
canonical URLs and records which channels a mirror served, never where (`lock_record`).
Docs: docs/lock.md, "Mirrors and credentials".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import unquote, urlsplit

from bootstrap.errors import InputError
from bootstrap.lock.spec import canonical_channel
from bootstrap.urls import scrub_argument, scrub_credentials


@dataclass(frozen=True)
class Mirror:
    canonical: str
    target: str  # an http(s) URL, or an absolute directory
    given: str = ""  # the target as the user wrote it; messages show it for local directories

    @classmethod
    def parse(cls, text: str, base: Optional[Path] = None) -> Mirror:
        """`conda-forge=http://mirror/cf`, `https://conda.anaconda.org/conda-forge=../snapshot/conda-forge`."""
        canonical, sep, target = (part.strip() for part in text.partition("="))
        if not sep or not canonical or not target:
            raise InputError(
                "--mirror",
                f"'{scrub_argument(text)}' is not CANONICAL=URL",
                "e.g. --mirror conda-forge=http://mirror.internal/conda-forge",
            )
        given = target
        parts = urlsplit(target) if "://" in target else None
        if parts is not None and (parts.query or parts.fragment or target.endswith(("?", "#"))):
            # Package paths are appended to the mirror's: `.../conda-forge?token=x/linux-64/...` fetches nothing.
            # Scrubbed whole, then cut: an unencoded `#` or `?` in a password splits it where urlsplit looks.
            shown = re.split(r"[?#]", scrub_argument(target), maxsplit=1)[0]  # a query may hold a token too
            raise InputError(
                f"--mirror {canonical}={shown}?...",
                "a mirror URL cannot carry a query string or fragment: package paths are appended to it",
                "put a token in the path (https://host/t/TOKEN/conda-forge) or as user:password@host "
                "(a `#` or `?` in a password written %23 or %3F)",
            )
        scheme = target.partition("://")[0] if "://" in target else ""
        if scheme not in ("", "http", "https", "file"):
            raise InputError(
                f"--mirror {canonical}={scrub_argument(target)}",
                f"'{scheme}' is not a scheme rattler fetches from",
                "give an http(s) URL, a file:// URL or a directory",
            )
        if not scheme or scheme == "file":
            # `~` too: no shell expands it after `conda-forge=` (nor in make's ENV_ARGS)
            path = Path(unquote(urlsplit(target).path)) if target.startswith("file://") else Path(target).expanduser()
            if not path.is_absolute() and base is not None:
                path = base / path
            if not scheme and _host_like(target) and not path.exists():
                # `bob:pw@host/cf`, `mirror.internal/t/TOKEN/cf`: read as a directory, its secrets would
                # end up in the "not found" error, which only scrubs what has a scheme
                raise InputError(
                    f"--mirror {canonical}={scrub_argument(target)}",
                    "looks like a URL without its scheme, and is no directory",
                    "put https:// in front of it (or ./ in front of a directory)",
                )
            target = str(path.resolve())
        return cls(canonical_channel(canonical), target.rstrip("/"), given)

    @property
    def local_dir(self) -> Optional[Path]:
        return None if "://" in self.target else Path(self.target)

    def public(self) -> str:
        """`canonical=target` with any user:password or token removed, safe to show in a message."""
        if self.local_dir is not None:
            # As written on the command line (often relative): the words the user knows it by.
            return f"{self.canonical}={self.given or self.local_dir.name}"
        return f"{self.canonical}={scrub_credentials(self.target)}"


def _host_like(target: str) -> bool:
    """Whether a target's first segment reads as `user@host`, `host.domain` or `host:port`."""
    first = target.split("/", 1)[0]
    return "@" in first or ":" in first or "." in first.strip(".")


def parse_mirrors(texts: Sequence[str], base: Optional[Path] = None) -> tuple[Mirror, ...]:
    """Every `--mirror` given, each channel mirrored once (a second one would be ignored unseen)."""
    mirrors = tuple(Mirror.parse(text, base) for text in texts)
    for index, mirror in enumerate(mirrors):
        if any(other.canonical == mirror.canonical for other in mirrors[:index]):
            raise InputError(
                "--mirror", f"{scrub_argument(mirror.canonical)} is mirrored twice", "give one --mirror per channel"
            )
    return mirrors


def lock_record(mirrors: Sequence[Mirror]) -> str:
    """What a lock records of the mirrors it was solved through: the canonical channels they served.

    Where a mirror was is the locking machine's business: a directory on one developer's disk or an
    internal host, which a committed lock would carry to everyone who clones it, and which would make
    two teammates' relocks of the same inputs differ by who ran them. Nothing reads it back. That a
    channel came through a mirror is worth keeping: a mirror can lag its channel, which explains a
    lock that misses the channel's newest builds."""
    return " ".join(scrub_credentials(mirror.canonical) for mirror in mirrors)


def mirror_for(channel_url: str, mirrors: Sequence[Mirror]) -> Optional[Mirror]:
    for mirror in mirrors:
        if mirror.canonical == channel_url:
            return mirror
    return None
