"""The README and docs/ show real things: every `$ make TARGET` is a target and echoes the command shown
under it, every `python -m bootstrap VERB --option` parses, the offline outputs the README shows are
what those commands print today (lines trimmed with `...` aside), and every link finds its file.

Offline and quick: the make targets run with `-n` in a scratch copy (test_makefile.py's way), and the
commands whose output is shown run in a scratch copy of the project, so no `.tools` or `.envs` of the
checkout is read or touched."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest

from tests.fixtures import REPO

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
# The checkout's path in the outputs the README shows.
SHOWN_ROOT = "/workspace/bootstrap"
# The commands whose output the README shows, all offline: each is run and its output compared.
CHECKED = {
    "make env ENV_ARGS=--dry-run",
    "make lock-check",
    "python -m bootstrap doctor --facts tests/data/verify/rtx3090-535.183.01.facts.json",
}
# The outputs are what an offline host prints: a plan's HEAD requests for sizes (what the cache lacks)
# are refused at once by a proxy that is not there, rather than waiting on the network.
NO_NETWORK = {name: "http://127.0.0.1:9" for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
NO_NETWORK.update(no_proxy="", NO_PROXY="")
# The outputs that need PyPI (`make test-network`) and, for the conda part, the developers' snapshot of
# conda-forge served as its mirror (the Makefile's SNAPSHOT); run in a scratch copy of their own.
CHECKED_ON_PYPI = {'make add PKG=rich ADD_ARGS="--pip --no-install"'}
SNAPSHOT = REPO.parent / "shared" / "conda-forge-snapshot" / "conda-forge"
# The same for docs/: the outputs shown there that replay recorded facts (the others need a GPU,
# a conda channel or a minute of benchmark).
CHECKED_IN_DOCS = {
    "python -m bootstrap doctor --facts tests/data/verify/h200x1-580.159.04.facts.json",
    "python -m bootstrap doctor --fleet tests/data/verify",
}


def console_commands(text: str) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown under it) of every `$ ` line in the page's console blocks."""
    shown: list[tuple[str, list[str]]] = []
    for block in re.findall(r"^```console\n(.*?)^```$", text, re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            if line.startswith("$ "):
                shown.append((line[2:].split("  #")[0].strip(), []))
            elif shown:
                shown[-1][1].append(line)
    return shown


COMMANDS = console_commands(README.read_text())


def make_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("ENV", "MAKEFLAGS", "MAKELEVEL")}


def scratch_project(root: Path) -> Path:
    """The Makefile and scripts with a `.tools` that looks built, and the project's specs and locks."""
    root.mkdir()
    shutil.copy(REPO / "Makefile", root)
    shutil.copytree(REPO / "scripts", root / "scripts")
    shutil.copytree(REPO / "envs", root / "envs")
    shutil.copy(REPO / "conda-lock.yml", root)
    (root / ".tools" / "bin").mkdir(parents=True)
    (root / ".tools" / "bin" / "python").symlink_to(sys.executable)
    shutil.copy(REPO / "scripts" / "requirements-tools.txt", root / ".tools" / ".requirements-tools.txt")
    shutil.copy(REPO / "scripts" / "tools-venv.sh", root / ".tools" / ".tools-venv.sh")
    shutil.copy(REPO / "scripts" / "requirements-test.txt", root / ".tools" / ".requirements-test.txt")
    (root / ".tools" / ".torch-test").write_text("torch==0\n")
    return root


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return scratch_project(tmp_path_factory.mktemp("readme") / "proj")


def dry_make(root: Path, command: str) -> list[str]:
    """What `make -n` prints for a `make ...` command line the README shows."""
    argv = shlex.split(command)
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", *argv[1:], "TORCH_TEST=torch==0"],
        cwd=root,
        env=make_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"`{command}`: {done.stderr}"
    return done.stdout.splitlines()


@lru_cache(maxsize=None)
def verb_help(verb: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bootstrap", verb, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"`python -m bootstrap {verb}` is no verb: {done.stderr}"
    return done.stdout


def bootstrap_call(line: str) -> tuple[str, list[str]] | None:
    """(verb, its options) of a `python -m bootstrap VERB ...` command line, or None; of the last one in
    it, the verb that runs in the end (`bootstrap shell ENV --exec python -m bootstrap verify`)."""
    if "-m bootstrap " not in line:
        return None
    argv = shlex.split(line)
    for i in reversed(range(len(argv) - 2)):
        if argv[i : i + 2] == ["-m", "bootstrap"]:
            return argv[i + 2], [a.split("=")[0] for a in argv[i + 3 :] if a.startswith("-")]
    return None


def fits(shown: list[str], actual: list[str]) -> bool:
    """Whether the shown lines are the actual ones, where a line `...` stands for any number of lines and
    `...` inside a line for any text."""

    def line_fits(pattern: str, line: str) -> bool:
        return re.fullmatch(".*".join(map(re.escape, pattern.split("..."))), line.rstrip()) is not None

    def rest(i: int, j: int) -> bool:
        if i == len(shown):
            return j == len(actual)
        if shown[i].strip() == "...":
            return any(rest(i + 1, k) for k in range(j, len(actual) + 1))
        return j < len(actual) and line_fits(shown[i], actual[j]) and rest(i + 1, j + 1)

    return rest(0, 0)


def test_fits_reads_trims_as_the_readme_writes_them() -> None:
    actual = ["head", "  a 1", "  b 2", "  c 3", "ok   x  y   z", "tail"]
    assert fits(["head", "...", "  c 3", "ok ... z", "tail"], actual)
    assert fits(["head", "..."], actual)
    assert not fits(["head", "  c 3", "..."], actual)  # a gap needs its `...`
    assert not fits(["head", "...", "ok ... q", "tail"], actual)
    assert not fits(["head", "..."], [])


def test_the_readme_shows_the_two_commands_and_stays_short() -> None:
    text = README.read_text()
    assert {"make env", "make test"} <= {command for command, _ in COMMANDS}
    assert len(text.splitlines()) <= 170


def shown_on(page: Path) -> list[tuple[str, list[str]]]:
    return COMMANDS if page == README else console_commands(page.read_text())


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_make_target_shown_exists_and_echoes_the_command_shown(scratch: Path, page: Path) -> None:
    targets = [(command, output) for command, output in shown_on(page) if command.startswith("make ")]
    for command, output in targets:
        planned = dry_make(scratch, command)
        if output:
            assert output[0] in planned, f"`{command}` echoes {planned[-1]!r}, the README shows {output[0]!r}"
        for line in planned:
            call = bootstrap_call(line)
            if call is not None:  # e.g. ENV_ARGS=--rollback: an option of the verb make runs
                verb, options = call
                assert set(options) <= set(re.findall(r"--?[\w-]+", verb_help(verb))), command


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_bootstrap_command_shown_is_a_verb_whose_options_parse(page: Path) -> None:
    calls = [bootstrap_call(command) for command, _ in shown_on(page)]
    for verb, options in filter(None, calls):
        missing = set(options) - set(re.findall(r"--?[\w-]+", verb_help(verb)))
        assert not missing, f"`bootstrap {verb}` has no {sorted(missing)}"


def test_the_outputs_shown_are_checked_here() -> None:
    shown = {command for command, output in COMMANDS if output}
    assert shown == CHECKED | CHECKED_ON_PYPI, "a command whose output the README shows needs a way to run it here"
    replays = {
        command
        for page in PAGES[1:]
        for command, output in shown_on(page)
        if output and ("--facts" in command or "--fleet" in command)
    }
    assert replays == CHECKED_IN_DOCS


def shown_output(command: str) -> list[str]:
    return next(output for page in PAGES for c, output in shown_on(page) if c == command and output)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.skipif(
    sys.platform != "linux" or os.uname().machine != "x86_64",
    reason="the README shows the linux-64 plan and doctor's linux facts",
)
@pytest.mark.parametrize("command", sorted(CHECKED | CHECKED_IN_DOCS))
def test_the_output_shown_is_what_the_command_prints(scratch: Path, command: str) -> None:
    replay(scratch, command, env=NO_NETWORK)


@pytest.mark.network
@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.skipif(not SNAPSHOT.is_dir(), reason=f"needs the developers' conda-forge snapshot at {SNAPSHOT}")
@pytest.mark.parametrize("command", sorted(CHECKED_ON_PYPI))
def test_the_output_shown_is_what_the_command_prints_against_pypi(tmp_path: Path, command: str) -> None:
    replay(scratch_project(tmp_path / "proj"), command, extra=("--mirror", f"conda-forge={SNAPSHOT}"))


def replay(root: Path, command: str, extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
    """Run `command` as the page shows it (a `make` line: the recipe make echoes) and compare what it
    prints with what the page shows."""
    shown = shown_output(command)
    argv, echoed = shlex.split(command), []
    if argv[0] == "make":  # make's echo of the recipe, then the recipe run with this interpreter
        echoed = dry_make(root, command)[-1:]
        argv = shlex.split(echoed[0])
        assert argv[0] == ".tools/bin/python"
    where = root if command.startswith("make ") else REPO
    done = subprocess.run(
        [sys.executable, *argv[1:], *extra],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
        env={**make_env(), "PYTHONPATH": str(REPO), **(env or {})},
    )
    assert done.returncode in (0, 1), done.stderr
    actual = echoed + done.stdout.replace(str(root), SHOWN_ROOT).splitlines()
    assert fits(shown, actual), "\n".join(["shown:", *shown, "", "printed:", *actual])


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not re.match(r"[a-z]+:", target) and not target.startswith("#")
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_link_finds_a_file_in_the_repository(page: Path) -> None:
    for target in relative_links(page):
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(REPO) and path.exists(), f"{page.name} links to {target}: not in the repository"


def test_the_readme_links_every_page_of_docs() -> None:
    linked = {(REPO / target).resolve() for target in relative_links(README)}
    assert set(PAGES[1:]) <= linked


# docs/PERFORMANCE.md, and scripts/bench_report.py that writes it (`make bench-report`).


def bench_report():
    """scripts/bench_report.py as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_report", REPO / "scripts" / "bench_report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_report"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def fake(tmp: Path, name: str, code: str) -> str:
    script = tmp / f"{name}.py"
    script.write_text(code)
    return str(script)


def test_a_failing_or_hanging_benchmark_is_reported_in_the_page(tmp_path: Path) -> None:
    report = bench_report()
    fails = fake(
        tmp_path,
        "fails",
        "import sys\nprint('half a table')\nsys.exit('Traceback (most recent call last):\\nRuntimeError: no PyPI')\n",
    )
    hangs = fake(tmp_path, "hangs", "import time\ntime.sleep(60)\n")
    works = fake(
        tmp_path,
        "works",
        "print('verify / collect_env = 0.25')\nprint('  verify   0.50 s')\nprint('  collect_env   2.00 s')\n",
    )
    lock, env, verify, *others = report.BENCHMARKS
    report.BENCHMARKS = (
        replace(lock, script=fails),
        replace(env, script=hangs, timeout_s=0.5),
        replace(verify, script=works, args=()),
        *others,
    )
    page = tmp_path / "PERFORMANCE.md"
    page.write_text(f"# Performance\n\n{report.KEPT}\n\n## Earlier measurements\n\nkept as it was\n")
    only = [arg for bench in report.BENCHMARKS[:3] for arg in ("--only", bench.name)]
    assert report.main(["--out", str(page), *only]) == 1
    text = page.read_text()
    assert "half a table" in text and "It failed (exit 1)" in text and "RuntimeError: no PyPI" in text
    assert "did not finish" in text and "no answer after 0.5 s" in text
    assert "a ratio of 0.25: met" in text
    assert text.endswith(f"{report.KEPT}\n\n## Earlier measurements\n\nkept as it was\n")
    assert "Not measured yet" in text  # the others, not chosen


def test_only_measures_one_section_and_keeps_the_others(tmp_path: Path) -> None:
    report = bench_report()
    report.BENCHMARKS = tuple(
        replace(b, script=fake(tmp_path, b.name, f"print('{b.name} run 1')\n"), args=()) for b in report.BENCHMARKS
    )
    page = tmp_path / "PERFORMANCE.md"
    report.main(["--out", str(page)])
    before = page.read_text()
    Path(report.BENCHMARKS[1].script).write_text(f"print('{report.BENCHMARKS[1].name} run 2')\n")
    report.main(["--out", str(page), "--only", report.BENCHMARKS[1].name])
    after = page.read_text()
    sections = [report.previous_sections(text)[0] for text in (before, after)]
    assert [name for name in sections[0] if sections[0][name] != sections[1][name]] == [report.BENCHMARKS[1].name]
    assert "run 2" in sections[1][report.BENCHMARKS[1].name]


def test_an_opt_in_benchmark_runs_only_when_named(tmp_path: Path) -> None:
    """The real-size bench-env downloads several GB: a plain `make bench-report` leaves its section as it was."""
    report = bench_report()
    report.BENCHMARKS = tuple(
        replace(b, script=fake(tmp_path, b.name, f"print('{b.name} ran')\n"), args=()) for b in report.BENCHMARKS
    )
    page = tmp_path / "PERFORMANCE.md"
    report.main(["--out", str(page)])
    sections = report.previous_sections(page.read_text())[0]
    assert [b.name for b in report.BENCHMARKS if "ran" not in sections[b.name]] == ["env-real"]
    report.main(["--out", str(page), "--only", "env-real"])
    assert "env-real ran" in report.previous_sections(page.read_text())[0]["env-real"]


def test_the_page_shows_no_path_of_the_machine_that_measured(tmp_path: Path) -> None:
    """The page is committed: the checkout, a benchmark's temp directories and the home of whoever ran
    it are written as on any machine."""
    report = bench_report()
    home = Path.home()
    printer = fake(
        tmp_path,
        "paths",
        "import os, shutil, sys, tempfile\n"
        "made = [tempfile.mkdtemp(prefix='bench-verify-'), tempfile.mkdtemp()]\n"
        f"print(f'py310: {{made[0]}}/proj/.envs/py310 -> generation 1; scratch {{made[1]}}')\n"
        f"print('checkout {REPO}/conda-lock.yml, home ' + os.path.join({str(home)!r}, '.cache', 'bootstrap'))\n"
        "for path in made:\n    shutil.rmtree(path)\n"
        "sys.exit(f'failed in {made[0]}')\n",
    )
    report.BENCHMARKS = tuple(replace(b, script=printer, args=()) for b in report.BENCHMARKS[:1])
    page = tmp_path / "PERFORMANCE.md"
    assert report.main(["--out", str(page)]) == 1
    text = page.read_text()
    assert "py310: /tmp/bench-verify-XXXXXXXX/proj/.envs/py310 -> generation 1; scratch /tmp/tmpXXXXXXXX" in text
    assert "checkout ./conda-lock.yml, home ~/.cache/bootstrap" in text
    assert "failed in /tmp/bench-verify-XXXXXXXX" in text  # its stderr too
    assert str(REPO) not in text and not re.search(r"bench-verify-(?!XXXXXXXX)", text)
    if len(home.parts) > 1:
        assert str(home) + os.sep not in text


def test_the_committed_figures_are_read_by_the_script_that_wrote_them() -> None:
    """Each section of docs/PERFORMANCE.md that ran to exit 0 holds output its reader parses: a changed
    output format of a benchmark script shows here once the page is written again."""
    report = bench_report()
    sections, kept = report.previous_sections((REPO / "docs" / "PERFORMANCE.md").read_text())
    assert "Earlier measurements (before the restructuring)" in kept
    for bench in report.BENCHMARKS:
        text = sections[bench.name]
        if ", exit 0;" not in text:
            continue
        printed = re.search(r"^```console\n\$ [^\n]*\n(.*?)^```$", text, re.MULTILINE | re.DOTALL).group(1)
        assert bench.read(printed).startswith("Target"), bench.name


def test_the_lock_reading_sets_a_one_package_update_beside_a_full_relock() -> None:
    report = bench_report()
    row = (
        "conda solve  0.145 s   pip resolve  61.18 s   write  0.273 s   conda solve + write  0.418 s   moved {} entries"
    )
    out = "\n".join(
        [
            f"{label:<22} {row.format(moved)}"
            for label, moved in (
                ("cold uv cache", 0),
                ("warm uv cache", 0),
                ("lock --update numpy", 6),
                ("lock --upgrade", 40),
            )
        ]
        + [
            "lock --check (2 envs)  median 0.241 s  min 0.215 s  max 0.283 s over 7 runs; bare `python -c "
            "pass` 0.012 s -> check costs 19.5x an empty interpreter start"
        ]
    )
    assert "cosmetic edit of every spec" not in report.read_lock(out)  # output from before that timing still reads
    out += (
        "\nlock --check after a cosmetic edit (2 envs)  median 0.252 s  min 0.22 s  max 0.3 s over 7 runs; bare "
        "`python -c pass` 0.012 s -> check costs 21.0x an empty interpreter start"
    )
    assert "`lock --check` took 0.24 s" in report.read_lock(out)
    assert (
        "after a cosmetic edit of every spec and virtual-packages.yml (a comment, keys reordered, blank lines) "
        "0.25 s, met" in report.read_lock(out)
    )
    assert report.read_lock(out).endswith(
        "A one-package update, `lock --update numpy`: conda solve + write 0.42 s, pip 61.2 s, 6 lock entries moved; "
        "beside it a full relock, `lock --upgrade`: conda solve + write 0.42 s, pip 61.2 s, 40 lock entries moved."
    )
