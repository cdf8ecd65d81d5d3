"""`bootstrap lock` end to end against the fixture channel and wheelhouse, offline.

The conda part is solved with py-rattler over a local-directory mirror, a
loopback HTTP mirror and a plain file:// channel; the pip part with uv over
the wheelhouse. The written lock is then handed to conda-lock itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bootstrap.cli import main
from bootstrap.lock.lockfile import META_MIRRORS, read_lock
from bootstrap.project import Project
from tests.fixtures import REPO
from tests.fixtures.conda_channel import CANONICAL_CHANNEL, file_url
from tests.fixtures.project import VIRTUAL_PACKAGES, copy_project, make_project, write_spec, write_virtual_packages

CONDA_LOCK = str(Path(sys.executable).with_name("conda-lock"))


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path / "proj")


def lock_args(project: Project, wheelhouse: Path, *extra: str) -> list[str]:
    return [
        "lock",
        "--root",
        str(project.root),
        "--cache-dir",
        str(project.root / ".cache"),
        "--pip-find-links",
        str(wheelhouse),
        "--pip-no-index",
        "--pip-offline",
        *extra,
    ]


def run_lock(project: Project, wheelhouse: Path, *extra: str) -> int:
    return main(lock_args(project, wheelhouse, *extra))


@pytest.fixture(scope="module")
def locked_once(tmp_path_factory, fixture_channel: Path, wheelhouse: Path) -> Project:
    """A project locked from the fixture channel used as a directory mirror of conda-forge."""
    project = make_project(tmp_path_factory.mktemp("locked") / "proj")
    assert run_lock(project, wheelhouse, "--mirror", f"conda-forge={fixture_channel}") == 0
    return project


@pytest.fixture
def locked(locked_once: Project, tmp_path: Path) -> Project:
    """A private copy of `locked_once` that a test may edit."""
    return copy_project(locked_once, tmp_path / "proj")


def entry(lock, platform: str, name: str):
    (found,) = [p for p in lock.packages if p.platform == platform and p.name == name]
    return found


def test_lock_from_directory_mirror(locked: Project, fixture_channel: Path) -> None:
    lock = read_lock(locked.lock_path("py310"))
    assert lock.platforms == ("linux-64", "osx-arm64", "win-64")
    for platform in lock.platforms:
        python = entry(lock, platform, "python")
        assert python.version == "3.10.19"
        assert python.url == f"{CANONICAL_CHANNEL}/{platform}/{python.filename}"  # canonical, not the mirror
        assert len(python.sha256) == 64 and len(python.md5) == 32
        assert entry(lock, platform, "alpha").version == "1.1"
        assert entry(lock, platform, "beta").version == "2.0"  # pulled in by alpha 1.1
        assert entry(lock, platform, "alpha").dependencies == {"beta": ">=2"}  # alpha 1.1 requires `beta>=2`
    # __cuda 12.4 on linux only: the CUDA build exactly where the platform allows it.
    assert entry(lock, "linux-64", "torchlike").build.startswith("cuda12")
    assert entry(lock, "win-64", "torchlike").build.startswith("cpu")
    assert entry(lock, "osx-arm64", "torchlike").build.startswith("cpu")
    assert all(str(fixture_channel) not in p.url for p in lock.packages)
    # The channel the mirror served, never the directory: a committed lock carries no machine's path.
    assert lock.custom[META_MIRRORS] == CANONICAL_CHANNEL
    assert str(fixture_channel) not in locked.lock_path("py310").read_text()


@pytest.mark.parametrize("written", ["relative", "file-url"])
def test_a_lock_made_through_a_local_mirror_records_no_path(
    tmp_path: Path, fixture_channel: Path, wheelhouse: Path, monkeypatch, written: str
) -> None:
    """However the directory is written (`../snapshot/conda-forge` as the Makefile's snapshot target
    does, or a file:// URL), the lock names the canonical channel it stood in for and nothing of where."""
    project = make_project(tmp_path / "proj")
    (tmp_path / "snapshot-of-cf").symlink_to(fixture_channel)
    monkeypatch.chdir(project.root)
    target = "../snapshot-of-cf" if written == "relative" else file_url(tmp_path / "snapshot-of-cf")
    assert run_lock(project, wheelhouse, "--mirror", f"conda-forge={target}") == 0
    text = project.lock_path("py310").read_text()
    lock = read_lock(project.lock_path("py310"))
    assert lock.custom[META_MIRRORS] == CANONICAL_CHANNEL
    assert entry(lock, "linux-64", "python").url.startswith(CANONICAL_CHANNEL + "/linux-64/")
    for path in ("snapshot-of-cf", str(fixture_channel), str(tmp_path)):
        assert path not in text


@pytest.mark.slow
def test_lock_over_http_mirror_keeps_canonical_urls_and_no_credentials(
    project: Project, channel_server, wheelhouse: Path
) -> None:
    with_credentials = channel_server.replace("http://", "http://alice:hunter2@")
    assert run_lock(project, wheelhouse, "--mirror", f"{CANONICAL_CHANNEL}={with_credentials}") == 0
    text = project.lock_path("py310").read_text()
    lock = read_lock(project.lock_path("py310"))
    assert entry(lock, "linux-64", "python").url.startswith(CANONICAL_CHANNEL + "/linux-64/")
    assert channel_server.requested("linux-64/repodata.json")  # the mirror really served it
    assert "hunter2" not in text and "alice" not in text
    assert lock.custom[META_MIRRORS] == CANONICAL_CHANNEL  # which channel a mirror served, not its host
    assert channel_server.split("://", 1)[1] not in text


@pytest.mark.slow  # a real lock; the mirror tests cover the solve, this the file:// channel URL in the lock
def test_lock_from_file_channel(tmp_path: Path, fixture_channel: Path, wheelhouse: Path) -> None:
    project = make_project(tmp_path / "proj", channels=(file_url(fixture_channel),))
    assert run_lock(project, wheelhouse) == 0
    lock = read_lock(project.lock_path("py310"))
    assert entry(lock, "win-64", "python").url.startswith(file_url(fixture_channel) + "/win-64/")


def test_conda_lock_parses_renders_and_accepts_the_hash(locked: Project) -> None:
    from conda_lock.lockfile import parse_conda_lock_file

    from bootstrap.lock.content_hash import conda_lock_accepts_hash
    from bootstrap.lock.spec import read_spec, read_virtual_packages

    path = locked.lock_path("py310")
    parsed = parse_conda_lock_file(path)
    assert {p.name for p in parsed.package} >= {"python", "pip", "torchlike", "alpha", "beta", "gamma"}
    lock = read_lock(path)
    for platform, value in lock.content_hash.items():
        assert conda_lock_accepts_hash(
            read_spec(locked.spec_path("py310")), read_virtual_packages(locked.virtual_packages_path), platform, value
        )
    out = locked.root / "rendered"
    out.mkdir()
    done = subprocess.run(
        [
            CONDA_LOCK,
            "render",
            "-k",
            "explicit",
            "-p",
            "linux-64",
            "--filename-template",
            f"{out}/{{platform}}.lock",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=locked.root,
    )
    assert done.returncode == 0, done.stderr
    rendered = (out / "linux-64.lock").read_text()
    assert "@EXPLICIT" in rendered
    assert f"{CANONICAL_CHANNEL}/linux-64/{entry(lock, 'linux-64', 'python').filename}#" in rendered


def test_hash_agrees_with_conda_lock_but_not_with_its_defaults(locked: Project) -> None:
    """Without our virtual-packages.yml conda-lock would compute another hash (its __cuda 11.4 default)."""
    from conda_lock.content_hash import compute_content_hashes
    from conda_lock.virtual_package import default_virtual_package_repodata

    from bootstrap.lock.content_hash import conda_lock_inputs

    lock = read_lock(locked.lock_path("py310"))
    with conda_lock_inputs(locked.spec_path("py310"), locked.virtual_packages_path) as (lock_spec, _):
        defaults = compute_content_hashes(lock_spec, default_virtual_package_repodata())
    assert defaults["linux-64"] != lock.content_hash["linux-64"]


def check(project: Project, capsys, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["lock", "--check", "--root", str(project.root), *extra])
    return code, capsys.readouterr().out


def test_check_fresh(locked: Project, capsys) -> None:
    code, out = check(locked, capsys)
    assert code == 0, out
    assert "py310: conda-lock.yml is fresh" in out


def test_records_keep_their_virtual_package_dependencies_and_stay_fresh(locked: Project, capsys) -> None:
    """conda-lock writes `__glibc`/`__unix` among a record's dependencies; they ask the machine, so
    no record is missing for them."""
    lock = read_lock(locked.lock_path("py310"))
    assert entry(lock, "linux-64", "zlibstub").dependencies == {"__glibc": ">=2.17,<3.0.a0", "__unix": ""}
    assert entry(lock, "linux-64", "python").virtual_dependencies == {"__glibc": ">=2.17"}
    assert entry(lock, "osx-arm64", "python").virtual_dependencies == {"__osx": ">=11.0"}
    assert entry(lock, "win-64", "zlibstub").dependencies == {}
    assert check(locked, capsys) == (0, "py310: conda-lock.yml is fresh\n")


def test_to_locked_keeps_every_dependency_as_conda_lock_writes_it() -> None:
    from rattler import BuildString, PackageRecord, RepoDataRecord

    from bootstrap.lock.conda import to_locked

    depends = [
        "__glibc >=2.17,<3.0.a0",
        "__unix",
        "libgcc >=14",
        "python_abi 3.10.* *_cp310",
        "pip >=24 py_0",
        "libgcc <15",
        "_libgcc_mutex 0.1 conda_forge",
    ]
    record = RepoDataRecord(
        PackageRecord(
            "libfoo", "1.0", BuildString("h0_0"), 0, "linux-64", depends=depends, sha256=bytes(32), md5=bytes(16)
        ),
        "libfoo-1.0-h0_0.conda",
        f"{CANONICAL_CHANNEL}/linux-64/libfoo-1.0-h0_0.conda",
        CANONICAL_CHANNEL,
    )
    locked = to_locked(record, "linux-64")
    # conda-lock's conda solver: the version part of each MatchSpec, '' for none, one name's specs merged
    assert locked.dependencies == {
        "__glibc": ">=2.17,<3.0.a0",
        "__unix": "",
        "libgcc": "<15,>=14",
        "python_abi": "3.10.*",
        "pip": ">=24",
        "_libgcc_mutex": "0.1",
    }
    assert locked.locked_dependencies == {
        "libgcc": "<15,>=14",
        "python_abi": "3.10.*",
        "pip": ">=24",
        "_libgcc_mutex": "0.1",
    }
    assert locked.virtual_dependencies == {"__glibc": ">=2.17,<3.0.a0", "__unix": ""}


def test_to_locked_names_a_record_without_the_hashes_a_lock_records() -> None:
    from rattler import BuildString, PackageRecord, RepoDataRecord

    from bootstrap.errors import SolveError
    from bootstrap.lock.conda import to_locked

    url = f"{CANONICAL_CHANNEL}/linux-64/libfoo-1.0-h0_0.tar.bz2"
    record = RepoDataRecord(
        PackageRecord("libfoo", "1.0", BuildString("h0_0"), 0, "linux-64", md5=bytes(16)),
        "libfoo-1.0-h0_0.tar.bz2",
        url,
        CANONICAL_CHANNEL,
    )
    with pytest.raises(SolveError, match=f"^{re.escape(url)}: the channel's repodata gives no sha256"):
        to_locked(record, "linux-64")


def test_check_catches_an_edited_spec(locked: Project, capsys) -> None:
    write_spec(locked.root, conda=("python=3.9.*", "pip", "torchlike"))
    code, out = check(locked, capsys)
    assert code == 1
    for platform in ("linux-64", "osx-arm64", "win-64"):
        assert f"{platform}: python=3.9.*: not satisfied by the lock (locked: python 3.10.19" in out
        assert f"{platform}: content_hash: does not match" in out


def test_check_catches_an_added_platform(locked: Project, capsys) -> None:
    write_virtual_packages(locked.root, {**VIRTUAL_PACKAGES, "osx-64": {"__unix": "0", "__osx": "11.0"}})
    write_spec(locked.root, platforms=("linux-64", "osx-arm64", "win-64", "osx-64"))
    code, out = check(locked, capsys)
    assert code == 1
    assert "osx-64: platforms: in the spec but not locked" in out


def test_check_catches_a_removed_platform(locked: Project, capsys) -> None:
    """A platform dropped from the spec is stale, not a crash in conda-lock's hash (KeyError)."""
    write_spec(locked.root, platforms=("linux-64", "win-64"))
    code, out = check(locked, capsys)
    assert code == 1
    assert "osx-arm64: platforms: locked but no longer in the spec" in out


def test_check_catches_a_removed_record(locked: Project, capsys) -> None:
    """Removing a dependency nobody names in the spec is caught by the closure check."""
    path = locked.lock_path("py310")
    data = yaml.safe_load(path.read_text())
    data["package"] = [p for p in data["package"] if not (p["name"] == "python_abi" and p["platform"] == "win-64")]
    path.write_text(yaml.safe_dump(data))
    code, out = check(locked, capsys)
    assert code == 1
    assert "win-64: python_abi (needed by python): missing from the lock" in out
    assert "linux-64" not in out  # only the platform that lost it


def test_check_catches_an_edited_pip_pin(locked: Project, capsys) -> None:
    path = locked.lock_path("py310")
    text = path.read_text()
    data = yaml.safe_load(text)
    for package in data["package"]:
        if package["name"] == "alpha" and package["platform"] == "osx-arm64":
            # the version and its file name, as a consistent hand edit would (the reader holds them together)
            package["url"] = package["url"].replace(f"/alpha-{package['version']}-", "/alpha-0.9-")
            package["version"] = "0.9"
    path.write_text(yaml.safe_dump(data))
    code, out = check(locked, capsys)
    assert code == 1
    assert "osx-arm64: pip: alpha>=1: locked 0.9 does not satisfy it" in out


def test_check_catches_a_hand_edited_hash(locked: Project, capsys) -> None:
    path = locked.lock_path("py310")
    text = path.read_text()
    lock = read_lock(path)
    path.write_text(text.replace(lock.content_hash["win-64"], "ab" * 32))
    code, out = check(locked, capsys)
    assert code == 1
    assert out.count("content_hash") == 1 and "win-64: content_hash" in out


def test_check_survives_a_comment_edit_in_the_spec(locked: Project, capsys) -> None:
    """A comment changes the bytes (no memo) but not conda-lock's hash: still fresh."""
    spec = locked.spec_path("py310")
    spec.write_text("# a comment\n" + spec.read_text())
    code, out = check(locked, capsys)
    assert code == 0, out


def check_in_a_process(project: Project) -> tuple[int, bool]:
    """`lock --check` in a fresh interpreter: (exit code, whether it imported conda-lock, the slow path)."""
    probe = (
        "import sys; from bootstrap.cli import main; code = main(sys.argv[1:]); "
        "print(code, 'conda_lock' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "lock", "--check", "--root", str(project.root)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    code, slow = done.stdout.split()[-2:]
    return int(code), slow == "True"


COSMETIC_EDITS = {
    "a comment": lambda text: "# why this env exists\n" + text.replace("\n", "  # trailing\n", 1),
    "reordered keys": lambda text: yaml.safe_dump(dict(reversed(list(yaml.safe_load(text).items()))), sort_keys=False),
    "whitespace": lambda text: "\n\n" + text.replace("\n", "\n\n") + "\n   \n",
    "flow style": lambda text: yaml.safe_dump(yaml.safe_load(text), default_flow_style=True),
}


@pytest.mark.parametrize("edit", sorted(COSMETIC_EDITS))
def test_an_edit_that_changes_nothing_locked_stays_on_the_fast_path(locked: Project, edit: str) -> None:
    for path in (locked.spec_path("py310"), locked.virtual_packages_path):
        path.write_text(COSMETIC_EDITS[edit](path.read_text()))
    assert check_in_a_process(locked) == (0, False)


def test_an_edit_of_what_is_locked_leaves_the_fast_path(locked: Project) -> None:
    # A reordered list is content (channel order is priority): conda-lock, the authority, decides it is fresh.
    write_spec(locked.root, pip=("gamma", "alpha>=1"))
    assert check_in_a_process(locked) == (0, True)
    write_spec(locked.root, conda=("python=3.9.*", "pip", "torchlike"))
    assert check_in_a_process(locked) == (1, True)


def test_dry_run_writes_nothing_and_relock_prints_a_diff(
    locked: Project, wheelhouse: Path, fixture_channel: Path, capsys
) -> None:
    path = locked.lock_path("py310")
    before = path.read_bytes()
    write_spec(locked.root, pip=("alpha==1.0", "gamma"))
    capsys.readouterr()
    assert run_lock(locked, wheelhouse, "--mirror", f"conda-forge={fixture_channel}", "--dry-run") == 0
    out = capsys.readouterr().out
    assert path.read_bytes() == before
    assert "would write conda-lock.yml" in out
    assert "~ alpha 1.1 -> 1.0" in out
    assert "- beta 2.0" in out  # alpha 1.0 does not need beta
    assert not list(path.parent.glob(".conda-lock.yml*"))  # no temp left behind


@pytest.mark.slow  # three real solves and uv resolutions
def test_lock_says_each_long_phase_on_stderr_and_quiet_says_none(
    locked: Project, wheelhouse: Path, fixture_channel: Path, capsys
) -> None:
    """A relock is silent for as long as rattler solves and uv resolves: each phase says it is starting,
    on stderr only, so stdout and --json read as before; --quiet drops those lines."""
    write_spec(locked.root, pip=("alpha==1.0", "gamma"))
    mirror = ("--mirror", f"conda-forge={fixture_channel}", "--dry-run")
    capsys.readouterr()
    assert run_lock(locked, wheelhouse, *mirror) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        "py310 linux-64: solving the conda part ...",
        "py310 osx-arm64: solving the conda part ...",
        "py310 win-64: solving the conda part ...",
        "py310 linux-64, osx-arm64, win-64: resolving the pip part with uv ...",
    ]
    assert "solving" not in out and "would write conda-lock.yml" in out
    assert run_lock(locked, wheelhouse, *mirror, "--quiet") == 0
    quiet_out, quiet_err = capsys.readouterr()
    assert quiet_err == "" and quiet_out.splitlines()[1:] == out.splitlines()[1:]  # the first line: timings
    assert run_lock(locked, wheelhouse, *mirror, "--json", "--quiet") == 0
    json_out, json_err = capsys.readouterr()
    assert json_err == "" and json.loads(json_out)["format"] == "bootstrap.lock"


@pytest.mark.slow
def test_lock_with_json_prints_what_moved_per_platform(
    locked: Project, wheelhouse: Path, fixture_channel: Path, capsys
) -> None:
    path = locked.lock_path("py310")
    before = path.read_bytes()
    write_spec(locked.root, pip=("alpha==1.0", "gamma"))
    capsys.readouterr()
    assert run_lock(locked, wheelhouse, "--mirror", f"conda-forge={fixture_channel}", "--dry-run", "--json") == 0
    out, err = capsys.readouterr()
    data = json.loads(out)  # stdout holds the envelope only
    assert (data["format"], data["version"], data["dry_run"]) == ("bootstrap.lock", 1, True)
    (env,) = data["envs"]
    assert (env["env"], env["lock_path"], env["written"], env["new"]) == ("py310", str(path), False, False)
    assert env["solved"] == ["linux-64", "osx-arm64", "win-64"] and sorted(env["seconds"]) == [
        "conda_solve",
        "pip_resolve",
        "write",
    ]
    lock = read_lock(path)
    for platform in env["platforms"]:
        assert platform["conda_packages"] == len(lock.for_platform(platform["platform"], "conda"))
        assert platform["pip_packages"] == len(lock.for_platform(platform["platform"], "pip")) - 1  # beta goes
        assert (platform["added"], platform["removed"], platform["changed"]) == ([], ["beta 2.0"], ["alpha 1.1 -> 1.0"])
    assert path.read_bytes() == before
    assert (
        run_lock(locked, wheelhouse, "--mirror", f"conda-forge={fixture_channel}", "--platform", "win-64", "--json")
        == 0
    )
    (env,) = json.loads(capsys.readouterr().out)["envs"]
    assert (env["written"], env["solved"]) == (True, ["win-64"])
    assert [p["changed"] for p in env["platforms"]] == [[], [], ["alpha 1.1 -> 1.0"]]  # the others kept


def test_check_with_json_lists_each_stale_entry_and_keeps_the_exit_codes(locked: Project, capsys) -> None:
    code, out = check(locked, capsys, "--json")
    fresh = json.loads(out)
    assert code == 0
    assert fresh == {
        "format": "bootstrap.lock-check",
        "version": 1,
        "fresh": True,
        "envs": [
            {
                "env": "py310",
                "variant": None,
                "lock_path": str(locked.lock_path("py310")),
                "platforms": ["linux-64", "osx-arm64", "win-64"],
                "fresh": True,
                "stale": [],
            }
        ],
    }
    path = locked.lock_path("py310")
    data = yaml.safe_load(path.read_text())
    data["package"] = [p for p in data["package"] if not (p["name"] == "python_abi" and p["platform"] == "win-64")]
    path.write_text(yaml.safe_dump(data))
    code, out = check(locked, capsys, "--json", "--platform", "win-64")
    stale = json.loads(out)
    assert code == 1 and stale["fresh"] is False and stale["envs"][0]["platforms"] == ["win-64"]
    assert {
        "platform": "win-64",
        "subject": "python_abi (needed by python)",
        "reason": "missing from the lock",
    } in stale["envs"][0]["stale"]
    code, out = check(locked, capsys, "--json", "--platform", "linux-32")
    assert code == 2 and json.loads(out)["error"]["type"] == "InputError"


def test_relock_one_platform_keeps_the_others(locked: Project, wheelhouse: Path, fixture_channel: Path) -> None:
    before = read_lock(locked.lock_path("py310"))
    write_spec(locked.root, pip=("alpha==1.0", "gamma"))
    assert run_lock(locked, wheelhouse, "--mirror", f"conda-forge={fixture_channel}", "--platform", "win-64") == 0
    after = read_lock(locked.lock_path("py310"))
    assert entry(after, "win-64", "alpha").version == "1.0"
    assert entry(after, "linux-64", "alpha") == entry(before, "linux-64", "alpha")


@pytest.mark.slow
def test_relocking_one_platform_leaves_the_others_stale_hash(
    locked: Project, wheelhouse: Path, fixture_channel: Path, capsys
) -> None:
    """A platform kept by `--platform` keeps its old content_hash: it was not solved for the new inputs."""
    write_virtual_packages(
        locked.root, {**VIRTUAL_PACKAGES, "linux-64": {**VIRTUAL_PACKAGES["linux-64"], "__glibc": "2.17"}}
    )
    assert check(locked, capsys)[0] == 1
    assert run_lock(locked, wheelhouse, "--mirror", f"conda-forge={fixture_channel}", "--platform", "win-64") == 0
    code, out = check(locked, capsys)
    assert code == 1 and "linux-64: content_hash: does not match" in out, out
    assert "win-64" not in out and "osx-arm64" not in out
    assert run_lock(locked, wheelhouse, "--mirror", f"conda-forge={fixture_channel}") == 0
    assert check(locked, capsys)[0] == 0


@pytest.mark.slow
def test_two_relocks_of_one_env_take_turns(locked: Project, wheelhouse: Path, fixture_channel: Path) -> None:
    """`--platform linux-64` and `--platform win-64` at once: each reads the lock the other wrote."""
    write_spec(locked.root, pip=("alpha==1.0", "gamma"))
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bootstrap",
                *lock_args(locked, wheelhouse, "--mirror", f"conda-forge={fixture_channel}", "--platform", platform),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for platform in ("linux-64", "win-64")
    ]
    assert [run.wait(timeout=120) for run in runs] == [0, 0], [run.stderr.read() for run in runs]
    lock = read_lock(locked.lock_path("py310"))
    assert entry(lock, "linux-64", "alpha").version == entry(lock, "win-64", "alpha").version == "1.0"


@pytest.mark.slow
def test_a_pip_requirement_whose_marker_is_false_asks_nothing(
    project: Project, wheelhouse: Path, fixture_channel: Path, capsys
) -> None:
    write_spec(project.root, pip=("alpha>=1", "gamma; sys_platform == 'win32'"))
    assert run_lock(project, wheelhouse, "--mirror", f"conda-forge={fixture_channel}") == 0
    lock = read_lock(project.lock_path("py310"))
    assert [p.platform for p in lock.packages if p.name == "gamma"] == ["win-64"]
    code, out = check(project, capsys)
    assert code == 0, out


@pytest.mark.slow  # a real lock first
def test_a_virtual_package_in_the_spec_is_not_staleness(
    project: Project, wheelhouse: Path, fixture_channel: Path, capsys
) -> None:
    """`__cuda>=12` asks the machine (virtual-packages.yml, covered by the content hash), never the lock."""
    write_spec(project.root, platforms=("linux-64",), conda=("python=3.10.*", "pip", "torchlike", "__cuda>=12"))
    assert run_lock(project, wheelhouse, "--mirror", f"conda-forge={fixture_channel}") == 0
    code, out = check(project, capsys)
    assert code == 0, out


def test_check_catches_a_record_nothing_needs(locked: Project, capsys) -> None:
    write_spec(locked.root, pip=("alpha>=1",))  # gamma stays in the lock
    code, out = check(locked, capsys)
    assert code == 1
    for platform in ("linux-64", "osx-arm64", "win-64"):
        assert f"{platform}: pip: gamma 0.5: locked, but nothing in the spec needs it" in out
    assert "beta" not in out  # alpha needs it


def test_check_names_a_constraint_it_cannot_parse(locked: Project, capsys) -> None:
    path = locked.lock_path("py310")
    data = yaml.safe_load(path.read_text())
    python = next(p for p in data["package"] if p["name"] == "python" and p["platform"] == "win-64")
    dependency = sorted(python["dependencies"])[0]
    python["dependencies"][dependency] = ">>>garbage"
    path.write_text(yaml.safe_dump(data))
    assert main(["lock", "--check", "--root", str(locked.root)]) == 2
    error = capsys.readouterr().err
    assert f"package python.dependencies.{dependency}: " in error and "(win-64)" in error and error.count("\n") == 1, (
        error
    )


def test_check_of_some_platforms_and_the_flags_it_refuses(locked: Project, capsys) -> None:
    path = locked.lock_path("py310")
    data = yaml.safe_load(path.read_text())
    data["package"] = [p for p in data["package"] if not (p["name"] == "python_abi" and p["platform"] == "win-64")]
    path.write_text(yaml.safe_dump(data))
    assert check(locked, capsys, "--platform", "win-64")[0] == 1
    assert check(locked, capsys, "--platform", "linux-64") == (0, "py310: conda-lock.yml is fresh\n")
    for flags in (
        ("--platform", "linux-32"),
        ("--mirror", "conda-forge=/nowhere"),
        ("--dry-run",),
        ("--pip-offline",),
        ("--cache-dir", str(locked.root / "cache")),
    ):
        assert check(locked, capsys, *flags)[0] == 2


def test_check_leaves_no_temporary_directory(locked: Project, tmp_path: Path) -> None:
    """conda-lock's fake repodata for the content hash is removed, though `python -m bootstrap` skips atexit."""
    spec = locked.spec_path("py310")
    spec.write_text("# a comment: the inputs digest no longer vouches, so conda-lock hashes\n" + spec.read_text())
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "bootstrap", "lock", "--check", "--root", str(locked.root)],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(tmp.iterdir()) == []


def test_committed_locks_are_fresh(capsys) -> None:
    repo = REPO
    capsys.readouterr()
    assert main(["lock", "--check", "--root", str(repo)]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("door", ["basic-auth", pytest.param("token", marks=pytest.mark.slow)])
def test_lock_fetches_from_a_private_mirror_and_records_no_credential(
    project: Project, fixture_channel: Path, wheelhouse: Path, capfd, door: str
) -> None:
    """The mirror's `user:password@` reaches the server (rattler drops it from the URL: 401 before),
    its `/t/TOKEN/` too; neither reaches the lock nor the output."""
    from tests.fixtures.conda_channel import serve_directory

    login, token = ("alice:hunter2", None) if door == "basic-auth" else (None, "tk-SECRET")
    with serve_directory(fixture_channel, login=login, token=token) as server:
        target = server.replace("http://", "http://alice:hunter2@") if login else f"{server}/t/{token}"
        code = run_lock(project, wheelhouse, "--mirror", f"conda-forge={target}")
        out, err = capfd.readouterr()
        assert code == 0, err
        assert server.requested("/linux-64/repodata.json")
    text = project.lock_path("py310").read_text()
    for secret in ("hunter2", "alice", "tk-SECRET"):
        assert secret not in text and secret not in out + err
    assert entry(read_lock(project.lock_path("py310")), "linux-64", "python").url.startswith(CANONICAL_CHANNEL)


def test_lock_from_a_private_mirror_with_a_wrong_password_shows_no_password(
    project: Project, fixture_channel: Path, wheelhouse: Path, capfd
) -> None:
    from tests.fixtures.conda_channel import serve_directory

    with serve_directory(fixture_channel, login="alice:hunter2") as server:
        code = run_lock(
            project, wheelhouse, "--mirror", "conda-forge=" + server.replace("http://", "http://alice:WRONGPW@")
        )
    out, err = capfd.readouterr()
    assert code != 0 and "401" in err and "WRONGPW" not in out + err and "alice" not in out + err, err
