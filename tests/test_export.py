"""`bootstrap export`: portability rules, --pinned parsed back, --from-prefix, round trips, bad input."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bootstrap.cli import main
from bootstrap.export.from_lock import export_env
from bootstrap.export.portable import ExportOptions, portable_channel, portable_from_lock, requested_build
from bootstrap.export.render import _toposort_names, render_environment_yml
from bootstrap.lock.content_hash import conda_lock_inputs
from bootstrap.lock.lockfile import Lock, LockedPackage, read_lock
from bootstrap.lock.spec import EnvSpec, read_spec
from bootstrap.project import Project
from tests.fixtures import REPO
from tests.fixtures.conda_channel import file_url
from tests.fixtures.project import make_project, write_spec, write_virtual_packages

SNAPSHOT = REPO.parent / "shared" / "conda-forge-snapshot" / "conda-forge"


def export(*args: str) -> int:
    return main(["export", *args])


def versions(lock: Lock, platforms=None) -> dict:
    return {
        (p.platform, p.manager, p.name): p.version
        for p in lock.packages
        if platforms is None or p.platform in platforms
    }


def conda_lock_parse(path: Path, vpkgs: Path):
    """conda-lock's own parser (make_lock_spec, offline with an empty PyPI mapping)."""
    with conda_lock_inputs(path, vpkgs) as (lock_spec, _):
        return {
            platform: {(d.manager, d.name): d.version for d in deps}
            for platform, deps in lock_spec.dependencies.items()
        }


# --------------------------------------------------------------------------- the committed file


def test_committed_environment_yml_matches_the_lock():
    """The drift check: `make export` output of the default env, byte for byte."""
    expected = export_env(Project(REPO), "py310").files[Path("environment.yml")]
    committed = (REPO / "environment.yml").read_text(encoding="utf-8")
    assert committed == expected, "environment.yml drifted from conda-lock.yml: run `make export`"


def test_portable_rules_on_the_committed_lock():
    text = (REPO / "environment.yml").read_text()
    data = yaml.safe_load(text)
    assert list(data) == ["name", "channels", "platforms", "dependencies"]
    assert "prefix" not in text and "file:" not in text and "@" not in text and "/home" not in text
    lock = read_lock(REPO / "conda-lock.yml")
    assert data["channels"] == ["conda-forge"] and data["platforms"] == list(lock.platforms)
    conda = [d for d in data["dependencies"] if isinstance(d, str)]
    (pip,) = [d["pip"] for d in data["dependencies"] if isinstance(d, dict)]
    assert conda == ["python=3.10.19", "pip=26.0"]  # no build strings
    spec = read_spec(REPO / "envs" / "py310.yml")
    assert [re.split(r"[=<>!~ ]", p)[0] for p in pip] == [re.split(r"[=<>!~ ]", p)[0] for p in spec.pip]
    for line in pip:
        name, version = line.split("==")
        assert {p.version for p in lock.packages if p.name == name} == {version}


def test_conda_lock_parses_the_committed_export():
    parsed = conda_lock_parse(REPO / "environment.yml", REPO / "envs" / "virtual-packages.yml")
    lock = read_lock(REPO / "conda-lock.yml")
    assert set(parsed) == set(lock.platforms)
    for deps in parsed.values():
        assert deps[("conda", "python")] == "3.10.19.*"  # conda's `=`: this version and its sub-versions
        assert deps[("pip", "torch")] == "==2.10.0"
        assert deps[("pip", "nvidia-ml-py")] == "==13.615.71"


@pytest.mark.skipif(not SNAPSHOT.is_dir(), reason="../shared/conda-forge-snapshot is not beside the repository")
def test_snapshot_round_trip_of_the_conda_part():
    """Solving the exported file against the real conda-forge snapshot gives the locked conda closure."""
    from bootstrap.lock.conda import solve_conda, to_locked
    from bootstrap.lock.mirrors import Mirror
    from bootstrap.lock.spec import read_virtual_packages

    exported = read_spec(REPO / "environment.yml")
    vpkgs = read_virtual_packages(REPO / "envs" / "virtual-packages.yml")
    lock = read_lock(REPO / "conda-lock.yml")
    mirror = Mirror.parse(f"conda-forge={SNAPSHOT}")
    for platform in exported.platforms:
        solved = {
            to_locked(r, platform).name: str(r.version)
            for r in solve_conda(exported, platform, vpkgs.for_platform(platform), [mirror])
        }
        assert solved == {p.name: p.version for p in lock.for_platform(platform, "conda")}


# --------------------------------------------------------------------------- round trip on the fixtures


def lock_project(project: Project, channel: Path, wheelhouse: Path) -> int:
    return main(
        [
            "lock",
            "--root",
            str(project.root),
            "--cache-dir",
            str(project.root / ".cache"),
            "--mirror",
            f"conda-forge={channel}",
            "--pip-find-links",
            str(wheelhouse),
            "--pip-no-index",
            "--pip-offline",
        ]
    )


@pytest.fixture(scope="module")
def locked(tmp_path_factory, fixture_channel: Path, wheelhouse: Path) -> Project:
    project = make_project(tmp_path_factory.mktemp("export") / "proj")
    assert lock_project(project, fixture_channel, wheelhouse) == 0
    return project


@pytest.mark.slow
def test_round_trip_through_conda_lock_and_our_lock(
    locked: Project, fixture_channel: Path, wheelhouse: Path, tmp_path: Path
):
    out = tmp_path / "environment.yml"
    assert export("--root", str(locked.root), "-o", str(out)) == 0
    data = yaml.safe_load(out.read_text())
    assert data["dependencies"] == [
        "python=3.10.19",
        "pip=25.0",
        "torchlike=1.0",
        {"pip": ["alpha==1.1", "gamma==0.5"]},
    ]

    parsed = conda_lock_parse(out, locked.virtual_packages_path)
    assert all(
        deps[("pip", "alpha")] == "==1.1" and deps[("conda", "torchlike")] == "1.0.*" for deps in parsed.values()
    )

    again = Project(tmp_path / "again")
    (again.root / "envs").mkdir(parents=True)
    shutil.copy(out, again.spec_path("py310"))
    shutil.copy(locked.virtual_packages_path, again.virtual_packages_path)
    assert lock_project(again, fixture_channel, wheelhouse) == 0
    before, after = read_lock(locked.lock_path("py310")), read_lock(again.lock_path("py310"))
    assert versions(after) == versions(before)
    # Builds are not pinned, yet the same machine description picks the same ones (CUDA on linux).
    assert {(p.platform, p.name, p.build) for p in after.packages} == {
        (p.platform, p.name, p.build) for p in before.packages
    }


@pytest.mark.slow
def test_a_build_the_spec_asks_for_survives_the_round_trip(fixture_channel: Path, wheelhouse: Path, tmp_path: Path):
    """`torchlike * cpu*`: the team ruled out the CUDA build the solver prefers on linux; an export
    that dropped the build would hand conda users exactly that build."""
    project = make_project(tmp_path / "cpu", conda=("python=3.10.*", "pip", "torchlike * cpu*"))
    assert lock_project(project, fixture_channel, wheelhouse) == 0
    out = tmp_path / "environment.yml"
    assert export("--root", str(project.root), "-o", str(out)) == 0
    assert yaml.safe_load(out.read_text())["dependencies"][2] == "torchlike=1.0=cpu*"

    again = Project(tmp_path / "again")
    (again.root / "envs").mkdir(parents=True)
    shutil.copy(out, again.spec_path("py310"))
    shutil.copy(project.virtual_packages_path, again.virtual_packages_path)
    assert lock_project(again, fixture_channel, wheelhouse) == 0
    builds = {p.platform: p.build for p in read_lock(again.lock_path("py310")).packages if p.name == "torchlike"}
    assert builds and all(build.startswith("cpu") for build in builds.values()), builds


def test_pinned_matches_conda_lock_render(locked: Project, tmp_path: Path):
    from conda_lock.conda_lock import render_lockfile_for_platform
    from conda_lock.lockfile import parse_conda_lock_file

    for index, root in enumerate((locked.root, REPO)):
        out = tmp_path / f"pinned{index}"  # not root.name: a checkout named `proj` is the fixture's name too
        out.mkdir()
        assert export("--root", str(root), "--pinned", "-o", str(out / "{name}-{platform}.lock")) == 0
        lock = read_lock(Project(root).lock_path("py310"))
        assert sorted(p.name for p in out.iterdir()) == [f"py310-{p}.lock" for p in sorted(lock.platforms)]
        for platform in lock.platforms:
            text = (out / f"py310-{platform}.lock").read_text()
            body = text[text.index("@EXPLICIT") :].splitlines()
            theirs = render_lockfile_for_platform(
                lockfile=parse_conda_lock_file(Project(root).lock_path("py310")),
                include_dev_dependencies=True,
                extras=None,
                kind="explicit",
                platform=platform,
                suppress_warning_for_pip_and_explicit=True,
            )
            assert body == theirs[theirs.index("@EXPLICIT") :]
            assert f"# input_hash: {lock.content_hash[platform]}" in text
            # Parsed back: every locked artifact exactly once, with its hash.
            conda = {line for line in body if line.startswith(("http", "file:"))}
            pip = {line for line in body if line.startswith("# pip ")}
            assert conda == {f"{p.url}#{p.md5}" for p in lock.for_platform(platform, "conda")}
            assert pip == {f"# pip {p.name} @ {p.url}#sha256={p.sha256}" for p in lock.for_platform(platform, "pip")}


def test_json_names_each_file_written(locked: Project, tmp_path: Path, capsys):
    import hashlib

    out = tmp_path / "environment.yml"
    capsys.readouterr()
    assert export("--root", str(locked.root), "-o", str(out), "--json") == 0
    printed, err = capsys.readouterr()
    data = json.loads(printed)  # stdout holds the envelope only: no "wrote" line
    assert data == {
        "format": "bootstrap.export",
        "version": 1,
        "kind": "portable",
        "name": "py310",
        "source": "envs/py310.yml pinned to conda-lock.yml",
        "platforms": ["linux-64", "osx-arm64", "win-64"],
        "files": [
            {"path": str(out), "bytes": out.stat().st_size, "sha256": hashlib.sha256(out.read_bytes()).hexdigest()}
        ],
        "notes": data["notes"],
    }
    assert data["notes"] == [
        "some pip packages were locked from local files, not PyPI; the portable file "
        "installs them from the teammate's index (use --pinned for the exact artifacts)"
    ]
    assert err == f"note: {data['notes'][0]}\n"  # notes go to stderr, as without --json
    template = str(tmp_path / "{name}-{platform}.lock")
    assert (
        export(
            "--root",
            str(locked.root),
            "--pinned",
            "--platform",
            "win-64",
            "--platform",
            "linux-64",
            "-o",
            template,
            "--json",
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert (data["kind"], data["source"], data["platforms"]) == ("pinned", "conda-lock.yml", ["win-64", "linux-64"])
    assert [f["path"] for f in data["files"]] == [
        str(tmp_path / "py310-win-64.lock"),
        str(tmp_path / "py310-linux-64.lock"),
    ]


def test_json_from_a_prefix_carries_the_notes_and_stdout_cannot_hold_both(conda_prefix: Path, tmp_path: Path, capsys):
    out = tmp_path / "shared.yml"
    assert export("--from-prefix", str(conda_prefix), "-o", str(out), "--json") == 0
    printed, err = capsys.readouterr()
    data = json.loads(printed)
    assert (data["kind"], data["name"], data["source"]) == ("portable", "train", "the environment 'train' (linux-64)")
    assert "requested conda specs taken from conda-meta/history" in data["notes"]
    assert [f"note: {note}" for note in data["notes"]] == err.splitlines()  # and on stderr, as without --json
    assert export("--from-prefix", str(conda_prefix), "-o", "-", "--json") == 2
    printed, err = capsys.readouterr()
    assert json.loads(printed)["error"]["message"].startswith("-o -: prints the file itself on stdout")
    assert err.count("\n") == 1


def test_pinned_single_platform_to_stdout(capsys):
    assert export("--root", str(REPO), "--pinned", "--platform", "osx-arm64", "-o", "-") == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1] == "# platform: osx-arm64" and "\n@EXPLICIT\n" in out
    assert "https://conda.anaconda.org/conda-forge/osx-arm64/python-3.10.19-" in out


def test_a_repeated_platform_counts_once(tmp_path: Path, capsys):
    twice = ("--platform", "osx-arm64", "--platform", "osx-arm64")
    assert export("--root", str(REPO), *twice, "-o", "-") == 0
    assert yaml.safe_load(capsys.readouterr().out)["platforms"] == ["osx-arm64"]
    assert export("--root", str(REPO), "--pinned", *twice, "-o", "-") == 0  # one platform: printable
    assert capsys.readouterr().out.count("\n@EXPLICIT\n") == 1
    assert export("--root", str(REPO), "--pinned", *twice, "-o", str(tmp_path / "env.lock"), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["platforms"] == ["osx-arm64"] and [f["path"] for f in data["files"]] == [str(tmp_path / "env.lock")]


@pytest.mark.parametrize("seed", range(40))
def test_toposort_is_condas(seed):
    from conda_lock.interfaces.vendored_conda import toposort

    rng = random.Random(seed)
    names = ["python", "pip", *(f"p{i}" for i in range(rng.randint(1, 12)))]
    graph = {n: {rng.choice(names + ["__glibc", "extra"]) for _ in range(rng.randint(0, 4))} for n in names}
    assert _toposort_names(graph) == toposort({k: set(v) for k, v in graph.items()})


# --------------------------------------------------------------------------- per-platform versions


def synthetic(packages, platforms=("linux-64", "osx-arm64", "win-64")) -> Lock:
    entries = tuple(
        LockedPackage(
            name,
            version,
            manager,
            platform,
            f"https://example.invalid/{name}-{version}",
            "0" * 64,
            "0" * 32 if manager == "conda" else None,
            "h0" if manager == "conda" else None,
        )
        for manager, name, by_platform in packages
        for platform, version in by_platform.items()
    )
    return Lock(
        Path("conda-lock.yml"), {p: "x" for p in platforms}, ("conda-forge",), tuple(platforms), (), {}, entries
    )


def test_versions_that_differ_per_platform(tmp_path: Path):
    lock = synthetic(
        [
            ("conda", "python", {"linux-64": "3.10.19", "osx-arm64": "3.10.19", "win-64": "3.10.18"}),
            ("conda", "openssl", {"linux-64": "3.6.1", "osx-arm64": "3.5.4", "win-64": "3.6.1"}),
            ("conda", "tzdata", {"linux-64": "2025b", "osx-arm64": "2026a", "win-64": "2026a"}),
            ("pip", "numpy", {"linux-64": "2.2.6", "osx-arm64": "2.2.6", "win-64": "2.2.5"}),
            ("pip", "torch", {"linux-64": "2.10.0", "osx-arm64": "2.10.0", "win-64": "2.10.0"}),
        ]
    )
    spec = EnvSpec(
        Path("envs/py310.yml"),
        "py310",
        ("conda-forge",),
        lock.platforms,
        ("python=3.10.*", "openssl", "tzdata"),
        ("numpy>=2", "torch[opt]==2.10.*"),
    )
    text = render_environment_yml(portable_from_lock(spec, lock))
    data = yaml.safe_load(text)
    assert data["dependencies"][:3] == ["python=3.10.*", "openssl=3.*", "tzdata>=2025b,<=2026a"]
    assert data["dependencies"][3]["pip"] == [
        'numpy==2.2.6; sys_platform == "linux"',
        'numpy==2.2.6; sys_platform == "darwin"',
        'numpy==2.2.5; sys_platform == "win32"',
        "torch[opt]==2.10.0",
    ]
    assert "- python=3.10.*  # locked: 3.10.18 (win-64), 3.10.19 (linux-64, osx-arm64)" in text
    path = tmp_path / "environment.yml"
    path.write_text(text)
    write_virtual_packages(tmp_path)
    parsed = conda_lock_parse(path, tmp_path / "envs" / "virtual-packages.yml")
    assert parsed["win-64"][("pip", "numpy")] == "==2.2.5"
    assert parsed["linux-64"][("pip", "numpy")] == parsed["osx-arm64"][("pip", "numpy")] == "==2.2.6"


@pytest.mark.parametrize(
    "spec, build",
    [
        ("pytorch * cuda*", "cuda*"),
        ("libblas=*=*mkl", "*mkl"),
        ("conda-forge::pytorch 2.5.* cuda*", "cuda*"),
        ("x >=1.0 [build_string='py*']", "py*"),
        ("numpy >=1.0 py*", "py*"),
        ("python >=3.10,<3.11", None),
        ("numpy >= 1.0", None),
        ("python=3.10.*", None),
        ("x 1.0 *", None),
    ],
)
def test_the_build_a_spec_asks_for(spec: str, build):
    assert requested_build(spec) == build


def test_a_requested_build_with_versions_that_differ_per_platform():
    lock = synthetic(
        [
            ("conda", "libblas", {"linux-64": "3.9.0", "osx-arm64": "3.9.0", "win-64": "3.8.0"}),
            ("conda", "pytorch", {"linux-64": "2.5.1", "osx-arm64": "2.5.0", "win-64": "2.5.1"}),
        ]
    )
    spec = EnvSpec(
        Path("envs/py310.yml"), "py310", ("conda-forge",), lock.platforms, ("libblas=*=*mkl", "pytorch * cpu*"), ()
    )
    assert [line.text for line in portable_from_lock(spec, lock).conda] == ["libblas=3.*=*mkl", "pytorch=2.5.*=cpu*"]


def test_two_platforms_of_one_os_get_a_machine_marker():
    lock = synthetic(
        [
            ("conda", "python", {"osx-64": "3.10.19", "osx-arm64": "3.10.19", "linux-64": "3.10.19"}),
            ("pip", "numpy", {"osx-64": "2.2.5", "osx-arm64": "2.2.6", "linux-64": "2.2.6"}),
        ],
        platforms=("linux-64", "osx-64", "osx-arm64"),
    )
    spec = EnvSpec(
        Path("envs/py310.yml"),
        "py310",
        ("conda-forge",),
        lock.platforms,
        ("python",),
        ("numpy; python_version >= '3'",),
    )
    pip = [line.text for line in portable_from_lock(spec, lock).pip]
    assert pip == [
        "numpy==2.2.6; (python_version >= '3') and (sys_platform == \"linux\")",
        'numpy==2.2.5; (python_version >= \'3\') and (sys_platform == "darwin" and platform_machine == "x86_64")',
        'numpy==2.2.6; (python_version >= \'3\') and (sys_platform == "darwin" and platform_machine == "arm64")',
    ]


@pytest.mark.parametrize(
    "given, expected",
    [
        ("conda-forge", "conda-forge"),
        ("https://conda.anaconda.org/conda-forge", "conda-forge"),
        ("https://alice:hunter2@conda.anaconda.org/t/tk-123-456/conda-forge/linux-64/", "conda-forge"),
        ("https://bob:pw@mirror.corp/conda/internal/noarch", "https://mirror.corp/conda/internal"),
    ],
)
def test_channels_lose_credentials_tokens_and_subdirs(given, expected):
    assert portable_channel(given) == expected


# --------------------------------------------------------------------------- --from-prefix


def write_record(
    prefix: Path,
    name: str,
    version: str,
    build: str,
    depends=(),
    channel="https://conda.anaconda.org/conda-forge/linux-64",
    subdir="linux-64",
    files=(),
    **extra,
) -> None:
    meta = prefix / "conda-meta"
    meta.mkdir(parents=True, exist_ok=True)
    record = {
        "name": name,
        "version": version,
        "build": build,
        "channel": channel,
        "subdir": subdir,
        "depends": list(depends),
        "files": list(files),
        **extra,
    }
    (meta / f"{name}-{version}-{build}.json").write_text(json.dumps(record))


def write_dist(
    prefix: Path, name: str, version: str, installer="pip", requested=False, requires=(), direct_url=None
) -> str:
    info = prefix / "lib" / "python3.10" / "site-packages" / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    metadata = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}\nA description: with colons\n"
    (info / "METADATA").write_text(metadata.format(name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)))
    (info / "INSTALLER").write_text(installer + "\n")
    if requested:
        (info / "REQUESTED").write_text("")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return info.relative_to(prefix).as_posix()


@pytest.fixture
def conda_prefix(tmp_path: Path) -> Path:
    """An env as conda leaves it: history with a create, an install and a remove; pip packages on top."""
    prefix = tmp_path / "envs" / "train"
    pip_info = "lib/python3.10/site-packages/pip-26.0.dist-info"
    write_record(prefix, "python", "3.10.19", "h3c07f61_3_cpython", ["libzlib >=1.3", "pip"])
    write_record(prefix, "libzlib", "1.3.1", "hb9d3cd8_2")
    write_record(
        prefix,
        "pip",
        "26.0",
        "pyh8b19718_0",
        ["python >=3.9"],
        channel="https://conda.anaconda.org/conda-forge/noarch",
        subdir="noarch",
        files=[f"{pip_info}/METADATA", f"{pip_info}/INSTALLER"],
    )
    write_record(prefix, "numpy", "2.2.6", "py310hefbff90_0", ["python >=3.10"])
    write_record(
        prefix,
        "ffmpeg",
        "7.1.1",
        "gpl_h0",
        channel="https://user:secret@conda.anaconda.org/t/tk-1/conda-forge/linux-64",
    )
    tables_info = "lib/python3.10/site-packages/tables-3.10.2-py3.10.egg-info"  # conda's, with no INSTALLER
    write_record(prefix, "pytables", "3.10.2", "py310h0", ["python >=3.10"], files=[f"{tables_info}/PKG-INFO"])
    (prefix / tables_info).mkdir(parents=True)
    (prefix / tables_info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: tables\nVersion: 3.10.2\n")
    (prefix / "conda-meta" / "bootstrap-install.json").write_text(json.dumps({"version": 1, "env": "train"}))
    (prefix / "conda-meta" / "history").write_text(
        "==> 2026-01-05 10:00:00 <==\n# cmd: /opt/conda/bin/conda create -p /home/ana/envs/train python=3.10 pip\n"
        "# conda version: 25.1.1\n+conda-forge/linux-64::python-3.10.19-h3c07f61_3_cpython\n"
        "+conda-forge/noarch::pip-26.0-pyh8b19718_0\n# update specs: ['python=3.10', 'pip']\n"
        "==> 2026-01-06 09:00:00 <==\n# cmd: /opt/conda/bin/conda install -c conda-forge numpy scipy ffmpeg\n"
        "# conda version: 25.1.1\n+conda-forge/linux-64::numpy-2.2.6-py310hefbff90_0\n"
        '# update specs: ["conda-forge::numpy", "scipy", "ffmpeg"]\n'
        "==> 2026-01-07 09:00:00 <==\n# cmd: /opt/conda/bin/conda remove ffmpeg\n# remove specs: ['ffmpeg']\n"
    )
    write_dist(prefix, "pip", "26.0", installer="conda")  # conda's own pip: not a pip package
    write_dist(
        prefix, "torch", "2.10.0", requested=True, requires=["filelock", "sympy>=1.13", "triton==3.6.0; extra == 'x'"]
    )
    write_dist(prefix, "filelock", "3.20.0", requires=[])
    write_dist(prefix, "sympy", "1.14.0", requires=["mpmath<1.4"])
    write_dist(prefix, "mpmath", "1.3.0")
    write_dist(
        prefix,
        "mylab",
        "0.1",
        requested=True,
        direct_url={"url": "file:///home/ana/mylab", "dir_info": {"editable": True}},
    )
    return prefix


def test_from_prefix_uses_history_and_requested_pip(conda_prefix: Path, tmp_path: Path, capsys):
    out = tmp_path / "shared.yml"
    assert export("--from-prefix", str(conda_prefix), "-o", str(out)) == 0
    text = out.read_text()
    data = yaml.safe_load(text)
    # scipy was asked for but never installed; ffmpeg was removed (still installed here: conda's rule keeps it out).
    assert data == {
        "name": "train",
        "channels": ["conda-forge"],
        "platforms": ["linux-64"],
        # no tables
        "dependencies": ["conda-forge::numpy=2.2.6", "pip=26.0", "python=3.10.19", {"pip": ["torch==2.10.0"]}],
    }
    assert "/home/ana" not in text and "secret" not in text and "tk-1" not in text and "prefix" not in text
    err = capsys.readouterr().err
    assert "mylab 0.1 was installed from a local path" in err


def test_from_prefix_names_the_env_by_the_path_given_not_its_generation(
    conda_prefix: Path, tmp_path: Path, capsys, monkeypatch
):
    """`bootstrap env` makes `.envs/py310` a link to `.envs/.py310.gens/1`: the name is py310, not 1."""
    generation = tmp_path / ".envs" / ".py310.gens" / "1"
    generation.parent.mkdir(parents=True)
    conda_prefix.rename(generation)
    (tmp_path / ".envs" / "py310").symlink_to(".py310.gens/1")
    monkeypatch.chdir(tmp_path)
    for given in (".envs/py310", str(tmp_path / ".envs" / "py310"), ".envs/py310/"):
        assert export("--from-prefix", given, "-o", "-") == 0
        text = capsys.readouterr().out
        assert yaml.safe_load(text)["name"] == "py310" and "the environment 'py310'" in text, text


def test_from_prefix_keeps_a_requested_build(conda_prefix: Path, capsys):
    history = conda_prefix / "conda-meta" / "history"
    history.write_text(history.read_text().replace('"conda-forge::numpy"', '"conda-forge::numpy=*=*mkl"'))
    assert export("--from-prefix", str(conda_prefix), "-o", "-") == 0
    assert yaml.safe_load(capsys.readouterr().out)["dependencies"][0] == "conda-forge::numpy=2.2.6=*mkl"


def test_from_prefix_without_requested_files_takes_the_leaves(conda_prefix: Path, capsys):
    for marker in conda_prefix.glob("lib/python3.10/site-packages/*.dist-info/REQUESTED"):
        marker.unlink()
    (conda_prefix / "conda-meta" / "history").write_text("")
    assert export("--from-prefix", str(conda_prefix), "--name", "train2", "-o", "-") == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert data["name"] == "train2"
    # Leaves: nothing depends on ffmpeg or numpy. python is kept although pip depends on it;
    # pip is not, since python depends on it (as conda-forge's python does).
    assert data["dependencies"] == [
        "ffmpeg=7.1.1",
        "numpy=2.2.6",
        "pytables=3.10.2",
        "python=3.10.19",
        {"pip": ["torch==2.10.0"]},
    ]


def test_from_prefix_installed_by_rattler(tmp_path: Path, fixture_channel: Path, wheelhouse: Path, capsys):
    """py-rattler 0.28 writes an empty history; the requested specs live in the records."""
    import asyncio

    import rattler

    def vp(name, version):
        return rattler.GenericVirtualPackage(
            rattler.PackageName(name), rattler.Version(version), rattler.BuildString("0")
        )

    records = asyncio.run(
        rattler.solve(
            sources=[rattler.Channel(file_url(fixture_channel))],
            specs=["python=3.10", "pip", "torchlike"],
            platforms=["linux-64", "noarch"],
            virtual_packages=[vp("__unix", "0"), vp("__glibc", "2.28"), vp("__cuda", "12.4")],
        )
    )
    prefix = tmp_path / "env"
    requested = [rattler.MatchSpec(s) for s in ("python=3.10", "pip", "torchlike")]
    # 0.28's wrapper passes its MatchSpec objects where the binding expects the inner ones.
    asyncio.run(
        rattler.install(
            records,
            target_prefix=prefix,
            cache_dir=tmp_path / "pkgs",
            show_progress=False,
            requested_specs=[m._match_spec for m in requested],
        )
    )
    assert (prefix / "conda-meta" / "history").read_text() == ""
    site = prefix / "lib" / "python3.10" / "site-packages"
    uv = str(Path(sys.executable).with_name("uv"))
    done = subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--target",
            str(site),
            "--python-version",
            "3.10",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            "--offline",
            "alpha",
            "gamma",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (site / "beta-2.0.dist-info").is_dir()  # alpha's dependency

    assert export("--from-prefix", str(prefix), "-o", "-") == 2  # a file:// channel is a machine path
    assert "local directory" in capsys.readouterr().err
    assert export("--from-prefix", str(prefix), "--channel", "conda-forge", "-o", "-") == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert data["channels"] == ["conda-forge"] and data["platforms"] == ["linux-64"]
    assert data["dependencies"] == [
        "pip=25.0",
        "python=3.10.19",
        "torchlike=1.0",
        {"pip": ["alpha==1.1", "gamma==0.5"]},
    ]


# --------------------------------------------------------------------------- bad input


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_missing_lock(tmp_path: Path, capsys):
    project = make_project(tmp_path / "proj")
    out = tmp_path / "environment.yml"
    assert export("--root", str(project.root), "-o", str(out)) == 2
    err = one_line_error(capsys)
    assert "conda-lock.yml: no lock for this env" in err and "make lock" in err
    assert not out.exists()


def test_unknown_env(locked: Project, tmp_path: Path, capsys):
    assert export("py311", "--root", str(locked.root), "-o", str(tmp_path / "x.yml")) == 2
    assert "unknown env 'py311'" in one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where, words", [("missing/environment.yml", "does not exist"), (".", "is a directory")])
def test_unwritable_output(locked: Project, tmp_path: Path, capsys, where, words):
    before = sorted(tmp_path.iterdir())
    assert export("--root", str(locked.root), "-o", str(tmp_path / where)) == 2
    assert words in one_line_error(capsys)
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("target, what", [("conda-lock.yml", "the lock"), ("envs/py310.yml", "the spec")])
def test_the_files_it_reads_are_never_overwritten(locked: Project, tmp_path: Path, capsys, target, what):
    root = tmp_path / "proj"
    shutil.copytree(locked.root, root)
    before = (root / target).read_bytes()
    for pinned in ((), ("--pinned", "--platform", "linux-64")):
        assert export("--root", str(root), *pinned, "-o", str(root / target)) == 2
        assert f"is {what} this export is made from" in one_line_error(capsys)
        assert (root / target).read_bytes() == before


def test_a_failed_write_names_the_output_not_its_staging_file(conda_prefix: Path, tmp_path: Path, capsys):
    """Each file is staged beside its target first; a failure there (a full disk, or here a directory
    where the staging file goes) is reported against the -o path, and nothing is written."""
    out = tmp_path / "out" / "environment.yml"
    out.parent.mkdir()
    (out.parent / f".{out.name}.{os.getpid()}.staged").mkdir()
    assert export("--from-prefix", str(conda_prefix), "-o", str(out)) == 2
    err = one_line_error(capsys)
    assert err == f"error: {out}: cannot write: Is a directory; nothing was written (give -o another file)\n", err
    assert sorted(p.name for p in out.parent.iterdir()) == [f".{out.name}.{os.getpid()}.staged"]


def test_pinned_needs_a_platform_placeholder(locked: Project, tmp_path: Path, capsys):
    assert export("--root", str(locked.root), "--pinned", "-o", str(tmp_path / "env.lock")) == 2
    assert "{platform}" in one_line_error(capsys)
    assert export("--root", str(locked.root), "--pinned", "--platform", "win-64", "-o", str(tmp_path / "env.lock")) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["env.lock"]


def test_stale_lock_is_refused(locked: Project, tmp_path: Path, capsys):
    root = tmp_path / "proj"
    shutil.copytree(locked.root, root)
    write_spec(root, pip=("alpha==1.0", "gamma"))
    out = tmp_path / "environment.yml"
    assert export("--root", str(root), "-o", str(out)) == 2
    err = one_line_error(capsys)
    assert "stale for py310.yml" in err and "make lock" in err
    assert not out.exists()


def test_a_hand_edited_record_is_refused_though_the_inputs_are_unchanged(locked: Project, tmp_path: Path, capsys):
    root = tmp_path / "proj"
    shutil.copytree(locked.root, root)
    lock = root / "conda-lock.yml"
    lock.write_text(lock.read_text().replace("3.10.19", "3.9.23"))  # python's version and file name
    assert export("--root", str(root), "-o", str(tmp_path / "environment.yml")) == 2
    assert "python=3.10.*: not satisfied by the lock" in one_line_error(capsys)
    assert not (tmp_path / "environment.yml").exists()


@pytest.mark.parametrize(
    "flags, words",
    [
        (("--name", "my env"), "'my env' is not an environment name"),
        (("--pinned", "--name", "../escaped"), "'../escaped' is not an environment name"),
        (("--channel", ""), "--channel: '' is not a channel"),
        (("--channel", "http://"), "--channel: 'http://' is not a channel"),
        (("--channel", "https://x y/c"), "is not a channel"),
        (("--channel", "pytorch"), "'pytorch' is not allowed"),
    ],
)
def test_names_and_channels_conda_would_refuse(locked: Project, tmp_path: Path, capsys, flags, words):
    assert export("--root", str(locked.root), "-o", str(tmp_path / "environment.yml"), *flags) == 2
    assert words in one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_fifo_output_is_written_to_not_replaced(locked: Project, tmp_path: Path):
    import threading

    fifo = tmp_path / "environment.yml"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    assert export("--root", str(locked.root), "-o", str(fifo)) == 0
    reader.join(timeout=10)
    assert fifo.is_fifo() and "dependencies:" in received[0]


def test_a_linked_output_stays_linked(locked: Project, tmp_path: Path):
    target = tmp_path / "team" / "environment.yml"
    target.parent.mkdir()
    target.write_text("old\n")
    (tmp_path / "environment.yml").symlink_to(target)
    assert export("--root", str(locked.root), "-o", str(tmp_path / "environment.yml")) == 0
    assert (tmp_path / "environment.yml").is_symlink() and target.read_text().startswith("# ")


def test_a_comment_in_the_spec_is_not_staleness(locked: Project, tmp_path: Path):
    root = tmp_path / "proj"
    shutil.copytree(locked.root, root)
    spec = root / "envs" / "py310.yml"
    spec.write_text("# a comment\n" + spec.read_text())
    assert export("--root", str(root), "-o", str(tmp_path / "environment.yml")) == 0


def test_a_channel_given_as_a_url_in_a_spec_entry():
    lock = synthetic([("conda", "python", {"linux-64": "3.10.19"})], platforms=("linux-64",))
    spec = EnvSpec(
        Path("envs/py310.yml"),
        "py310",
        ("conda-forge",),
        ("linux-64",),
        ("https://conda.anaconda.org/conda-forge::python=3.10.*",),
    )
    assert [line.text for line in portable_from_lock(spec, lock).conda] == ["conda-forge::python=3.10.19"]


def test_a_local_channel_is_refused_unless_renamed():
    from bootstrap.errors import InputError

    lock = synthetic([("conda", "python", {"linux-64": "3.10.19"})], platforms=("linux-64",))
    spec = EnvSpec(Path("envs/py310.yml"), "py310", ("file:///home/ana/channel",), ("linux-64",), ("python",))
    with pytest.raises(InputError, match="local directory.*--channel"):
        portable_from_lock(spec, lock)
    renamed = portable_from_lock(spec, lock, ExportOptions(channels=("conda-forge",)))
    assert renamed.channels == ("conda-forge",)
    with pytest.raises(InputError, match="local directory"):
        portable_from_lock(spec, lock, ExportOptions(channels=("./channel",)))


def test_not_a_prefix(tmp_path: Path, capsys):
    assert export("--from-prefix", str(tmp_path), "-o", str(tmp_path / "e.yml")) == 2
    assert "no conda-meta" in one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the env side


@pytest.mark.parametrize(
    ("edit", "vouched"),
    [(("  - pip\n", "  - pip >=20\n"), False), (("  - pip\n", "  - pip  # a comment\n"), True)],
    ids=["data", "comment"],
)
def test_export_needs_only_the_stdlib_and_pyyaml(tmp_path: Path, edit: tuple, vouched: bool):
    """Inside a created env there is no conda-lock, rattler or packaging: export still works, and
    says the lock could not be checked unless the recorded inputs digests vouch for it."""
    root = tmp_path / "repo"
    (root / "envs").mkdir(parents=True)
    for name in ("envs/py310.yml", "envs/virtual-packages.yml", "conda-lock.yml"):
        shutil.copy(REPO / name, root / name)
    spec = root / "envs" / "py310.yml"
    spec.write_text(spec.read_text().replace(*edit, 1))
    script = (
        "import sys\n"
        "for m in ('rattler', 'conda_lock', 'packaging', 'pydantic', 'pynvml', 'torch'): sys.modules[m] = None\n"
        "from bootstrap.cli import main\n"
        f"sys.exit(main(['export', '--root', {str(root)!r}, '-o', '-']))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("      - pillow==12.3.0\n")
    assert "cannot" not in done.stdout and ("is not installed here to check it" in done.stderr) != vouched
