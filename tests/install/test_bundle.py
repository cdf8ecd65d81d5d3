"""`bootstrap bundle` and `env --bundle`: an env created where no channel or index is reachable.

The fixture lock's conda URLs are conda-forge's canonical ones (unreachable
here and in CI) and its wheels are served from a copy deleted once the bundle
is made, so the env can only come from the bundle.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Optional

import pytest

from bootstrap.cli import main
from bootstrap.lock.lockfile import read_lock
from bootstrap.project import Project
from tests.fixtures import REPO
from tests.fixtures.env_project import CONDA, assert_matches_lock, change_lock, prefix_of, relock, run_python
from tests.fixtures.wheels import build_wheel


@pytest.fixture
def served(project: Project, channel: Path, wheels: Path, tmp_path: Path) -> Path:
    """A copy of the wheelhouse the project is relocked against: delete it to take PyPI away."""
    copy = tmp_path / "served-wheels"
    shutil.copytree(wheels, copy)
    relock(project, channel, copy)
    return copy


def bundle(project: Project, channel: Path, output: Path, cache: Optional[Path] = None, *extra: str) -> int:
    """`bootstrap bundle`, without the tools venv's wheels (those come from PyPI) unless `extra` asks."""
    return main(
        [
            "bundle",
            "--root",
            str(project.root),
            "--platform",
            "linux-64",
            "--mirror",
            f"conda-forge={channel}",
            "--cache-dir",
            str(cache or output.parent / ".bundle-cache"),
            "-o",
            str(output),
            *(extra or ["--no-tools"]),
        ]
    )


def env_from(project: Project, bundle_path: Path, *extra: str) -> int:
    """`env --bundle`: no --mirror, so the canonical conda-forge URLs are all it could try besides."""
    return main(
        [
            "env",
            "--root",
            str(project.root),
            "--platform",
            "linux-64",
            "--bundle",
            str(bundle_path),
            "--cache-dir",
            str(project.root / ".cache"),
            *extra,
        ]
    )


def test_an_env_is_created_from_a_bundle_alone(
    project: Project, channel: Path, served: Path, tmp_path: Path, capsys
) -> None:
    output = tmp_path / "out" / "py310.tar"
    output.parent.mkdir()
    capsys.readouterr()
    assert bundle(project, channel, output) == 0
    assert "make env BUNDLE=py310.tar" in capsys.readouterr().out
    shutil.rmtree(served)  # the wheels' index is gone too
    assert env_from(project, output) == 0
    sized = capsys.readouterr().err.splitlines()[0]  # each member's size read off the tar, no HEAD to a channel
    assert sized.startswith("fetching ") and "unknown size" not in sized, sized
    assert_matches_lock(project)
    assert run_python(prefix_of(project), "import alpha, gamma; print('ok')") == "ok"

    lock = read_lock(project.lock_path("py310"))
    with tarfile.open(output) as tar:
        names = tar.getnames()
        index = json.loads(tar.extractfile("bundle.json").read())
        sums = tar.extractfile("SHA256SUMS").read().decode().splitlines()
        for line in sums:  # what `tar xf` + `sha256sum -c SHA256SUMS` checks
            digest, member = line.split("  ")
            assert hashlib.sha256(tar.extractfile(member).read()).hexdigest() == digest
        assert tar.extractfile("locks/py310/conda-lock.yml").read() == project.lock_path("py310").read_bytes()
    locked = lock.for_platform("linux-64")
    assert {a["sha256"] for a in index["artifacts"]} == {e.sha256 for e in locked}
    assert len(sums) == len(locked) and len(names) == len(locked) + 3
    assert index["envs"] == [
        {
            "env": "py310",
            "lock": "locks/py310/conda-lock.yml",
            "platforms": ["linux-64"],
            "content_hash": {"linux-64": lock.content_hash["linux-64"]},
        }
    ]


def test_the_same_lock_makes_the_same_bundle(project: Project, channel: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "b.tar", tmp_path / "b" / "b.tar"  # separate caches: fetched twice
    for output in (first, second):
        output.parent.mkdir()
        assert bundle(project, channel, output) == 0
    assert first.read_bytes() == second.read_bytes()


def test_a_damaged_bundle_is_refused_and_the_env_kept(
    project: Project, channel: Path, served: Path, tmp_path: Path, capsys
) -> None:
    output = tmp_path / "b.tar"
    assert bundle(project, channel, output) == 0
    assert env_from(project, output) == 0
    prefix = prefix_of(project)
    before = os.readlink(prefix)
    change_lock(project, channel, served, pip=("alpha==1.0", "gamma"))  # alpha 1.0 is not in the bundle yet
    assert bundle(project, channel, output) == 0
    with tarfile.open(output) as tar:
        member = next(m for m in tar if m.name.endswith("/alpha-1.0-py3-none-any.whl"))
    with open(output, "r+b") as handle:  # one byte of the wheel's data, inside the tar
        handle.seek(member.offset_data + member.size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    capsys.readouterr()
    assert env_from(project, output) == 2
    err = capsys.readouterr().err
    assert "alpha-1.0-py3-none-any.whl: sha256" in err and f"{output}:artifacts/" in err
    assert "the bundle was damaged" in err and "make it again with `make bundle`" in err
    assert os.readlink(prefix) == before
    assert run_python(prefix, "import alpha; print(alpha.__version__)") == "1.1"


def test_what_the_bundle_lacks_is_named_with_the_fix(
    project: Project, channel: Path, served: Path, tmp_path: Path, capsys
) -> None:
    output = tmp_path / "b.tar"
    assert bundle(project, channel, output) == 0
    build_wheel(served, "delta", "1.0")
    change_lock(project, channel, served, pip=("alpha", "gamma", "delta"))
    (served / "delta-1.0-py3-none-any.whl").unlink()
    capsys.readouterr()
    assert env_from(project, output) == 2
    err = capsys.readouterr().err
    assert "cannot fetch delta-1.0-py3-none-any.whl" in err
    assert f"not in the bundle {output} either, made from locks/py310/conda-lock.yml [linux-64]" in err
    assert "make bundle" in err
    assert not prefix_of(project).exists()


def test_a_bundle_that_cannot_be_made_leaves_no_file(project: Project, tmp_path: Path, capsys) -> None:
    output = tmp_path / "out" / "b.tar"
    output.parent.mkdir()
    capsys.readouterr()
    assert bundle(project, tmp_path / "no-such-channel", output, cache=tmp_path / "cache") == 2
    assert "cannot fetch" in capsys.readouterr().err
    assert list(output.parent.iterdir()) == []


def test_a_full_disk_leaves_no_half_written_bundle(
    project: Project, blob_sources: tuple, small_fs: tuple, tmp_path: Path, capsys
) -> None:
    channel, wheels = blob_sources
    change_lock(project, channel, wheels, conda=(*CONDA, "blobpkg"))  # 6 MiB, on a 4 MiB file system
    mount, _ = small_fs
    capsys.readouterr()
    assert bundle(project, channel, mount / "b.tar", tmp_path / "cache") == 2
    err = capsys.readouterr().err
    assert f"while bundling into {mount / 'b.tar'} on {mount} (bundle: " in err and "nothing was written" in err
    assert list(mount.iterdir()) == []


def write_tar(path: Path, members: dict) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


INDEX_V1 = '{"format": "bootstrap.bundle", "version": 1, '


@pytest.mark.parametrize(
    "members, message",
    [
        (None, "no such bundle"),
        (b"not a tar at all" * 100, "not a readable bundle"),
        ({"other.json": b"{}"}, "no bundle.json of format 'bootstrap.bundle'"),
        ({"bundle.json": b'{"format": "bootstrap.bundle", "version": 99}'}, "version 99 is not 1"),
        ({"bundle.json": (INDEX_V1 + '"artifacts": {}}').encode()}, "`artifacts` is not a list"),
        ({"bundle.json": (INDEX_V1 + '"artifacts": [{"url": "x"}]}').encode()}, "artifacts[0].sha256 is not a string"),
        (
            {"bundle.json": (INDEX_V1 + '"artifacts": [{"sha256": ["x"], "member": "m"}]}').encode()},
            "artifacts[0].sha256 is not a string",
        ),
        (
            {"bundle.json": (INDEX_V1 + '"artifacts": [], "envs": ["py310"]}').encode()},
            "`envs` is not a list of {env, lock",
        ),
        (
            {"bundle.json": (INDEX_V1 + '"artifacts": [{"sha256": "ab", "member": "artifacts/ab/x.conda"}]}').encode()},
            "damaged: 1 of the 1 artifacts its bundle.json lists are not in it, "
            "e.g. 'artifacts/ab/x.conda' (a truncated copy?)",
        ),
    ],
    ids=[
        "missing",
        "not-a-tar",
        "no-index",
        "other-version",
        "artifacts-not-a-list",
        "no-sha256",
        "sha256-a-list",
        "envs-not-dicts",
        "truncated",
    ],
)
def test_a_file_that_is_not_a_bundle_gets_one_line(project: Project, tmp_path: Path, capsys, members, message) -> None:
    path = tmp_path / "b.tar"
    if isinstance(members, bytes):
        path.write_bytes(members)
    elif members is not None:
        write_tar(path, members)
    capsys.readouterr()
    assert env_from(project, path) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}") and message in err and len(err.splitlines()) == 1
    assert not prefix_of(project).exists()


@pytest.mark.parametrize("lock", [False, True], ids=["variant", "lock-file"])
def test_a_bundle_made_for_another_platform_is_refused_before_fetching(
    project: Project, channel: Path, tmp_path: Path, capsys, lock: bool
) -> None:
    """The same lock bundled for linux-aarch64 only: every artifact was sought online, 4 tries each, before."""
    made = tmp_path / "made.tar"
    assert bundle(project, channel, made) == 0
    with tarfile.open(made) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if not m.name.startswith("artifacts/")}
    index = json.loads(members["bundle.json"])
    index["envs"] = [dict(e, platforms=["linux-aarch64"], content_hash={"linux-aarch64": "x"}) for e in index["envs"]]
    index["artifacts"] = []
    other = tmp_path / "other.tar"
    write_tar(other, {**members, "bundle.json": json.dumps(index).encode()})
    capsys.readouterr()
    assert env_from(project, other, *(["--lock", str(project.lock_path("py310"))] if lock else [])) == 2
    assert capsys.readouterr().err == (
        f"error: {other}: made for linux-aarch64, --platform is linux-64 (make the "
        "bundle with `bootstrap bundle --platform linux-64`)\n"
    )
    assert not prefix_of(project).exists() and not (project.root / ".cache").exists()  # nothing fetched


@pytest.mark.network
def test_the_tools_venv_is_built_offline_from_a_bundle(project: Project, channel: Path, tmp_path: Path) -> None:
    """The nodes' other missing piece: py-rattler, conda-lock, uv ... for `make env` itself."""
    version = "%d.%d" % sys.version_info[:2]
    output = tmp_path / "b.tar"
    assert bundle(project, channel, output, None, "--tools-python", version) == 0
    tag = f"cp{version.replace('.', '')}-linux-64"
    with tarfile.open(output) as tar:
        index = json.loads(tar.extractfile("bundle.json").read())
        wheels = [n for n in tar.getnames() if n.startswith(f"tools/{tag}/")]
    assert index["tools"][0]["member"] == f"tools/{tag}" and len(wheels) == len(index["tools"][0]["wheels"]) > 20
    venv = tmp_path / "tools"
    done = tools_venv(output, venv)
    assert done.returncode == 0, done.stderr
    check = "import rattler, conda_lock, rich, yaml; print('ok')"
    imported = subprocess.run([str(venv / "bin" / "python"), "-c", check], capture_output=True, text=True)
    assert imported.stdout.strip() == "ok"
    assert (venv / "bin" / "uv").exists()


def tools_venv(bundle_path: Path, venv: Path):
    environ = {**os.environ, "BUNDLE": str(bundle_path), "PYTHON": sys.executable, "PIP_CONFIG_FILE": os.devnull}
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "tools-venv.sh"), str(venv)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_tools_wheels_that_do_not_cover_the_requirements_leave_the_venv_alone(tmp_path: Path) -> None:
    tag = "cp%d%d-linux-64" % sys.version_info[:2]
    partial = tmp_path / "partial.tar"
    write_tar(partial, {f"tools/{tag}/idna-3.20-py3-none-any.whl": b"not even a wheel"})
    venv = tmp_path / "tools"
    venv.mkdir()
    (venv / "kept").write_text("a working venv")
    done = tools_venv(partial, venv)
    assert done.returncode == 2
    assert f"the wheels in {partial} for {tag} do not install" in done.stderr and f"{venv} is unchanged" in done.stderr
    assert (venv / "kept").read_text() == "a working venv"
    unreadable = tools_venv(tmp_path / "no-such.tar", venv)
    assert unreadable.returncode == 2 and "cannot read" in unreadable.stderr


def test_a_bundle_without_tools_for_this_python_says_how_to_make_one(
    project: Project, channel: Path, tmp_path: Path
) -> None:
    output = tmp_path / "b.tar"
    assert bundle(project, channel, output) == 0
    done = tools_venv(output, tmp_path / "tools")
    assert done.returncode == 2
    assert "holds no tools venv wheels for cp" in done.stderr and "--tools-python X.Y" in done.stderr
    assert not (tmp_path / "tools").exists()


@pytest.mark.parametrize("name", ["b.tar.gz", "b.tgz", "b.tar"])  # the last: as `curl` saves a gzip-encoded response
def test_a_gzipped_bundle_says_to_gunzip_it(project: Project, channel: Path, tmp_path: Path, capsys, name: str) -> None:
    import gzip
    import re

    from bootstrap.install.bundle import Bundle

    output = tmp_path / "made" / "b.tar"
    output.parent.mkdir()
    assert bundle(project, channel, output) == 0
    zipped = tmp_path / name
    zipped.write_bytes(gzip.compress(output.read_bytes()))
    capsys.readouterr()
    assert env_from(project, zipped) == 2
    fix = re.search(r"it is gzip-compressed: `(.*)` first", capsys.readouterr().err).group(1)
    assert "gunzip" in fix
    subprocess.run(fix, shell=True, cwd=tmp_path, check=True)  # noqa: S602 - the command line it prints works
    assert Bundle.open(tmp_path / "b.tar").index["envs"][0]["env"] == "py310"


@pytest.mark.parametrize(
    "name, message",
    [
        ("conda-lock.yml", "a bundle is a .tar file"),
        ("missing-dir/b.tar", "is not a directory (create it first"),
        ("adir.tar", "is a directory"),
    ],
)
def test_an_output_that_cannot_be_a_bundle_is_refused_before_fetching(
    project: Project, tmp_path: Path, capsys, name: str, message: str
) -> None:
    (project.root / "adir.tar").mkdir()
    lock = project.lock_path("py310").read_bytes()
    capsys.readouterr()
    code = main(
        [
            "bundle",
            "--root",
            str(project.root),
            "--platform",
            "linux-64",
            "--no-tools",
            "--cache-dir",
            str(tmp_path / "cache"),
            "-o",
            str(project.root / name),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1
    assert project.lock_path("py310").read_bytes() == lock
    assert not (tmp_path / "cache" / "archives").exists()  # refused before any fetch


def test_a_directory_we_may_not_look_into_is_one_line(project: Project, tmp_path: Path, monkeypatch, capsys) -> None:
    """As a user without the x bit on a directory on the way (pathlib raises EACCES; root is never refused)."""
    locked, stat = tmp_path / "locked", Path.stat

    def refused(self, **kwargs):  # what stat(2) answers under a directory without the x bit
        if locked in self.parents:
            raise PermissionError(13, "Permission denied", str(self))
        return stat(self, **kwargs)

    monkeypatch.setattr(Path, "stat", refused)
    capsys.readouterr()
    assert main(["bundle", "--root", str(project.root), "--no-tools", "-o", str(tmp_path / "locked" / "b.tar")]) == 2
    assert main(["cache", "--cache-dir", str(tmp_path / "locked" / "cache")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"error: -o: {tmp_path / 'locked' / 'b.tar'}: Permission denied (pass -o in a directory you can write)",
        f"error: --cache-dir {tmp_path / 'locked' / 'cache'}: cannot be used: Permission denied "
        "(pass a --cache-dir you can write; the default is ~/.cache/bootstrap)",
    ]


def test_a_killed_runs_leftover_is_removed_and_a_live_ones_kept(
    project: Project, channel: Path, tmp_path: Path
) -> None:
    import fcntl

    output = tmp_path / "b.tar"
    killed, live, starting = (tmp_path / f".b.tar.{name}.part" for name in ("killed", "live", "starting"))
    for path in (killed, live, starting):
        path.write_bytes(b"part of a tar")
    an_hour_ago = time.time() - 3600
    for path in (killed, live):
        os.utime(path, (an_hour_ago, an_hour_ago))
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the writing run holds it
        assert bundle(project, channel, output) == 0
    assert not killed.exists() and live.exists()
    assert starting.exists()  # unlocked but new: a run between creating its file and locking it
    assert oct(output.stat().st_mode & 0o777) == "0o644"


def test_an_env_named_twice_is_bundled_once(project: Project, channel: Path, tmp_path: Path) -> None:
    output = tmp_path / "b.tar"
    assert (
        main(
            [
                "bundle",
                "py310",
                "py310",
                "--root",
                str(project.root),
                "--platform",
                "linux-64",
                "--no-tools",
                "--mirror",
                f"conda-forge={channel}",
                "--cache-dir",
                str(tmp_path / "cache"),
                "-o",
                str(output),
            ]
        )
        == 0
    )
    with tarfile.open(output) as tar:
        names = tar.getnames()
        index = json.loads(tar.extractfile("bundle.json").read())
    assert names.count("locks/py310/conda-lock.yml") == 1 and len(names) == len(set(names))
    assert [e["env"] for e in index["envs"]] == ["py310"]


def test_a_mirror_for_no_channel_of_the_locks_is_refused_before_fetching(
    project: Project, channel: Path, tmp_path: Path, capsys
) -> None:
    """As `env` refuses it: ignored, the typo would have the bundle fetched from the channel it meant to avoid."""
    output = tmp_path / "b.tar"
    capsys.readouterr()
    assert bundle(project, channel, output, tmp_path / "cache", "--no-tools", "--mirror", f"conda-froge={channel}") == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: --mirror https://conda.anaconda.org/conda-froge={channel}: no URL of conda-lock.yml "
        "is under https://conda.anaconda.org/conda-froge (CANONICAL is one of the lock's channels"
    )
    assert len(err.splitlines()) == 1
    assert not output.exists() and not (tmp_path / "cache" / "archives").exists()


def test_a_symlinked_lock_goes_in_as_its_bytes(project: Project, channel: Path, tmp_path: Path) -> None:
    lock = project.lock_path("py310")
    real = project.root / "locks" / "py310.yml"
    real.parent.mkdir()
    lock.rename(real)
    lock.symlink_to(Path("locks") / "py310.yml")
    output = tmp_path / "b.tar"
    assert bundle(project, channel, output) == 0
    with tarfile.open(output) as tar:
        member = tar.getmember("locks/py310/conda-lock.yml")
        assert member.isfile() and tar.extractfile(member).read() == real.read_bytes()


def test_a_lock_with_credentials_is_not_bundled(project: Project, channel: Path, tmp_path: Path, capsys) -> None:
    lock = project.lock_path("py310")
    lock.write_text(
        lock.read_text().replace(
            "url: https://conda.anaconda.org/", "url: https://bob:PW-SECRET@conda.anaconda.org/", 1
        )
    )
    code = bundle(project, channel, tmp_path / "b.tar", tmp_path / "cache")
    err = capsys.readouterr().err
    assert code == 2 and "carries credentials" in err and "PW-SECRET" not in err, err
    assert not (tmp_path / "b.tar").exists() and not (tmp_path / "cache" / "locks").exists()


def test_a_bundle_is_written_on_a_file_system_without_locks(
    project: Project, channel: Path, tmp_path: Path, monkeypatch
) -> None:
    """Lustre without `-o flock`: before, "cannot write b.tar: Function not implemented"; the same
    bytes as anywhere else now."""
    import errno
    import fcntl

    anywhere = tmp_path / "anywhere" / "b.tar"
    anywhere.parent.mkdir()
    assert bundle(project, channel, anywhere) == 0

    def refused(fd, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", refused)
    unlocked = tmp_path / "unlocked" / "b.tar"
    unlocked.parent.mkdir()
    assert bundle(project, channel, unlocked) == 0
    assert unlocked.read_bytes() == anywhere.read_bytes()
