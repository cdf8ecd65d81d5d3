"""`bootstrap env --variant auto|NAME`: a spec with two torch variants, `cpu` (the default) and `cu128`,
whose locks differ only in the `torch` wheel; real installs, as in test_env.py.

The pick is made on recorded facts (`--facts FILE`): a host without a GPU, and the recorded H200 node,
so that no test depends on the GPUs of the machine it runs on.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import yaml

from bootstrap.cli import main
from bootstrap.lock.lockfile import read_lock
from bootstrap.prefix import read_install_record
from bootstrap.project import Project
from bootstrap.report import Status
from bootstrap.runner import run
from tests.fixtures import DATA
from tests.fixtures.env_project import CONDA, PIP, env_args, prefix_of, relock, run_python
from tests.fixtures.fakes import FakeNvml, missing_binary_runner
from tests.fixtures.project import copy_project, make_project
from tests.fixtures.variants import facts_file
from tests.fixtures.wheels import WheelSpec, build_wheelhouse, standard_wheels

H200 = DATA / "verify" / "h200x8-580.95.05.facts.json"
VARIANTS = [{"name": "cpu", "torch": "==2.10.0+cpu"}, {"name": "cu128", "torch": "==2.10.0+cu128"}]
CPU_TORCH, CUDA_TORCH = {"name": "torch", "version": "2.10.0+cpu"}, {"name": "torch", "version": "2.10.0+cu128"}


@pytest.fixture(scope="module")
def torch_wheels(tmp_path_factory) -> Path:
    """The standard wheels and two builds of a pure-Python `torch`, told apart by their local version."""
    return build_wheelhouse(
        tmp_path_factory.mktemp("torch-wheels"),
        [*standard_wheels(), WheelSpec("torch", "2.10.0+cpu"), WheelSpec("torch", "2.10.0+cu128")],
    )


@pytest.fixture(scope="module")
def variants_once(tmp_path_factory, channel: Path, torch_wheels: Path) -> Project:
    project = make_project(
        tmp_path_factory.mktemp("variants") / "proj", platforms=("linux-64",), conda=CONDA, pip=(*PIP, "torch")
    )
    spec = yaml.safe_load(project.spec_path("py310").read_text())
    project.spec_path("py310").write_text(yaml.safe_dump({**spec, "variants": VARIANTS}, sort_keys=False))
    relock(project, channel, torch_wheels)
    return project


@pytest.fixture
def project(variants_once: Project, tmp_path: Path) -> Project:
    return copy_project(variants_once, tmp_path / "proj")


@pytest.fixture(scope="module")
def no_gpu(tmp_path_factory) -> Path:
    return facts_file(tmp_path_factory.mktemp("facts") / "no-gpu.json", [], driver=None)


def env_json(project: Project, channel: Path, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--json", *extra)) == 0
    return json.loads(capsys.readouterr().out)


def installed(project: Project, variant: str) -> tuple:
    """What the prefix of `variant` holds, `.envs/py310/<variant>`."""
    prefix = project.env_prefix("py310", variant)
    record = read_install_record(prefix)
    return (record.variant, Path(record.lock_path).name, run_python(prefix, "import torch; print(torch.__version__)"))


def test_each_variant_installs_into_its_own_prefix_and_never_touches_another(
    project: Project, channel: Path, no_gpu: Path, capsys
) -> None:
    first = env_json(project, channel, capsys, "--facts", str(no_gpu))
    assert first["variant"]["name"] == "cpu" and first["variant"]["how"] == "auto"
    assert first["variant"]["why"].startswith("cpu: no NVIDIA GPU here, and the default variant is a CPU build")
    assert first["variant"]["pick"]["chosen"] == "cpu" and CPU_TORCH in first["plan"]["pip_install"]
    assert first["prefix"] == str(project.root / ".envs" / "py310" / "cpu")
    assert installed(project, "cpu") == ("cpu", "conda-lock.yml", "2.10.0+cpu")
    cpu_record = (project.env_prefix("py310", "cpu") / "conda-meta" / "bootstrap").read_bytes()
    other = env_json(project, channel, capsys, "--variant", "auto", "--facts", str(H200))
    assert other["variant"]["name"] == "cu128" and other["variant"]["lock"].endswith("py310.cu128.conda-lock.yml")
    assert (other["prefix"], other["generation"], other["made"]) == (
        str(project.env_prefix("py310", "cu128")),
        1,
        "empty",
    )
    assert CUDA_TORCH in other["plan"]["pip_install"] and other["plan"]["pip_remove"] == []
    assert installed(project, "cu128") == ("cu128", "py310.cu128.conda-lock.yml", "2.10.0+cu128")
    assert installed(project, "cpu") == ("cpu", "conda-lock.yml", "2.10.0+cpu")  # the other prefix, as it was
    assert (project.env_prefix("py310", "cpu") / "conda-meta" / "bootstrap").read_bytes() == cpu_record
    again = env_json(project, channel, capsys, "--facts", str(H200))
    assert not again["changed"] and again["variant"]["name"] == "cu128"
    both = env_json(project, channel, capsys, "--variant", "all")  # a login node: every variant, none changed
    assert [(d["variant"]["name"], d["variant"]["how"], d["changed"]) for d in both["variants"]] == [
        ("cpu", "all", False),
        ("cu128", "all", False),
    ]
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--rollback", "--variant", "cu128", "--facts", str(no_gpu))) == 2
    assert f"{project.env_prefix('py310', 'cu128')}: no earlier generation" in capsys.readouterr().err
    assert sorted(p.name for p in prefix_of(project).iterdir()) == [
        ".cpu.gens",
        ".cpu.lock",
        ".cu128.gens",
        ".cu128.lock",
        "cpu",
        "cu128",
    ]


def test_all_installs_every_locked_variant_whether_or_not_it_runs_here(project: Project, channel: Path, capsys) -> None:
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--variant", "all")) == 0
    out = capsys.readouterr().out
    assert "variant cpu (conda-lock.yml, all): --variant all installs every locked variant" in out
    assert installed(project, "cpu")[2] == "2.10.0+cpu" and installed(project, "cu128")[2] == "2.10.0+cu128"
    for extra in (["--facts", str(H200)], ["--rollback"], ["--force"]):
        assert main(env_args(project, str(channel), "--variant", "all", *extra)) == 2
        assert f"error: {extra[0]}: does not apply to --variant all" in capsys.readouterr().err


def test_a_variant_env_in_the_one_prefix_layout_is_refused_with_how_to_move(
    project: Project, channel: Path, no_gpu: Path, capsys
) -> None:
    """An older bootstrap installed one variant at `.envs/py310` itself: its files name that prefix and jobs
    may run from it, so it is neither moved nor replaced; one line says how to go over."""
    old = prefix_of(project)
    assert main(env_args(project, str(channel), "--facts", str(no_gpu), "--prefix", str(old))) == 0
    before = sorted(str(p.relative_to(old.parent)) for p in old.parent.rglob("*"))
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--facts", str(no_gpu))) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {old}: holds variant cpu in one prefix, as bootstrap made envs with variants before each variant "
        f"had its own ({old}/<variant>) (once no job runs from it, remove it with `make clean-env` (it and its "
        "generations), then `make env`)\n"
    )
    assert sorted(str(p.relative_to(old.parent)) for p in old.parent.rglob("*")) == before


def test_dry_run_says_which_variant_and_why(project: Project, channel: Path, capsys) -> None:
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--dry-run", "--facts", str(H200))) == 0
    out = capsys.readouterr().out
    assert "\nvariant cu128 (py310.cu128.conda-lock.yml, auto): cu128: the newest torch that runs fully" in out
    assert "the default cpu will not run here (torch.cuda_build: torch 2.10.0+cpu is a CPU build" in out
    assert "\n    cpu    torch 2.10.0+cpu (CPU build)    fail  conda-lock.yml" in out
    assert "\n  * cu128  torch 2.10.0+cu128 (CUDA 12.8)  ok    py310.cu128.conda-lock.yml" in out
    assert not prefix_of(project).exists()


def test_a_variant_that_will_not_run_here_is_refused_before_any_download(
    project: Project, channel: Path, capsys
) -> None:
    capsys.readouterr()
    cache = project.root / ".cache"
    assert main(env_args(project, "/nonexistent-mirror", "--variant", "cpu", "--facts", str(H200))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "error: --variant cpu: torch 2.10.0+cpu (CPU build) will not run on this host (torch.cuda_build: "
    )
    assert "(cu128 would run: `--variant cu128` (or auto); --force installs the other anyway)" in err
    assert not prefix_of(project).exists() and not cache.exists()
    forced = env_json(project, channel, capsys, "--variant", "cpu", "--force")
    assert forced["variant"]["how"] == "forced" and installed(project, "cpu")[0] == "cpu"


def test_unknown_or_unlocked_variants_and_mixed_flags_are_one_line(project: Project, channel: Path, capsys) -> None:
    lock = str(project.lock_path("py310"))
    cases = [
        (["--variant", "cu999"], "error: --variant: py310 has no variant 'cu999' (known: cpu, cu128)"),
        (["--force"], "error: --force: applies to --variant NAME only"),
        (["--variant", "cu128", "--lock", lock], "error: --variant: does not apply to --lock"),
        (["--facts", str(H200), "--lock", lock], "error: --facts: does not apply to --lock"),
    ]
    for extra, words in cases:
        capsys.readouterr()
        assert main(env_args(project, str(channel), *extra)) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith(words) and err.count("\n") == 1, err
    project.variant_lock_path("py310", "cu128").unlink()
    for extra in (["--variant", "cu128", "--facts", str(H200)], ["--variant", "cu128", "--force"]):
        assert main(env_args(project, str(channel), *extra)) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --variant cu128: not locked yet: ") and err.rstrip().endswith("(run `make lock`)")
    assert main(env_args(project, str(channel), "--facts", str(H200))) == 2  # auto: the cu128 lock is all that runs
    assert "no locked variant of py310 runs on this host" in capsys.readouterr().err
    assert not prefix_of(project).exists()


# The default suite breaks each lock one way; `make test-slow` every way.
@pytest.mark.parametrize(
    ("which", "corrupt"),
    [
        (which, corrupt)
        if (which, corrupt) in (("cpu", "empty"), ("cu128", "version 2"))
        else pytest.param(which, corrupt, marks=pytest.mark.slow)
        for which in ("cpu", "cu128")
        for corrupt in ("empty", "version 2", "truncated", "binary", "null", "a list")
    ],
)
def test_a_lock_that_cannot_be_read_stops_auto_instead_of_being_passed_over(
    project: Project, channel: Path, capsys, corrupt: str, which: str
) -> None:
    """Auto judges every variant's lock: a broken one (the default's or the pick's) is bad input naming the
    file, exit 2, not a silent switch to whichever other variant still reads."""
    path = project.lock_path("py310") if which == "cpu" else project.variant_lock_path("py310", "cu128")
    text = path.read_text()
    path.write_bytes(
        {
            "empty": b"",
            "version 2": text.replace("version: 1", "version: 2").encode(),
            "truncated": text[: len(text) // 2].encode(),
            "binary": bytes(range(256)) * 4,
            "null": b"null\n",
            "a list": b"- 1\n- 2\n",
        }[corrupt]
    )
    for facts in (H200, None):
        capsys.readouterr()
        extra = ["--dry-run"] + (["--facts", str(facts)] if facts else [])
        assert main(env_args(project, str(channel), *extra)) == 2, (facts, corrupt)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {path}"), err
    assert not prefix_of(project).exists()


def test_facts_recorded_on_another_platform_are_not_judged_for_this_one(
    project: Project, channel: Path, capsys, tmp_path: Path
) -> None:
    """An aarch64 node's facts judged for a linux-64 plan would pick a variant for the wrong machine."""
    facts = json.loads(H200.read_text())
    facts["platform"] = "linux_aarch64"
    aarch64 = tmp_path / "gh200.facts.json"
    aarch64.write_text(json.dumps(facts))
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--dry-run", "--facts", str(aarch64))) == 2
    assert capsys.readouterr().err == (
        f"error: --facts {aarch64}: was recorded on linux-aarch64, the env is planned "
        "for linux-64 (add --platform linux-aarch64, with --dry-run on this machine)\n"
    )
    assert (
        main(env_args(project, str(channel), "--dry-run", "--facts", str(aarch64), "--platform", "linux-aarch64")) == 2
    )  # no variant is locked for it: nothing to force
    err = capsys.readouterr().err
    assert "no variant is locked for this platform" in err and "add it to `platforms:`" in err
    assert "--force" not in err


def test_a_spec_without_variants_has_no_variant_to_name(tmp_path: Path, channel: Path, capsys) -> None:
    project = make_project(tmp_path / "plain", platforms=("linux-64",), conda=CONDA, pip=PIP)
    assert main(env_args(project, str(channel), "--variant", "cpu")) == 2
    assert "variants: none declared, so there is no variant 'cpu'" in capsys.readouterr().err


def no_smi(argv, timeout=300.0, **kwargs):
    """The real runner, except nvidia-smi, which this machine may have."""
    return missing_binary_runner(argv) if "nvidia-smi" in argv[0] else run(argv, timeout=timeout, **kwargs)


def env_variant(project: Project, nvml: FakeNvml, variant: str):
    from bootstrap.checks.verify import VerifyOptions, run_verify

    prefix = project.env_prefix("py310", variant)
    result = run_verify(VerifyOptions(prefix=prefix, root=project.root, bench=False), nvml=nvml, runner=no_smi)
    return next(c for c in result.checks if c.id == "env.variant")


def test_verify_reports_the_installed_variant_and_fails_when_another_should_run(
    project: Project, channel: Path, no_gpu: Path, capsys
) -> None:
    env_json(project, channel, capsys, "--facts", str(no_gpu))
    here = env_variant(project, FakeNvml({}, init_error=12), "cpu")
    assert here.status is Status.OK
    assert here.observed == "cpu from conda-lock.yml: torch 2.10.0+cpu (CPU build), the pick for this host"
    gpu = env_variant(project, FakeNvml.load("h200x8-580.95.05.json"), "cpu")
    assert gpu.status is Status.FAIL and gpu.observed.startswith(
        "cpu from conda-lock.yml: will not run here (torch.cuda_build: "
    )
    assert gpu.observed.endswith("; this host should run cu128")
    assert gpu.remedy == (
        "`make env VARIANT=cu128` installs it in its own prefix; "
        '`eval "$(python -m bootstrap shell py310)"` activates the one this host picks'
    )
    env_json(project, channel, capsys, "--variant", "cu128", "--facts", str(no_gpu))
    cpu_host = env_variant(project, FakeNvml({}, init_error=12), "cu128")  # runs, but a CPU host is better off with cpu
    assert cpu_host.status is Status.WARN
    assert cpu_host.observed == "cu128 from py310.cu128.conda-lock.yml: runs, but cpu is the pick for this host"
    assert cpu_host.remedy.startswith("`make env VARIANT=cpu` installs it in its own prefix; ")
    assert cpu_host.remedy.endswith(", or keep this one with VARIANT=cu128")
    assert env_variant(project, FakeNvml.load("h200x8-580.95.05.json"), "cu128").status is Status.OK


def test_a_bundle_holds_the_variants_named_and_env_installs_only_those(
    project: Project, channel: Path, no_gpu: Path, tmp_path: Path, capsys
) -> None:
    output = tmp_path / "cu128.tar"
    capsys.readouterr()
    assert (
        main(
            [
                "bundle",
                "--root",
                str(project.root),
                "--platform",
                "linux-64",
                "--variant",
                "cu128",
                "--mirror",
                f"conda-forge={channel}",
                "--cache-dir",
                str(tmp_path / "bundle-cache"),
                "-o",
                str(output),
                "--no-tools",
            ]
        )
        == 0
    )
    with tarfile.open(output) as tar:
        index = json.loads(tar.extractfile("bundle.json").read())
    assert [e["lock"] for e in index["envs"]] == ["locks/py310/py310.cu128.conda-lock.yml"]
    from_bundle = [
        "env",
        "--root",
        str(project.root),
        "--platform",
        "linux-64",
        "--bundle",
        str(output),
        "--cache-dir",
        str(project.root / ".cache"),
        "--facts",
        str(no_gpu),
    ]
    capsys.readouterr()
    assert main(from_bundle) == 2  # no GPU: the pick is cpu, which the bundle does not hold
    err = capsys.readouterr().err
    assert "holds py310.cu128.conda-lock.yml, not conda-lock.yml (variant cpu, auto)" in err
    assert "--variant cpu" in err and len(err.strip().splitlines()) == 1
    assert not prefix_of(project).exists()
    assert main([*from_bundle, "--variant", "cu128"]) == 0
    assert installed(project, "cu128") == ("cu128", "py310.cu128.conda-lock.yml", "2.10.0+cu128")
    assert main(["bundle", "--root", str(project.root), "--variant", "rocm", "-o", str(tmp_path / "x.tar")]) == 2
    assert "py310 has no variant 'rocm'" in capsys.readouterr().err and not (tmp_path / "x.tar").exists()


def test_prune_keeps_what_every_variant_installs(project: Project, channel: Path, no_gpu: Path, capsys) -> None:
    env_json(project, channel, capsys, "--facts", str(no_gpu))
    env_json(project, channel, capsys, "--variant", "cu128", "--facts", str(no_gpu))
    capsys.readouterr()
    assert (
        main(["cache", "--prune", "--json", "--root", str(project.root), "--cache-dir", str(project.root / ".cache")])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["kept_for"] == [str(project.lock_path("py310")), str(project.variant_lock_path("py310", "cu128"))]
    kept = {p.name for p in (project.root / ".cache" / "archives").iterdir()}
    for path in report["kept_for"]:
        torch = next(e for e in read_lock(Path(path)).packages if e.name == "torch")
        assert torch.sha256 in kept  # both builds of torch stay: either variant reinstalls offline


def without_torch(path: Path) -> None:
    """The lock as a hand edit or a damaged copy leaves it: every entry kept but torch's."""
    lock = yaml.safe_load(path.read_text())
    lock["package"] = [p for p in lock["package"] if p["name"] != "torch"]
    path.write_text(yaml.safe_dump(lock, sort_keys=False))


@pytest.mark.parametrize("facts", ["no-gpu", "h200"])
def test_auto_says_which_variant_it_skipped_and_why(
    project: Project, channel: Path, no_gpu: Path, capsys, facts: str
) -> None:
    """The default's lock lost its torch entry: auto installs the other variant, and says which it skipped
    and why, in one line: in the plan, on stderr before the install starts, and in --json."""
    without_torch(project.lock_path("py310"))
    facts_path = str(no_gpu if facts == "no-gpu" else H200)
    skipped = (
        "note: skipped variant cpu: conda-lock.yml has no torch pip entry for linux-64 "
        "(damaged or edited by hand? `make lock` writes it again)\n"
    )
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--dry-run", "--facts", facts_path)) == 0
    assert skipped in capsys.readouterr().out
    done = env_json(project, channel, capsys, "--dry-run", "--facts", facts_path)
    assert done["variant"]["name"] == "cu128"
    assert done["variant"]["skipped"] == [
        {
            "name": "cpu",
            "lock": str(project.lock_path("py310")),
            "why": "conda-lock.yml has no torch pip entry for linux-64",
        }
    ]
    assert main(env_args(project, str(channel), "--facts", facts_path)) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith(skipped) and skipped in captured.out
    assert installed(project, "cu128")[0] == "cu128"


def test_auto_names_no_skipped_variant_when_every_lock_holds_torch(
    project: Project, channel: Path, no_gpu: Path, capsys
) -> None:
    done = env_json(project, channel, capsys, "--dry-run", "--facts", str(H200))
    assert done["variant"]["name"] == "cu128" and done["variant"]["skipped"] == []
    capsys.readouterr()
    assert main(env_args(project, str(channel), "--dry-run", "--facts", str(no_gpu))) == 0
    assert "skipped variant" not in capsys.readouterr().out
