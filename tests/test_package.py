"""Every module imports, the CLI lists its verbs and reports every failure alike, and the 3.9 static check bites."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bootstrap
from bootstrap.cli import build_parser
from tests.fixtures import REPO

CHECK = REPO / "scripts" / "check-py39.py"


def all_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(bootstrap.__path__, "bootstrap."))


@pytest.mark.parametrize("name", [m for m in all_modules() if m != "bootstrap.__main__"])
def test_module_imports(name: str) -> None:
    importlib.import_module(name)


def test_heavy_engines_are_not_imported_at_startup() -> None:
    """`python -m bootstrap --help` must not pay for rattler, conda-lock, torch or pynvml, nor for
    the benchmark's runner (the parser reads only its options) or asyncio."""
    heavy = "{'rattler', 'conda_lock', 'torch', 'pynvml', 'asyncio', 'bootstrap.bench.run', 'bootstrap.bench.results'}"
    code = (
        "import sys, bootstrap.cli; bootstrap.cli.build_parser(); "
        f"print(sorted(m for m in sys.modules if m in {heavy} or m.split('.')[0] in {heavy}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "[]"


def test_the_bench_package_still_exports_its_api_on_first_use() -> None:
    import bootstrap.bench as bench

    for name in bench.__all__:
        assert getattr(bench, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        bench.nothing  # noqa: B018


def test_the_python_api_is_importable_from_the_package_and_loads_nothing_until_used() -> None:
    """`from bootstrap import tune_loader`, as a training script writes it; a bare `import bootstrap` (every
    module's first import) loads neither torch nor numpy nor the bench."""
    heavy = "{'torch', 'numpy', 'PIL', 'pynvml', 'bootstrap.bench'}"
    loaded = f"sorted(m for m in sys.modules if m in {heavy} or m.split('.')[0] in {heavy})"
    code = (
        f"import sys, bootstrap; print({loaded}); "
        "from bootstrap import tune_loader; import bootstrap.bench; "
        "print(tune_loader is bootstrap.bench.tune_loader, tune_loader.__module__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.splitlines() == ["[]", "True bootstrap.bench.run"]
    with pytest.raises(AttributeError, match="no attribute 'run_bench'"):
        bootstrap.run_bench  # noqa: B018 (the CLI's full run stays in bootstrap.bench)


def test_a_verb_imports_only_its_own_command() -> None:
    """A no-op `make env` is promised under 0.2 s: the other verbs' commands are not loaded for it."""
    code = (
        "import sys, bootstrap.cli; bootstrap.cli.build_parser(['env', '--dry-run']); "
        "print(sorted(m for m in sys.modules if m.startswith(('bootstrap.bench', 'bootstrap.commands.'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "['bootstrap.commands.argtypes', 'bootstrap.commands.env']"  # and what all share
    args = build_parser(["--debug", "bench", "--json"]).parse_args(["--debug", "bench", "--json"])
    assert args.json and args._run.__module__ == "bootstrap.commands.bench"


def test_cli_verbs() -> None:
    help_text = build_parser().format_help()
    assert "lock" in help_text


def bootstrap_into_closed_pipe(*argv: str) -> subprocess.CompletedProcess:
    """`python -m bootstrap ARGV | true`, with the reader gone before the first write."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "bootstrap", *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            timeout=120,
        )
    finally:
        os.close(write)


def facts_with_gpu_name(tmp_path: Path, name: str) -> Path:
    facts = json.loads((REPO / "tests" / "data" / "verify" / "h200x1-580.159.04.facts.json").read_text())
    facts["nvidia"]["gpus"][0]["name"] = name
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    return path


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_text_the_terminal_cannot_spell_is_escaped_not_a_traceback(tmp_path: Path, encoding: str) -> None:
    facts = facts_with_gpu_name(tmp_path, "NVIDIA H200 \U0001f680 \u03bb")
    done = subprocess.run(
        [sys.executable, "-m", "bootstrap", "doctor", "--facts", str(facts)],
        capture_output=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "PYTHONIOENCODING": encoding},
    )
    assert done.returncode in (0, 1) and b"Traceback" not in done.stderr, done.stderr
    assert b"NVIDIA H200 \\U0001f680 " in done.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell")
@pytest.mark.parametrize("closed", [">&-", "2>&-", ">&- 2>&-"])
def test_a_closed_stdout_or_stderr_is_no_traceback(tmp_path: Path, closed: str) -> None:
    """`bootstrap doctor >&-`: what would go there goes nowhere; the exit code is the command's own."""
    facts = facts_with_gpu_name(tmp_path, "NVIDIA H200")
    script = f'exec 3>&1; "$0" -m bootstrap doctor --facts "$1" {closed}; echo "rc=$?" >&3'
    done = subprocess.run(
        ["sh", "-c", script, sys.executable, str(facts)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.stdout.strip().splitlines()[-1] == "rc=0", (done.stdout, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_output_to_a_full_disk_is_one_line() -> None:
    for argv in (("lock", "--check"), ("cache", "--json")):
        with open("/dev/full", "w") as full:  # every write: ENOSPC
            done = subprocess.run(
                [sys.executable, "-m", "bootstrap", *argv],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
                timeout=120,
            )
        assert done.returncode == 2, done.stderr  # as DiskFullError; 1 would say the lock is stale
        assert done.stderr.splitlines() == [
            "error: the output: no space left on device (free space there, or send the output elsewhere)"
        ], done.stderr


def test_ctrl_c_while_the_verb_is_still_loading_is_one_line() -> None:
    """Ctrl-C while the verb's modules are still importing: no traceback either, and with --json the envelope."""
    code = (
        "import runpy, bootstrap.cli as cli\n"
        "def interrupted(argv=None):\n    raise KeyboardInterrupt\n"
        "cli.build_parser = interrupted\n"
        "runpy.run_module('bootstrap', run_name='__main__')"
    )
    for argv in (["doctor"], ["doctor", "--json"]):
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=REPO, timeout=60)
        assert (done.returncode, done.stderr) == (130, "interrupted\n")
        assert done.stdout == (
            ""
            if "--json" not in argv
            else json.dumps(
                {
                    "format": "bootstrap.error",
                    "version": 1,
                    "verb": "doctor",
                    "error": {"type": "KeyboardInterrupt", "message": "interrupted", "exit_code": 130},
                }
            )
            + "\n"
        )


def test_ctrl_c_while_the_command_line_itself_imports_is_one_line() -> None:
    """Ctrl-C even before `main` runs (the command line's own modules importing) is `interrupted`, 130."""
    code = (
        "import runpy, sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'bootstrap.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "runpy.run_module('bootstrap', run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code, "doctor"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (130, "interrupted\n", "")


def test_a_usage_error_of_a_json_run_still_prints_the_envelope(capsys) -> None:
    from bootstrap.cli import main

    assert main(["bench", "--json", "--budget", "abc"]) == 2
    out, err = capsys.readouterr()
    assert err == ("error: argument --budget: invalid float value: 'abc' (see `python -m bootstrap bench --help`)\n")
    assert json.loads(out) == {
        "format": "bootstrap.error",
        "version": 1,
        "verb": "bench",
        "error": {
            "type": "UsageError",
            "message": "argument --budget: invalid float value: 'abc' (see `python -m bootstrap bench --help`)",
            "exit_code": 2,
        },
    }
    assert main(["env", "--frobnicate"]) == 2  # without --json: one line, nothing on stdout
    out, err = capsys.readouterr()
    assert out == "" and err == ("error: unrecognized arguments: --frobnicate (see `python -m bootstrap env --help`)\n")


def test_a_reader_that_goes_away_gets_no_traceback() -> None:
    for argv in (("lock", "--check"), ("env", "--json", "--lock", "/nowhere/conda-lock.yml")):
        done = bootstrap_into_closed_pipe(*argv)
        assert done.returncode == 141, done.stderr
        assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_a_failure_with_json_prints_the_error_envelope(tmp_path: Path) -> None:
    import json

    done = subprocess.run(
        [sys.executable, "-m", "bootstrap", "env", "--json", "--lock", str(tmp_path / "none.yml")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == f"error: {tmp_path / 'none.yml'}: file not found (check the path or create it)\n"
    assert json.loads(done.stdout) == {
        "format": "bootstrap.error",
        "version": 1,
        "verb": "env",
        "error": {"type": "InputError", "message": done.stderr[len("error: ") : -1], "exit_code": 2},
    }


def test_an_interrupt_with_json_prints_the_error_envelope(monkeypatch, capsys) -> None:
    """Ctrl-C is an outcome too: stdout is still the envelope CI parses, not empty."""
    import json

    import bootstrap.commands.env as env_command
    from bootstrap.cli import main

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(env_command, "run", interrupted)
    assert main(["env", "--json"]) == 130
    out, err = capsys.readouterr()
    assert err == "interrupted\n"
    assert json.loads(out) == {
        "format": "bootstrap.error",
        "version": 1,
        "verb": "env",
        "error": {"type": "KeyboardInterrupt", "message": "interrupted", "exit_code": 130},
    }


def test_a_venv_missing_a_dependency_gets_one_line_and_a_bug_its_traceback(tmp_path: Path) -> None:
    """A damaged tools venv (rattler's files gone) names the module and how to rebuild, not a traceback;
    a module of bootstrap's own that is missing is a bug, and keeps its traceback."""
    shutil.copytree(REPO / "envs", tmp_path / "envs")

    def lock_without(module: str) -> subprocess.CompletedProcess:
        code = (
            f"import sys; sys.modules[{module!r}] = None; from bootstrap.cli import main; sys.exit(main(sys.argv[1:]))"
        )
        return subprocess.run(
            [sys.executable, "-c", code, "lock", "--root", str(tmp_path)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )

    damaged = lock_without("rattler")
    assert damaged.returncode == 2 and damaged.stderr.count("\n") == 1 and "Traceback" not in damaged.stderr
    assert damaged.stderr == (
        f"error: {sys.executable} cannot import rattler, which `bootstrap lock` needs: the tools "
        "venv is partial or damaged; `make clean && make tools` rebuilds it (.tools)\n"
    )
    no_yaml = lock_without("yaml")  # the tools venv's PyYAML: the tools venv's fix, not the env's
    assert (
        no_yaml.returncode == 2 and "needs PyYAML" in no_yaml.stderr and "`make clean && make tools`" in no_yaml.stderr
    )
    bug = lock_without("bootstrap.lock.conda")
    assert bug.returncode == 1 and "Traceback" in bug.stderr and "ModuleNotFoundError" in bug.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "envs"]  # nothing written


def test_an_env_missing_a_module_is_told_to_lock_it_not_to_rebuild_the_tools_venv(tmp_path: Path) -> None:
    """`bench` runs in the team's env: a torch missing there belongs in the env's spec and lock. This
    Python plays such an env: its prefix holds the record `bootstrap env` writes."""
    env = tmp_path / "env"
    (env / "conda-meta").mkdir(parents=True)
    (env / "conda-meta" / "bootstrap").write_text("{}")
    code = (
        f"import sys; sys.prefix = {str(env)!r}; sys.modules['torch'] = None; "
        "from bootstrap.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "bench", "--json", "--budget", "5", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    last = done.stderr.splitlines()[-1]  # after bench's progress lines
    assert done.returncode == 2 and done.stderr.count("error:") == 1 and "Traceback" not in done.stderr, done.stderr
    fix = (
        f"cannot import torch, which `bootstrap bench` needs: add `torch` to the env's spec (envs/*.yml), then "
        f"`make lock` and `make env`; to try it first, `{sys.executable} -m pip install torch`"
    )
    assert fix in last and "make tools" not in done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "MissingModuleError" and error["message"] == last[len("error: ") :]
    assert not (tmp_path / "out").exists()


def test_bench_in_a_python_without_torch_says_where_bench_runs(tmp_path: Path) -> None:
    """After the README's set-up, bench run by a Python that is no env of bootstrap's (the tools venv, a
    bare python3) and has no torch: the one line names this Python and where bench runs, not the user's
    module (which imports torch) nor the env's spec."""
    import venv

    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    python = bare / "bin" / "python"
    (tmp_path / "mymod.py").write_text("import torch\n\n\ndef make():\n    return torch.zeros(64, 3)\n")
    runs = f"torch is missing from this Python ({python}): `bootstrap bench` runs inside the env, on the torch its lock"
    where = f"`make bench` in {REPO}, or `PYTHONPATH={REPO} {REPO}/.envs/"
    for argv in (["--dataset", "mymod:make"], ["--json", "--budget", "5"]):
        done = subprocess.run(
            [str(python), "-m", "bootstrap", "bench", "--out", str(tmp_path / "out"), *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=60,
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"error: {runs}") and where in done.stderr, done.stderr
        assert "/bin/python -m bootstrap bench` with the same arguments" in done.stderr
        assert "mymod" not in done.stderr and "make lock" not in done.stderr
    assert json.loads(done.stdout)["error"]["message"] == done.stderr[len("error: ") : -1]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # `make test` runs the check itself before pytest
def test_package_passes_the_py39_check() -> None:
    done = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize(
    "source, why",
    [
        ("def f(x):\n    match x:\n        case 1:\n            return 1\n", "Pattern matching"),
        ("print(list(zip([1], [2], strict=True)))\n", "zip(strict)"),
        ("import tomllib\n", "tomllib"),
    ],
)
def test_py39_check_rejects_newer_python(tmp_path: Path, source: str, why: str) -> None:
    path = tmp_path / "new.py"
    path.write_text(source)
    done = subprocess.run([sys.executable, str(CHECK), str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert why in done.stdout


def test_py39_check_names_what_it_cannot_check(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(CHECK), str(tmp_path / "bootstrp")], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"check-py39: no such file or directory: {tmp_path / 'bootstrp'}\n"
    bare = tmp_path / "bin" / "python3"  # an interpreter with no vermin beside it
    bare.parent.mkdir()
    bare.symlink_to(sys.executable)
    done = subprocess.run([str(bare), str(CHECK)], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"check-py39: no vermin beside {bare}: run it with the tools venv's python")


@pytest.mark.parametrize(
    "argv, words",
    [
        (["export", "-o", "-", *["py310"] * 5000], "error: unrecognized arguments: py310 py310"),
        (["doctor", "--s", "x"], "error: unrecognized arguments: --s x"),
        (["doctor", "--save", "x"], "error: unrecognized arguments: --save x"),
        (["bench", "--budg", "5"], "error: unrecognized arguments: --budg 5"),
        (["export", "-o", ""], "error: argument -o/--output: an empty path (give a file or directory)"),
    ],
)
def test_usage_errors_are_one_short_line_and_options_are_never_abbreviated(
    tmp_path: Path, capsys, monkeypatch, argv, words
) -> None:
    from bootstrap.cli import main

    monkeypatch.chdir(tmp_path)  # an abbreviation taken as `--save-facts x` would write ./x here
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(words) and err.count("\n") == 1 and len(err) < 300, err
    assert list(tmp_path.iterdir()) == []
