"""Bad input to `bootstrap lock`: one line naming file, field and fix; exit 2; nothing written.

Run as a real subprocess so the exit code, stderr and absence of a traceback
are what a user sees.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap.cli import main
from tests.fixtures import REPO
from tests.fixtures.project import make_project, write_spec


def bootstrap(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bootstrap", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(cwd)},
        timeout=120,
    )


def files(root: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and ".cache" not in p.parts}


def assert_clean_failure(done: subprocess.CompletedProcess, *phrases: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    # Past the lines that say which solve or resolve started, one line: the error.
    errors = [line for line in done.stderr.splitlines() if not line.endswith(" ...")]
    assert len(errors) == 1 and errors[0].startswith("error: ") and done.stderr.endswith("\n"), done.stderr
    for phrase in phrases:
        assert phrase in done.stderr, done.stderr


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_project(tmp_path / "proj").root


def lock(root: Path, *args: str, wheelhouse: Path) -> subprocess.CompletedProcess:
    return bootstrap(
        "lock",
        "--cache-dir",
        str(root / ".cache"),
        "--pip-find-links",
        str(wheelhouse),
        "--pip-no-index",
        "--pip-offline",
        *args,
        cwd=root,
    )


def test_malformed_yaml(root: Path, wheelhouse: Path) -> None:
    spec = root / "envs" / "py310.yml"
    spec.write_text(spec.read_text() + "  - [oops\n")
    before = files(root)
    done = lock(root, wheelhouse=wheelhouse)
    assert_clean_failure(done, "envs/py310.yml:", "malformed YAML", "fix the syntax")
    assert len(done.stderr.strip().splitlines()) == 1
    assert files(root) == before


def test_unknown_key(root: Path, wheelhouse: Path) -> None:
    spec = root / "envs" / "py310.yml"
    spec.write_text(spec.read_text() + "variables: {A: 1}\n")
    assert_clean_failure(lock(root, wheelhouse=wheelhouse), "py310.yml", "unknown key 'variables'", "allowed keys")
    assert not (root / "conda-lock.yml").exists()


def test_unknown_platform(root: Path, wheelhouse: Path) -> None:
    done = lock(root, "--platform", "linux-s390x", wheelhouse=wheelhouse)
    assert_clean_failure(done, "--platform", "'linux-s390x' is not among", "add it to `platforms:`")
    assert not (root / "conda-lock.yml").exists()


def test_unknown_env(root: Path, wheelhouse: Path) -> None:
    assert_clean_failure(lock(root, "py27", wheelhouse=wheelhouse), "unknown env 'py27'", "known envs: py310")


def test_unsatisfiable_conda_spec_shows_the_solver(root: Path, fixture_channel: Path, wheelhouse: Path) -> None:
    write_spec(root, conda=("python=3.10.*", "pip", "torchlike >=9"))
    done = lock(root, "--mirror", f"conda-forge={fixture_channel}", wheelhouse=wheelhouse)
    assert_clean_failure(done, "dependencies: cannot be solved for linux-64", "torchlike >=9")
    assert not (root / "conda-lock.yml").exists()


def test_unsatisfiable_pip_spec_shows_uv(root: Path, fixture_channel: Path, wheelhouse: Path) -> None:
    write_spec(root, pip=("alpha>=5",))
    done = lock(root, "--mirror", f"conda-forge={fixture_channel}", wheelhouse=wheelhouse)
    assert_clean_failure(done, "pip: for", "cannot be satisfied", "alpha>=5")
    assert not (root / "conda-lock.yml").exists()


def test_bad_pip_requirement(root: Path, wheelhouse: Path) -> None:
    write_spec(root, pip=("alpha>=>1",))
    assert_clean_failure(lock(root, wheelhouse=wheelhouse), "pip: 'alpha>=>1' is not a valid requirement")


def test_bad_match_spec(root: Path, wheelhouse: Path, fixture_channel: Path) -> None:
    write_spec(root, conda=("python=3.10.*", "pip", "torchlike >=>1"))
    done = lock(root, "--mirror", f"conda-forge={fixture_channel}", wheelhouse=wheelhouse)
    assert_clean_failure(done, "'torchlike >=>1' is not a valid conda match spec")


def test_unreachable_mirror_names_url_and_option(root: Path, wheelhouse: Path) -> None:
    done = lock(root, "--mirror", "conda-forge=http://u:hunter2@127.0.0.1:9/conda-forge", wheelhouse=wheelhouse)
    assert_clean_failure(
        done, "http://127.0.0.1:9/conda-forge (mirror of https://conda.anaconda.org/conda-forge)", "check --mirror"
    )
    assert "hunter2" not in done.stderr
    assert not (root / "conda-lock.yml").exists()


def test_missing_directory_mirror(root: Path, wheelhouse: Path) -> None:
    done = lock(root, "--mirror", f"conda-forge={root / 'nowhere'}", wheelhouse=wheelhouse)
    assert_clean_failure(done, "nowhere/linux-64/repodata.json: not found", "--mirror")


def test_bad_mirror_syntax(root: Path, wheelhouse: Path) -> None:
    assert_clean_failure(lock(root, "--mirror", "conda-forge", wheelhouse=wheelhouse), "--mirror", "CANONICAL=URL")


def test_a_channel_mirrored_twice(root: Path, fixture_channel: Path, wheelhouse: Path) -> None:
    done = lock(
        root,
        "--mirror",
        f"conda-forge={fixture_channel}",
        "--mirror",
        f"https://conda.anaconda.org/conda-forge/={root}",
        wheelhouse=wheelhouse,
    )
    assert_clean_failure(
        done, "--mirror: https://conda.anaconda.org/conda-forge is mirrored twice", "one --mirror per channel"
    )


def test_corrupt_existing_lock_is_left_alone(root: Path, fixture_channel: Path, wheelhouse: Path) -> None:
    path = root / "conda-lock.yml"
    path.write_text("version: 1\nmetadata: {}\npackage: []\n")
    before = files(root)
    done = lock(root, "--mirror", f"conda-forge={fixture_channel}", wheelhouse=wheelhouse)
    assert_clean_failure(
        done, "conda-lock.yml", "metadata.content_hash", "restore it (e.g. `git checkout conda-lock.yml`) or remove it"
    )
    assert files(root) == before
    check = bootstrap("lock", "--check", cwd=root)
    assert_clean_failure(check, "conda-lock.yml", "metadata.content_hash")


def test_check_without_lock(root: Path) -> None:
    assert_clean_failure(bootstrap("lock", "--check", cwd=root), "no lock for this env", "make lock")


SYNTAX = {
    "match spec": (dict(conda=("python=3.10.*", "pip", "torchlike >=>1")), "is not a valid conda match spec"),
    "name rattler refuses with a cause": (
        dict(conda=("python=3.10.*", "pip", "nümpy")),
        "'nümpy' is not a valid conda match spec: invalid package name",
    ),
    "package URL": (
        dict(conda=("python=3.10.*", "pip", "https://conda.anaconda.org/conda-forge/noarch/t-1-0.conda")),
        "dependencies: 'https://conda.anaconda.org/conda-forge/noarch/t-1-0.conda' is a package file",
    ),
    "package file": (dict(conda=("python=3.10.*", "pip", "./t-1-0.tar.bz2")), "'./t-1-0.tar.bz2' is a package file"),
    "pip requirement": (dict(pip=("alpha>=>1",)), "pip: 'alpha>=>1' is not a valid requirement"),
    "pip file URL": (dict(pip=("alpha @ file:///tmp/alpha-1.0-py3-none-any.whl",)), "only a wheel over http(s)"),
    "channel with a space": (dict(channels=("conda forge",)), "channels: 'conda forge' is not a channel"),
    "channel URL without host": (dict(channels=("https://",)), "channels: 'https://' is not a channel"),
    "channel of another scheme": (dict(channels=("ftp://x.org/c",)), "is not a channel"),
    "channel '::'": (dict(channels=("::",)), "is not a channel"),
}


@pytest.mark.parametrize("with_lock", [False, True])
@pytest.mark.parametrize("case", SYNTAX)
def test_check_names_a_syntax_error_before_the_lock(root: Path, capsys, case: str, with_lock: bool) -> None:
    """`lock --check` names a bad match spec, requirement or channel as `lock` does, lock or no lock."""
    spec, phrase = SYNTAX[case]
    write_spec(root, **spec)
    if with_lock:
        (root / "conda-lock.yml").write_text("version: 1\n")
    assert main(["lock", "--check", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and phrase in err, err


def test_bad_syntax_in_a_later_env_writes_no_lock_for_an_earlier_one(
    root: Path, fixture_channel: Path, wheelhouse: Path, capsys
) -> None:
    """Every env's spec, variants and syntax are checked before the first env is solved."""
    write_spec(root, name="py39", conda=("python=3.10.*", "pip", "torchlike>=>1"))
    before = files(root)
    assert (
        main(
            [
                "lock",
                "--root",
                str(root),
                "--quiet",
                "--cache-dir",
                str(root / ".cache"),
                "--mirror",
                f"conda-forge={fixture_channel}",
                "--pip-find-links",
                str(wheelhouse),
                "--pip-no-index",
                "--pip-offline",
            ]
        )
        == 2
    )
    out, err = capsys.readouterr()
    assert "envs/py39.yml: dependencies: 'torchlike>=>1' is not a valid conda match spec" in err
    assert err.count("\n") == 1 and out == "" and files(root) == before


def test_debug_shows_the_traceback(root: Path, wheelhouse: Path) -> None:
    done = bootstrap("--debug", "lock", "--platform", "linux-s390x", cwd=root)
    assert done.returncode != 0
    assert "Traceback" in done.stderr and "InputError" in done.stderr


def test_unreachable_channel_suggests_a_mirror(root: Path, wheelhouse: Path) -> None:
    write_spec(root, channels=("http://127.0.0.1:9/nochannel",))
    done = lock(root, wheelhouse=wheelhouse)
    assert_clean_failure(done, "from http://127.0.0.1:9/nochannel", "--mirror http://127.0.0.1:9/nochannel=URL_OR_DIR")


def test_failed_fetch_exits_2_every_time(root: Path, wheelhouse: Path) -> None:
    """py-rattler's runtime threads used to abort the interpreter at exit after a failed fetch."""
    write_spec(root, channels=("http://127.0.0.1:9/nochannel",))
    codes = [lock(root, "--cache-dir", str(root / f".cache{i}"), wheelhouse=wheelhouse).returncode for i in range(8)]
    assert codes == [2] * 8


def test_a_checkout_it_cannot_write_is_refused_before_solving(
    root: Path, fixture_channel: Path, wheelhouse: Path, tmp_path: Path, make_read_only
) -> None:
    make_read_only(root)
    done = bootstrap(
        "lock",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--mirror",
        f"conda-forge={fixture_channel}",
        "--pip-find-links",
        str(wheelhouse),
        "--pip-no-index",
        "--pip-offline",
        cwd=root,
    )
    assert_clean_failure(
        done,
        f"conda-lock.yml: cannot write in {root} (no permission, or a read-only file system)",
        "lock in a checkout you can write",
    )
    assert not (tmp_path / "cache").exists()  # refused before the solve


def test_a_full_disk_leaves_the_lock_as_it_was(
    fixture_channel: Path, wheelhouse: Path, tmp_path: Path, small_fs
) -> None:
    mount, _ = small_fs
    root = make_project(mount / "proj").root
    argv = (
        "lock",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--mirror",
        f"conda-forge={fixture_channel}",
        "--pip-find-links",
        str(wheelhouse),
        "--pip-no-index",
        "--pip-offline",
    )
    assert bootstrap(*argv, cwd=root).returncode == 0
    before = files(root)
    with open(mount / "filler", "wb", buffering=0) as filler:  # the disk full but for a few bytes
        with pytest.raises(OSError):
            while True:
                filler.write(b"\0" * 4096)
    done = bootstrap(*argv, cwd=root)
    assert_clean_failure(done, "no space left on device while writing conda-lock.yml on", "the lock is unchanged")
    assert files(root) == before  # the old lock byte for byte, no temp directory left


@pytest.mark.parametrize(
    "edit",
    [
        ("  - pillow>=10\n", "  - pillow>=10  # [linux]\n"),
        ("  - pillow>=10\n", "  - pillow>=10" + " " * 100_000 + "\n"),
    ],
    ids=["selector", "100k spaces"],
)
def test_lock_check_refuses_lines_conda_lock_reads_its_own_way(tmp_path: Path, edit: tuple) -> None:
    """A `# [linux]` selector kept the inputs digest (comments are not data), so `lock --check` said
    fresh while conda-lock, which drops the line on osx-arm64 and win-64, hashes another spec; and
    100,000 spaces after a requirement kept conda-lock's line filter busy for minutes."""
    from tests.fixtures.variants import plain_project

    project = plain_project(tmp_path / "proj")
    spec = project.spec_path("py310")
    assert bootstrap("lock", "--check", "py310", cwd=project.root).returncode == 0
    assert edit[0] in spec.read_text()
    spec.write_text(spec.read_text().replace(*edit))
    done = bootstrap("lock", "--check", "py310", cwd=project.root)
    assert_clean_failure(done, "envs/py310.yml: line ")
