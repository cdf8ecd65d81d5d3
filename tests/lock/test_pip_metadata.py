"""A pip lock entry's dependencies carry the specifiers its wheel's METADATA gives them on the
target (`nvidia-cublas-cu12: ==12.8.4.1`), as conda-lock writes them; `'*'` where the METADATA
cannot be read. Real uv, offline, over a wheelhouse and over a loopback index."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Iterator

import pytest

from bootstrap.lock.pip import PipOptions, marker_environment, resolve_all, target_for
from bootstrap.lock.pip_wheels import dependency_specifiers, read_metadata
from bootstrap.lock.spec import EnvSpec, VirtualPackage, VirtualPackages
from tests.fixtures.conda_channel import ServedUrl, serve_directory
from tests.fixtures.wheels import WheelSpec, build_wheelhouse

PARENT_REQUIRES = (
    'nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux"',
    "filelock",
    "Typing_Extensions>=4.10",
    'kernels[fast]>=1.2; sys_platform == "linux"',
    'kernels<2; python_version >= "3.10"',
    'kernels>=0.5; sys_platform == "win32"',
    'colorama>=0.4; sys_platform == "win32"',
)
WHEELS = [
    WheelSpec("parent", "1.0", requires=PARENT_REQUIRES),
    WheelSpec("nvidia-cublas-cu12", "12.8.4.1"),
    WheelSpec("filelock", "3.16.1"),
    WheelSpec("typing-extensions", "4.12.2"),
    WheelSpec("kernels", "1.5"),
    WheelSpec("kernels", "2.0"),
    WheelSpec("colorama", "0.4.6"),
]
EDGES = {
    "linux-64": {
        "filelock": "*",
        "kernels": "<2,>=1.2",
        "nvidia-cublas-cu12": "==12.8.4.1",
        "typing-extensions": ">=4.10",
    },
    "win-64": {"colorama": ">=0.4", "filelock": "*", "kernels": "<2,>=0.5", "typing-extensions": ">=4.10"},
}
VPKGS = VirtualPackages(Path("vp.yml"), {"linux-64": (VirtualPackage("__glibc", "2.28"),), "win-64": ()})
SPEC = EnvSpec(Path("envs/t.yml"), "t", ("conda-forge",), ("linux-64", "win-64"), ("python", "pip"), ("parent",))


def locked_dependencies(options: PipOptions) -> dict:
    """platform -> {name: dependencies} of the lock entries `resolve_all` makes for `parent`."""
    result = resolve_all(SPEC, [target_for(p, "3.10.19", VPKGS) for p in ("linux-64", "win-64")], options)
    return {platform: {p.name: dict(p.dependencies) for p in packages} for platform, packages in result.items()}


def expected(edges_of_parent: dict) -> dict:
    """The entries of one platform: parent's edges as given, its children with none."""
    return {"parent": edges_of_parent, **{child: {} for child in edges_of_parent}}


def with_metadata_files(wheelhouse: Path) -> Path:
    """Beside each wheel its METADATA as `<wheel>.metadata`, as a PEP 658 index serves it."""
    for wheel in wheelhouse.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            (name,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            Path(f"{wheel}.metadata").write_bytes(archive.read(name))
    return wheelhouse


@pytest.fixture
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServedUrl]:
    """The wheels on loopback HTTP as a find-links page; with `.metadata` files if the test's
    parameter says so."""
    wheelhouse = build_wheelhouse(tmp_path / "wheels", WHEELS)
    with serve_directory(with_metadata_files(wheelhouse) if request.param else wheelhouse) as url:
        yield url


@pytest.mark.slow  # a real uv resolution
def test_specifiers_from_the_archive_of_a_find_links_wheel(tmp_path: Path) -> None:
    wheelhouse = build_wheelhouse(tmp_path, WHEELS)
    locked = locked_dependencies(PipOptions(find_links=(str(wheelhouse),), no_index=True, offline=True))
    assert locked == {platform: expected(edges) for platform, edges in EDGES.items()}


@pytest.mark.slow  # a real uv resolution over HTTP
@pytest.mark.parametrize("served", [True], indirect=True)
def test_specifiers_from_the_index_metadata_file(served: ServedUrl) -> None:
    locked = locked_dependencies(PipOptions(find_links=(f"{served}/",), no_index=True))
    assert locked == {platform: expected(edges) for platform, edges in EDGES.items()}
    assert served.requested("/parent-1.0-py3-none-any.whl.metadata")


@pytest.mark.slow  # reads every wheel's metadata by HTTP range requests
@pytest.mark.parametrize("served", [False], indirect=True)
def test_an_index_without_metadata_files_leaves_each_edge_unconstrained(served: ServedUrl) -> None:
    locked = locked_dependencies(PipOptions(find_links=(f"{served}/",), no_index=True))
    assert locked == {platform: expected(dict.fromkeys(edges, "*")) for platform, edges in EDGES.items()}
    assert served.requested("/parent-1.0-py3-none-any.whl.metadata")  # asked, answered 404


@pytest.mark.parametrize("served", [True], indirect=True)
def test_offline_asks_no_index(served: ServedUrl) -> None:
    url = f"{served}/parent-1.0-py3-none-any.whl"
    assert read_metadata(url, offline=True) is None and served.requests == []
    assert "Requires-Dist: filelock\n" in (read_metadata(url, offline=False) or "")


TORCH_METADATA = """\
Metadata-Version: 2.1
Name: torch
Version: 2.8.0
Provides-Extra: opt-einsum
Requires-Dist: filelock
Requires-Dist: nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux" and platform_machine == "x86_64"
Requires-Dist: opt-einsum>=3.3; extra == "opt-einsum"
Requires-Dist: sympy>=1.13.3
Requires-Dist: sympy<2; python_version < "3.9"
Requires-Dist: not a requirement at all
Requires-Dist: Typing_Extensions>=4.10.0

"""
TORCH_CHILDREN = ("filelock", "nvidia-cublas-cu12", "opt-einsum", "sympy", "typing-extensions", "unlisted")


def test_dependency_specifiers() -> None:
    """Only lines that hold on the target; a child only an extra brings (uv resolved
    `torch[opt-einsum]`) takes that extra's line; a child no line names stays '*'."""
    linux = marker_environment("linux-64", "3.10.19")
    assert dependency_specifiers(TORCH_CHILDREN, TORCH_METADATA, linux) == {
        "filelock": "*",
        "nvidia-cublas-cu12": "==12.8.4.1",
        "opt-einsum": ">=3.3",
        "sympy": ">=1.13.3",
        "typing-extensions": ">=4.10.0",
        "unlisted": "*",
    }
    aarch64 = marker_environment("linux-aarch64", "3.10.19")
    assert dependency_specifiers(["nvidia-cublas-cu12"], TORCH_METADATA, aarch64) == {"nvidia-cublas-cu12": "*"}
    assert dependency_specifiers(["sympy"], TORCH_METADATA, marker_environment("linux-64", "3.8.20")) == {
        "sympy": "<2,>=1.13.3"
    }
    assert dependency_specifiers(["filelock", "sympy"], None, linux) == {"filelock": "*", "sympy": "*"}
