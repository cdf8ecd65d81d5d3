"""Credentials in URLs: `user:password@` and anaconda.org's `/t/TOKEN/` path segment.

Used but never shown or written: every error message, log line, lock and
export passes URLs through `scrub_credentials` first.
"""

from __future__ import annotations

import re

# Up to the authority's last `@`: a password may hold an unencoded `@`, `#`, `?` or `:`
# (`bob:p@ss#1@host`), and URL parsers, rattler's and uv's too, still read it as the password.
# A scheme is a short word: bounded, so a long run of letters without `://` is not scanned once per
# starting position (a 100 KB value would take minutes).
_SCHEME = r"[a-z][a-z0-9+.-]{0,31}://"
_USERINFO = re.compile(rf"(?P<scheme>{_SCHEME})[^/\s]*@", re.IGNORECASE)
# Anywhere in the path, not only first: a mirror may serve an anaconda.org-style channel under
# its own prefix (`https://host/api/conda/t/TOKEN/conda-forge`).
_TOKEN = re.compile(rf"(?P<before>{_SCHEME}\S*?)/t/(?!<TOKEN>)[^/\s'\"]+", re.IGNORECASE)
REDACTED_TOKEN = "/t/<TOKEN>"


def scrub_credentials(text: str) -> str:
    """Every URL in `text` without `user:password@`, its `/t/TOKEN` as `/t/<TOKEN>` (as conda shows it)."""
    if "://" not in text:
        return text
    text = _USERINFO.sub(r"\g<scheme>", text) if "@" in text else text
    while "/t/" in text:  # one token per URL and pass: a URL may hold two `/t/` segments
        scrubbed = _TOKEN.sub(rf"\g<before>{REDACTED_TOKEN}", text)
        if scrubbed == text:
            return text
        text = scrubbed
    return text


def has_credentials(url: str) -> bool:
    return scrub_credentials(url) != url


def has_query(url: str) -> bool:
    """Whether `url` has a query or fragment (`?token=...`, `#...`): where a signed URL or an index
    keeps its token, and never part of a package file's URL."""
    return "?" in url or "#" in url


def plain_url(url: str) -> str:
    """`url` as a message may show it: without credentials, and cut before any query or fragment."""
    return re.split(r"[?#]", scrub_argument(url), maxsplit=1)[0]


_LOOSE_DELIMITERS = re.compile(r"([\s=/'\"])")
_LOOSE_TOKEN = re.compile(r"/t/(?!<TOKEN>)[^/\s'\"]+")


def scrub_argument(text: str) -> str:
    """A command-line value (`--mirror C=URL`, `--index NAME=URL`) as an error may show it: like
    `scrub_credentials`, and for what is no well-formed URL (`https:bob:pw@host`, `bob:pw@host/t/TK/cf`,
    the very input a refusal is about) every `...@` and `/t/...` segment dropped too."""
    parts = _LOOSE_DELIMITERS.split(scrub_credentials(text))  # each piece up to its last `@` dropped, in one pass
    return _LOOSE_TOKEN.sub(REDACTED_TOKEN, "".join(part.rpartition("@")[2] for part in parts))
