"""The pip part of a change: uv removes and installs exactly the planned wheels.

Hash-checked, no resolution, no network: uv installs the wheels bootstrap
fetched and checked into its store (`fetch`), then each new distribution is
rewritten for the stable path and the lock (`_finish_wheel`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Mapping, Sequence

from bootstrap.errors import IntegrityError, ToolError
from bootstrap.fsutil import overwrite_unshared, remove_tree
from bootstrap.install import wheelstore
from bootstrap.install.fetch import forget_verified
from bootstrap.lock.lockfile import LockedPackage
from bootstrap.lock.pip import PipOptions, uv_binary
from bootstrap.prefix import InstalledPip, python_executable, site_packages
from bootstrap.runner import Completed, run
from bootstrap.urls import scrub_credentials


def remove(dists: Sequence[InstalledPip], partial: Path, stable: Path, held: Sequence[int] = ()) -> list[str]:
    """uv uninstalls `dists` from `partial`; returns notes on those whose metadata alone could be
    removed (`_drop_unlisted`). `stable` is the path errors name; `held`: see `install`."""
    notes = _drop_unlisted(dists, partial)
    names = sorted({d.name for d in dists if os.path.lexists(d.dist_info)})
    if names:
        done = _run_uv(
            [uv_binary(PipOptions()), "pip", "uninstall", "--python", str(python_executable(partial)), *names],
            timeout=600,
            held=held,
        )
        if done.returncode != 0:
            raise _uv_failed("uninstall", _uv_message(done, partial), stable)
    return notes


# `linkmode` names -> uv's --link-mode
UV_LINK_MODES = {"reflink": "clone", "hardlink": "hardlink", "copy": "copy"}


def install(
    entries: Sequence[LockedPackage],
    partial: Path,
    stable: Path,
    wheels: Mapping[str, Path],
    cache: wheelstore.Checking,
    held: Sequence[int] = (),
    link: str = "copy",
) -> list[str]:
    """uv installs `entries` into `partial` from their checked local `wheels` (name -> file), so it
    never downloads mid-install; then each new distribution gets the lock's URL and the stable
    path (`_finish_wheel`). uv unpacks them in its cache in the package cache `cache.cache_dir` and
    links the files from there by `link` (`linkmode.choose`), only from unpacked wheels as they
    were sealed: those `cache.edited` finds edited are unpacked again first. Returns notes for the
    user.

    uv inherits `held`, the descriptor of the env's lock. uv runs in a session of its own, so
    a SIGKILL of bootstrap, or of its process group (a CI job cancelled, `timeout -s KILL`),
    leaves it writing into `partial`; holding the lock, it keeps the next run waiting until it
    is done, rather than have that run build a generation of the same number for it to write into."""
    if not entries:
        return []
    # Whatever the mode: a wheel edited through an earlier env's hard link must not be copied either.
    cache_dir = cache.cache_dir
    notes = _drop_edited(cache_dir, cache.edited.result(), held)
    checked = wheelstore.of(cache_dir, entries)  # what is left of them: as sealed, or found intact
    local = {wheels[e.name].as_uri(): e for e in entries}
    requirements = partial / ".bootstrap-requirements.txt"
    requirements.write_text(
        "".join(f"{e.name} @ {uri} --hash=sha256:{e.sha256}\n" for uri, e in local.items()), encoding="utf-8"
    )
    try:
        done = _run_uv(
            [
                uv_binary(PipOptions()),
                "pip",
                "install",
                "--python",
                str(python_executable(partial)),
                "--cache-dir",
                str(wheelstore.uv_cache(cache_dir)),
                "--no-deps",
                "--require-hashes",
                "--link-mode",
                UV_LINK_MODES[link],
                "--no-index",
                "-r",
                str(requirements),
            ],
            timeout=3600,
            held=held,
        )
    finally:
        requirements.unlink()
    if done.returncode != 0:
        # if a stored wheel changed unseen, the next run's hashing finds it
        forget_verified([wheels[e.name] for e in entries])
        raise _pip_failure(_uv_message(done, partial), stable)
    wheelstore.seal_all(cache_dir, checked)
    for dist_info, entry in _installed_from(partial, local):
        _finish_wheel(dist_info, entry, partial, stable)
    return notes


def _drop_edited(cache_dir: Path, edited: Sequence[tuple[Path, str]], held: Sequence[int]) -> list[str]:
    """`uv cache clean NAME` for each unpacked wheel edited since it was sealed: uv unpacks it again
    from the checked wheel rather than link the edited files into another env."""
    names = sorted({name for _, name in edited if name})
    if not names:
        return []
    wheelstore.clean(cache_dir, names, held)
    return [f"unpacked files of the wheels {', '.join(names)} in the package cache were edited: unpacked again"]


def _drop_unlisted(dists: Sequence[InstalledPip], partial: Path) -> list[str]:
    """Remove the metadata of each distribution in `dists` that lists no files to uninstall (a
    .dist-info without RECORD, an .egg-info without top_level.txt, a distutils .egg-info file, as
    hand or legacy installs leave them): uv refuses to uninstall those, which would block every
    later change of the env. Files such a distribution installed, listed nowhere, stay."""
    notes = []
    for dist in dists:
        metadata = dist.dist_info
        if (metadata / ("RECORD" if metadata.name.endswith(".dist-info") else "top_level.txt")).is_file():
            continue  # uv's to uninstall
        if metadata.is_dir():
            remove_tree(metadata)
        else:
            metadata.unlink()
        notes.append(
            f"{dist.name} {dist.version}: only its metadata was removed ({metadata.relative_to(partial)}), "
            "which lists no files to uninstall; any files it installed are still there"
        )
    return notes


def _run_uv(argv: Sequence[str], timeout: float, held: Sequence[int]) -> Completed:
    # From /: uv names paths in full, not relative to our working directory (so `_uv_message` can
    # name them relative to the env), and reads no uv.toml of whatever project we are in.
    return run(argv, timeout=timeout, cwd="/", pass_fds=held)


_UV_PROGRESS = ("Using Python ", "Resolved ", "Prepared ", "Installed ", "Uninstalled ", "Audited ", "+ ", "- ", "~ ")


def _uv_message(done: Completed, partial: Path) -> str:
    """uv's stderr on one line: its errors and what caused them, without progress lines, with paths
    in the generation being built (gone once the run failed) relative to the env's top."""
    text = scrub_credentials(done.stderr).replace(f"{partial}{os.sep}", "").replace(str(partial), "the next generation")
    lines = [line.strip() for line in text.splitlines()]
    kept = [
        line[len("error: ") :] if line.startswith("error: ") else line
        for line in lines
        if line and not line.startswith(_UV_PROGRESS)
    ]
    return " ".join(kept) or f"exit status {done.returncode}, no message"


def _uv_failed(verb: str, message: str, stable: Path) -> ToolError:
    """uv's failure: it ran in the next generation of the env at `stable`, which the caller discards;
    the env itself was never touched (or, on a first create, never made)."""
    outcome = f"{stable} was left as it was" if os.path.lexists(stable) else f"{stable} was not created"
    return ToolError(f"uv pip {verb} failed in the next generation of {stable} (discarded): {message}; {outcome}")


def _pip_failure(message: str, stable: Path) -> Exception:
    if "hash" in message.lower() and "mismatch" in message.lower():
        return IntegrityError(
            "a wheel does not match the lock's sha256 "
            "(its copy in the package cache damaged on disk?); "
            f"nothing was installed, and the next run hashes the cached wheels again: {message}"
        )
    return _uv_failed("install", message, stable)


def _installed_from(partial: Path, local: Mapping[str, LockedPackage]) -> list[tuple[Path, LockedPackage]]:
    """(dist-info, lock entry) of each distribution uv just installed: its direct_url.json names
    one of the store's `file://` URLs in `local`. Older ones were finished when they came in."""
    site = site_packages(partial)
    found = []
    for direct_url in site.glob("*.dist-info/direct_url.json") if site is not None else ():
        try:
            entry = local.get(json.loads(direct_url.read_text(encoding="utf-8")).get("url"))
        except ValueError:
            continue
        if entry is not None:
            found.append((direct_url.parent, entry))
    return found


def _finish_wheel(dist_info: Path, entry: LockedPackage, partial: Path, stable: Path) -> None:
    """Rewrite what uv wrote for the generation and the store, for the stable path and the lock.

    * direct_url.json (PEP 610) names the store's `file://` URL: the lock's URL instead, byte
      for byte what uv writes when it fetches that URL itself, so that `export` and `verify`
      see where the wheel comes from.
    * Entry-point shebangs name the generation (`#!<gen>/bin/python`, or for long paths uv's
      `#!/bin/sh` + `exec '<gen>/bin/python'` header): the stable path instead.

    RECORD follows the new bytes, as pip's does when it writes the shebang at install time, so
    `verify --deep` agrees. Only RECORD paths that leave site-packages (`../`) can be scripts,
    so only those are resolved: a CUDA wheel's RECORD lists thousands of files."""
    site = dist_info.parent
    bin_dir = partial.resolve() / "bin"
    old, new = f"{partial}/bin/".encode(), f"{stable}/bin/".encode()
    direct_url = f"{dist_info.name}/direct_url.json"
    record = dist_info / "RECORD"
    lines = record.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        path = line.partition(",")[0]
        if path != direct_url and not path.startswith("../"):
            continue
        target = site / path
        if path == direct_url:
            data = json.dumps({"url": entry.url, "archive_info": {}}, separators=(",", ":")).encode()
        elif target.resolve().parent == bin_dir and target.is_file():
            data = target.read_bytes()
            head, body = data[:1024], data[1024:]
            if not data.startswith(b"#!") or old not in head:
                continue
            data = head.replace(old, new) + body
        else:
            continue
        overwrite_unshared(target, data)
        lines[index] = _record_line(path, data)
    overwrite_unshared(record, ("\n".join(lines) + "\n").encode("utf-8"))


def _record_line(relative: str, data: bytes) -> str:
    """A RECORD line: path, urlsafe-base64 sha256 without padding, size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{relative},sha256={digest},{len(data)}"
