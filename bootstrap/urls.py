"""Credentials in URLs: `user:password@` and anaconda.org's `/t/TOKEN/` path segment.

Used but never shown or written: every error message, log line, lock and
export passes URLs through `scrub_credentials` first.
"""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.IGNORECASE)
_TOKEN = re.compile(r"(?P<host>[a-z][a-z0-9+.-]*://[^/\s]+)/t/[^/\s]+", re.IGNORECASE)
REDACTED_TOKEN = "/t/<TOKEN>"


def scrub_credentials(text: str) -> str:
    """Every URL in `text` without `user:password@`, its `/t/TOKEN` as `/t/<TOKEN>` (as conda shows it)."""
    return _TOKEN.sub(rf"\g<host>{REDACTED_TOKEN}", _USERINFO.sub(r"\g<scheme>", text))


def has_credentials(url: str) -> bool:
    return scrub_credentials(url) != url
