"""Spec and virtual-packages parsing: good files parse, bad ones name file, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from bootstrap.errors import InputError
from bootstrap.lock.spec import _dependencies, canonical_channel, read_spec, read_virtual_packages
from tests.fixtures import REPO

GOOD = """\
name: demo
channels: [conda-forge]
platforms: [linux-64, win-64]
dependencies:
  - python=3.10.*
  - pip
  - pip:
      - torch==2.10.*
"""


def write(tmp_path: Path, text: str, name: str = "demo.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_committed_specs_parse() -> None:
    for env, python in (("py310", "python=3.10.*"), ("py39", "python=3.9.*")):
        spec = read_spec(REPO / "envs" / f"{env}.yml")
        assert spec.channels == ("conda-forge",)
        assert spec.platforms == ("linux-64", "osx-arm64", "win-64")
        assert python in spec.conda and "pip" in spec.conda
        names = {r.split("=")[0].split(">")[0] for r in spec.pip}
        assert {"torch", "nvidia-ml-py", "pyyaml", "numpy", "pillow"} <= names
    vpkgs = read_virtual_packages(REPO / "envs" / "virtual-packages.yml")
    assert vpkgs.version_of("linux-64", "__glibc") == "2.28"
    assert vpkgs.version_of("osx-arm64", "__osx") == "14.0"
    assert vpkgs.version_of("win-64", "__glibc") is None


def test_good_spec(tmp_path: Path) -> None:
    spec = read_spec(write(tmp_path, GOOD))
    assert spec.name == "demo"
    assert spec.conda == ("python=3.10.*", "pip")
    assert spec.pip == ("torch==2.10.*",)
    assert spec.channel_urls == ("https://conda.anaconda.org/conda-forge",)


def test_channel_qualified_python_and_pip_count_for_the_pip_section(tmp_path: Path) -> None:
    text = GOOD.replace("- python=3.10.*", "- conda-forge::python=3.10.*").replace("- pip\n", "- conda-forge::pip\n")
    spec = read_spec(write(tmp_path, text))
    assert spec.conda == ("conda-forge::python=3.10.*", "conda-forge::pip")
    assert spec.pip == ("torch==2.10.*",)


@pytest.mark.parametrize(
    "dependency",
    [
        "conda-forge::pip",
        "https://conda.anaconda.org/conda-forge::pip",
        "conda-forge/linux-64::pip",
        "pip[channel=conda-forge]",
    ],
)
def test_a_dependency_may_name_a_channel_of_the_spec(tmp_path: Path, dependency: str) -> None:
    assert dependency in read_spec(write(tmp_path, GOOD.replace("- pip\n", f"- {dependency}\n", 1))).conda


@pytest.mark.parametrize(
    ("dependency", "shown"),
    [
        ("pytorch::pip", "'pytorch::pip' names the channel 'pytorch'"),
        ("nvidia/linux-64::pip", "'nvidia/linux-64::pip' names the channel 'nvidia/linux-64'"),
        ("conda-forge/label/dev::pip", "names the channel 'conda-forge/label/dev'"),
        ("pip[channel=pytorch]", "'pip[channel=pytorch]' names the channel 'pytorch'"),
        ("https://user:hunter2@host/ch::pip", "'https://host/ch::pip' carries credentials"),
        ("https://conda.anaconda.org/t/TK-SECRET/conda-forge::pip", "carries credentials"),
    ],
)
def test_a_dependency_naming_another_channel_or_credentials_is_refused(
    tmp_path: Path, dependency: str, shown: str
) -> None:
    """The solve takes every package from `channels:`, where the channel rules hold (no pytorch, no
    nvidia, no credentials): `pytorch::x` was solved from conda-forge and exported without its channel."""
    path = write(tmp_path, GOOD.replace("- pip\n", f"- {dependency}\n", 1))
    with pytest.raises(InputError) as caught:
        read_spec(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: dependencies[1]: ") and shown in message, message
    assert "hunter2" not in message and "TK-SECRET" not in message and "\n" not in message


@pytest.mark.parametrize(
    "text, field, fix",
    [
        ("name: [oops\n", "malformed YAML", "fix the syntax"),
        (GOOD + "prefix: /opt/env\n", "unknown key 'prefix'", "allowed keys"),
        (GOOD.replace("win-64", "win-32"), "unknown platform 'win-32'", "use one of"),
        (GOOD.replace("[conda-forge]", "[conda-forge, pytorch]"), "'pytorch' is not allowed", "use conda-forge"),
        (GOOD.replace("[conda-forge]", "[defaults]"), "'defaults' is not allowed", "use conda-forge"),
        (GOOD.replace("[conda-forge]", "[nvidia]"), "'nvidia' is not allowed", "use conda-forge"),
        (GOOD.replace("[conda-forge]", "['https://u:hunter2@repo.example/cf']"), "carries credentials", "~/.netrc"),
        (GOOD.replace("platforms: [linux-64, win-64]\n", ""), "platforms: missing", "platforms: [linux-64"),
        (GOOD.replace("  - pip\n  - pip:", "  - pip:"), "needs `pip`", "add `- pip`"),
        (GOOD.replace("torch==2.10.*", "--index-url https://x"), "pip options", "pip-indexes:"),
        (GOOD.replace("  - pip\n", "  - 42\n"), "dependencies[1]", ""),
        (
            GOOD.replace("[conda-forge]", "['https://repo.example/t/tk-hunter2/conda-forge']"),
            "carries credentials",
            "~/.netrc",
        ),
        (GOOD.replace("python=3.10.*", "3.10"), "dependencies[0]: 3.1 is a number", "quote it"),
        (
            GOOD.replace("[linux-64, win-64]", "[linux-64, linux-64]"),
            "platforms: 'linux-64' is listed twice",
            "list it once",
        ),
        (GOOD + "dependencies: [python=3.9.*]\n", "the key 'dependencies' is given twice", "fix the syntax"),
        (
            GOOD.replace("name: demo", "name: ../../demo"),
            "name: '../../demo' is not an environment name",
            "name: py310",
        ),
        (
            GOOD.replace("torch==2.10.*", "torch @ https://u:hunter2@wheels.example/torch-2.10.0-cp310-none-any.whl"),
            "dependencies[2].pip[0]: 'torch @ https://wheels.example/torch-2.10.0-cp310-none-any.whl' "
            "carries credentials",
            "~/.netrc",
        ),
        (
            GOOD.replace("torch==2.10.*", "torch @ https://wheels.example/torch-2.10.0-py3-none-any.whl?token=hunter2"),
            "dependencies[2].pip[0]: the URL 'https://wheels.example/torch-2.10.0-py3-none-any.whl' has a query or "
            "fragment",
            "give the wheel's plain URL",
        ),
        (
            GOOD.replace(
                "torch==2.10.*",
                "torch @ https://wheels.example/torch-2.10.0-py3-none-any.whl#hunter2 ; sys_platform == 'linux'",
            ),
            "has a query or fragment",
            "~/.netrc",
        ),
    ],
)
def test_bad_spec_names_field_and_fix(tmp_path: Path, text: str, field: str, fix: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        read_spec(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert field in message
    assert fix in message
    assert "hunter2" not in message


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        read_spec(tmp_path / "nope.yml")


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    from bootstrap.lock.lockfile import read_lock

    path = tmp_path / "env.yml"
    path.write_bytes(GOOD.encode() + b"# caf\xe9 in latin-1\n")
    for read in (read_spec, read_lock):
        with pytest.raises(InputError, match=rf"{path}: not UTF-8 text \(invalid continuation byte at byte \d+\)"):
            read(path)


def test_deeply_nested_yaml_is_refused_not_a_crash(tmp_path: Path) -> None:
    from bootstrap.lock.lockfile import read_lock

    for text in ("version: 1\nx: " + "[" * 100_000 + "]" * 100_000 + "\n", "- " * 100_000 + "\n"):
        path = write(tmp_path, text)
        for read in (read_spec, read_lock):
            with pytest.raises(InputError, match=rf"{path}:\d+: nested more than 100 levels deep"):
                read(path)


def _alias_bomb(levels: int) -> str:
    """conda-lock's `version: 1` then `levels` of 10 aliases each: 10**levels strings in a few hundred bytes."""
    lines = ["version: 1", "a0: &a0 [xxxxxxxxxx]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (_alias_bomb(9), r":7: more than 200000 values, aliases expanded"),
        ("version: 1\na: &a x\nb: [" + ", ".join(["*a"] * 101) + "]\n", r":3: more than 100 aliases"),
        ("version: 1\nname: " + "x" * 70_000 + "\n", r":2: a value of 70000 characters \(at most 65536\)"),
        ("- x\n" * 200_001, r":200000: more than 200000 values"),
        ("version: 1\nwhen: 2020-13-45\n", r": a value YAML cannot read: month must be in 1..12"),
    ],
    ids=["alias-bomb", "aliases", "long-scalar", "many-nodes", "bad-date"],
)
def test_yaml_beyond_the_limits_is_refused_before_it_is_built(tmp_path: Path, text: str, problem: str) -> None:
    from bootstrap.lock.lockfile import read_lock

    path = write(tmp_path, text)
    for read in (read_spec, read_lock):
        with pytest.raises(InputError, match=f"^{path}{problem}"):
            read(path)


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "  - [unclosed\n")
    with pytest.raises(InputError, match=rf"{path}:\d+: malformed YAML"):
        read_spec(path)


@pytest.mark.parametrize(
    "text, field",
    [
        ("subdirs:\n  linux-64:\n    packages:\n      cuda: '12'\n", "start with '__'"),
        ("subdirs:\n  amiga-68k:\n    packages: {}\n", "unknown platform 'amiga-68k'"),
        ("platforms: [linux-64]\n", "exactly one top-level key"),
        ("subdirs:\n  linux-64: [__cuda]\n", "subdirs.linux-64"),
        ("subdirs:\n  linux-64:\n    packages:\n      __glibc: 2.28\n", r"__glibc: 2.28 is a number.*quote it"),
        ("subdirs:\n  linux-64:\n    packages:\n      __cuda: '12.8!!'\n", r"__cuda: '12.8!!' is not a version"),
    ],
)
def test_bad_virtual_packages(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(InputError, match=field):
        read_virtual_packages(write(tmp_path, text, "virtual-packages.yml"))


def test_virtual_package_build_string(tmp_path: Path) -> None:
    vp = read_virtual_packages(write(tmp_path, "subdirs:\n  linux-64:\n    packages:\n      __archspec: '1 x86_64'\n"))
    (only,) = vp.for_platform("linux-64")
    assert (only.name, only.version, only.build) == ("__archspec", "1", "x86_64")
    with pytest.raises(InputError, match="subdirs.win-64: missing"):
        vp.for_platform("win-64")


def test_canonical_channel() -> None:
    assert canonical_channel("conda-forge") == "https://conda.anaconda.org/conda-forge"
    assert canonical_channel("https://mirror.example/cf/") == "https://mirror.example/cf"
    assert canonical_channel("file:///srv/channel") == "file:///srv/channel"


@pytest.mark.parametrize(
    "key, value",
    [
        ("platforms", "linux-64 "),
        ("platforms", " win-64"),
        ("channels", "conda-forge "),
        ("channels", " https://x.org/c"),
    ],
)
def test_a_name_with_spaces_around_it_is_refused_not_stripped(tmp_path: Path, key: str, value: str) -> None:
    """conda-lock hashes the file as written: a name stripped here only would be two names, and
    the lock writer would find no content hash for the stripped one."""
    text = GOOD.replace("channels: [conda-forge]", "channels: [conda-forge, other]")
    text = text.replace(
        "[linux-64, win-64]" if key == "platforms" else "[conda-forge, other]",
        f"[{value!r}]" if key == "platforms" else f"[conda-forge, {value!r}]",
    )
    with pytest.raises(InputError) as caught:
        read_spec(write(tmp_path, text))
    message = str(caught.value)
    assert f"{key}: " in message and "has spaces around it" in message and "secret" not in message


def test_a_bad_value_is_quoted_as_a_short_excerpt(tmp_path: Path) -> None:
    # What YAML aliases build: 7 levels of 10 references to one list, 10**7 strings from a few
    # hundred bytes of file; quoted whole, the message alone would be a hundred megabytes.
    bomb: list = ["x" * 10]
    for _ in range(7):
        bomb = [bomb] * 10
    with pytest.raises(InputError) as info:
        _dependencies(tmp_path / "demo.yml", [bomb, "python=3.10.*"], ("conda-forge",))
    assert "dependencies[0]: expected a conda spec string or a `pip:` list, got [[[" in str(info.value)
    assert len(info.value.problem) < 150
    with pytest.raises(InputError) as info:
        _dependencies(
            tmp_path / "demo.yml", ["python=3.10.*", {"pip": ["x" * 100_000, ["y"] * 100_000]}], ("conda-forge",)
        )
    assert len(info.value.problem) < 150


def test_a_long_list_with_a_name_twice_is_named_without_quadratic_work(tmp_path: Path) -> None:
    """150,000 channels (within the reader's node limit): the duplicate is found by counting once, not
    by rescanning the list for each entry, which took minutes. The list is given parsed: YAML's own
    parse of it is not what this bounds."""
    import time

    from bootstrap.lock.spec import _string_list

    channels = [f"https://host/c{i}" for i in range(150_000)] + ["https://host/c7"]
    started = time.perf_counter()
    with pytest.raises(InputError, match=r"channels: 'https://host/c7' is listed twice"):
        _string_list(tmp_path / "demo.yml", {"channels": channels}, "channels")
    assert time.perf_counter() - started < 5


# --------------------------------------------------------------------------- conda-lock's line filter

SELECTED = [
    ("  - pip  # [linux]\n", 6, "linux"),
    ("  - pip # [not win]\n", 6, "not win"),
    ("  - pip  # pinned, see [1]\n", 6, "1"),  # conda-lock drops this on every platform
    ("      - torch==2.10.*  # [osx]\n", 8, "osx"),
    ("platforms: [linux-64, win-64]  # [win]\n", 3, "win"),
]


@pytest.mark.parametrize(("edit", "line", "selector"), SELECTED, ids=[s[2] for s in SELECTED])
def test_a_conda_lock_platform_selector_is_refused(tmp_path: Path, edit: str, line: int, selector: str) -> None:
    """conda-lock drops a line whose selector does not match the platform, and so hashes what bootstrap
    does not lock; the fast freshness path, which reads the YAML without comments, missed it."""
    lines = GOOD.splitlines(keepends=True)
    key = edit.strip().split("  #")[0].split(" #")[0]
    index = next(i for i, text in enumerate(lines) if text.strip() == key)
    lines[index] = edit
    path = write(tmp_path, "".join(lines))
    assert index + 1 == line
    with pytest.raises(InputError) as caught:
        read_spec(path)
    assert str(caught.value) == (
        f"{path}: line {line}: conda-lock reads '[{selector}]' at its end as a platform selector, which drops the "
        "line on some of linux-64, win-64 (remove it: every dependency is locked for every platform of the spec; a "
        'pip requirement may take a marker instead, `; sys_platform == "linux"`)'
    )


@pytest.mark.parametrize(
    ("platforms", "selector"), [("[linux-64]", "linux"), ("[linux-64, osx-arm64]", "unix"), ("[win-64]", "win")]
)
def test_a_selector_that_keeps_the_line_on_every_platform_of_the_spec_is_read(
    tmp_path: Path, platforms: str, selector: str
) -> None:
    """conda-lock keeps such a line wherever the spec is locked, so it hashes what bootstrap locks."""
    text = GOOD.replace("[linux-64, win-64]", platforms).replace("  - pip\n", f"  - pip  # [{selector}]\n")
    assert read_spec(write(tmp_path, text)).conda == ("python=3.10.*", "pip")


def test_a_long_comment_line_is_read(tmp_path: Path) -> None:
    """conda-lock skips a comment line before its pattern sees it: its length costs nothing."""
    comment = "# " + "why " * 1000
    assert read_spec(write(tmp_path, GOOD.replace("  - pip\n", f"  - pip\n{comment}\n"))).conda[1] == "pip"


@pytest.mark.parametrize("comment", ["# [linux] a whole comment line", "  # see [1]", "# (x) [y] (z)"])
def test_comments_conda_lock_reads_as_comments_are_not_selectors(tmp_path: Path, comment: str) -> None:
    assert read_spec(write(tmp_path, GOOD.replace("  - pip\n", f"  - pip\n{comment}\n"))).conda == (
        "python=3.10.*",
        "pip",
    )
    assert read_spec(write(tmp_path, GOOD.replace("  - pip\n", "  - pip  # [x] (y)\n"))).conda[1] == "pip"


def test_platform_selector_agrees_with_conda_lock() -> None:
    """Every short line of the characters that matter: selected as conda-lock's own filter selects."""
    import itertools

    from conda_lock.src_parser.selectors import filter_platform_selectors

    from bootstrap.lock.spec_text import platform_selector

    linux = {"linux64", "unix", "linux"}
    for size in range(1, 7):
        for chars in itertools.product("a #[]()", repeat=size):
            line = "".join(chars)
            if line.lstrip().startswith("#"):
                continue
            kept = list(filter_platform_selectors(line, platform="linux-64")) == [line]
            selector = platform_selector(line)
            assert kept == (selector is None or selector in linux), line


def test_an_absurdly_long_line_is_refused_before_conda_lock_reads_it(tmp_path: Path) -> None:
    """conda-lock's selector pattern takes minutes over a requirement followed by 100,000 spaces."""
    import time

    path = write(tmp_path, GOOD.replace("torch==2.10.*", "torch==2.10.*" + " " * 100_000))
    started = time.process_time()
    with pytest.raises(InputError) as caught:
        read_spec(path)
    assert time.process_time() - started < 1
    assert str(caught.value) == (
        f"{path}: line 8: 100021 characters long (at most 1000) (a spec line holds one "
        "dependency: drop the spaces or comment after it)"
    )
    assert read_spec(write(tmp_path, GOOD.replace("torch==2.10.*", "torch==2.10.*" + " " * 900))).pip == (
        "torch==2.10.*",
    )


@pytest.mark.parametrize(
    "extra",
    [
        ("  - pip" + " " * 900 + "\n") * 3,  # each line short enough: together, too slow for conda-lock
        (" " * 999 + "\n") * 3,  # blank lines, which conda-lock's pattern still reads
        ("  - pip  #" + "#" * 900 + "\n") * 3,
    ],
    ids=["trailing spaces", "blank lines", "hashes"],
)
def test_lines_conda_lock_would_read_slowly_together_are_refused(tmp_path: Path, extra: str) -> None:
    import time

    from conda_lock.src_parser.selectors import filter_platform_selectors

    text = GOOD.replace("  - pip\n", "  - pip\n" + extra)
    started = time.process_time()
    assert len(list(filter_platform_selectors(text, platform="linux-64"))) > 1
    conda_lock_seconds = time.process_time() - started
    path = write(tmp_path, text)
    started = time.process_time()
    with pytest.raises(InputError) as caught:
        read_spec(path)
    assert time.process_time() - started < conda_lock_seconds
    assert str(caught.value) == (
        f"{path}: line 8: too many spaces in a row or '#' up to here, which conda-lock's "
        "line filter reads in time growing with their square (drop the spaces and "
        "comments after the dependencies)"
    )


def test_the_committed_specs_cost_conda_lock_little() -> None:
    from bootstrap.lock.spec_text import MAX_SELECTOR_STEPS, _selector_steps

    for path in [*REPO.glob("envs/*.yml"), *REPO.glob("examples/*/envs/*.yml")]:
        if not path.name.endswith("conda-lock.yml"):
            assert sum(map(_selector_steps, path.read_text().splitlines())) < MAX_SELECTOR_STEPS / 100, path
