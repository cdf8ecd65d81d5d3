"""The set-up path: the Makefile's decisions (when to rebuild the tools venv, which ENV it accepts)
and scripts/tools-venv.sh's promise that a failed refresh leaves the working venv as it was.

Each test runs in a scratch copy of the Makefile and scripts, never in the checkout's own `.tools`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures import REPO

REQUIREMENTS = REPO / "scripts" / "requirements-tools.txt"
TEST_REQUIREMENTS = REPO / "scripts" / "requirements-test.txt"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """The Makefile and scripts, and a `.tools` that looks built (its python: this interpreter), without
    the test requirements and torch."""
    shutil.copy(REPO / "Makefile", tmp_path)
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    (tmp_path / ".tools" / "bin").mkdir(parents=True)
    (tmp_path / ".tools" / "bin" / "python").symlink_to(sys.executable)
    shutil.copy(REQUIREMENTS, tmp_path / ".tools" / ".requirements-tools.txt")
    shutil.copy(REPO / "scripts" / "tools-venv.sh", tmp_path / ".tools" / ".tools-venv.sh")
    return tmp_path


def make(root: Path, *argv: str, **environ: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ENV", "MAKEFLAGS", "MAKELEVEL")}
    return subprocess.run(
        ["make", "--no-print-directory", *argv],
        cwd=root,
        env={**env, **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )


def rebuilds(root: Path) -> bool:
    return "tools-venv.sh" in make(root, "-n", "tools").stdout


def test_the_tools_venv_is_rebuilt_when_its_stamp_or_its_python_says_so(scratch: Path) -> None:
    assert not rebuilds(scratch)
    stamp = scratch / ".tools" / ".requirements-tools.txt"
    stamp.write_text(stamp.read_text() + "# another pin\n")  # newer than the requirements, other content
    assert rebuilds(scratch)
    shutil.copy(REQUIREMENTS, stamp)
    (scratch / ".tools" / "bin" / "python").unlink()
    (scratch / ".tools" / "bin" / "python").symlink_to(scratch / "moved" / "python3")  # its interpreter is gone
    assert rebuilds(scratch)


@pytest.mark.parametrize("env", ["", "/root/.shrc", "..", "py 310", "*", "py[0-9]*"])
def test_clean_env_refuses_an_env_that_is_no_name(scratch: Path, env: str) -> None:
    (scratch / ".envs" / "mywork").mkdir(parents=True)
    done = make(scratch, "clean-env", ENV=env)
    assert done.returncode == 2 and f"ENV='{env}' is not an env name" in done.stderr
    assert (scratch / ".envs" / "mywork").is_dir()


def test_clean_env_removes_one_env_and_its_generations(scratch: Path) -> None:
    envs = scratch / ".envs"
    for name in (".py39.gens/1", ".py310.gens/1", "mywork"):
        (envs / name).mkdir(parents=True)
    (envs / "py39").symlink_to(".py39.gens/1")
    assert make(scratch, "clean-env", ENV="py39").returncode == 0
    assert sorted(p.name for p in envs.iterdir()) == [".py310.gens", "mywork"]


def tools_venv(root: Path, **environ: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return subprocess.run(
        ["bash", "scripts/tools-venv.sh", ".tools"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, **environ},
    )


@pytest.mark.slow
def test_a_refresh_that_cannot_install_puts_the_working_venv_back(scratch: Path) -> None:
    (scratch / ".tools" / "working").write_text("the venv make trusted")
    stamp = scratch / ".tools" / ".requirements-tools.txt"
    stamp.write_text(stamp.read_text() + "# the pin before\n")  # the requirements changed since
    done = tools_venv(scratch, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(scratch / "no-wheels"), PIP_CONFIG_FILE=os.devnull)
    assert done.returncode != 0
    assert "the previous .tools is back as it was" in done.stderr.splitlines()[-1], done.stderr
    assert (scratch / ".tools" / "working").read_text() == "the venv make trusted"
    assert not (scratch / ".tools.old").exists()


def test_a_python_that_does_not_run_is_named(scratch: Path) -> None:
    broken = scratch / "bin" / "python3"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'fake python: broken install' >&2\nexit 1\n")
    broken.chmod(0o755)
    done = tools_venv(scratch, PYTHON=str(broken))
    assert done.returncode == 2
    assert done.stderr == (
        f"tools-venv: '{broken}' does not run (fake python: broken install); set PYTHON=/path/to/python3\n"
    )
    assert (scratch / ".tools" / ".requirements-tools.txt").exists()  # untouched


def test_help_lists_every_target(scratch: Path) -> None:
    phony = next(line for line in (scratch / "Makefile").read_text().splitlines() if line.startswith(".PHONY:"))
    lines = make(scratch, "help", ENV="py39").stdout.splitlines()
    listed = {line.split()[0] for line in lines if not line.startswith(" " * 4)}  # not a wrapped line
    assert set(phony.split()[1:]) - {"FORCE"} - listed == set()
    assert all(len(line) <= 100 for line in lines)
    assert "$(ENV)" not in "\n".join(lines) and "Create or update .envs/py39 from its lock" in "\n".join(lines)


def test_verify_without_an_env_names_the_make_env_that_creates_it(scratch: Path) -> None:
    done = make(scratch, "verify", ENV="py39")
    assert done.returncode == 2
    assert "no env at .envs/py39: run `make env ENV=py39` first" in done.stderr
    assert "run `make env` first" in make(scratch, "verify").stderr


def test_bench_runs_in_the_env_it_accepts_and_names_a_missing_one(scratch: Path) -> None:
    done = make(scratch, "bench", ENV="py39")
    assert done.returncode == 2
    assert "no env at .envs/py39: run `make env ENV=py39` first" in done.stderr
    (scratch / ".envs" / "py310" / "bin").mkdir(parents=True)
    (scratch / ".envs" / "py310" / "bin" / "python").symlink_to(sys.executable)
    planned = make(scratch, "-n", "bench", "BENCH_ARGS=--budget 60 --device mps").stdout.splitlines()[-1]
    assert planned == f'PYTHONPATH="{scratch}" .envs/py310/bin/python -m bootstrap bench --budget 60 --device mps'
    shutil.rmtree(scratch / ".envs" / "py310")
    (scratch / ".envs" / "py310" / "cu130").mkdir(parents=True)  # a prefix per variant: the one this host picks
    planned = make(scratch, "-n", "bench", "VARIANT=cu130").stdout.splitlines()[-1]
    assert planned == (
        f'PYTHONPATH="{scratch}" .tools/bin/python -m bootstrap shell py310 --variant cu130 --exec python '
        "-m bootstrap bench "
    )


def test_env_passes_the_variant_on_and_refuses_one_that_is_no_name(scratch: Path) -> None:
    planned = make(scratch, "-n", "env").stdout.splitlines()[-1]
    assert planned == ".tools/bin/python -m bootstrap env py310 --variant auto "
    planned = make(scratch, "-n", "env", "VARIANT=cu130", "ENV_ARGS=--force").stdout.splitlines()[-1]
    assert planned == ".tools/bin/python -m bootstrap env py310 --variant cu130 --force"
    for bad in ("", "--force", "cu 130", "py310.cu130", "a;id"):
        done = make(scratch, "env", f"VARIANT={bad}")
        assert done.returncode == 2 and f"VARIANT='{bad}' is not a variant name" in done.stderr, bad


def test_add_and_remove_quote_each_package_and_need_one(scratch: Path) -> None:
    planned = make(scratch, "-n", "add", "PKG=numpy>=1.26 it's", "ADD_ARGS=--pip").stdout.splitlines()[-1]
    assert planned == ".tools/bin/python -m bootstrap add --env py310 --variant auto 'numpy>=1.26' 'it'\\''s' --pip"
    planned = make(scratch, "-n", "remove", "PKG=zlib", "ENV=py39").stdout.splitlines()[-1]
    assert planned == ".tools/bin/python -m bootstrap remove --env py39 --variant auto 'zlib' "
    for target in ("add", "remove"):
        done = make(scratch, target, "PKG= ")
        assert done.returncode == 2 and f"PKG is empty: name what to {target}" in done.stderr


def test_bench_loader_passes_its_arguments_on(scratch: Path) -> None:
    (scratch / ".tools" / ".torch-test").write_text("torch==0\n")
    planned = make(scratch, "-n", "bench-loader", "BENCH_LOADER_ARGS=--budget 20", "TORCH_TEST=torch==0").stdout
    assert planned.splitlines()[-1] == ".tools/bin/python scripts/bench_loader.py --budget 20"


def test_a_python_without_ensurepip_is_named_before_the_venv_is_touched(scratch: Path) -> None:
    """Debian's and Ubuntu's python3 without python3-venv: `-m venv` would fail, and not for want of a network."""
    (scratch / "shadow" / "ensurepip").mkdir(parents=True)
    (scratch / "shadow" / "ensurepip" / "__init__.py").write_text("raise ImportError('removed by the distribution')\n")
    python = scratch / "bin" / "python3"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nPYTHONPATH={scratch / "shadow"} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    (scratch / ".tools" / "working").write_text("the venv make trusted")
    done = tools_venv(
        scratch,
        PYTHON=str(python),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(scratch / "no-wheels"),
        PIP_CONFIG_FILE=os.devnull,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"tools-venv: '{python}' cannot create a venv (no ensurepip: on Debian/Ubuntu "
        "`apt install python3-venv`, or set PYTHON=/path/to/python3)\n"
    )
    assert (scratch / ".tools" / "working").read_text() == "the venv make trusted"


def interrupting_rm(scratch: Path, instead: str) -> str:
    """A PATH whose `rm`, asked to remove the replaced venv, runs the shell command `instead` (a Ctrl-C)
    and exits 130; any other `rm` is the real one."""
    shims = scratch / "shims"
    shims.mkdir()
    (shims / "rm").write_text(
        '#!/bin/bash\nfor a; do case "$a" in *.tools.old|*.tools.trash)\n'
        f'  [ -d "$a" ] && {instead} && sleep 1 && exit 130;; esac; done\n'
        'exec /bin/rm "$@"\n'
    )
    (shims / "rm").chmod(0o755)
    return f"{shims}:{os.environ['PATH']}"


@pytest.mark.slow
def test_ctrl_c_while_the_replaced_venv_is_removed_keeps_the_new_one(scratch: Path) -> None:
    """The last step, removing the replaced venv, takes about a second: Ctrl-C there must not put a
    half-removed copy of it back in place of the venv just built."""
    (scratch / "scripts" / "requirements-tools.txt").write_text("")  # installs nothing: no index needed
    (scratch / ".tools" / "working").write_text("the venv make trusted")
    # `rm` of the replaced venv removes one file of it, then the user presses Ctrl-C.
    path = interrupting_rm(scratch, '/bin/rm "$a/working" && kill -INT $PPID')
    done = tools_venv(scratch, PATH=path, PYTHON=sys.executable, PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull)
    assert done.returncode == 130, done.stderr
    tools = scratch / ".tools"
    assert (tools / ".requirements-tools.txt").read_text() == "" and not (tools / "working").exists()
    assert subprocess.run([str(tools / "bin" / "python"), "-c", ""]).returncode == 0
    assert "back as it was" not in done.stderr
    assert not (scratch / ".tools.old").exists()


@pytest.mark.slow
def test_ctrl_c_to_make_at_the_end_of_a_rebuild_keeps_the_stamp(scratch: Path) -> None:
    """Ctrl-C reaches make too: the stamp, written when the venv was complete, must survive it, or the next
    run rebuilds a working venv (and fails to, offline)."""
    (scratch / "scripts" / "requirements-tools.txt").write_text("")  # installs nothing: no index needed
    path = interrupting_rm(scratch, 'kill -INT -- -$(ps -o pgid= $$ | tr -d " ")')  # make's whole group
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL") and not k.startswith("PIP_")}
    env.update(PATH=path, PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull)
    done = subprocess.run(
        ["make", "--no-print-directory", "tools", f"PYTHON={sys.executable}"],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert done.returncode != 0 and "Deleting file" not in done.stderr, done.stderr
    assert (scratch / ".tools" / ".requirements-tools.txt").read_text() == ""
    assert not rebuilds(scratch)


def test_requirements_or_script_touched_but_unchanged_need_no_rebuild(scratch: Path) -> None:
    """A checkout that rewrites the files as they were makes them newer than the stamps: offline, a
    rebuild would fail, and every target with it; nor may it install the test torch again."""
    shutil.copy(TEST_REQUIREMENTS, scratch / ".tools" / ".requirements-test.txt")
    (scratch / ".tools" / ".torch-test").write_text("torch==0\n")
    later = time.time() + 100
    for name in ("requirements-tools.txt", "requirements-test.txt", "tools-venv.sh"):
        os.utime(scratch / "scripts" / name, (later, later))
    assert not rebuilds(scratch)
    assert make(scratch, "-n", "test", "TORCH_TEST=torch==0").stdout.splitlines()[0].startswith(".tools/bin/ruff")
    script = scratch / "scripts" / "tools-venv.sh"
    script.write_text(script.read_text() + "# another step\n")  # a changed script does rebuild
    assert rebuilds(scratch)


def test_only_the_test_targets_install_the_test_requirements(scratch: Path) -> None:
    (scratch / ".tools" / ".torch-test").write_text("torch==0\n")
    planned = make(scratch, "-n", "test", "TORCH_TEST=torch==0").stdout
    assert "-r scripts/requirements-test.txt" in planned and "cp scripts/requirements-test.txt" in planned
    for target in ("env", "lock", "lock-check", "doctor"):
        assert "requirements-test" not in make(scratch, "-n", target).stdout, target
    shutil.copy(TEST_REQUIREMENTS, scratch / ".tools" / ".requirements-test.txt")
    assert "requirements-test" not in make(scratch, "-n", "test", "TORCH_TEST=torch==0").stdout
    stamp = scratch / ".tools" / ".requirements-test.txt"
    stamp.write_text(stamp.read_text() + "# another pin\n")
    assert "-r scripts/requirements-test.txt" in make(scratch, "-n", "test", "TORCH_TEST=torch==0").stdout


@pytest.mark.network  # the seed venv installs the pinned uv from PyPI
def test_a_39_host_where_uv_finds_no_311_names_the_python_mirror(scratch: Path) -> None:
    from tests.fixtures.runnable_env import find_interpreter

    python39 = find_interpreter("3.9")
    if python39 is None:
        pytest.skip("no Python 3.9 on this machine (PATH or ~/.pyenv/versions)")
    (scratch / ".tools" / "bin" / "python").unlink()  # its interpreter is gone: a rebuild
    done = tools_venv(
        scratch,
        PYTHON=str(python39.path),
        UV_PYTHON_PREFERENCE="only-managed",
        UV_HTTP_RETRIES="0",
        UV_PYTHON_INSTALL_DIR=str(scratch / "uv-pythons"),
        UV_PYTHON_INSTALL_MIRROR="http://127.0.0.1:9/pbs",
    )
    assert done.returncode != 0
    assert done.stderr.splitlines()[-1].endswith(
        "(uv found no Python 3.11 here and could not download one: offline? UV_PYTHON_INSTALL_MIRROR=URL of a "
        "python-build-standalone mirror, or PYTHON=/path/to/python3.10-or-newer)"
    ), done.stderr


@pytest.mark.slow
def test_a_closed_terminal_mid_install_puts_the_working_venv_back(scratch: Path) -> None:
    """SIGHUP (an ssh connection dropped) reaches the whole job while pip waits on the index."""
    import socket

    (scratch / ".tools" / "working").write_text("the venv make trusted")
    stamp = scratch / ".tools" / ".requirements-tools.txt"
    stamp.write_text(stamp.read_text() + "# the pin before\n")  # the requirements changed since
    with socket.socket() as index:  # answers nothing: pip waits
        index.bind(("127.0.0.1", 0))
        index.listen(8)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(PIP_INDEX_URL=f"http://127.0.0.1:{index.getsockname()[1]}/simple", PIP_CONFIG_FILE=os.devnull)
        proc = subprocess.Popen(
            ["bash", "scripts/tools-venv.sh", ".tools"],
            cwd=scratch,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.time() + 60
        while not (scratch / ".tools.old").exists() and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(2)  # pip is waiting on the index now
        os.killpg(proc.pid, signal.SIGHUP)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 129
    assert "the previous .tools is back as it was" in stderr.splitlines()[-1], stderr
    assert (scratch / ".tools" / "working").read_text() == "the venv make trusted"
    assert not (scratch / ".tools.old").exists()
