"""Credentials in URLs: `user:password@` and anaconda.org's `/t/TOKEN/` path segment.

Used but never shown or written: every error message, log line, lock and
export passes URLs through `scrub_credentials` first.
"""

from __future__ import annotations

import re

# Up to the authority's last `@`: a password may hold an unencoded `@`, `#`, `?` or `:`
# (`bob:p@ss#1@host`), and URL parsers, rattler's and uv's too, still read it as the password.
_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/\s]*@", re.IGNORECASE)
# Anywhere in the path, not only first: a mirror may serve an anaconda.org-style channel under
# its own prefix (`https://host/api/conda/t/TOKEN/conda-forge`).
_TOKEN = re.compile(r"(?P<before>[a-z][a-z0-9+.-]*://\S*?)/t/(?!<TOKEN>)[^/\s'\"]+", re.IGNORECASE)
REDACTED_TOKEN = "/t/<TOKEN>"


def scrub_credentials(text: str) -> str:
    """Every URL in `text` without `user:password@`, its `/t/TOKEN` as `/t/<TOKEN>` (as conda shows it)."""
    text = _USERINFO.sub(r"\g<scheme>", text)
    while True:  # one token per URL and pass: a URL may hold two `/t/` segments
        scrubbed = _TOKEN.sub(rf"\g<before>{REDACTED_TOKEN}", text)
        if scrubbed == text:
            return text
        text = scrubbed


def has_credentials(url: str) -> bool:
    return scrub_credentials(url) != url


_LOOSE_USERINFO = re.compile(r"[^\s=/'\"]*@")
_LOOSE_TOKEN = re.compile(r"/t/(?!<TOKEN>)[^/\s'\"]+")


def scrub_argument(text: str) -> str:
    """A command-line value (`--mirror C=URL`, `--index NAME=URL`) as an error may show it: like
    `scrub_credentials`, and for what is no well-formed URL (`https:bob:pw@host`, `bob:pw@host/t/TK/cf`,
    the very input a refusal is about) every `...@` and `/t/...` segment dropped too."""
    return _LOOSE_TOKEN.sub(REDACTED_TOKEN, _LOOSE_USERINFO.sub("", scrub_credentials(text)))
