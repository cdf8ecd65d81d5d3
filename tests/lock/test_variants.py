"""Torch variants in a spec: parsed and refused in one line, and locked side by side, offline.

The example spec (examples/pytorch-index) is locked against a fixture PyTorch
index and a fixture PyPI served on loopback: wheels with local version labels
(+cpu, +cu126) and their dependencies, the conda part from the fixture channel.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from bootstrap.cli import main
from bootstrap.errors import InputError
from bootstrap.lock.lockfile import read_lock
from bootstrap.lock.spec import read_spec, read_virtual_packages
from bootstrap.project import Project
from tests.fixtures import REPO
from tests.fixtures.conda_channel import serve_directory
from tests.fixtures.wheels import WheelSpec, build_simple_index

EXAMPLE = REPO / "examples" / "pytorch-index"
CONDA_LOCK = str(Path(sys.executable).with_name("conda-lock"))

BASE = """\
name: demo
channels: [conda-forge]
platforms: [linux-64, osx-arm64, win-64]
dependencies:
  - python=3.10.*
  - pip
  - pip:
      - torch==2.10.*
      - numpy
"""


def spec_with(tmp_path: Path, extra: str, base: str = BASE) -> Path:
    path = tmp_path / "demo.yml"
    path.write_text(base + extra)
    return path


# --------------------------------------------------------------------------- the spec


def test_a_spec_without_variants_has_none_and_locks_as_written(tmp_path: Path) -> None:
    spec = read_spec(spec_with(tmp_path, ""))
    assert spec.variants == () and spec.indexes == {} and spec.for_variant(None) is spec
    assert spec.torch_index is None


def test_variants_parse_with_their_platforms_pins_and_indexes() -> None:
    spec = read_spec(EXAMPLE / "envs" / "torch.yml")
    cpu, cu126 = spec.variants
    assert (cpu.name, cpu.default, cpu.platforms) == ("cpu", True, ("linux-64", "osx-arm64", "win-64"))
    assert (cu126.name, cu126.default, cu126.platforms) == ("cu126", False, ("linux-64", "win-64"))  # no macOS CUDA
    assert spec.for_variant(cu126).torch_index == "https://download.pytorch.org/whl/cu126"
    assert cpu.virtual_packages == {"__cuda": None} and not cpu.as_written


def test_a_torch_pin_replaces_the_spec_requirement_keeping_marker_and_extras(tmp_path: Path) -> None:
    base = BASE.replace("torch==2.10.*", "torch[opt]==2.10.*; sys_platform != 'darwin'")
    spec = read_spec(spec_with(tmp_path, "variants:\n  - name: a\n  - name: b\n    torch: 2.14.*\n", base))
    effective = spec.for_variant(spec.variants[1])
    assert effective.pip == ("torch[opt]==2.14.*; sys_platform != 'darwin'", "numpy")
    assert spec.for_variant(spec.variants[0]).pip == spec.pip


def test_virtual_package_overrides_apply_per_platform() -> None:
    spec = read_spec(EXAMPLE / "envs" / "torch.yml")
    vpkgs = read_virtual_packages(EXAMPLE / "envs" / "virtual-packages.yml")
    cpu, cu126 = spec.variants
    assert vpkgs.for_variant(cu126).version_of("linux-64", "__cuda") == "12.6"
    assert vpkgs.for_variant(cu126).version_of("linux-64", "__glibc") == "2.28"  # the rest as the file says
    assert vpkgs.for_variant(cpu).version_of("win-64", "__cuda") is None
    assert vpkgs.for_variant(cpu).version_of("osx-arm64", "__osx") == "14.0"


# Each bad `variants:` / `pip-indexes:` block, the field the message names, and a word of its fix.
BAD = [
    ("variants:\n  - name: a\n    index: nowhere\n", "variants[0] (a).index: unknown index 'nowhere'", "pip-indexes"),
    ("variants:\n  - name: a\n  - name: a\n", "two variants are named 'a'", "its own name"),
    ("variants:\n  - name: x\n  - name: X\n", "variants: 'x' and 'X' differ only in case", "macOS and Windows"),
    ("pip-indexes:\n  x: https://u:hunter2@host/simple\nvariants:\n  - name: a\n", "carries credentials", "--index"),
    (
        "variants:\n  - name: a\n    virtual-packages: {__cuda: '12.6'}\n    platforms: [osx-arm64]\n",
        "osx-arm64 cannot have __cuda",
        "drop the platform",
    ),
    ("variants:\n  - name: a.b\n", "is not a variant name", "letters"),
    ("variants:\n  - name: a\n    colour: red\n", "unknown key 'colour'", "allowed"),
    ("variants:\n  - name: a\n    torch: '=>2'\n", "is not a version pin", "==2.10"),
    ("variants:\n  - name: a\n    torch: '~=2'\n", "variants[0] (a).torch: '~=2' is not a version pin", "==2.10"),
    ("variants:\n  - name: a\n    torch: '==2.*.1'\n", "is not a version pin", "==2.10"),
    ("variants:\n  - name: a\n    virtual-packages: {__cuda: 12.10}\n", "is a number", "quote it"),
    ("variants:\n  - name: a\n    virtual-packages: {cuda: '12'}\n", "is not a virtual package", "'__'"),
    ("variants:\n  - name: a\n    platforms: [linux-aarch64]\n", "not among the spec's platforms", "linux-64"),
    (
        "variants:\n  - name: a\n    platforms: [linux-64, win-64, linux-64]\n",
        "variants[0] (a).platforms: 'linux-64' is listed twice",
        "list it once",
    ),
    ("variants: []\n", "non-empty list", "drop the key"),
    ("variants:\n  - cu128\n", "expected a mapping", "name: cu128"),
    ("pip-indexes: [https://x]\n", "pip-indexes: expected a mapping", "pytorch-cu126"),
    ("pip-indexes:\n  x: not-a-url\n", "is not an index URL", "https://"),
    # what an outside tester found: tracebacks, and a token the credential check missed
    ("variants:\n  - name: " + "c" * 240 + "\n", "is not a variant name", "at most 64"),
    ("variants:\n  - name: a\n    index: [ix]\n", "variants[0] (a).index: unknown index ['ix']", "pip-indexes"),
    ("variants:\n  - name: a\n    index: {a: b}\n", "variants[0] (a).index: unknown index", "pip-indexes"),
    ("variants:\n  - name: a\n    virtual-packages: {__cuda: '13.0 junk!!'}\n", "is not a version", "12.8"),
    ("variants:\n  - name: a\n    virtual-packages: {'__cu da': '1'}\n", "is not a virtual package", "__cuda"),
    ("variants:\n  - name: a\n    virtual-packages: {__: '1'}\n", "is not a virtual package", "__cuda"),
    ("variants:\n  - name: a\n    virtual-packages: {__cuda: 99999999999999999999}\n", "is not a version", "12.8"),
    (
        "pip-indexes:\n  ix: https://mirror.example/whl?token=s3cretQ\nvariants:\n  - name: a\n",
        "has no host, or a query or fragment",
        "~/.netrc",
    ),
    (
        "pip-indexes:\n  ix: https://mirror.example/whl#frag\nvariants:\n  - name: a\n",
        "has no host, or a query or fragment",
        "--index ix=URL",
    ),
    ("pip-indexes:\n  ix: https:///whl\nvariants:\n  - name: a\n", "has no host", "host and path"),
]


@pytest.mark.parametrize(("extra", "problem", "fix"), BAD, ids=[b[1][:40] for b in BAD])
def test_a_bad_variant_is_one_line_naming_file_field_and_fix(
    tmp_path: Path, extra: str, problem: str, fix: str
) -> None:
    path = spec_with(tmp_path, extra)
    with pytest.raises(InputError) as caught:
        read_spec(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and problem in message and fix in message
    assert "\n" not in message and "hunter2" not in message and "s3cretQ" not in message and len(message) < 400


def test_a_spec_a_windows_editor_saved_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    path = spec_with(tmp_path, "")
    path.write_bytes("\ufeff".encode() + path.read_bytes())
    assert read_spec(path).pip == read_spec(spec_with(tmp_path / "..", "")).pip


def test_variants_need_a_torch_to_vary(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no torch requirement"):
        read_spec(spec_with(tmp_path, "variants:\n  - name: a\n", BASE.replace("torch==2.10.*", "numpy>=1")))


def test_a_cuda_variant_on_a_mac_only_spec_fits_no_platform(tmp_path: Path) -> None:
    base = BASE.replace("[linux-64, osx-arm64, win-64]", "[osx-arm64]")
    with pytest.raises(InputError, match=r"no platform of the spec can have __cuda \(osx-arm64\)"):
        read_spec(spec_with(tmp_path, "variants:\n  - name: a\n    virtual-packages: {__cuda: '12.8'}\n", base))


@pytest.mark.parametrize(
    ("platforms", "virtual"),
    list(
        itertools.product(
            [("linux-64",), ("osx-arm64",), ("win-64",), ("linux-64", "osx-arm64", "win-64"), ("osx-arm64", "win-64")],
            ["{__cuda: '12.8'}", "{__cuda: null}", "{__glibc: '2.17'}", "{__osx: '13.0'}", "{__win: '0'}"],
        )
    ),
)
def test_a_variant_covers_exactly_the_platforms_that_can_have_its_packages(tmp_path: Path, platforms, virtual) -> None:
    base = BASE.replace("[linux-64, osx-arm64, win-64]", f"[{', '.join(platforms)}]")
    os_of = {"linux-64": "linux", "osx-arm64": "osx", "win-64": "win"}
    allowed = {"__cuda": {"linux", "win"}, "__glibc": {"linux"}, "__osx": {"osx"}, "__win": {"win"}}
    name, _, value = virtual.strip("{}").partition(": ")
    fitting = tuple(p for p in platforms if value == "null" or os_of[p] in allowed[name])
    path = spec_with(tmp_path, f"variants:\n  - name: v\n    virtual-packages: {virtual}\n", base)
    if not fitting:
        with pytest.raises(InputError, match="no platform of the spec can have"):
            read_spec(path)
    else:
        assert read_spec(path).variants[0].platforms == fitting


# --------------------------------------------------------------------------- locked side by side

CUDA_RUNTIME = "nvidia-cuda-runtime-cu12"


@pytest.fixture(scope="module")
def indexes(tmp_path_factory) -> Iterator[dict]:
    """A fixture PyPI and two fixture PyTorch indexes on loopback. The torch index also carries a
    numpy, as download.pytorch.org does: it must not be taken from there."""
    root = tmp_path_factory.mktemp("indexes")
    build_simple_index(
        root / "pypi",
        [
            WheelSpec("numpy", "2.0"),
            WheelSpec(CUDA_RUNTIME, "12.6.77"),
            WheelSpec("torch", "2.10.0", requires=("numpy",)),
        ],
    )
    build_simple_index(
        root / "cpu", [WheelSpec("torch", "2.10.0+cpu", requires=("numpy",)), WheelSpec("numpy", "1.99")]
    )
    build_simple_index(
        root / "cu126", [WheelSpec("torch", "2.10.0+cu126", requires=("numpy", f"{CUDA_RUNTIME}==12.6.77"))]
    )
    with serve_directory(root) as url:
        yield {"pypi": f"{url}/pypi", "pytorch-cpu": f"{url}/cpu", "pytorch-cu126": f"{url}/cu126"}


@pytest.fixture(scope="module")
def example_locked(tmp_path_factory, fixture_channel: Path, indexes: dict) -> Project:
    root = tmp_path_factory.mktemp("example") / "proj"
    shutil.copytree(EXAMPLE, root)
    assert main(lock_argv(root, fixture_channel, indexes)) == 0
    return Project(root)


def lock_argv(root: Path, channel: Path, indexes: dict, *extra: str) -> list:
    overrides = [arg for name, url in indexes.items() for arg in ("--index", f"{name}={url}")]
    return [
        "lock",
        "--root",
        str(root),
        "--cache-dir",
        str(root / ".cache"),
        "--mirror",
        f"conda-forge={channel}",
        *overrides,
        *extra,
    ]


def pip_entries(path: Path, platform: str) -> dict:
    return {p.name: p for p in read_lock(path).for_platform(platform, "pip")}


def test_each_variant_is_locked_from_its_own_index(example_locked: Project, indexes: dict) -> None:
    default, cu126 = example_locked.lock_path("torch"), example_locked.variant_lock_path("torch", "cu126")
    for platform in ("linux-64", "osx-arm64", "win-64"):
        pip = pip_entries(default, platform)
        assert pip["torch"].version == "2.10.0+cpu" and pip["torch"].url.startswith(indexes["pytorch-cpu"])
        assert pip["numpy"].url.startswith(indexes["pypi"])  # the torch index is explicit: only torch from it
    for platform in ("linux-64", "win-64"):
        pip = pip_entries(cu126, platform)
        assert pip["torch"].version == "2.10.0+cu126" and pip["torch"].url.startswith(indexes["pytorch-cu126"])
        assert pip[CUDA_RUNTIME].version == "12.6.77" and pip[CUDA_RUNTIME].url.startswith(indexes["pypi"])
    assert read_lock(cu126).platforms == ("linux-64", "win-64")
    assert read_lock(cu126).custom["bootstrap.variant"] == "cu126"
    assert read_lock(cu126).custom["bootstrap.torch-index"] == "https://download.pytorch.org/whl/cu126"


def test_conda_lock_parses_and_renders_every_variant(example_locked: Project, tmp_path: Path) -> None:
    import subprocess

    from conda_lock.lockfile import parse_conda_lock_file

    for path in (example_locked.lock_path("torch"), example_locked.variant_lock_path("torch", "cu126")):
        assert {p.name for p in parse_conda_lock_file(path).package} >= {"python", "torch", "numpy"}
        done = subprocess.run(
            [
                CONDA_LOCK,
                "render",
                "-k",
                "explicit",
                "-p",
                "linux-64",
                "--filename-template",
                f"{tmp_path}/{path.stem}-{{platform}}.lock",
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr


def test_check_covers_each_variant_and_names_the_stale_one(example_locked: Project, tmp_path: Path, capsys) -> None:
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    capsys.readouterr()
    assert main(["lock", "--check", "--root", str(project.root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(e["variant"], e["fresh"]) for e in report["envs"]] == [("cpu", True), ("cu126", True)]
    spec = project.spec_path("torch")
    data = yaml.safe_load(spec.read_text())
    data["variants"][1]["virtual-packages"]["__cuda"] = "12.4"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["lock", "--check", "--root", str(project.root)]) == 1
    out = capsys.readouterr().out
    assert "torch [cpu]: envs/torch.conda-lock.yml is fresh" in out
    assert "torch [cu126]: envs/torch.cu126.conda-lock.yml is stale" in out and "content_hash" in out


def test_a_lock_copied_over_another_variant_is_stale(example_locked: Project, tmp_path: Path, capsys) -> None:
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    shutil.copy(project.lock_path("torch"), project.variant_lock_path("torch", "cu126"))
    capsys.readouterr()
    assert main(["lock", "--check", "--root", str(project.root), "--variant", "cu126"]) == 1
    assert "variant: lock holds cpu, spec expects cu126" in capsys.readouterr().out


@pytest.mark.slow
def test_relocking_one_variant_names_it_and_leaves_the_other(
    example_locked: Project, tmp_path: Path, fixture_channel: Path, indexes: dict, capsys
) -> None:
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    default_before = project.lock_path("torch").read_bytes()
    project.variant_lock_path("torch", "cu126").unlink()
    capsys.readouterr()
    assert main(lock_argv(project.root, fixture_channel, indexes, "--variant", "cu126", "--dry-run")) == 0
    assert "torch [cu126]: would write envs/torch.cu126.conda-lock.yml" in capsys.readouterr().out
    assert not project.variant_lock_path("torch", "cu126").exists()
    assert main(lock_argv(project.root, fixture_channel, indexes, "--variant", "cu126")) == 0
    out = capsys.readouterr().out
    assert "torch [cu126]: wrote envs/torch.cu126.conda-lock.yml" in out and "[cpu]" not in out
    assert project.lock_path("torch").read_bytes() == default_before
    assert main(["lock", "--check", "--root", str(project.root)]) == 0


@pytest.mark.slow  # a real uv resolution
def test_index_credentials_are_used_but_never_written_or_shown(
    example_locked: Project, tmp_path: Path, fixture_channel: Path, indexes: dict, capsys
) -> None:
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    secret = {name: url.replace("http://", "http://alice:hunter2@") for name, url in indexes.items()}
    capsys.readouterr()
    assert main(lock_argv(project.root, fixture_channel, secret, "--variant", "cu126")) == 0
    out = capsys.readouterr()
    text = project.variant_lock_path("torch", "cu126").read_text()
    assert "hunter2" not in text + out.out + out.err and "alice" not in text
    assert pip_entries(project.variant_lock_path("torch", "cu126"), "linux-64")["torch"].version == "2.10.0+cu126"


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--variant", "rocm"], "torch has no variant 'rocm'"),
        (["--index", "elsewhere=http://127.0.0.1:9/simple"], "names the index 'elsewhere'"),
        (["--index", "pytorch-cpu"], "is not NAME=URL"),
        (
            ["--variant", "cu126", "--platform", "osx-arm64"],
            "--platform: variant 'cu126' of torch is not locked for osx-arm64 (only linux-64, win-64) (drop --platform "
            "osx-arm64, or add it to that variant's `platforms:`)",
        ),
        (
            ["--variant", "cpu", "--variant", "cu126", "--platform", "linux-64", "--platform", "osx-arm64"],
            "variant 'cu126' of torch is not locked for osx-arm64",
        ),
    ],
)
def test_bad_variant_options_are_one_line_and_exit_2(
    example_locked: Project, fixture_channel: Path, indexes: dict, capsys, argv: list, problem: str
) -> None:
    before = {p: p.read_bytes() for p in example_locked.root.glob("envs/*.conda-lock.yml")}
    capsys.readouterr()
    assert main(lock_argv(example_locked.root, fixture_channel, {}, *argv)) == 2
    err = capsys.readouterr().err
    assert problem in err and len(err.strip().splitlines()) == 1
    assert before == {p: p.read_bytes() for p in example_locked.root.glob("envs/*.conda-lock.yml")}


def test_check_of_a_variant_on_a_platform_it_is_not_locked_for_is_refused(example_locked: Project, capsys) -> None:
    """It checked nothing and said nothing, exit 0."""
    capsys.readouterr()
    argv = ["lock", "--check", "--root", str(example_locked.root), "--platform", "osx-arm64"]
    assert main([*argv, "--variant", "cu126"]) == 2
    assert capsys.readouterr().err == (
        "error: --platform: variant 'cu126' of torch is not locked for osx-arm64 "
        "(only linux-64, win-64) (drop --platform osx-arm64, or add it to that "
        "variant's `platforms:`)\n"
    )
    assert main(argv) == 0  # every variant: the cpu one is locked for osx-arm64
    assert capsys.readouterr().out == "torch [cpu]: envs/torch.conda-lock.yml is fresh\n"


def test_a_platform_no_variant_is_locked_for_is_refused() -> None:
    from bootstrap.lock.variants import Variant, check_variant_platforms

    linux = (Variant("a", ("linux-64",)), Variant("b", ("linux-64", "win-64")))
    check_variant_platforms("demo", linux, ("win-64",), named=False)  # b covers it
    check_variant_platforms("demo", (None,), ("win-64",), named=False)  # no variants: the spec's platforms
    with pytest.raises(InputError, match="no variant of demo is locked for osx-arm64"):
        check_variant_platforms("demo", linux, ("osx-arm64",), named=False)
    with pytest.raises(InputError, match="variant 'a' of demo is not locked for win-64"):
        check_variant_platforms("demo", linux, ("win-64",), named=True)


def _pin_cu126(spec: Path, pin: str) -> None:
    """The cu126 variant pinned to a torch its fixture index does not carry: it cannot be resolved."""
    text = spec.read_text()
    spec.write_text(text.replace("    index: pytorch-cu126\n", f'    index: pytorch-cu126\n    torch: "{pin}"\n'))


def test_a_variant_that_cannot_be_resolved_writes_no_lock_at_all(
    tmp_path: Path, fixture_channel: Path, indexes: dict, capsys
) -> None:
    """Every variant is solved before any lock is written: the default, solved first, is not written
    beside a variant that fails (a half-relocked project), nor is a first lock created."""
    root = tmp_path / "proj"
    shutil.copytree(EXAMPLE, root)
    _pin_cu126(root / "envs" / "torch.yml", "==2.14.*")
    capsys.readouterr()
    assert main(lock_argv(root, fixture_channel, indexes, "--quiet")) == 2
    err = capsys.readouterr().err
    assert "variants[1] (cu126): " in err and "cannot be satisfied" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in (root / "envs").iterdir()) == ["torch.yml", "virtual-packages.yml"]


def test_a_relock_whose_variant_fails_leaves_every_lock_as_it_was(
    example_locked: Project, tmp_path: Path, fixture_channel: Path, indexes: dict, capsys
) -> None:
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    spec = project.spec_path("torch")
    spec.write_text(spec.read_text().replace("numpy>=1.26", "numpy>=1.27"))  # the default relocks fine
    _pin_cu126(spec, "==2.14.*")
    before = {p: p.read_bytes() for p in project.envs_dir.glob("*.conda-lock.yml")}
    capsys.readouterr()
    assert main(lock_argv(project.root, fixture_channel, indexes)) == 2
    assert "variants[1] (cu126): " in capsys.readouterr().err
    assert before == {p: p.read_bytes() for p in project.envs_dir.glob("*.conda-lock.yml")}


def test_a_lock_that_cannot_be_rendered_leaves_every_lock_as_it_was(
    example_locked: Project, tmp_path: Path, fixture_channel: Path, indexes: dict, monkeypatch, capsys
) -> None:
    """Every variant's lock is rendered (conda-lock's models validate it) before the first is replaced:
    the default, rendered first, is not written beside a variant whose lock fails to render."""
    import bootstrap.lock.write as write

    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    spec = project.spec_path("torch")
    spec.write_text(spec.read_text().replace("numpy>=1.26", "numpy>=1.27"))  # both locks change
    before = {p: p.read_bytes() for p in project.envs_dir.glob("*.conda-lock.yml")}
    model = write._to_conda_lock_model

    def failing(content):
        if content.custom.get("bootstrap.variant") == "cu126":
            raise InputError("package[3].build", "not a string", "fix it")
        return model(content)

    monkeypatch.setattr(write, "_to_conda_lock_model", failing)
    capsys.readouterr()
    assert main(lock_argv(project.root, fixture_channel, indexes, "--quiet")) == 2
    assert "package[3].build: not a string" in capsys.readouterr().err
    assert before == {p: p.read_bytes() for p in project.envs_dir.glob("*.conda-lock.yml")}
    assert sorted(p.name for p in project.envs_dir.iterdir() if p.name.startswith(".")) == []


# --------------------------------------------------------------------------- the committed locks


def committed_locks() -> list:
    from bootstrap.lock.variants import variant_locks

    project = Project(REPO)
    return [
        (env, variant, path)
        for env in project.env_names()
        for variant, path in variant_locks(project, env, read_spec(project.spec_path(env)))
    ]


@pytest.mark.parametrize(
    ("env", "variant", "path"), committed_locks(), ids=[f"{e}-{v.name if v else ''}" for e, v, _ in committed_locks()]
)
def test_conda_lock_accepts_each_committed_lock_and_its_hash(env: str, variant, path: Path) -> None:
    """conda-lock's own `--check-input-hash` rule on every platform, and its parser and renderer."""
    from conda_lock.conda_lock import render_lockfile_for_platform
    from conda_lock.content_hash import compute_content_hashes
    from conda_lock.lockfile import parse_conda_lock_file

    from bootstrap.lock.content_hash import conda_lock_accepts_hash, conda_lock_inputs

    spec = read_spec(Project(REPO).spec_path(env))
    vpkgs = read_virtual_packages(Project(REPO).virtual_packages_path)
    lock = read_lock(path)
    assert lock.custom["bootstrap.variant"] == variant.name and lock.platforms == variant.platforms
    parsed = parse_conda_lock_file(path)
    for platform in lock.platforms:
        assert conda_lock_accepts_hash(
            spec.for_variant(variant), vpkgs.for_variant(variant), platform, lock.content_hash[platform]
        )
        rendered = render_lockfile_for_platform(
            lockfile=parsed,
            include_dev_dependencies=True,
            extras=None,
            kind="explicit",
            platform=platform,
            suppress_warning_for_pip_and_explicit=True,
        )
        assert len([line for line in rendered if line.startswith("https://")]) == len(
            lock.for_platform(platform, "conda")
        )
    if variant.as_written:  # the default as written: conda-lock's hash of the very spec file
        with conda_lock_inputs(spec.path, vpkgs.path) as (lock_spec, vpr):
            assert {p: h for p, h in compute_content_hashes(lock_spec, vpr).items() if p in lock.platforms} == dict(
                lock.content_hash
            )


def test_the_committed_cu130_variant_is_torch_2_14_on_cuda_13() -> None:
    project = Project(REPO)
    pip = {p.name: p for p in read_lock(project.variant_lock_path("py310", "cu130")).for_platform("linux-64", "pip")}
    assert pip["torch"].version.startswith("2.14.") and pip["torch"].url.startswith("https://files.pythonhosted.org/")
    assert pip["torch"].dependencies["cuda-toolkit"].startswith("==13.0")  # the wheel's own Requires-Dist pin
    default = {p.name: p for p in read_lock(project.lock_path("py310")).for_platform("linux-64", "pip")}
    assert (
        default["torch"].version.startswith("2.10.")
        and default["torch"].dependencies["nvidia-cuda-runtime-cu12"] == "==12.8.90"
    )


def test_lock_variant_without_an_env_acts_on_the_envs_that_declare_it(tmp_path: Path, capsys) -> None:
    """`lock --check --variant cu130` checks py310's cu130, and does not fail on py39, which has no cu130."""
    import shutil

    from bootstrap.cli import main
    from tests.fixtures import REPO

    root = tmp_path / "proj"
    shutil.copytree(REPO / "envs", root / "envs")
    shutil.copy(REPO / "conda-lock.yml", root)
    capsys.readouterr()
    assert main(["lock", "--check", "--variant", "cu130", "--root", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == ["py310 [cu130]: envs/py310.cu130.conda-lock.yml is fresh"]
    assert main(["lock", "--check", "--variant", "cu999", "--root", str(root)]) == 2
    assert capsys.readouterr().err.startswith("error: --variant: py310 has no variant 'cu999' (known: cu128, cu130)")


def _without_variant(project: Project, name: str) -> None:
    spec = project.spec_path("torch")
    data = yaml.safe_load(spec.read_text())
    data["variants"] = [v for v in data["variants"] if v["name"] != name]
    spec.write_text(yaml.safe_dump(data, sort_keys=False))


def test_check_names_the_lock_of_a_variant_the_spec_dropped(example_locked: Project, tmp_path: Path, capsys) -> None:
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    _without_variant(project, "cu126")
    capsys.readouterr()
    assert main(["lock", "--check", "--root", str(project.root)]) == 1
    out = capsys.readouterr().out
    assert "torch [cpu]: envs/torch.conda-lock.yml is fresh" in out
    assert (
        "torch [cu126]: envs/torch.cu126.conda-lock.yml is stale (1 problem); relock with `make lock`\n"
        "  *: variant: torch.yml no longer declares cu126; `make lock` deletes this lock"
    ) in out
    assert main(["lock", "--check", "--root", str(project.root), "--variant", "cpu"]) == 0  # asked for one


@pytest.mark.slow
def test_a_relock_deletes_the_lock_of_a_dropped_variant(
    example_locked: Project, tmp_path: Path, fixture_channel: Path, indexes: dict, capsys
) -> None:
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    orphan = project.variant_lock_path("torch", "cu126")
    _without_variant(project, "cu126")
    capsys.readouterr()
    assert main(lock_argv(project.root, fixture_channel, indexes, "--dry-run", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["dropped"] == [
        {
            "env": "torch",
            "variant": "cu126",
            "lock_path": str(orphan),
            "deleted": False,
            "why": "torch.yml no longer declares cu126",
        }
    ]
    assert orphan.exists()
    assert main(lock_argv(project.root, fixture_channel, indexes)) == 0
    assert (
        "torch [cu126]: deleted envs/torch.cu126.conda-lock.yml (torch.yml no longer declares cu126)"
        in capsys.readouterr().out
    )
    assert not orphan.exists()
    assert main(["lock", "--check", "--root", str(project.root)]) == 0


@pytest.mark.parametrize(
    ("env", "where"), [("torch.cu126", ""), ("torch.CU126", " on macOS and Windows, whose file names ignore case")]
)
def test_an_env_whose_lock_would_be_a_variants_is_refused(
    example_locked: Project, tmp_path: Path, capsys, env: str, where: str
) -> None:
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    project.spec_path(env).write_text(project.spec_path("torch").read_text())
    capsys.readouterr()
    assert main(["lock", "--check", "--root", str(project.root), "torch"]) == 2
    assert capsys.readouterr().err == (
        f"error: {project.spec_path(env)}: an env named '{env}' would share its lock "
        f"with variant 'cu126' of torch{where} (rename the env or the variant)\n"
    )


def test_only_a_lock_that_holds_a_dropped_variant_of_the_env_is_an_orphan(
    example_locked: Project, tmp_path: Path
) -> None:
    from bootstrap.lock.check import orphan_locks
    from bootstrap.lock.spec import read_spec

    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    envs, cu126 = project.envs_dir, project.variant_lock_path("torch", "cu126").read_text()
    for name in ("torch.old", "torch.cu126", "torch.x.y", "torch.other", "torchy.z"):
        (envs / f"{name}.conda-lock.yml").write_text(cu126.replace("variant: cu126", f"variant: {name[6:]}"))
    (envs / "torch.backup.conda-lock.yml").write_text(cu126)  # a copy kept by hand: holds cu126, not "backup"
    (envs / "torch.junk.conda-lock.yml").write_text("not: [a lock")
    (envs / "torch.other.yml").write_text(project.spec_path("torch").read_text())  # an env named torch.other
    found = orphan_locks(project, "torch", read_spec(project.spec_path("torch")))
    assert found == [("old", envs / "torch.old.conda-lock.yml", "torch.yml no longer declares old")]


def test_the_lock_of_a_variant_made_the_default_is_an_orphan(example_locked: Project, tmp_path: Path, capsys) -> None:
    """The first variant is locked in the env's own lock: when cu126 moves first, its old lock file
    holds what no variant is locked in any more, and `lock --check` says so rather than calling it fresh."""
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    spec = project.spec_path("torch")
    data = yaml.safe_load(spec.read_text())
    data["variants"].sort(key=lambda v: v["name"] != "cu126")
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    capsys.readouterr()
    assert main(["lock", "--check", "--root", str(project.root)]) == 1
    assert (
        "torch [cu126]: envs/torch.cu126.conda-lock.yml is stale (1 problem); relock with `make lock`\n"
        "  *: variant: cu126 is now the default variant, locked in torch.conda-lock.yml; `make lock` deletes "
        "this lock"
    ) in capsys.readouterr().out


def test_a_platform_relock_after_reordering_variants_is_refused(
    example_locked: Project, tmp_path: Path, fixture_channel: Path, indexes: dict, capsys
) -> None:
    """The env's lock holds cpu, now that cu126 moved first: `--platform` would keep cpu's other
    platforms as cu126's, and delete cu126's own lock, which held its only good records."""
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    spec = project.spec_path("torch")
    data = yaml.safe_load(spec.read_text())
    data["variants"].sort(key=lambda v: v["name"] != "cu126")
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    before = {p: p.read_bytes() for p in project.envs_dir.iterdir()}
    capsys.readouterr()
    assert main(lock_argv(project.root, fixture_channel, indexes, "--quiet", "--platform", "linux-64")) == 2
    assert capsys.readouterr().err == (
        f"error: {project.lock_path('torch')}: holds variant cpu, not variant cu126 (variants reordered or renamed): "
        "--platform would keep its other platforms' records under the wrong name (relock every platform: "
        "`bootstrap lock torch` without --platform)\n"
    )
    assert before == {p: p.read_bytes() for p in project.envs_dir.iterdir()}


def test_a_platform_relock_keeps_the_lock_of_a_dropped_variant(
    example_locked: Project, tmp_path: Path, fixture_channel: Path, indexes: dict, capsys
) -> None:
    """A relock of some platforms leaves the others as they were: an orphan lock too, for a full relock."""
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    orphan = project.variant_lock_path("torch", "cu126")
    _without_variant(project, "cu126")
    assert main(lock_argv(project.root, fixture_channel, indexes, "--quiet", "--platform", "linux-64")) == 0
    assert "deleted" not in capsys.readouterr().out and orphan.exists()


def _note_and_check(project: Project, variant: str, platform: str) -> tuple:
    """What `env`'s note says for one platform of a variant's lock, and what `lock --check` says of it."""
    from bootstrap.lock.check import check_env
    from bootstrap.lock.content_hash import spec_changed_since

    (result,) = check_env(project, "torch", (platform,), (variant,))
    note = spec_changed_since(project, "torch", result.lock_path, platform)
    return note is not None, any(s.subject == "content_hash" for s in result.stale)


def test_the_note_on_a_variant_lock_agrees_with_check_when_another_variant_changes(
    example_locked: Project, tmp_path: Path
) -> None:
    """Each lock's inputs digest covers its own variant's part of the spec: editing cu126 leaves the
    cpu lock trusted by `lock --check` and by `env`'s note alike."""
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    spec = project.spec_path("torch")
    spec.write_text(spec.read_text().replace('{__cuda: "12.6"}', '{__cuda: "12.7"}'))
    assert _note_and_check(project, "cpu", "linux-64") == (False, False)
    assert _note_and_check(project, "cu126", "linux-64") == (True, True)


def test_the_note_after_a_platform_relock_agrees_with_check(
    example_locked: Project, tmp_path: Path, fixture_channel: Path, indexes: dict
) -> None:
    """A `--platform` relock records the inputs of the platforms it solved, and keeps those of the
    platforms it kept: the note appears on a kept platform the spec has moved on from, as `--check` says."""
    project = Project(shutil.copytree(example_locked.root, tmp_path / "proj"))
    spec = project.spec_path("torch")
    spec.write_text(spec.read_text().replace("numpy>=1.26", "numpy>=1.25"))
    assert (
        main(lock_argv(project.root, fixture_channel, indexes, "--quiet", "--variant", "cpu", "--platform", "linux-64"))
        == 0
    )
    assert _note_and_check(project, "cpu", "linux-64") == (False, False)
    assert _note_and_check(project, "cpu", "osx-arm64") == (True, True)
