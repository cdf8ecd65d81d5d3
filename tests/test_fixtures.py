"""The fixtures are real: rattler indexes, solves and installs the channel; uv resolves and installs the wheels."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
import rattler
from rattler import Channel, Gateway
from rattler.networking import Client, MirrorMiddleware

from tests.fixtures.conda_channel import (
    CANONICAL_CHANNEL,
    PLACEHOLDER,
    PLATFORMS,
    big_spec,
    build_channel,
    build_package,
    corrupt_archive_after_index,
    escaping_specs,
    file_url,
    read_archive,
    repodata,
    serve_directory,
    virtual_packages,
    zlibstub_spec,
)
from tests.fixtures.wheels import build_wheel, wheel_filename

HOST_FACTS = {
    "linux-64": {"__glibc": "2.28", "__linux": "5.10", "__unix": "0"},
    "osx-arm64": {"__osx": "13.0", "__unix": "0"},
    "win-64": {"__win": "0"},
}


def solve(source: str, specs: list, platform: str, cache: Path, extra: dict | None = None, client=None) -> dict:
    """Solve `specs` against one channel for `platform`; records by package name."""
    facts = {**HOST_FACTS[platform], **(extra or {})}
    records = asyncio.run(
        rattler.solve(
            [Channel(source)],
            specs,
            gateway=Gateway(cache_dir=cache, client=client),
            platforms=[platform, "noarch"],
            virtual_packages=virtual_packages(facts),
        )
    )
    return {r.name.normalized: r for r in records}


def install(records, prefix: Path, cache: Path, client=None) -> None:
    """`rattler.install` into `prefix` with its own package cache."""
    asyncio.run(rattler.install(list(records), prefix, cache_dir=cache, show_progress=False, client=client))


# --------------------------------------------------------------------------- channel


def test_repodata_records_carry_hashes_sizes_and_timestamps(fixture_channel: Path) -> None:
    for subdir in PLATFORMS:
        data = repodata(fixture_channel, subdir)
        assert data["packages"], f"{subdir}: no .tar.bz2 record"
        assert data["packages.conda"], f"{subdir}: no .conda record"
        for fn, record in {**data["packages"], **data["packages.conda"]}.items():
            assert {"md5", "sha256", "size", "timestamp"} <= set(record), fn
            assert (fixture_channel / subdir / fn).stat().st_size == record["size"]


def test_archives_are_read_by_conda_package_handling(fixture_channel: Path, tmp_path: Path) -> None:
    from conda_package_handling import api

    for fn in ("python-3.10.19-h0_0_cpython.conda", "zlibstub-1.3.1-h0_0.tar.bz2"):
        api.extract(str(fixture_channel / "linux-64" / fn), dest_dir=str(tmp_path / fn))
        paths = json.loads((tmp_path / fn / "info" / "paths.json").read_text())["paths"]
        for entry in paths:
            if entry["path_type"] == "hardlink":
                assert (tmp_path / fn / entry["_path"]).stat().st_size == entry["size_in_bytes"]
    python_paths = json.loads((tmp_path / "python-3.10.19-h0_0_cpython.conda/info/paths.json").read_text())["paths"]
    config = next(e for e in python_paths if e["_path"] == "bin/python3.10-config")
    assert {"prefix_placeholder": PLACEHOLDER, "file_mode": "text"}.items() <= config.items()


@pytest.mark.parametrize("platform", PLATFORMS)
def test_channel_solves_python_and_pip(fixture_channel: Path, tmp_path: Path, platform: str) -> None:
    records = solve(file_url(fixture_channel), ["python 3.10.*", "pip"], platform, tmp_path)
    assert set(records) == {"python", "python_abi", "pip", "zlibstub"}
    assert str(records["python"].version) == "3.10.19"
    assert str(records["python_abi"].build) == "8_cp310"


@pytest.mark.parametrize(
    ("platform", "cuda", "expected"),
    [
        ("linux-64", None, "cpu_0"),
        ("linux-64", "11.8", "cpu_0"),
        ("linux-64", "12.4", "cuda12_1"),
        ("win-64", "12.4", "cuda12_1"),
        ("osx-arm64", "12.4", "cpu_0"),
    ],
)
def test_torchlike_is_cuda_exactly_when_cuda_12_is_present(
    fixture_channel: Path, tmp_path: Path, platform: str, cuda: str | None, expected: str
) -> None:
    extra = {"__cuda": cuda} if cuda else {}
    records = solve(file_url(fixture_channel), ["python 3.10.*", "torchlike"], platform, tmp_path, extra)
    assert str(records["torchlike"].build) == expected


def test_mirror_over_http_yields_canonical_urls(channel_server, tmp_path: Path) -> None:
    client = Client([MirrorMiddleware({CANONICAL_CHANNEL: [str(channel_server)]})])
    records = solve(CANONICAL_CHANNEL, ["python 3.10.*", "pip"], "linux-64", tmp_path, client=client)
    assert records["python"].url == f"{CANONICAL_CHANNEL}/linux-64/python-3.10.19-h0_0_cpython.conda"
    assert all(r.url.startswith(CANONICAL_CHANNEL + "/") for r in records.values())
    assert channel_server.requested("/linux-64/repodata.json")
    assert channel_server.requested("/noarch/repodata.json")


def test_install_links_both_formats_and_rewrites_the_placeholder(fixture_channel: Path, tmp_path: Path) -> None:
    records = solve(file_url(fixture_channel), ["python 3.10.*", "pip"], "linux-64", tmp_path / "repodata")
    assert {records["python"].file_name[-6:], records["zlibstub"].file_name[-8:]} == {".conda", ".tar.bz2"}
    prefix = tmp_path / "prefix"
    install(records.values(), prefix, tmp_path / "pkgs")

    metas = sorted(p.name for p in (prefix / "conda-meta").glob("*.json"))
    assert metas == sorted(f"{r.name.normalized}-{r.version}-{r.build}.json" for r in records.values())
    config = (prefix / "bin" / "python3.10-config").read_text()
    assert f'prefix="{prefix}"' in config and PLACEHOLDER not in config
    assert os.readlink(prefix / "bin" / "python") == "python3.10"
    assert (prefix / "lib" / "libzstub.so.1").is_file()
    assert (prefix / "lib/python3.10/site-packages/pip/__init__.py").is_file()  # noarch python relocated
    assert (prefix / "bin" / "pip").read_text().startswith(f"#!{prefix}/bin/python3.10")


def test_corrupted_archive_fails_an_http_install(tmp_path: Path) -> None:
    spec = zlibstub_spec("linux-64")
    channel = build_channel(tmp_path / "channel", [spec])
    corrupt_archive_after_index(channel, spec.fn)
    with serve_directory(channel) as url:
        records = solve(url, ["zlibstub"], "linux-64", tmp_path / "repodata")
        with pytest.raises(Exception, match="hash mismatch"):
            install(records.values(), tmp_path / "prefix", tmp_path / "pkgs")


def test_escaping_archives_index_and_keep_their_raw_paths(tmp_path: Path) -> None:
    # Only built and indexed here: installing evil-abspath aborts the whole
    # process with a Rust panic in py-rattler 0.28 (see the fixture's docs).
    target = tmp_path / "outside" / "evil.txt"
    specs = escaping_specs(absolute_target=target)
    channel = build_channel(tmp_path / "channel", specs)
    assert {spec.fn for spec in specs} <= set(repodata(channel, "noarch")["packages.conda"])

    names = {}
    for spec in specs:
        info, pkg = read_archive(channel / "noarch" / spec.fn)
        paths = json.loads(dict((m.name, d) for m, d in info)["info/paths.json"])["paths"]
        names[spec.name] = ({m.name: m.linkname for m, _ in pkg}, {e["_path"] for e in paths})
    assert "../evil.txt" in names["evil-dotdot"][0] and "../evil.txt" in names["evil-dotdot"][1]
    assert str(target) in names["evil-abspath"][0] and str(target) in names["evil-abspath"][1]
    assert names["evil-symlink"][0]["lib/link"] == "../../../etc"


def test_big_spec_records_every_file_as_a_placeholder(tmp_path: Path) -> None:
    archive = build_package(big_spec(50), tmp_path)
    info, pkg = read_archive(archive)
    paths = json.loads(dict((m.name, d) for m, d in info)["info/paths.json"])["paths"]
    assert len(pkg) == len(paths) == 50
    assert all(entry["prefix_placeholder"] == PLACEHOLDER for entry in paths)


def test_serve_directory_records_requests_and_stops(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hi")
    with serve_directory(tmp_path) as url:
        assert urllib.request.urlopen(f"{url}/hello.txt", timeout=5).read() == b"hi"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{url}/missing", timeout=5)
        assert url.requests == ["/hello.txt", "/missing"]
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/hello.txt", timeout=5)


def test_clean_environ_scrubs_tool_variables() -> None:
    assert not [n for n in os.environ if n.startswith(("CONDA_", "PIP_", "BOOTSTRAP_"))]
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    for name in ("RATTLER_CACHE_DIR", "XDG_CACHE_HOME", "UV_CACHE_DIR"):
        assert Path(os.environ[name]).is_dir()
    assert [n for n in os.environ if n.startswith("UV_")] == ["UV_CACHE_DIR"]


# --------------------------------------------------------------------------- wheels


def uv(*args: str) -> subprocess.CompletedProcess:
    """Run the tools venv's uv, offline, failing loudly."""
    from uv import find_uv_bin

    argv = [find_uv_bin(), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)


def test_wheel_names_are_normalised(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path, "My.Package_X", "1.0.0", requires=["beta>=2"])
    assert wheel.name == wheel_filename("my-package-x", "1.0.0") == "my_package_x-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("my_package_x-1.0.0.dist-info/METADATA").decode()
        record = archive.read("my_package_x-1.0.0.dist-info/RECORD").decode()
    assert "Name: My.Package_X\n" in metadata and "Requires-Dist: beta>=2\n" in metadata
    assert "my_package_x/__init__.py,sha256=" in record


def test_wheelhouse_compiles_and_installs_offline_with_uv(wheelhouse: Path, tmp_path: Path) -> None:
    (tmp_path / "requirements.in").write_text("alpha\ngamma\n")
    offline = ["--offline", "--no-index", "--find-links", str(wheelhouse)]
    compiled = uv(
        "pip",
        "compile",
        *offline,
        "--no-header",
        "--python",
        sys.executable,
        str(tmp_path / "requirements.in"),
        "-o",
        str(tmp_path / "requirements.txt"),
    )
    pins = [line for line in (tmp_path / "requirements.txt").read_text().splitlines() if "==" in line]
    assert pins == ["alpha==1.1", "beta==2.0", "gamma==0.5"], compiled.stderr

    venv = tmp_path / "venv"
    uv("venv", "--offline", "--python", sys.executable, str(venv))
    python = str(venv / "bin" / "python")
    uv("pip", "install", *offline, "--python", python, "-r", str(tmp_path / "requirements.txt"))
    probe = "import alpha, beta, gamma; print(alpha.__version__, beta.__version__, gamma.__version__)"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1.1", "2.0", "0.5"]
