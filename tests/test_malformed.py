"""A corpus of malformed inputs: specs, locks, virtual-packages and facts files (generated from
the committed ones by mutation, and hand-written raw files), and command-line arguments (a table
of options by the kind of value they take, times bad values of that kind, and hand-written ones).

Each input goes through its reader and through every verb that takes it, and each must give
exit 2, one line on stderr naming the file or option, no traceback, nothing written or changed,
within 2 s of CPU; `test_memory_stays_bounded` runs the raw files in a fresh interpreter and holds its
peak RSS under 300 MB. `python -m tests.test_malformed` prints the corpus size and the slowest
input."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from bootstrap.cli import main
from bootstrap.errors import InputError
from bootstrap.lock.lockfile import read_lock
from bootstrap.lock.spec import read_spec, read_virtual_packages
from tests.fixtures import REPO

ENV = "py39"
SPEC = yaml.safe_load((REPO / "envs" / f"{ENV}.yml").read_text(encoding="utf-8"))
LOCK = yaml.safe_load((REPO / "envs" / f"{ENV}.conda-lock.yml").read_text(encoding="utf-8"))
# The mutations touch the first package only, and every verb parses the whole file: a few packages keep
# each case to what it tests.
LOCK["package"] = LOCK["package"][:8]
VPKGS = yaml.safe_load((REPO / "envs" / "virtual-packages.yml").read_text(encoding="utf-8"))
WRONG = {
    "int": 7,
    "float": 3.1,
    "bool": True,
    "null": None,
    "list": [1, [2]],
    "map": {"a": {"b": 1}},
    "huge": "x" * 70_000,
    "nul": "a\x00b",
}


def _bomb(levels: int = 8) -> str:
    lines = ["a0: &a0 [xxxxxxxxxx]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


# Raw files: the same for every kind of input.
RAW: dict[str, Callable[[Path], None]] = {
    "empty": lambda p: p.write_text(""),
    "nul-bytes": lambda p: p.write_bytes(b"\x00" * 64),
    "not-utf8": lambda p: p.write_bytes(b"name: caf\xe9\n"),
    "bomb": lambda p: p.write_text(_bomb(8)),
    "bomb9": lambda p: p.write_text(_bomb(9)),
    "deep-flow": lambda p: p.write_text("[" * 100_000),
    "deep-block": lambda p: p.write_text("- " * 50_000 + "x\n"),
    "many-aliases": lambda p: p.write_text("a: &a x\nb: [" + ", ".join(["*a"] * 500) + "]\n"),
    "many-nodes": lambda p: p.write_text("- x\n" * 250_000),
    "huge-scalar": lambda p: p.write_text("name: " + "x" * 1_000_000 + "\n"),
    "comments-60mb": lambda p: p.write_bytes(b"#" * (60 << 20)),
    "dev-zero": lambda p: p.symlink_to("/dev/zero"),
    "fifo": lambda p: os.mkfifo(p),
    "directory": lambda p: p.mkdir(),
    "missing": lambda p: None,
    "bad-syntax": lambda p: p.write_text("a: [unclosed\n"),
    "tab-indent": lambda p: p.write_text("a:\n\t- b\n"),
    "duplicate-key": lambda p: p.write_text("a: 1\na: 2\n"),
    "bad-date": lambda p: p.write_text("a: 2020-13-45\n"),
    "long-int": lambda p: p.write_text("a: " + "9" * 5000 + "\n"),
    "scalar": lambda p: p.write_text("just a string\n"),
    "list": lambda p: p.write_text("- a\n- b\n"),
    "python-tag": lambda p: p.write_text("a: !!python/object/apply:os.system ['true']\n"),
}


def _mutations(base: Any, prefix: tuple = (), depth: int = 2) -> list[tuple[str, Any]]:
    """(name, document) for each key of `base` deleted and set to each WRONG value, `depth` levels down."""
    out = []
    items = base.items() if isinstance(base, dict) else enumerate(base[:1]) if isinstance(base, list) else []
    for key, value in items:
        path = prefix + (key,)
        name = ".".join(map(str, path))
        out.append((f"{name}:deleted", _replaced(path, None, delete=True)))
        for kind, wrong in WRONG.items():
            if wrong != value:
                out.append((f"{name}:{kind}", _replaced(path, wrong)))
        if depth > 1:
            out += _mutations(value, path, depth - 1)
    return out


def _replaced(path: tuple, value: Any, delete: bool = False) -> tuple[tuple, Any, bool]:
    return (path, value, delete)


def _apply(base: Any, change: tuple[tuple, Any, bool]) -> Any:
    path, value, delete = change
    doc = copy.deepcopy(base)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


def _cases() -> list[Any]:
    cases = []
    for kind, base, depth, every in (("spec", SPEC, 3, 5), ("lock", LOCK, 4, 10), ("vpkgs", VPKGS, 3, 5)):
        for index, (name, change) in enumerate(_mutations(base, depth=depth)):
            # A share of the mutations in the default run keeps `make test` within its minutes (a lock's go
            # through more verbs, each reading more): `make test-slow` runs them all.
            marks = () if index % every == 0 else (pytest.mark.slow,)
            cases.append(pytest.param(kind, ("doc", base, change), id=f"{kind}-{name}", marks=marks))
        for name in RAW:
            # Every kind reads through one YAML loader: the default run counts a file's nodes to the
            # bound once.
            marks = (pytest.mark.slow,) if name == "many-nodes" and kind != "spec" else ()
            cases.append(pytest.param(kind, ("raw", name), id=f"{kind}-{name}", marks=marks))
    for name in RAW:
        cases.append(pytest.param("facts", ("raw", name), id=f"facts-{name}"))
    for name, facts in (
        ("facts-wrong-format", {"format": "x" * 100_000, "version": 1}),
        ("facts-list", [1] * 10_000),
        ("facts-deep", "[" * 100_000),
    ):
        cases.append(pytest.param("facts", ("text", facts), id=name))
    return cases


# Mutations that leave a valid document: an optional field removed, a boolean set to another
# boolean. The readers must accept exactly these (anything else accepted is a hole).
VALID = {
    "spec-name:deleted",
    "spec-platforms.0:deleted",
    "spec-variants:deleted",
    "spec-variants:null",
    "vpkgs-subdirs.linux-64:deleted",
    "vpkgs-subdirs.osx-arm64:deleted",
    "vpkgs-subdirs.win-64:deleted",
    "lock-package.0:deleted",
    "lock-package.0.category:deleted",
    "lock-package.0.dependencies:deleted",
    "lock-package.0.optional:deleted",
    "lock-package.0.optional:bool",
    "lock-metadata.channels.0:deleted",
    "lock-metadata.channels.0.used_env_vars:deleted",
    "lock-metadata.sources.0:deleted",
    "lock-metadata.custom_metadata:deleted",
    "lock-metadata.custom_metadata:null",
    *(
        f"lock-metadata.{k}.{p}:deleted"
        for p in ("linux-64", "osx-arm64", "win-64")
        for k in ("content_hash", "custom_metadata.bootstrap.inputs-sha256")
    ),
    *(f"lock-metadata.custom_metadata.bootstrap.{k}:deleted" for k in ("mirrors", "variant", "version")),
}
CASES = _cases()
READERS = {"spec": read_spec, "lock": read_lock, "vpkgs": read_virtual_packages}
# Every verb that reads each kind of input ({target}: the input file; {out}: a path to write to).
_WRITE = ["export", ENV, "-o", "{out}/environment.yml"]
_BUNDLE = ["bundle", ENV, "--no-tools", "-o", "{out}/b.tar"]
_LOCK = ["lock", "--dry-run", ENV, "--pip-offline", "--pip-no-index"]
VERBS: dict[str, list[list[str]]] = {
    "spec": [["lock", "--check", ENV], _LOCK, ["env", "--dry-run", ENV], _WRITE, _BUNDLE, ["doctor", "--env", ENV]],
    "lock": [
        ["lock", "--check", ENV],
        _LOCK,
        ["env", "--dry-run", ENV],
        _WRITE,
        _BUNDLE,
        ["doctor", "--env", ENV],
        ["verify", "--no-bench", "--lock", "{target}", "--prefix", "{out}/env"],
    ],
    "vpkgs": [["lock", "--check", ENV], _LOCK, _WRITE],
    "facts": [
        ["doctor", "--facts", "{target}"],
        ["env", "--dry-run", ENV, "--facts", "{target}"],
        ["verify", "--facts", "{target}"],
    ],
}
TARGETS = {
    "spec": f"envs/{ENV}.yml",
    "lock": f"envs/{ENV}.conda-lock.yml",
    "vpkgs": "envs/virtual-packages.yml",
    "facts": "bootstrap.facts",
}


def _write(target: Path, how: tuple) -> None:
    if how[0] == "raw":
        RAW[how[1]](target)
    elif how[0] == "text":
        target.write_text(how[1] if isinstance(how[1], str) else json.dumps(how[1]))
    else:
        target.write_text(yaml.safe_dump(_apply(how[1], how[2]), sort_keys=False))


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "envs").mkdir(parents=True)
    for name in (f"{ENV}.yml", f"{ENV}.conda-lock.yml", "virtual-packages.yml"):
        shutil.copy(REPO / "envs" / name, root / "envs" / name)
    return root


def _run(argv: list[str]) -> tuple[int, str, float]:
    """`python -m bootstrap ARGV` in-process: exit code, stderr, and the CPU seconds it took (what an
    input costs, whatever else the machine is doing)."""
    err = io.StringIO()
    started = time.process_time()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue(), time.process_time() - started


def _one_line_naming(code: int, err: str, names: tuple[str, ...], argv: list[str]) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (argv, code, err[:500])
    assert any(name in lines[0] for name in names) and len(lines[0]) < 500, (argv, names, lines[0][:500])
    return lines[0]


def run_case(tmp_path: Path, name: str, kind: str, how: tuple) -> list[tuple[float, list[str]]]:
    """The input through its reader and every verb that takes it; (seconds, argv) of each verb run.
    Nothing under `tmp_path` may change (the input aside, written before the first run)."""
    root = _project(tmp_path)
    target = root / TARGETS[kind] if kind != "facts" else tmp_path / TARGETS[kind]
    if target.exists():
        target.unlink()
    _write(target, how)
    (tmp_path / "out").mkdir()
    before = _snapshot(tmp_path)
    if kind in READERS:
        try:
            READERS[kind](target)
        except InputError as exc:
            message = str(exc)
        else:
            assert name in VALID, f"{name}: accepted by the reader"
            return []
        assert name not in VALID, f"{name}: a valid document refused: {message}"
        assert message.startswith(str(target)) and "\n" not in message and len(message) < 400, message
    # No spec at all is no env at all: the error names the envs/ folder.
    names = (str(target.parent), "envs") if how == ("raw", "missing") and kind == "spec" else (str(target.name),)
    timings = []
    for template in VERBS[kind]:
        no_lock_yet = how == ("raw", "missing") and kind == "lock"
        if no_lock_yet and template[0] in ("lock", "doctor") and "--check" not in template:
            continue  # no lock yet is what `lock` is for, and doctor reports it as a check
        argv = [a.format(target=target, out=tmp_path / "out") for a in template] + (
            ["--root", str(root)] if template[0] != "verify" else []
        )
        code, err, seconds = _run(argv)
        _one_line_naming(code, err, names, argv)
        assert seconds < 2, (argv, seconds)
        timings.append((seconds, argv))
    assert _snapshot(tmp_path) == before
    return timings


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) + len(CLI_CASES) >= 300


@pytest.mark.parametrize(("kind", "how"), CASES)
def test_malformed_input_is_one_line_and_exit_2(
    tmp_path: Path, kind: str, how: tuple, request: pytest.FixtureRequest
) -> None:
    run_case(tmp_path, request.node.callspec.id, kind, how)


# Command-line arguments: each option by the kind of value it takes, times bad values of that kind.
_BASE = {
    "env": ["env", ENV, "--dry-run"],
    "lock": _LOCK,
    "export": _WRITE,
    "bundle": _BUNDLE,
    "doctor": ["doctor", "--env", ENV],
    "verify": ["verify", "--no-bench", "--prefix", "{out}/env"],
    "cache": ["cache"],
    "bench": ["bench", "--budget", "1", "--out", "{out}/bench"],
    "monitor": ["monitor", "--count", "1"],
}
_OPTIONS = {
    "file to read": {
        "env": ["--lock", "--facts", "--bundle"],
        "doctor": ["--lock", "--facts"],
        "verify": ["--lock", "--facts"],
        "bench": ["--config"],
    },
    "directory to read": {
        "env": ["--root"],
        "lock": ["--root", "--pip-find-links"],
        "export": ["--root"],
        "bundle": ["--root"],
        "doctor": ["--root"],
        "verify": ["--root"],
        "cache": ["--root"],
    },
    "file to write": {"export": ["-o"], "bundle": ["-o"], "doctor": ["--save-facts"], "verify": ["--save-facts"]},
    "directory to write": {
        "env": ["--cache-dir"],
        "lock": ["--cache-dir"],
        "bundle": ["--cache-dir"],
        "cache": ["--cache-dir"],
        "bench": ["--out", "--data-dir"],
    },
    "platform": {
        "env": ["--platform"],
        "lock": ["--platform"],
        "export": ["--platform"],
        "bundle": ["--platform"],
        "doctor": ["--platform"],
    },
    "number": {
        "bench": ["--budget", "--batch-size", "--samples", "--max-workers", "--cpu-ms"],
        "verify": ["--bench-budget"],
        "monitor": ["--interval"],
    },
    "mirror": {"env": ["--mirror"], "lock": ["--mirror"], "bundle": ["--mirror"]},
}
_BAD = {
    "file to read": ["", "{tmp}/missing", "/dev/zero", "{tmp}", "{tmp}/fifo"],
    "directory to read": ["", "{tmp}/missing", "/dev/zero", "{tmp}/file"],
    "file to write": ["", "{tmp}", "/dev/full", "{tmp}/file/x"],
    "directory to write": ["", "{tmp}/file", "/dev/null", "{tmp}/file/x"],
    "platform": ["", "linux-64 ", "Linux-64", "linux_64", "../x", "linux-64\t"],
    "number": ["", "abc", "-1", "nan", "inf", "1e309", "9" * 400],
    "mirror": [
        "conda-forge=bob:PW-SECRET@host/cf",
        "conda-forge=ftp://bob:PW-SECRET@host/cf",
        "https://bob:PW-SECRET@host/cf",
        "conda-forge=",
        "=https://host/cf",
        "conda-forge=https://host/t/PW-SECRET/cf?x=1",
        "conda-forge=mirror.internal/t/PW-SECRET/cf",
    ],
}
_BY_HAND = [  # (argv, what the line must name)
    (["env", ""], "env name"),
    (["env", " py39"], "py39"),
    (["env", "../py39"], "../py39"),
    (["export", ""], "env name"),
    (["env", ENV, "--dry-run", "--variant", ""], "--variant"),
    (["env", ENV, "--dry-run", "--variant", "x y"], "--variant"),
    (["env", ENV, "--dry-run", "--variant", "cu999"], "--variant"),
    (["bundle", ENV, "--variant", "nope"], "--variant"),
    (["env", ENV, "--dry-run", "--prefix", ""], "--prefix"),
    (["env", ENV, "--dry-run", "--prefix", "/dev/null"], "/dev/null"),
    (["lock", ENV, "--dry-run", "--index", "=x"], "--index"),
    (["lock", ENV, "--dry-run", "--index", "pypi=ftp://x"], "--index"),
    (["lock", ENV, "--dry-run", "--index", "pypi=bob:PW-SECRET@host/simple"], "--index"),
    (["lock", ENV, "--dry-run", "--update", ""], "--update"),
    (["lock", ENV, "--dry-run", "--update", "no-such-pkg"], "--update"),
    (["lock", "--check", ENV, "--mirror", "conda-forge=https://host/cf"], "--mirror"),
    (["lock", "--check", "no-such-env"], "no-such-env"),
    (["lock", "--check", ENV, "--variant", "cu999"], "--variant"),
    (["export", ENV, "--channel", "x y"], "--channel"),
    (["export", ENV, "--name", ""], "--name"),
    (["export", ENV, "--name", "a/b"], "--name"),
    (["bundle", ENV, "--tools-python", "3"], "--tools-python"),
    (["bundle", ENV, "--tools-python", "2.7"], "--tools-python"),
    (["verify", "--threshold", "x"], "--threshold"),
    (["bench", "--threshold", "nope=1"], "--threshold"),
    (["bench", "--threshold", "efficiency=abc"], "--threshold"),
    (["bench", "--model", "nope"], "--model"),
    (["bench", "--device", "tpu"], "--device"),
    (["bench", "--dataset", "no_such_module:make"], "no_such_module"),
    (["bench", "--dataset", "os:no_such_factory"], "os:no_such_factory"),
    (["bench", "--dataset", "nocolon"], "--dataset"),
    (["doctor", "--env", ""], "env name"),
    (["verify", "--facts", "{tmp}/file", "--deep"], "--deep"),
    (["monitor", "--csv", "{out}/a", "--jsonl", "{out}/b"], "--jsonl"),
    (["frobnicate"], "frobnicate"),
    (["env", "--frobnicate"], "--frobnicate"),
]


def _cli_cases() -> list[Any]:
    cases = []
    for kind, table in _OPTIONS.items():
        for verb, options in table.items():
            for option in options:
                for value in _BAD[kind]:
                    argv = list(_BASE[verb])
                    if option in argv:  # the base's own value replaced
                        del argv[argv.index(option) : argv.index(option) + 2]
                    named = (option, value) if value.strip() else (option,)  # the option, or the file it names
                    marks = () if len(cases) % 3 == 0 else (pytest.mark.slow,)  # as the mutations: a share by default
                    cases.append(
                        pytest.param(argv + [option, value], named, id=f"{verb} {option} {value!r}"[:80], marks=marks)
                    )
    for argv, named in _BY_HAND:
        cases.append(pytest.param(argv, (named,), id=" ".join(map(repr, argv))[:80]))
    return cases


CLI_CASES = _cli_cases()


@pytest.mark.parametrize(("argv", "names"), CLI_CASES)
def test_bad_argument_is_one_line_and_exit_2(tmp_path: Path, argv: list[str], names: tuple[str, ...]) -> None:
    root = _project(tmp_path)
    (tmp_path / "file").write_text("x\n")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "out").mkdir()
    argv = [a.format(tmp=tmp_path, out=tmp_path / "out") for a in argv]
    names = tuple(n.format(tmp=tmp_path) for n in names)
    if argv[0] not in ("bench", "monitor", "cache", "verify", "frobnicate") and "--root" not in argv:
        argv += ["--root", str(root)]
    before = _snapshot(tmp_path)
    code, err, seconds = _run(argv)
    _one_line_naming(code, err, names, argv)
    assert "PW-SECRET" not in err and seconds < 2, (err, seconds)
    assert _snapshot(tmp_path) == before


@pytest.mark.slow
def test_memory_stays_bounded() -> None:
    """Every raw file of the corpus (the alias bombs, the endless and the huge ones) through every
    verb in one fresh interpreter: its peak RSS bounds what any one input costs."""
    code = (
        "import sys, tempfile; from pathlib import Path; import tests.test_malformed as m\n"
        "for kind in m.VERBS:\n"
        "    for name in m.RAW:\n"
        "        with tempfile.TemporaryDirectory() as tmp:\n"
        "            m.run_case(Path(tmp), f'{kind}-{name}', kind, ('raw', name))\n"
        "print(m.peak_rss_mib())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    peak_mib = float(done.stdout.split()[-1])
    assert peak_mib < 300, peak_mib


def peak_rss_mib() -> float:
    """This process's peak RSS. On Linux VmHWM, the peak of its own memory since exec: getrusage's
    ru_maxrss also keeps the peak from before the exec, that is of the forked parent (a pytest worker
    that imported torch), and reported some 400 MB for a child that used 130."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux, bytes on macOS
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(kib) / 1024


def _report() -> None:
    """`python -m tests.test_malformed`: the corpus size, and the slowest inputs with their times."""
    import tempfile

    timings = []
    for param in CASES:
        kind, how = param.values
        with tempfile.TemporaryDirectory() as tmp:
            timings += [(seconds, param.id, argv[0]) for seconds, argv in run_case(Path(tmp), param.id, kind, how)]
    timings.sort(reverse=True)
    print(
        f"corpus: {len(CASES)} input files ({len(timings)} verb runs), {len(CLI_CASES)} argument lists, "
        f"{len(CASES) + len(CLI_CASES)} inputs in all; peak RSS "
        f"{peak_rss_mib():.0f} MiB"
    )
    for seconds, name, verb in timings[:5]:
        print(f"  {seconds:.3f} s  {verb:<7} {name}")


if __name__ == "__main__":
    _report()
