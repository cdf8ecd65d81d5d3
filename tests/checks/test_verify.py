"""`bootstrap verify` against envs that `bootstrap env` really created from a fixture lock.

The env's python is a venv-style shim of the test interpreter
(tests/fixtures/runnable_env.py); pip changes are made with uv, the tool
`bootstrap env` itself uses. Each drift (a modified file, a removed package,
another pip version, an unlocked package, a changed or stale lock) must be
reported with the command that repairs it, and applying that command must
make verify clean again. The GPU code paths are exercised with stand-ins for
torch.cuda and recorded NVML facts; one real run inside the env checks the
JSON envelope on this CPU-only machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from bootstrap.checks.torch import compute_checks, device_checks
from bootstrap.checks.verify import VerifyOptions, run_verify
from bootstrap.cli import main
from bootstrap.compat.probe import probe_torch
from bootstrap.compat.rules import evaluate
from bootstrap.lock.pip import PipOptions, uv_binary
from bootstrap.project import Project
from bootstrap.report import Status, from_json
from tests.fixtures import REPO
from tests.fixtures.env_project import CONDA, PIP, env_args, relock
from tests.fixtures.fakes import FakeNvml, fake_torch
from tests.fixtures.project import make_project, write_spec
from tests.fixtures.runnable_env import build_runnable_channel
from tests.fixtures.wheels import WheelSpec, build_wheelhouse, standard_wheels

ENV_IDS = ("env.prefix", "env.lock", "env.python", "env.conda", "env.pip", "env.extra", "env.files", "env.freshness")
GPU_IDS = (
    "torch.cuda_available",
    "torch.device_count",
    "torch.cudnn",
    "torch.nccl",
    "torch.pinned_memory",
    "torch.gpu",
)
CHECK_KEYS = {"id", "status", "observed", "expected", "remedy", "detail"}
EXTRA_KEYS = {"prefix", "lock", "inside", "facts_source", "seconds", "facts"}


@pytest.fixture(scope="module")
def channel(tmp_path_factory) -> Path:
    return build_runnable_channel(tmp_path_factory.mktemp("runnable") / "channel")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    return build_wheelhouse(tmp_path_factory.mktemp("wheels"), [*standard_wheels(), WheelSpec("delta", "1.0")])


@pytest.fixture(scope="module")
def locked(tmp_path_factory, channel: Path, wheels: Path) -> Project:
    project = make_project(
        tmp_path_factory.mktemp("verifyproj") / "proj", platforms=("linux-64",), conda=CONDA, pip=PIP
    )
    relock(project, channel, wheels)
    return project


def make_env(project: Project, channel: Path) -> None:
    assert main(env_args(project, str(channel))) == 0


@pytest.fixture
def env(locked: Project, channel: Path, tmp_path: Path) -> SimpleNamespace:
    """A copy of the locked project with its env created: `.envs/py310 -> .py310.gens/1`."""
    root = tmp_path / "proj"
    shutil.copytree(locked.root, root)
    project = Project(root)
    make_env(project, channel)
    return SimpleNamespace(project=project, prefix=root / ".envs" / "py310", channel=channel)


NO_DRIVER = FakeNvml({}, init_error=12)


def verify(prefix: Path, **options) -> dict:
    result = run_verify(VerifyOptions(prefix=prefix, bench=False, **options), nvml=NO_DRIVER)
    assert_remedies(result.checks)
    return {c.id: c for c in result.checks}


def assert_remedies(checks) -> None:
    """Every warn and fail names its fix; every skip says why."""
    for check in checks:
        if check.status in (Status.WARN, Status.FAIL):
            assert check.remedy, check
        if check.status is Status.SKIP:
            assert check.detail or check.observed, check


def assert_env_clean(prefix: Path) -> None:
    checks = verify(prefix)
    assert {cid: checks[cid].status for cid in ENV_IDS} == {cid: Status.OK for cid in ENV_IDS}


def uv(prefix: Path, *args: str) -> None:
    done = subprocess.run(
        [uv_binary(PipOptions()), "pip", *args, "--python", str(prefix / "bin" / "python")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- env checks


def test_clean_env_all_env_checks_ok(env) -> None:
    checks = verify(env.prefix)
    for cid in ENV_IDS:
        assert checks[cid].status is Status.OK, checks[cid]
    assert checks["env.conda"].observed == "5 match" and checks["env.pip"].observed == "3 match"
    assert checks["env.python"].observed == f"python {sys.version.split()[0]} (python in the env)"
    assert "(0 hashed)" in checks["env.files"].observed  # nothing changed since install: nothing to hash
    deep = verify(env.prefix, deep=True)["env.files"]
    assert deep.status is Status.OK and "sha256 of every file" in deep.expected
    assert "(0 hashed)" not in deep.observed
    # A generation directory (what sys.prefix is inside the env) is reported as the stable path users activate.
    assert verify(env.prefix.resolve())["env.prefix"].observed.startswith(f"{env.prefix} (env py310, generation 1")
    # The torch checks need the env's own interpreter; from outside they are a skip that says how to run them.
    assert checks["torch.gpu"].status is Status.SKIP and "bin/python -m bootstrap verify" in checks["torch.gpu"].detail


def test_modified_files_are_reported_and_recreating_fixes_them(env) -> None:
    grown = env.prefix / "share/bigpkg/f000002.txt"
    grown.write_text(grown.read_text() + "edited\n")
    module = next(env.prefix.glob("lib/python*/site-packages/alpha/__init__.py"))
    module.write_text(module.read_text().replace("1.1", "9.9"))  # same size: found by its change time + hash
    checks = verify(env.prefix)
    files = checks["env.files"]
    assert files.status is Status.FAIL and files.observed.startswith("2 of ")
    assert "share/bigpkg/f000002.txt (conda:bigpkg, size" in files.detail
    assert "alpha/__init__.py (pip:alpha, content differs)" in files.detail
    assert "`make clean-env env` recreates the env from the lock" in files.remedy
    assert checks["env.conda"].status is Status.OK and checks["env.pip"].status is Status.OK
    shutil.rmtree(env.project.root / ".envs")  # what `make clean-env` does
    make_env(env.project, env.channel)
    assert_env_clean(env.prefix)


def test_removed_packages_are_reported_and_make_env_restores_them(env) -> None:
    next(env.prefix.glob("conda-meta/zlibstub-*.json")).unlink()
    uv(env.prefix, "uninstall", "gamma")
    checks = verify(env.prefix)
    conda, pip = checks["env.conda"], checks["env.pip"]
    assert conda.status is Status.FAIL and conda.observed == "zlibstub 1.3.1 h0_0 missing"
    assert conda.remedy == "install the locked builds: `make env`"
    assert pip.status is Status.FAIL and pip.observed == "gamma 0.5 missing"
    assert pip.remedy == "install the locked wheels: `make env`"
    make_env(env.project, env.channel)
    assert_env_clean(env.prefix)


def test_other_pip_version_is_reported_and_make_env_restores_it(env, wheels: Path) -> None:
    uv(env.prefix, "install", "--no-deps", "--no-index", "--find-links", str(wheels), "alpha==1.0")
    checks = verify(env.prefix)
    pip = checks["env.pip"]
    assert pip.status is Status.FAIL and pip.observed == "alpha: 1.0 installed, lock has 1.1"
    assert "`make env`" in pip.remedy
    make_env(env.project, env.channel)
    assert_env_clean(env.prefix)
    # Now an earlier generation exists, so a changed file also offers the rollback.
    (env.prefix / "share/torchlike/build.txt").write_text("tampered\n")
    assert "`python -m bootstrap env py310 --rollback`" in verify(env.prefix)["env.files"].remedy


def test_a_permission_change_is_no_drift_but_a_reinstall_is(env, wheels: Path) -> None:
    """chmod -R moves every ctime, not one byte: no pip failure, and the files hash as recorded."""
    subprocess.run(["chmod", "-R", "g+w", str(env.prefix.resolve())], check=True)
    checks = verify(env.prefix)
    assert checks["env.pip"].status is Status.OK and checks["env.files"].status is Status.OK, checks["env.pip"]
    uv(env.prefix, "install", "--reinstall", "--no-deps", "--no-index", "--find-links", str(wheels), "alpha==1.1")
    pip = verify(env.prefix)["env.pip"]
    assert pip.status is Status.FAIL and pip.observed == "alpha: reinstalled after `bootstrap env` (by uv)"


def test_unlocked_package_is_reported_and_pip_uninstall_fixes_it(env, wheels: Path) -> None:
    uv(env.prefix, "install", "--no-deps", "--no-index", "--find-links", str(wheels), "delta")
    extra = verify(env.prefix)["env.extra"]
    assert extra.status is Status.FAIL and extra.observed == "not in the lock: pip: delta 1.0"
    assert extra.remedy.startswith("`pip uninstall -y delta` or `make env` removes what the lock lacks")
    assert "add them to envs/py310.yml" in extra.remedy and "`make lock`" in extra.remedy
    uv(env.prefix, "uninstall", "delta")
    assert_env_clean(env.prefix)


def test_changed_lock_and_stale_lock(env) -> None:
    lock_path = env.project.lock_path("py310")
    text = lock_path.read_text()
    installed_hash = json.loads((env.prefix / "conda-meta" / "bootstrap").read_text())["content_hash"]
    lock_path.write_text(text.replace(installed_hash, "f" * 64))
    lock = verify(env.prefix)["env.lock"]
    assert lock.status is Status.FAIL and "the lock changed since generation 1" in lock.observed
    assert lock.remedy == "apply the new lock: `make env`"
    lock_path.write_text(text)
    write_spec(env.project.root, platforms=("linux-64",), conda=CONDA, pip=("alpha", "gamma", "delta"))
    fresh = verify(env.prefix)["env.freshness"]
    assert fresh.status is Status.FAIL and "pip: delta: not in the lock" in fresh.observed
    assert fresh.remedy == "re-lock and apply: `make lock` then `make env`"


def test_no_env_yet_exits_1_with_make_env(locked: Project, tmp_path: Path, capsys) -> None:
    root = tmp_path / "proj"
    shutil.copytree(locked.root, root)
    capsys.readouterr()
    assert main(["verify", "--root", str(root), "--no-bench", "--json"]) == 1
    checks = {c.id: c for c in from_json(json.loads(capsys.readouterr().out))}
    prefix = checks["env.prefix"]
    assert prefix.status is Status.FAIL and prefix.observed == f"no environment at {root.absolute()}/.envs/py310"
    assert prefix.remedy == "create it: `make env`"


@pytest.mark.parametrize(
    "text", ["version: [", "[]\n", "version: 2\n", "version: 1\nmetadata: {}\npackage: []\n", "\udcff", None]
)
def test_a_lock_given_that_cannot_be_read_is_bad_usage(locked: Project, tmp_path: Path, capsys, text) -> None:
    """`--lock FILE` is input like every other verb's: unreadable, one line and exit 2. The same file
    found as the env's own lock is the env's state: a failed check (env.lock once the env exists), exit 1."""
    root = tmp_path / "proj"
    shutil.copytree(locked.root, root)
    bad = root / "conda-lock.yml"
    if text is None:
        bad.unlink()
    else:
        bad.write_bytes(text.encode("utf-8", "surrogateescape"))
    capsys.readouterr()
    assert main(["verify", "--root", str(root), "--no-bench", "--lock", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and str(bad) in err and "Traceback" not in err
    if text is not None:
        assert main(["verify", "--root", str(root), "--no-bench", "--json"]) == 1  # no env yet: env.prefix fails
        assert {c.id for c in from_json(json.loads(capsys.readouterr().out))} >= {"env.prefix"}


def test_a_directory_bootstrap_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "conda-meta").mkdir()
    check = verify(tmp_path)["env.prefix"]
    assert check.status is Status.FAIL and "no conda-meta/bootstrap record" in check.observed
    assert f"move {tmp_path} aside and run `python -m bootstrap env" in check.remedy  # env refuses to take it over


def test_an_interpreter_without_pyyaml_gets_one_line(locked: Project) -> None:
    """verify runs inside the created env, which has PyYAML only if the lock lists it."""
    code = "import sys; sys.modules['yaml'] = None; from bootstrap.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "verify", "--root", str(locked.root), "--no-bench"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"reading {locked.lock_path('py310')} needs PyYAML, which {sys.executable} cannot import" in done.stderr
    assert "add `pyyaml` to the env's spec (envs/*.yml), then `make lock` and `make env`" in done.stderr


def test_bad_usage_exits_2(tmp_path: Path, capsys) -> None:
    facts = REPO / "tests" / "data" / "verify" / "h200x8-580.95.05.facts.json"
    assert main(["verify", "--facts", str(facts), "--deep"]) == 2
    assert "--deep: does not apply to --facts" in capsys.readouterr().err
    for budget in ("0", "nan", "inf", "1e30"):
        assert main(["verify", "--no-bench", "--bench-budget", budget]) == 2
        assert "--bench-budget: " in capsys.readouterr().err
    assert main(["verify", "--prefix"]) == 2  # argparse's usage error, returned (a --json run gets its envelope)


# --------------------------------------------------------------------------- a real run inside the env


STATUSES = ("ok", "warn", "fail", "skip", "inconclusive")  # every one counted in the summary, even at 0


def assert_envelope(envelope: dict) -> None:
    """The `--json` contract: versioned envelope, string fields, consistent summary."""
    assert set(envelope) == {"format", "version", "kind", "checks", "summary", "extra"}
    assert (envelope["format"], envelope["version"], envelope["kind"]) == ("bootstrap.checks", 1, "verify")
    ids = [c["id"] for c in envelope["checks"]]
    assert len(ids) == len(set(ids))
    for check in envelope["checks"]:
        assert set(check) == CHECK_KEYS and all(isinstance(v, str) for v in check.values())
        assert check["status"] in STATUSES
    counts = Counter(c["status"] for c in envelope["checks"])
    assert envelope["summary"] == {s: counts.get(s, 0) for s in STATUSES}
    assert set(envelope["extra"]) == EXTRA_KEYS
    assert envelope["extra"]["facts"]["format"] == "bootstrap.facts"
    assert_remedies(from_json(envelope))


def test_real_run_inside_the_env_on_this_machine(env, tmp_path: Path, capsys) -> None:
    """`verify --no-bench --json` with the env's own python; torch comes from the test venv through a .pth."""
    site = next(env.prefix.glob("lib/python*/site-packages"))
    (site / "zz-test-venv.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    saved = tmp_path / "facts.json"
    done = subprocess.run(
        [
            str(env.prefix / "bin" / "python"),
            "-m",
            "bootstrap",
            "verify",
            "--no-bench",
            "--json",
            "--save-facts",
            str(saved),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    envelope = json.loads(done.stdout)
    assert_envelope(envelope)
    checks = {c["id"]: c for c in envelope["checks"]}
    assert envelope["extra"]["inside"] is True
    assert all(checks[cid]["status"] == "ok" for cid in ENV_IDS), [checks[cid] for cid in ENV_IDS]
    assert checks["env.python"]["observed"].endswith("(this interpreter)")
    torch_import = checks["torch.import"]  # the test venv's torch is outside the env and not in the fixture lock
    assert torch_import["status"] == "warn" and "PYTHONNOUSERSITE=1" in torch_import["remedy"]
    facts = envelope["extra"]["facts"]
    if facts["nvidia"]["driver_version"] is None or facts["torch"]["cuda"] is None:
        for cid in ("nvidia.driver", *GPU_IDS):
            if cid in checks:
                assert checks[cid]["status"] == "skip" and checks[cid]["detail"], checks[cid]
        assert all(cid in checks for cid in GPU_IDS)
    assert checks["bench"]["status"] == "skip" and checks["bench"]["observed"] == "--no-bench"
    assert done.returncode == (1 if envelope["summary"]["fail"] else 0)
    # Another invocation on the recorded facts reaches the same host, driver and CUDA verdicts.
    capsys.readouterr()
    main(["verify", "--facts", str(saved), "--json"])
    replayed = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    rules = [cid for cid in checks if cid.split(".")[0] in ("nvidia", "cuda", "host") or cid == "torch.cuda_build"]
    assert rules and {cid: checks[cid] for cid in rules} == {cid: replayed[cid] for cid in rules}
    assert replayed["env"]["status"] == "skip" and replayed["torch.gpu"]["status"] == "skip"


# --------------------------------------------------------------------------- GPU code paths, without a GPU


def h200_facts():
    from bootstrap.compat.probe import probe_gpus
    from tests.fixtures.fakes import missing_binary_runner

    return probe_gpus(nvml=FakeNvml.load("h200x8-580.95.05.json"), runner=missing_binary_runner, os_name="linux")


def test_matmul_and_conv_against_the_cpu_reference() -> None:
    torch = pytest.importorskip("torch")
    checks = compute_checks(torch, 0, device="cpu")
    assert [c.id for c in checks] == ["torch.gpu0.matmul", "torch.gpu0.conv"]
    assert all(c.status is Status.OK for c in checks), checks


class Proxy:
    """The real torch module with some attributes replaced."""

    def __init__(self, torch, **replaced) -> None:
        self._torch = torch
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._torch, name)


def wrong_conv(torch) -> Proxy:
    """torch, except that conv2d in float32 returns a wrong result (a miscomputing device)."""
    conv = torch.nn.functional.conv2d

    def wrong(x, w, **kwargs):
        return conv(x, w, **kwargs) * (1.0 if x.dtype == torch.float64 else 1.5)

    return Proxy(torch, nn=SimpleNamespace(functional=SimpleNamespace(conv2d=wrong)))


def test_wrong_results_and_device_errors_fail_with_a_remedy() -> None:
    torch = pytest.importorskip("torch")
    matmul, conv = compute_checks(wrong_conv(torch), 0, device="cpu")
    assert matmul.status is Status.OK
    assert conv.status is Status.FAIL and "dcgmi diag" in conv.remedy
    broken = compute_checks(torch, 3, device="meta")  # no data to copy back: an error, reported as a verdict
    assert all(c.status is Status.FAIL and c.remedy for c in broken) and broken[0].id == "torch.gpu3.matmul"


class Unpinnable:
    """A host tensor whose pin_memory() fails as cudaHostAlloc does when the host has no memory to lock."""

    def __mod__(self, other):
        return self

    def to(self, *args, **kwargs):
        return self

    def pin_memory(self):
        raise RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")


def test_pinning_that_fails_names_host_memory_not_the_locked_memory_limit() -> None:
    """cudaHostAlloc pins through the driver: RLIMIT_MEMLOCK (`ulimit -l`) does not bound it."""
    from bootstrap.checks.torch import pinned_check

    torch = Proxy(pytest.importorskip("torch"), arange=lambda *args, **kwargs: Unpinnable())
    check = pinned_check(torch, "cuda:0")
    assert check.status is Status.FAIL and check.observed == "CUDA error: out of memory"
    assert "memlock" not in check.remedy and "ulimit" not in check.remedy
    assert "free host memory" in check.remedy and "memory limit" in check.remedy


def cuda_torch(available: bool, count: int):
    cuda = SimpleNamespace(is_available=lambda: available, device_count=lambda: count)
    return SimpleNamespace(cuda=cuda, version=SimpleNamespace(cuda="12.8"))


def test_cuda_unavailable_on_a_gpu_host() -> None:
    target, _ = probe_torch(fake_torch())
    checks = {c.id: c for c in device_checks(cuda_torch(False, 0), h200_facts(), target, environ={})}
    assert checks["torch.cuda_available"].status is Status.FAIL
    assert "docker run --gpus all" in checks["torch.cuda_available"].remedy
    assert checks["torch.gpu"].status is Status.SKIP
    hidden = device_checks(cuda_torch(False, 0), h200_facts(), target, environ={"CUDA_VISIBLE_DEVICES": ""})
    assert "`unset CUDA_VISIBLE_DEVICES`" in hidden[0].remedy


def test_device_count_against_nvml_and_cuda_visible_devices() -> None:
    target, _ = probe_torch(fake_torch())
    nvidia = h200_facts()

    def count_check(count: int, environ: dict):
        torch = Proxy(pytest.importorskip("torch"), cuda=cuda_torch(True, count).cuda)
        checks = {c.id: c for c in device_checks(torch, nvidia, target, environ=environ)}
        # This CPU torch cannot reach "cuda:N": the device checks answer with a verdict, not a traceback.
        assert checks["torch.pinned_memory"].status is Status.FAIL and checks["torch.gpu0.matmul"].remedy
        assert len([cid for cid in checks if cid.endswith(".conv")]) == count
        return checks["torch.device_count"]

    assert count_check(8, {}).status is Status.OK
    assert count_check(2, {"CUDA_VISIBLE_DEVICES": "0,1"}).status is Status.OK
    assert count_check(2, {"CUDA_VISIBLE_DEVICES": "7gpu,+3"}).status is Status.OK  # read as strtoul reads them
    mig = count_check(1, {"CUDA_VISIBLE_DEVICES": "MIG-4f3e2d1c-aaaa-bbbb-cccc-000000000001,MIG-x"})
    assert mig.status is Status.OK
    missing = count_check(7, {})
    assert missing.status is Status.FAIL and "nvidia-smi -L" in missing.remedy
    hidden = count_check(1, {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert hidden.status is Status.FAIL and hidden.expected.startswith("2 (8 per NVML")


def test_a_torchrun_rank_compute_checks_its_own_gpu_only() -> None:
    target, _ = probe_torch(fake_torch())
    torch = Proxy(pytest.importorskip("torch"), cuda=cuda_torch(True, 8).cuda)
    checks = {c.id: c for c in device_checks(torch, h200_facts(), target, environ={}, only=5)}
    assert [cid for cid in checks if cid.startswith("torch.gpu")] == ["torch.gpu5.matmul", "torch.gpu5.conv"]
    assert "cuda:5" in checks["torch.pinned_memory"].expected and "cuda:5" in checks["torch.gpu5.matmul"].expected


def test_cpu_only_torch_on_a_gpu_host_fails_with_the_remedy() -> None:
    target, _ = probe_torch(fake_torch(version="2.10.0+cpu", cuda=None))
    nvidia = h200_facts()
    build = next(c for c in evaluate(nvidia, target) if c.id == "torch.cuda_build")
    assert build.status is Status.FAIL and "`make env`" in build.remedy
    assert all(
        c.status is Status.SKIP and "CPU build" in c.detail
        for c in device_checks(cuda_torch(False, 0), nvidia, target, environ={})
    )


def test_no_driver_skips_every_gpu_check_with_the_reason() -> None:
    from bootstrap.compat.facts import DriverFacts

    target, _ = probe_torch(fake_torch())
    checks = device_checks(cuda_torch(False, 0), DriverFacts(reason="NVML: NVML library not found"), target)
    assert [c.id for c in checks] == list(GPU_IDS)
    assert all(c.status is Status.SKIP and "NVML library not found" in c.detail for c in checks)


# --------------------------------------------------------------------------- the short benchmark


def bench_result(device_type: str, *checks):
    from bootstrap.bench.results import LoaderConfig

    return SimpleNamespace(
        device={"type": device_type, "name": "NVIDIA H200" if device_type == "cuda" else "CPU"},
        seconds=12.5,
        budget_s=10.0,
        best=LoaderConfig(num_workers=6, pin_memory=True),
        partial=False,
        notes=("a note",),
        checks=tuple(checks),
    )


def test_bench_verdicts_become_checks() -> None:
    from dataclasses import fields

    from bootstrap.bench import BenchOptions, BenchResult
    from bootstrap.checks.verify import bench_checks
    from bootstrap.report import Check

    used = {"device", "seconds", "budget_s", "best", "partial", "notes", "checks"}
    assert used <= {f.name for f in fields(BenchResult)}  # the stand-in below has the real result's shape
    asked = []
    slow = Check("bench.efficiency", Status.FAIL, "0.60", ">= 0.90", "give the job more CPUs")

    def fake_bench(options):
        asked.append(options)
        return bench_result("cuda", slow)

    summary, efficiency = bench_checks(True, True, 7.0, nvml=NO_DRIVER, bench=fake_bench)
    assert isinstance(asked[0], BenchOptions) and asked[0].budget_s == 7.0 and asked[0].nvml_module is NO_DRIVER
    assert summary.id == "bench" and "best loader: w=6 pf=2 pin" in summary.observed
    assert efficiency == slow  # on a GPU a failed verdict fails verify
    _, on_cpu = bench_checks(True, True, 7.0, bench=lambda options: bench_result("cpu", slow))
    assert on_cpu.status is Status.WARN and "sizing figure" in on_cpu.detail and on_cpu.remedy == slow.remedy

    def crash(options):
        raise ValueError("boom")

    crashed = bench_checks(True, True, 7.0, bench=crash)
    assert crashed[0].status is Status.FAIL and "--debug bench --budget 7" in crashed[0].remedy
    assert bench_checks(False, True, 7.0)[0].status is Status.SKIP
    assert bench_checks(True, False, 7.0)[0].observed == "not inside the env"


def test_an_interrupted_benchmark_does_not_pass() -> None:
    """Ctrl-C during verify's benchmark: run_bench returns what it measured, and the bench check fails
    ('(interrupted)'), so `python -m bootstrap verify && train` does not go on to train."""
    from bootstrap.checks.verify import bench_checks

    stopped = bench_result("cuda")
    stopped.partial = True
    (summary,) = bench_checks(True, True, 7.0, bench=lambda options: stopped)
    assert summary.status is Status.FAIL and "(interrupted)" in summary.observed
    assert "--no-bench" in summary.remedy
    # Exit 130 as `bench` does, so CI tells a Ctrl-C from a failed verdict; any other failure stays 1.
    from bootstrap.checks.verify import VerifyResult
    from bootstrap.report import Check

    def code(*checks) -> int:
        return VerifyResult(
            checks=checks, prefix=None, lock_path=None, inside=True, facts=None, facts_source="this host"
        ).exit_code

    slow = Check("bench.efficiency", Status.FAIL, "0.60", ">= 0.90")
    assert (code(summary), code(summary, slow)) == (130, 130)
    (done,) = bench_checks(True, True, 7.0, bench=lambda options: bench_result("cuda"))
    assert (code(done), code(done, slow)) == (0, 1)


def test_torch_build_read_without_importing_agrees_with_the_import(monkeypatch) -> None:
    """Without a GPU verify reads torch/version.py instead of paying for `import torch`: same answer."""
    from bootstrap.checks.torch import find_torch

    torch = pytest.importorskip("torch")
    imported = find_torch(True)
    assert imported.module is torch and imported.how == "imported"
    monkeypatch.delitem(sys.modules, "torch")  # as in a fresh interpreter (the module object stays alive)
    read = find_torch(False)
    assert read.module is None and "torch/version.py" in read.how
    assert (read.version, read.location) == (imported.version, imported.location)
    assert (read.target.version, read.target.cuda, read.target.variant) == (
        imported.target.version,
        imported.target.cuda,
        imported.target.variant,
    )


# --------------------------------------------------------------------------- verify --prolog


def prolog(capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    """`verify --prolog` on a host with room for any loader: the warnings it gives are the env's, not
    those of whatever `ulimit -n`, /dev/shm or free memory the test machine has."""
    from bootstrap.compat import host

    monkeypatch.setitem(sys.modules, "pynvml", NO_DRIVER)
    monkeypatch.setattr(host, "probe_nofile", lambda: ((1 << 20, 1 << 20), ""))
    monkeypatch.setattr(host, "probe_statvfs", lambda path: ((1 << 20, 1 << 20), ""))
    monkeypatch.setattr(host, "probe_memory", lambda meminfo: ((1 << 20, 1 << 20), ""))
    capsys.readouterr()
    code = main(["verify", "--prolog", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_prolog_prints_one_line_and_an_exit_status_a_scheduler_acts_on(env, capsys, monkeypatch) -> None:
    code, out, err = prolog(capsys, monkeypatch, "--prefix", str(env.prefix))
    assert code == 0 and err == "" and out.count("\n") == 1 and len(out) <= 257, out
    assert out.startswith(f"bootstrap: ok: {env.prefix}: ") and " 0 warn" in out
    # A same-size edit with a newer time: named, not hashed (verify without --prolog compares the content)
    module = next(env.prefix.glob("lib/python*/site-packages/alpha/__init__.py"))
    module.write_text(module.read_text().replace("1.1", "9.9"))
    later = (env.prefix / "conda-meta" / "bootstrap").stat().st_mtime + 5
    os.utime(module, (later, later))
    code, out, _ = prolog(capsys, monkeypatch, "--prefix", str(env.prefix))
    assert code == 0 and "warn: env.files" in out
    files = verify(env.prefix, prolog=True)["env.files"]
    assert files.status is Status.WARN and "(--prolog)" in files.expected
    assert files.observed.startswith("1 of ") and "modified since install, their content not compared" in files.observed
    assert verify(env.prefix)["env.files"].observed.startswith("1 of ")  # hashed, and found to differ
    # A file of another size: a failure, its line under the limit of a drain reason
    grown = env.prefix / "share/bigpkg/f000002.txt"
    grown.write_text(grown.read_text() + "edited\n")
    code, out, _ = prolog(capsys, monkeypatch, "--prefix", str(env.prefix))
    assert code == 1 and out.count("\n") == 1 and len(out.rstrip("\n")) <= 256, out
    assert out.startswith("bootstrap: env.files: 1 of ") and "share/bigpkg/f000002.txt" in out
    checks = verify(env.prefix, prolog=True)
    assert checks["torch.gpu"].observed == "--prolog" and checks["bench"].status is Status.SKIP


def test_prolog_names_the_node_failure_first_in_printable_ascii() -> None:
    from bootstrap.checks.prolog import MAX_CHARS, prolog_line
    from bootstrap.compat.facts import DriverFacts, GpuFacts
    from bootstrap.compat.target import torch_target_from_lock_entry
    from bootstrap.report import Check

    old = DriverFacts(
        driver_version="470.82.01",
        cuda_driver_version=11040,
        gpus=(GpuFacts(index=0, name="Tesla V100-SXM2-32GB\x1b[31m", compute_capability=(7, 0)),),
    )
    checks = [
        Check("env.files", Status.FAIL, "3 of 20027 files changed", "as installed", "recreate it: `make env`"),
        Check("host.nofile", Status.WARN, "soft 1024", "soft >= 4096", "`ulimit -n 65536`"),
        *evaluate(old, torch_target_from_lock_entry("2.10.0+cu128", "linux-64")),
    ]
    line = prolog_line(checks, "/shared/proj/.envs/py310")
    assert len(line) <= MAX_CHARS and all(" " <= c <= "~" for c in line), line
    assert line.startswith("bootstrap: cuda.driver: driver 470.82.01 (linux), CUDA 11.4")
    assert "needs CUDA >= 12.8 for torch 2.10.0+cu128 (CUDA 12.x needs driver >= 525.60.13)" in line
    assert line.endswith("[+1 more: env.files]")
    assert prolog_line([], "x") == "bootstrap: ok: x: 0 ok, 0 warn, 0 skip"
    noisy = [Check("nvidia.gpu0", Status.FAIL, "GPU \x1b[2J\n\u202e fell off", "a GPU", "reseat it")]
    assert (
        prolog_line(noisy, "x") == "bootstrap: nvidia.gpu0: GPU \\x1b[2J \\u202e fell off; needs a GPU; fix: reseat it"
    )


@pytest.mark.parametrize("flag", [["--json"], ["--deep"], ["--distributed"], ["--bench-budget", "5"]])
def test_prolog_refuses_what_does_not_apply(capsys, monkeypatch, flag) -> None:
    code, out, err = prolog(capsys, monkeypatch, *flag)
    assert code == 2 and f"{flag[0]}: does not apply to --prolog" in err and err.count("\n") == 1
    assert out == "" or json.loads(out)["format"] == "bootstrap.error"  # --json asks for errors as JSON too
