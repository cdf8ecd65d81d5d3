"""rattler and uv replace a file in a prefix (unlink, create) rather than write into it.

Generations share the inodes of the files they have in common
(bootstrap/install/generations.py), and a change is built in a generation that
shares files with the one in use. That is safe only while every writer
replaces files; these tests pin that down for the two engines, at the level
of one prefix: a hard link taken before the change (a "witness", standing
for the generation in use) must keep its bytes whatever the change does to
the path. If an engine upgrade starts writing in place, they fail here
before an env does.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import rattler

from bootstrap.lock.pip import PipOptions, uv_binary
from tests.fixtures.conda_channel import PLACEHOLDER, PackageSpec, build_channel
from tests.fixtures.wheels import build_wheel

COPIES = "allow-hard-links = false\n"  # bootstrap's link mode (bootstrap/install/link.py)


def witnesses(root: Path, relatives: list[str], where: Path) -> dict[str, Path]:
    """A hard link to each file, outside `root`: what a sharing generation would see."""
    where.mkdir()
    out = {}
    for relative in relatives:
        out[relative] = where / relative.replace("/", "_")
        os.link(root / relative, out[relative])
    return out


def conda_package(name: str, version: str, files: dict) -> PackageSpec:
    return PackageSpec(
        name,
        version,
        noarch="generic",
        files=files,
        prefix_placeholder_files={p for p, text in files.items() if PLACEHOLDER in text},
    )


def test_rattler_replaces_files_on_update_and_clobber(tmp_path: Path) -> None:
    channel = build_channel(
        tmp_path / "channel",
        [
            conda_package("aaa", "1.0", {"share/x": "a1 x\n", "share/p": f"a1 {PLACEHOLDER}\n"}),
            conda_package("aaa", "2.0", {"share/x": "a2 x\n", "share/p": f"a2 {PLACEHOLDER}\n"}),
            conda_package("bbb", "1.0", {"share/x": "b x\n"}),  # clobbers aaa's share/x
        ],
    )
    prefix = tmp_path / "prefix"

    def install(*specs: str) -> None:
        records = asyncio.run(
            rattler.solve(
                sources=[rattler.Channel(channel.as_uri())],
                specs=[rattler.MatchSpec(s) for s in specs],
                platforms=["linux-64", "noarch"],
                virtual_packages=[],
            )
        )
        installed = [rattler.PrefixRecord.from_path(p) for p in (prefix / "conda-meta").glob("*.json")] or None
        asyncio.run(
            rattler.install(
                records,
                prefix,
                cache_dir=tmp_path / "cache",
                installed_packages=installed,
                show_progress=False,
                execute_link_scripts=False,
                config=rattler.Config.from_toml(COPIES),
            )
        )

    install("aaa 1.0")
    before = {r: (prefix / r).read_text() for r in ("share/x", "share/p")}
    for step, specs in enumerate([("aaa 2.0",), ("aaa 2.0", "bbb"), ("aaa 2.0",)]):  # update, clobber, unclobber
        seen = witnesses(prefix, list(before), tmp_path / f"witness{step}")
        install(*specs)
        assert {r: w.read_text() for r, w in seen.items()} == before, specs
        before = {r: (prefix / r).read_text() for r in before}
    assert before["share/p"] == f"a2 {prefix}\n"  # the updates did happen


def test_uv_replaces_files_on_upgrade_and_clobber(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    alpha1 = build_wheel(wheels, "alpha", "1.0", files={"alpha/data.txt": "a1\n"})
    alpha2 = build_wheel(wheels, "alpha", "2.0", files={"alpha/data.txt": "a2\n"})
    beta = build_wheel(wheels, "beta", "1.0", files={"alpha/data.txt": "from beta\n"})  # clobbers alpha's
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    (site,) = (tmp_path / "venv" / "lib").glob("python3*/site-packages")

    def install(wheel: Path) -> None:
        subprocess.run(
            [
                uv_binary(PipOptions()),
                "pip",
                "install",
                "--python",
                str(python),
                "--no-deps",
                "--link-mode",
                "copy",
                "--no-index",
                str(wheel),
            ],
            check=True,
            capture_output=True,
        )

    install(alpha1)
    before = {r: (site / r).read_text() for r in ("alpha/__init__.py", "alpha/data.txt")}
    for step, wheel in enumerate([alpha2, beta]):
        seen = witnesses(site, list(before), tmp_path / f"witness{step}")
        install(wheel)
        assert {r: w.read_text() for r, w in seen.items()} == before, wheel.name
        before = {r: (site / r).read_text() for r in before}
    assert before["alpha/data.txt"] == "from beta\n"
