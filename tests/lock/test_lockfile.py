"""Reading a conda-lock v1 file: every field a hand edit or a broken tool can get wrong is refused
by name before anything uses it (names, versions and file names become paths in the cache and env)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

import pytest
import yaml

from bootstrap.errors import InputError
from bootstrap.lock.lockfile import read_lock
from tests.fixtures import REPO

COMMITTED = yaml.safe_load((REPO / "conda-lock.yml").read_text())


def first(data: dict, manager: str = "conda", platform: str = "linux-64") -> dict:
    return next(p for p in data["package"] if p["manager"] == manager and p["platform"] == platform)


def edited(tmp_path: Path, edit: Callable[[dict], None]) -> Path:
    data = copy.deepcopy(COMMITTED)
    edit(data)
    path = tmp_path / "conda-lock.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def duplicate(data: dict, **changes) -> None:
    data["package"].append({**first(data), **changes})


BROKEN = {
    "garbage md5": (lambda d: first(d)["hash"].update(md5="qq"), "package[0].hash.md5: 'qq' is not 32 hex digits"),
    "cut sha256": (
        lambda d: first(d)["hash"].update(sha256="fe51de61"),
        "hash.sha256: 'fe51de61' is not 64 hex digits",
    ),
    "unquoted zeros": (
        lambda d: first(d)["hash"].update(sha256=0),
        "package[0].hash.sha256: not a quoted string (YAML read 0; conda-lock refuses it too)",
    ),
    "numeric md5": (lambda d: first(d)["hash"].update(md5=123), "package[0].hash.md5: not a quoted string"),
    "numeric version": (lambda d: first(d).update(version=1.5), "package[0].version: not a quoted string"),
    "numeric build": (
        lambda d: first(d).update(build=7, url=first(d)["url"].replace("conda_forge", "7")),
        "package[0].build: not a quoted string (YAML read 7; conda-lock refuses it too)",
    ),
    "build as a list": (lambda d: first(d).update(build=["x"]), "package[0].build: not a quoted string"),
    "numeric url": (lambda d: first(d).update(url=7), "package[0].url: not a quoted string"),
    "bad version": (
        lambda d: first(d).update(version="not a version!!"),
        "version: 'not a version!!' is not a version",
    ),
    "name as path": (lambda d: first(d).update(name="../../evil"), "name: '../../evil' is not a conda package name"),
    "name not the file's": (
        lambda d: first(d).update(name="otherpkg"),
        "url: the file '_libgcc_mutex-0.1-conda_forge.tar.bz2' is not otherpkg",
    ),
    "dot-dot url": (
        lambda d: first(d).update(url="https://conda.anaconda.org/conda-forge/noarch/../../../etc/passwd"),
        "is not a plain URL",
    ),
    "wheel not the name's": (lambda d: first(d, "pip").update(name="torch"), "url: the file"),
    "twice, differing": (
        lambda d: duplicate(d, version="0.2", url=first(d)["url"].replace("0.1", "0.2")),
        "_libgcc_mutex is listed twice for linux-64 (also package[0])",
    ),
    "no packages": (
        lambda d: d.update(package=[]),
        "metadata.platforms: no packages are locked for linux-64, osx-arm64, win-64",
    ),
    "no platforms": (lambda d: d["metadata"].update(platforms=[]), "metadata.platforms: empty"),
    "unlisted platform": (
        lambda d: first(d).update(platform="linux-aarch64"),
        "platform: 'linux-aarch64' is not in metadata.platforms",
    ),
    "dependencies as a list": (lambda d: first(d).update(dependencies=["libgcc"]), "dependencies: expected a mapping"),
    "custom metadata as a list": (
        lambda d: d["metadata"].update(custom_metadata=["x"]),
        "metadata.custom_metadata: expected a mapping",
    ),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_a_broken_entry_is_named_with_the_fix(tmp_path: Path, case: str) -> None:
    edit, message = BROKEN[case]
    with pytest.raises(InputError) as caught:
        read_lock(edited(tmp_path, edit))
    assert message in str(caught.value) and "regenerate it with `make lock`" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_hashes_are_read_in_lower_case(tmp_path: Path) -> None:
    lock = read_lock(edited(tmp_path, lambda d: first(d)["hash"].update(sha256=first(d)["hash"]["sha256"].upper())))
    assert lock.packages == read_lock(REPO / "conda-lock.yml").packages


@pytest.mark.parametrize("upper", [False, True], ids=["byte-identical", "hash in upper case"])
def test_an_exact_repeat_is_refused_as_conda_lock_cannot_read_it(tmp_path: Path, upper: bool) -> None:
    """`conda-lock render` fails on a repeated entry (an AssertionError), so the readers refuse it too."""

    def edit(data: dict) -> None:
        duplicate(data)
        if upper:
            first(data)["hash"]["sha256"] = first(data)["hash"]["sha256"].upper()

    path = edited(tmp_path, edit)
    with pytest.raises(InputError) as caught:
        read_lock(path)
    index = len(COMMITTED["package"])
    assert str(caught.value) == (
        f"{path}: package[{index}]: _libgcc_mutex is listed twice for linux-64 (also "
        "package[0]) (regenerate it with `make lock`)"
    )


def test_conda_names_differing_in_separators_are_two_packages_pip_names_one(tmp_path: Path) -> None:
    """conda-forge has `typing-extensions` (a metapackage) depending on `typing_extensions`, both locked
    side by side; pip reads `cuda_bindings` and `cuda-bindings` as one distribution (PEP 503)."""

    def twin(data: dict, manager: str, name: str) -> None:
        entry = next(
            p for p in data["package"] if p["manager"] == manager and p["platform"] == "linux-64" and p["name"] == name
        )
        other = name.replace("-", "_")
        data["package"].append({**entry, "name": other, "url": entry["url"].replace(f"/{name}-", f"/{other}-")})

    lock = read_lock(edited(tmp_path, lambda d: twin(d, "conda", "ca-certificates")))
    assert {"ca-certificates", "ca_certificates"} <= {p.name for p in lock.for_platform("linux-64", "conda")}
    with pytest.raises(InputError, match=r"cuda_bindings is listed twice for linux-64"):
        read_lock(edited(tmp_path, lambda d: twin(d, "pip", "cuda-bindings")))


def test_conda_locks_one_entry_per_category_reads_as_one_package_of_both(tmp_path: Path) -> None:
    """conda-lock writes a package of `main` and `dev` as two entries identical but for `category`
    (its own reader merges them): read as one, and written back as conda-lock wrote it."""
    from bootstrap.lock.write import LockContent, render_lock

    path = edited(tmp_path, lambda d: duplicate(d, category="dev", optional=True))
    lock = read_lock(path)
    assert lock.packages[0].categories == ("dev", "main") and len(lock.packages) == len(COMMITTED["package"])
    content = LockContent(lock.channels, lock.platforms, lock.sources, lock.content_hash, lock.custom, lock.packages)
    rendered = yaml.safe_load(render_lock(path, content))
    assert sorted(p["category"] for p in rendered["package"] if p["name"] == "_libgcc_mutex") == ["dev", "main"]
    with pytest.raises(InputError, match=r"_libgcc_mutex is listed twice for linux-64 \(also package\[0\]\)"):
        read_lock(edited(tmp_path, lambda d: [duplicate(d, category="dev"), duplicate(d, category="dev")]))
    with pytest.raises(InputError, match="listed twice"):  # another record, not the same one in another category
        read_lock(
            edited(
                tmp_path,
                lambda d: duplicate(d, category="dev", version="0.2", url=first(d)["url"].replace("0.1", "0.2")),
            )
        )


def test_the_relock_diff_names_versions_and_for_another_wheel_of_one_version_the_files() -> None:
    from bootstrap.lock.lockfile import LockedPackage
    from bootstrap.lock.write import diff_locks

    def wheel(version: str, tag: str, sha: str) -> LockedPackage:
        return LockedPackage(
            "numpy",
            version,
            "pip",
            "osx-arm64",
            f"https://files.example/numpy-{version}-cp310-cp310-{tag}.whl",
            sha * 64,
        )

    old = [
        wheel("2.2.6", "macosx_11_0_arm64", "a"),
        LockedPackage("six", "1", "pip", "osx-arm64", "https://files.example/six-1-py3-none-any.whl", "c" * 64),
    ]
    (same_version,) = diff_locks(old, [wheel("2.2.6", "macosx_14_0_arm64", "b")], ["osx-arm64"])
    assert same_version.changed == (
        "numpy 2.2.6: numpy-2.2.6-cp310-cp310-macosx_11_0_arm64.whl -> numpy-2.2.6-cp310-cp310-macosx_14_0_arm64.whl",
    )
    assert same_version.removed == ("six 1",)
    (newer,) = diff_locks(old[:1], [wheel("2.3.0", "macosx_14_0_arm64", "b")], ["osx-arm64"])
    assert newer.changed == ("numpy 2.2.6 -> 2.3.0",)
    (unchanged,) = diff_locks(old, old, ["osx-arm64"])
    assert unchanged.empty


CREDENTIALS = {
    "conda url with a password": (
        lambda d: first(d).update(url=first(d)["url"].replace("https://", "https://bob:PW-SECRET@")),
        "package[0].url",
    ),
    "conda url with a token": (
        lambda d: first(d).update(url=first(d)["url"].replace(".org/", ".org/t/TK-SECRET/")),
        "package[0].url",
    ),
    "wheel url with a password": (
        lambda d: first(d, "pip").update(url=first(d, "pip")["url"].replace("https://", "https://bob:PW-SECRET@")),
        "].url",
    ),
    "channel with a token": (
        lambda d: d["metadata"]["channels"][0].update(url="https://conda.anaconda.org/t/TK-SECRET/conda-forge"),
        "metadata.channels",
    ),
    "conda url with a query": (lambda d: first(d).update(url=first(d)["url"] + "?token=TK-SECRET"), "package[0].url"),
    "wheel url with a query": (
        lambda d: first(d, "pip").update(url=first(d, "pip")["url"] + "?X-Sig=TK-SECRET"),
        "].url",
    ),
    "wheel url with a fragment": (lambda d: first(d, "pip").update(url=first(d, "pip")["url"] + "#TK-SECRET"), "].url"),
    "wheel url with a bare question mark": (
        lambda d: first(d, "pip").update(url=first(d, "pip")["url"] + "?"),
        "].url",
    ),
    "channel with a query": (
        lambda d: d["metadata"]["channels"][0].update(url="https://conda.anaconda.org/conda-forge?token=TK-SECRET"),
        "metadata.channels",
    ),
}


@pytest.mark.parametrize("case", CREDENTIALS, ids=list(CREDENTIALS))
def test_a_lock_carrying_credentials_is_refused_without_showing_them(tmp_path: Path, case: str) -> None:
    """A lock is committed, bundled into caches and exported: `bundle` copied such URLs into locks/*.json."""
    edit, where = CREDENTIALS[case]
    with pytest.raises(InputError) as caught:
        read_lock(edited(tmp_path, edit))
    message = str(caught.value)
    assert where in message and "carries credentials" in message and "keep secrets out of locks" in message
    assert "PW-SECRET" not in message and "TK-SECRET" not in message and "bob" not in message


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["metadata"].update(platforms=[f"{p} " for p in d["metadata"]["platforms"]]),
        lambda d: (
            [p.update(platform=f"{p['platform']} ") for p in d["package"]]
            and d["metadata"].update(platforms=[f"{p} " for p in d["metadata"]["platforms"]])
        ),
        lambda d: d["metadata"]["channels"][0].update(url=" https://u:hunter2@conda.anaconda.org/conda-forge"),
    ],
)
def test_a_platform_or_channel_with_spaces_is_refused(tmp_path: Path, edit) -> None:
    with pytest.raises(InputError) as caught:
        read_lock(edited(tmp_path, edit))
    message = str(caught.value)
    assert "without spaces" in message and "hunter2" not in message


WHEEL = "cuda_bindings-12.9.4-cp310-cp310-manylinux_2_28_x86_64.whl"  # the first pip entry: cuda-bindings 12.9.4
PIP_URLS_REFUSED = [
    "file:///etc/passwd",
    "file:///etc/",
    "https://example.org/etc/passwd",
    "ftp://example.org/" + WHEEL,
    "s3://bucket/" + WHEEL,
    "https:///" + WHEEL,
    "file://otherhost/wheels/" + WHEEL,
    "https://u:hunter2@example.org/" + WHEEL.replace("12.9.4", "12.9.5"),  # another version
    "file:///w/" + WHEEL.replace("cuda_bindings", "cuda_pathfinder"),  # another package
    "https://example.org/cuda_bindings-12.9.4.whl",  # not a wheel file name
    "https://example.org/cuda-bindings-12.9.3.tar.gz",
    "https://example.org/cuda_pathfinder-12.9.4.zip",
    "https://example.org/cuda_bindings-12.9.4.exe",
]
PIP_URLS_ACCEPTED = [
    "file:///tmp/wheelhouse/" + WHEEL,
    "file://localhost/w/" + WHEEL,
    "http://mirror.local/simple/" + WHEEL,
    "https://example.org/Cuda.Bindings-12.9.4-py3-none-any.whl",
    "https://example.org/cuda_bindings-12.9.4.tar.gz",
    "https://example.org/cuda-bindings-12.9.4.zip",
]


@pytest.mark.parametrize("url", PIP_URLS_REFUSED)
def test_a_pip_url_that_is_not_the_entrys_wheel_or_sdist_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(InputError) as caught:
        read_lock(edited(tmp_path, lambda d: first(d, "pip").update(url=url)))
    message = str(caught.value)
    assert "].url: " in message and "hunter2" not in message and "\n" not in message


@pytest.mark.parametrize("url", PIP_URLS_ACCEPTED)
def test_a_pip_url_of_the_entrys_own_file_is_read(tmp_path: Path, url: str) -> None:
    lock = read_lock(edited(tmp_path, lambda d: first(d, "pip").update(url=url)))
    assert url in {p.url for p in lock.packages}


@pytest.mark.parametrize("argv", [["lock", "--check"], ["env", "--dry-run"], ["export", "-o", "-"]])
def test_every_lock_reader_refuses_a_pip_url_of_another_file(tmp_path: Path, capsys, argv: list) -> None:
    from bootstrap.cli import main
    from tests.fixtures.variants import plain_project

    project = plain_project(tmp_path / "proj")
    path = project.lock_path("py310")
    path.write_text(path.read_text().replace(first(COMMITTED, "pip")["url"], "file:///etc/passwd"))
    assert main([*argv, "--root", str(project.root)]) == 2
    out, err = capsys.readouterr()
    assert "url: 'passwd' is not a wheel or sdist" in err and err.count("\n") == 1 and "root:" not in out


@pytest.mark.parametrize("argv", [["lock", "--check"], ["export", "-o", "-"], ["export", "--pinned", "-o", "OUT"]])
def test_every_lock_reader_refuses_a_url_with_a_query_and_exports_nothing(tmp_path: Path, capsys, argv: list) -> None:
    from bootstrap.cli import main
    from tests.fixtures.variants import plain_project

    project = plain_project(tmp_path / "proj")
    path = project.lock_path("py310")
    wheel = first(COMMITTED, "pip")["url"]
    path.write_text(path.read_text().replace(wheel, f"{wheel}?token=TK-SECRET"))
    out_dir = tmp_path / "out"
    assert main([*(str(out_dir) if a == "OUT" else a for a in argv), "--root", str(project.root)]) == 2
    out, err = capsys.readouterr()
    assert (
        f"package[{COMMITTED['package'].index(first(COMMITTED, 'pip'))}].url: '{wheel}' carries credentials "
        "or a query" in err
    )
    assert err.count("\n") == 1 and "TK-SECRET" not in out + err and not out_dir.exists()
