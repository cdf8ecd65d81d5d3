"""The pip part: target mapping, uv output parsing, and real uv resolutions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from bootstrap.errors import InputError, SolveError
from bootstrap.lock.pip import (
    PipOptions,
    marker_environment,
    parse_via_annotations,
    pip_requirements,
    resolve_all,
    resolve_pip,
    target_for,
)
from bootstrap.lock.spec import EnvSpec, VirtualPackage, VirtualPackages

VPKGS = VirtualPackages(
    Path("virtual-packages.yml"),
    {
        "linux-64": (VirtualPackage("__glibc", "2.28"), VirtualPackage("__cuda", "12.8")),
        "linux-aarch64": (VirtualPackage("__glibc", "2.17"),),
        "osx-arm64": (VirtualPackage("__osx", "14.0"),),
        "win-64": (VirtualPackage("__win", "0"),),
        "osx-64": (),
    },
)


def spec(*pip: str) -> EnvSpec:
    return EnvSpec(
        Path("envs/t.yml"), "t", ("conda-forge",), ("linux-64", "osx-arm64", "win-64"), ("python", "pip"), pip
    )


@pytest.mark.parametrize(
    "platform, python_platform, env",
    [
        ("linux-64", "x86_64-manylinux_2_28", {}),
        ("linux-aarch64", "aarch64-manylinux_2_17", {}),
        ("osx-arm64", "aarch64-apple-darwin", {"MACOSX_DEPLOYMENT_TARGET": "14.0"}),
        ("win-64", "x86_64-pc-windows-msvc", {}),
    ],
)
def test_target_for(platform: str, python_platform: str, env: dict) -> None:
    target = target_for(platform, "3.10.19", VPKGS)
    assert (target.python_platform, dict(target.env), target.python_version) == (python_platform, env, "3.10.19")


def test_target_needs_the_deciding_virtual_package() -> None:
    with pytest.raises(InputError, match="subdirs.osx-64.packages.__osx: missing"):
        target_for("osx-64", "3.10.19", VPKGS)


def test_parse_via_annotations() -> None:
    text = (
        "alpha==1.1                # via -r requirements.in\n"
        "beta==2.0                 # via alpha, Gamma\n"
        "nvidia-cublas-cu12==12.8.4.1  # via nvidia-cudnn-cu12, torch\n"
    )
    assert parse_via_annotations(text) == {
        "alpha": {"beta"},
        "gamma": {"beta"},
        "nvidia-cudnn-cu12": {"nvidia-cublas-cu12"},
        "torch": {"nvidia-cublas-cu12"},
    }


def test_offline_resolution_from_a_wheelhouse(wheelhouse: Path) -> None:
    options = PipOptions(find_links=(str(wheelhouse),), no_index=True, offline=True)
    targets = [target_for(p, "3.10.19", VPKGS) for p in ("linux-64", "win-64")]
    result = resolve_all(spec("alpha", "gamma<1"), targets, options)
    for platform in ("linux-64", "win-64"):
        by_name = {p.name: p for p in result[platform]}
        assert set(by_name) == {"alpha", "beta", "gamma"}
        assert by_name["alpha"].version == "1.1" and by_name["alpha"].dependencies == {"beta": ">=2"}
        assert by_name["beta"].url.startswith("file://") and len(by_name["beta"].sha256) == 64
        assert {p.platform for p in result[platform]} == {platform}


def test_empty_pip_section_runs_nothing() -> None:
    def no_runner(*args, **kwargs):
        raise AssertionError("uv must not run")

    assert resolve_pip(spec(), target_for("win-64", "3.10.19", VPKGS), runner=no_runner) == []


@pytest.mark.network
def test_pypi_resolution_is_per_platform() -> None:
    """nvidia-ml-py (pure) and pyyaml (compiled) from PyPI for linux-64 and win-64."""
    targets = [target_for(p, "3.10.19", VPKGS) for p in ("linux-64", "win-64")]
    result = resolve_all(spec("nvidia-ml-py", "pyyaml>=6"), targets)
    linux = {p.name: p for p in result["linux-64"]}
    windows = {p.name: p for p in result["win-64"]}
    assert set(linux) == set(windows) == {"nvidia-ml-py", "pyyaml"}
    assert linux["nvidia-ml-py"].url == windows["nvidia-ml-py"].url  # one py3-none-any wheel
    assert "manylinux" in linux["pyyaml"].filename and "cp310" in linux["pyyaml"].filename
    assert windows["pyyaml"].filename.endswith("win_amd64.whl")
    for package in [*linux.values(), *windows.values()]:
        assert package.url.startswith("https://files.pythonhosted.org/")
        assert len(package.sha256) == 64


SIX = "https://files.pythonhosted.org/packages/d9/5a/e7c31adb/six-1.16.0-py2.py3-none-any.whl"
LINUX_ONLY = "https://example.org/w/markupsafe-2.1.5-cp310-cp310-manylinux_2_17_x86_64.whl"


def test_requirements_that_cannot_be_locked_by_hash_are_named() -> None:
    assert [r.url for r in pip_requirements(spec(f"six @ {SIX}"))] == [SIX]
    for text in (
        "six @ git+https://github.com/benjaminp/six",
        "six @ https://example.org/six-1.16.0.tar.gz",
        "six @ file:///wheels/six-1.16.0-py2.py3-none-any.whl",
    ):
        with pytest.raises(InputError, match="only a wheel over http"):
            pip_requirements(spec(text))
    with pytest.raises(InputError) as caught:
        pip_requirements(spec("./local/project"))
    assert "is not a valid requirement" in str(caught.value) and "\n" not in str(caught.value)


@pytest.fixture
def index_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    """No wheel's METADATA can be fetched, so recorded uv output with made-up index URLs asks no one."""
    monkeypatch.setattr("bootstrap.lock.pip.read_metadata_all", lambda urls, offline: {})


def recorded_uv(pylock: str):
    """A runner standing in for `uv pip compile`: writes `pylock` where uv would, annotates nothing."""

    def runner(argv, env=None, cwd=None, timeout=None):
        if "pylock.toml" in argv:
            Path(cwd, "pylock.toml").write_text(pylock)
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    return runner


def archive_lock(url: str) -> str:
    return (
        'lock-version = "1.0"\n[[packages]]\nname = "pkg"\nversion = "1.0"\n'
        f'archive = {{ url = "{url}", hashes = {{ sha256 = "{"ab" * 32}" }} }}\n'
    )


def wheels_lock(url: str) -> str:
    """uv's pylock.toml for `alpha` served from an index at `url`."""
    return (
        'lock-version = "1.0"\n[[packages]]\nname = "alpha"\nversion = "1.0"\n'
        f'wheels = [{{ url = "{url}", hashes = {{ sha256 = "{"ab" * 32}" }} }}]\n'
    )


@pytest.mark.usefixtures("index_unreachable")
def test_a_wheel_url_is_locked_where_its_tags_fit() -> None:
    linux, mac = (target_for(p, "3.10.19", VPKGS) for p in ("linux-64", "osx-arm64"))
    (six,) = resolve_pip(spec(f"six @ {SIX}"), mac, runner=recorded_uv(archive_lock(SIX)))
    assert (six.url, six.sha256, six.platform) == (SIX, "ab" * 32, "osx-arm64")
    (markupsafe,) = resolve_pip(spec(f"markupsafe @ {LINUX_ONLY}"), linux, runner=recorded_uv(archive_lock(LINUX_ONLY)))
    assert markupsafe.url == LINUX_ONLY
    with pytest.raises(SolveError, match=f"pkg 1.0: no wheel for aarch64-apple-darwin at {LINUX_ONLY}"):
        resolve_pip(spec(f"markupsafe @ {LINUX_ONLY}"), mac, runner=recorded_uv(archive_lock(LINUX_ONLY)))


@pytest.mark.usefixtures("index_unreachable")
def test_dependency_edges_of_a_url_wheel_uv_cannot_serve_offline() -> None:
    """uv's cache may not answer the offline annotation run for `name @ URL`: ask again online, so
    the lock keeps `alpha -> beta` instead of a beta that nothing needs."""
    url = "https://example.org/w/alpha-1.1-py3-none-any.whl"
    pylock = (
        f'lock-version = "1.0"\n[[packages]]\nname = "alpha"\nversion = "1.1"\n'
        f'archive = {{ url = "{url}", hashes = {{ sha256 = "{"ab" * 32}" }} }}\n'
        f'[[packages]]\nname = "beta"\nversion = "2.0"\n'
        f'wheels = [{{ url = "https://example.org/w/beta-2.0-py3-none-any.whl", '
        f'hashes = {{ sha256 = "{"cd" * 32}" }} }}]\n'
    )
    calls = []

    def runner(argv, env=None, cwd=None, timeout=None):
        calls.append(argv)
        if "pylock.toml" in argv:
            Path(cwd, "pylock.toml").write_text(pylock)
        elif "--offline" in argv:
            return SimpleNamespace(returncode=2, stdout="", stderr=f"error: Failed to download `alpha @ {url}`")
        else:  # uv writes its `-o FILE`, and nothing on stdout with --quiet
            Path(cwd, argv[argv.index("-o") + 1]).write_text(
                f"alpha @ {url}  # via -r requirements.in\nbeta==2.0  # via alpha\n"
            )
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    alpha, beta = resolve_pip(spec(f"alpha @ {url}"), target_for("linux-64", "3.10.19", VPKGS), runner=runner)
    assert (alpha.name, alpha.dependencies) == ("alpha", {"beta": "*"})
    assert len(calls) == 3


@pytest.mark.usefixtures("index_unreachable")
def test_uv_never_downloads_a_python() -> None:
    """`--only-binary :all:` runs no Python of the target's version; without the flag uv would
    fetch one wherever this machine lacks it (or retry, offline)."""
    calls = []

    def runner(argv, env=None, cwd=None, timeout=None):
        calls.append(argv)
        return recorded_uv(archive_lock(SIX))(argv, env=env, cwd=cwd, timeout=timeout)

    resolve_pip(spec(f"six @ {SIX}"), target_for("linux-64", "3.10.19", VPKGS), runner=runner)
    assert len(calls) == 2 and all("--no-python-downloads" in argv for argv in calls)


def test_uv_errors_lose_index_tokens() -> None:
    from bootstrap.errors import FetchError

    def runner(argv, env=None, cwd=None, timeout=None):
        return SimpleNamespace(
            returncode=2,
            stdout="",
            stderr="error: Failed to fetch: `alpha`\n  cause: HTTP status client "
            "error (403 Forbidden) for url "
            "(https://pypi.anaconda.org/t/tk-hunter2/team/simple/alpha/)",
        )

    with pytest.raises(FetchError) as caught:
        resolve_pip(spec("alpha"), target_for("linux-64", "3.10.19", VPKGS), PipOptions(uv="uv"), runner=runner)
    assert "hunter2" not in str(caught.value) and "/t/<TOKEN>/team" in str(caught.value)


@pytest.mark.parametrize(
    ("failing", "hint"),
    [
        (
            "https://mirror.example/whl/cu126/torch/",
            "index pytorch-cu126: error: Failed to fetch (offline? serve it from "
            "a mirror: `--index pytorch-cu126=URL`, or fix `pip-indexes: {pytorch-cu126: URL}` in t.yml)",
        ),
        (
            "https://pypi.org/simple/numpy/",
            "index: error: Failed to fetch (offline? point UV_INDEX_URL at a PyPI mirror)",
        ),
    ],
)
def test_an_unreachable_index_is_named_with_the_option_that_serves_it(failing: str, hint: str) -> None:
    """A variant's torch index is served by `lock --index NAME=URL` or the spec's `pip-indexes:`, which
    UV_INDEX_URL (the default index) does not change."""
    from bootstrap.errors import FetchError
    from bootstrap.lock.variants import Variant

    variant = Variant("cu126", ("linux-64",), index="pytorch-cu126")
    with_index = replace(
        spec("torch==2.10.*", "numpy"),
        indexes={"pytorch-cu126": "https://x.example/whl/cu126"},
        variants=(variant,),
        variant=variant,
    )

    def runner(argv, env=None, cwd=None, timeout=None):
        return SimpleNamespace(
            returncode=2, stdout="", stderr=f"cause: error sending request for url ({failing})\nerror: Failed to fetch"
        )

    options = PipOptions(uv="uv", indexes={"pytorch-cu126": "https://bob:hunter2@mirror.example/whl/cu126"})
    with pytest.raises(FetchError) as caught:
        resolve_pip(with_index, target_for("linux-64", "3.10.19", VPKGS), options, runner=runner)
    assert str(caught.value).endswith(f"cannot reach the package {hint}") and "hunter2" not in str(caught.value)


def test_a_token_in_a_wheel_url_is_never_locked() -> None:
    url = "https://pypi.anaconda.org/t/tk-hunter2/team/simple/alpha/alpha-1.0-py3-none-any.whl"
    with pytest.raises(SolveError) as caught:
        resolve_pip(spec("alpha"), target_for("linux-64", "3.10.19", VPKGS), runner=recorded_uv(archive_lock(url)))
    assert "hunter2" not in str(caught.value) and "/t/<TOKEN>/team" in str(caught.value)
    assert "carries a token" in str(caught.value)


@pytest.mark.parametrize("tail", ["?token=hunter2", "#hunter2"])
def test_a_query_in_a_wheel_url_is_never_locked(tail: str) -> None:
    """A signed URL's query, which a lock reader refuses, is refused before any lock is written."""
    url = f"https://index.example/simple/alpha/alpha-1.0-py3-none-any.whl{tail}"
    with pytest.raises(SolveError) as caught:
        resolve_pip(spec("alpha"), target_for("linux-64", "3.10.19", VPKGS), runner=recorded_uv(wheels_lock(url)))
    assert "hunter2" not in str(caught.value) and "carries a token or a query" in str(caught.value)


def test_marker_environment() -> None:
    from packaging.markers import Marker

    windows_only = Marker("sys_platform == 'win32'")
    assert [windows_only.evaluate(marker_environment(p, "3.10.19")) for p in ("linux-64", "osx-arm64", "win-64")] == [
        False,
        False,
        True,
    ]
    assert Marker("python_version < '3.10'").evaluate(marker_environment("linux-64", "3.9.23"))
    assert Marker("platform_machine == 'arm64'").evaluate(marker_environment("osx-arm64", "3.10.19"))
