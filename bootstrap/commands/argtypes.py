"""argparse `type=` converters the verbs share: a bad value is a usage error naming its option."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from bootstrap.platforms import KNOWN_PLATFORMS
from bootstrap.urls import scrub_argument

_SUBDIR = re.compile(r"[a-z0-9]+-[a-z0-9_]+")  # conda's `<os>-<arch>`: linux-64, osx-arm64, freebsd13-amd64


def nonempty(text: str) -> str:
    """A path kept as written (a name template, or '-'); an empty one would silently mean the current
    directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (give a file or directory)")
    return text


def path(text: str) -> Path:
    return Path(nonempty(text))


def directory(text: str) -> Path:
    """An existing directory (`--root`)."""
    found = path(text)
    if not found.is_dir():
        raise argparse.ArgumentTypeError(f"'{text}' is not a directory")
    return found


def hours(text: str) -> float:
    """A duration in hours, 0 or more (`--recycle-after`)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"'{scrub_argument(text)}' is not a number of hours (0 or more)")
    return value


def platform(text: str) -> str:
    if not _SUBDIR.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"'{scrub_argument(text)}' is not a conda platform ({', '.join(KNOWN_PLATFORMS)}, ...)"
        )
    return text


def find_links(text: str) -> str:
    """`--pip-find-links`: a directory of wheels, or an http(s)/file URL of an index page."""
    scheme = text.partition("://")[0] if "://" in text else ""
    if scheme in ("http", "https", "file"):
        return text
    if not scheme and text.strip() and Path(text).is_dir():
        return os.path.abspath(text)  # uv runs in a temp directory, where a relative path finds nothing

    raise argparse.ArgumentTypeError(f"'{scrub_argument(text)}' is neither a directory nor an http(s) or file URL")
