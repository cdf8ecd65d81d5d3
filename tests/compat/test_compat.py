"""The compatibility rules, from a case table: driver x torch CUDA x compute capability -> verdict and remedy."""

from __future__ import annotations

import importlib.util

import pytest

from bootstrap.compat import data as compat_data
from bootstrap.compat.facts import DriverFacts, GpuFacts
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import TorchTarget, suggest_builds, torch_target_from_lock_entry
from bootstrap.compat.versions import cuda_supported_by_driver_number, driver_tuple, first_cuda_for, kernel_for
from bootstrap.report import Status
from tests.fixtures import REPO

COMPAT_YAML = REPO / "bootstrap" / "compat" / "cuda_compat.yml"  # the source of ...
COMPAT_DATA = REPO / "bootstrap" / "compat" / "data.py"  # ... the generated tables

H200 = ("NVIDIA H200", (9, 0))
RTX3090 = ("NVIDIA GeForce RTX 3090", (8, 6))
RTX4090 = ("NVIDIA GeForce RTX 4090", (8, 9))
RTX5090 = ("NVIDIA GeForce RTX 5090", (12, 0))
GTX1080 = ("NVIDIA GeForce GTX 1080", (6, 1))
V100 = ("Tesla V100-SXM2-32GB", (7, 0))
K80 = ("Tesla K80", (3, 7))
B300 = ("NVIDIA B300", (10, 3))
ORIN = ("Orin", (8, 7))


def host(driver, cuda, *gpus, os="linux", jetson=""):
    return DriverFacts(
        os=os,
        driver_version=driver,
        cuda_driver_version=cuda,
        source="test",
        jetson=jetson,
        gpus=tuple(GpuFacts(index=i, name=name, compute_capability=cc) for i, (name, cc) in enumerate(gpus)),
    )


def lock(version, platform="linux-64"):
    return torch_target_from_lock_entry(version, platform)


def custom(arch, cuda="12.8", version="2.7.1", variant="cu128"):
    return TorchTarget(version=version, cuda=cuda, arch_list=tuple(arch), variant=variant, source="test")


NO_DRIVER = DriverFacts(reason="no NVIDIA driver found (NVML: NVML library not found; nvidia-smi: not found on PATH)")

# (case id, facts, target, check id, status, phrases the observed+remedy text must contain)
CASES = [
    # driver vs torch CUDA
    (
        "535 + cu128: minor-version compat",
        host("535.183.01", 12020, RTX3090),
        lock("2.8.0"),
        "cuda.driver",
        Status.WARN,
        ["minor-version compatibility", "PTX", ">= 570.26"],
    ),
    (
        "535 + cu128, CUDA version from the driver number",
        host("535.183.01", None, RTX3090),
        lock("2.8.0"),
        "cuda.driver",
        Status.WARN,
        ["derived from the linux driver number", ">= 570.26"],
    ),
    (
        "470 + cu121 wheel",
        host("470.82.01", 11040, RTX3090),
        lock("2.4.1"),
        "cuda.driver",
        Status.FAIL,
        [">= 525.60.13", "cu118"],
    ),
    (
        "470 + cu124 wheel",
        host("470.82.01", 11040, RTX3090),
        lock("2.5.1"),
        "cuda.driver",
        Status.FAIL,
        [">= 525.60.13", "minor-version floor"],
    ),
    (
        "470 + cu126 wheel",
        host("470.82.01", 11040, RTX3090),
        lock("2.7.1"),
        "cuda.driver",
        Status.FAIL,
        [">= 525.60.13", "torch==2.7.1+cu118"],
    ),
    (
        "470 + cu128 wheel",
        host("470.82.01", 11040, RTX3090),
        lock("2.8.0"),
        "cuda.driver",
        Status.FAIL,
        [">= 525.60.13", ">= 570.26", "torch==2.7.1+cu118"],
    ),
    (
        "580 + cu130: ok",
        host("580.95.05", 13000, H200),
        lock("2.11.0"),
        "cuda.driver",
        Status.OK,
        ["CUDA 13.0 (reported by the driver)"],
    ),
    (
        "575 + cu130: other major",
        host("575.57.08", 12090, H200),
        lock("2.11.0"),
        "cuda.driver",
        Status.FAIL,
        [">= 580.65.06", "torch==2.11.0+cu128"],
    ),
    (
        "590 + cu132 wheel: minor compat inside 13.x",
        host("590.44.01", 13010, H200),
        lock("2.15.0"),
        "cuda.driver",
        Status.WARN,
        [">= 595.45.04", "minor-version compatibility"],
    ),
    (
        "newer major driver runs older wheel",
        host("580.95.05", 13000, RTX3090),
        lock("2.8.0"),
        "cuda.driver",
        Status.OK,
        ["CUDA 13.0"],
    ),
    # Windows driver numbering is its own series
    (
        "windows 528.33 + cu128",
        host("528.33", None, RTX3090, os="windows"),
        lock("2.8.0+cu128", "win-64"),
        "cuda.driver",
        Status.WARN,
        ["windows driver number", ">= 570.65", "minor-version compatibility"],
    ),
    (
        "windows 452.39 + cu128",
        host("452.39", None, RTX3090, os="windows"),
        lock("2.8.0+cu128", "win-64"),
        "cuda.driver",
        Status.FAIL,
        [">= 528.33", "CUDA 11.0"],
    ),
    (
        "windows 527.41 is the 12.0 driver but below the 12.x floor",
        host("527.41", None, RTX3090, os="windows"),
        lock("2.8.0+cu128", "win-64"),
        "cuda.driver",
        Status.FAIL,
        [">= 528.33", "CUDA 12.0"],
    ),
    (
        "linux 525.60.13 meets the linux 12.x floor",
        host("525.60.13", None, RTX3090),
        lock("2.8.0"),
        "cuda.driver",
        Status.WARN,
        ["CUDA 12.0", ">= 525.60.13"],
    ),
    (
        "windows 13.x: driver-reported CUDA decides",
        host("581.57", 13000, RTX3090, os="windows"),
        lock("2.14.1+cu132", "win-64"),
        "cuda.driver",
        Status.WARN,
        ["reports CUDA >= 13.2", "no windows driver number"],
    ),
    (
        "windows 13.x without a reported CUDA: branch rule",
        host("581.57", None, RTX3090, os="windows"),
        lock("2.11.0+cu130", "win-64"),
        "cuda.driver",
        Status.OK,
        ["CUDA 13.0 (at least"],
    ),
    # compute capability vs arch list
    (
        "H200 on a wheel with sm_90",
        host("580.95.05", 13000, H200),
        lock("2.11.0"),
        "cuda.arch.gpu0",
        Status.OK,
        ["runs sm_90", "Hopper"],
    ),
    (
        "RTX 3090 picks its own sm_86",
        host("535.183.01", 12020, RTX3090),
        lock("2.8.0"),
        "cuda.arch.gpu0",
        Status.OK,
        ["runs sm_86"],
    ),
    (
        "B300 (10.3) runs sm_100 SASS",
        host("580.95.05", 13000, B300),
        lock("2.11.0"),
        "cuda.arch.gpu0",
        Status.OK,
        ["runs sm_100"],
    ),
    (
        "RTX 5090 on a wheel without sm_120 and without PTX",
        host("570.153.02", 12080, RTX5090),
        lock("2.6.0"),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["no kernel image is available", "torch==2.7.1+cu128"],
    ),
    (
        "RTX 5090 is not served by sm_100",
        host("580.95.05", 13000, RTX5090),
        custom(["sm_90", "sm_100"]),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["no kernel image is available"],
    ),
    (
        "Pascal on a CUDA 13 wheel",
        host("580.95.05", 13000, GTX1080),
        lock("2.11.0"),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["no kernel image", "torch==2.11.0+cu126", "CUDA 13 builds never support CC < 7.5"],
    ),
    (
        "Pascal on the 2.8 PyPI wheel (no sm_60)",
        host("575.57.08", 12090, GTX1080),
        lock("2.8.0"),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["no kernel image", "torch==2.8.0+cu126"],
    ),
    (
        "Volta still on 2.8 PyPI",
        host("575.57.08", 12090, V100),
        lock("2.8.0"),
        "cuda.arch.gpu0",
        Status.OK,
        ["runs sm_70"],
    ),
    (
        "Volta dropped from the 2.11 default",
        host("580.95.05", 13000, V100),
        lock("2.11.0"),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["torch==2.11.0+cu126"],
    ),
    (
        "Kepler on a R470 driver: only cu118 builds have sm_37",
        host("470.182.03", 11040, K80),
        lock("2.8.0"),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["torch==2.7.1+cu118"],
    ),
    (
        "Kepler cannot take a newer driver: a CUDA 11 build instead",
        host("470.182.03", 11040, K80),
        lock("2.8.0"),
        "cuda.driver",
        Status.FAIL,
        ["R470 is the last driver branch for Kepler", "torch==2.7.1+cu118"],
    ),
    (
        "Kepler beside a newer GPU: no driver runs both the K80 and a CUDA 12 build",
        host("470.182.03", 11040, K80, V100),
        lock("2.8.0"),
        "cuda.driver",
        Status.FAIL,
        ["no NVIDIA driver runs both the Tesla K80", "R470 is the last driver branch for Kepler", "torch==2.7.1+cu118"],
    ),
    (
        "PTX only, driver fully supports the wheel: JIT warning",
        host("580.95.05", 13000, H200),
        custom(["sm_80", "compute_80"]),
        "cuda.arch.gpu0",
        Status.WARN,
        ["PTX compute_80 only", "JIT"],
    ),
    (
        "PTX only, driver under minor compat: the JIT rejects it",
        host("535.183.01", 12020, H200),
        custom(["sm_80", "compute_80"]),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["CUDA_ERROR_UNSUPPORTED_PTX_VERSION", ">= 570.26"],
    ),
    (
        "2.7 cu128 PTX compute_120 does not reach an older GPU",
        host("580.95.05", 13000, GTX1080),
        lock("2.7.1+cu128"),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["no kernel image", "cu126"],
    ),
    (
        "arch-specific sm_90a does not run on 10.0",
        host("580.95.05", 13000, ("NVIDIA B200", (10, 0))),
        custom(["sm_90a"]),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["no kernel image"],
    ),
    (
        "Jetson Orin is excluded from sm_80/sm_86",
        host("540.4.0", 12060, ORIN),
        custom(["sm_80", "sm_86"]),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["no kernel image"],
    ),
    (
        "Jetson Orin on a server aarch64 build: JetPack's torch, no server build",
        host("540.4.0", 12060, ORIN, jetson="R36.4.0"),
        TorchTarget(
            version="2.10.0",
            cuda="12.8",
            arch_list=("sm_80", "sm_90", "sm_100", "sm_120"),
            variant="cu128",
            platform="linux_aarch64",
            source="test",
        ),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["made for its JetPack"],
    ),
    (
        "Jetson Orin runs sm_80 from CUDA 13.2 builds",
        host("595.45.04", 13020, ORIN),
        custom(["sm_80", "sm_86"], cuda="13.2", version="2.15.0", variant="cu132"),
        "cuda.arch.gpu0",
        Status.OK,
        ["runs sm_86"],
    ),
    (
        "arch list unknown (get_arch_list() == [] without a GPU)",
        host("580.95.05", 13000, H200),
        TorchTarget(version="2.8.0", cuda="12.8", arch_list=()),
        "cuda.arch.gpu0",
        Status.SKIP,
        [],
    ),
    # cuda-compat: NVML reports the forward-compatibility libcuda's CUDA, which refuses consumer GPUs
    (
        "cuda-compat 13.0 over R535 on a GeForce",
        host("535.183.01", 13000, RTX3090),
        lock("2.10.0"),
        "cuda.driver",
        Status.FAIL,
        [
            "cuda-compat forward-compatibility package",
            "LD_LIBRARY_PATH",
            "GeForce RTX 3090",
            "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        ],
    ),
    (
        "cuda-compat 12.8 over R535 on a GeForce fails even a 12.x build",
        host("535.183.01", 12080, RTX3090),
        lock("2.10.0"),
        "cuda.driver",
        Status.FAIL,
        ["(CUDA 12.2) is the cuda-compat"],
    ),
    (
        "cuda-compat 13.0 over R535 on a data-center GPU runs",
        host("535.183.01", 13000, H200),
        lock("2.10.0"),
        "cuda.driver",
        Status.OK,
        [],
    ),
    (
        "a GeForce on its own driver's CUDA is no forward compatibility",
        host("580.95.05", 13000, RTX3090),
        lock("2.10.0"),
        "cuda.driver",
        Status.OK,
        [],
    ),
    (
        "a driver newer than the tables: its own CUDA is not judged",
        host("999.10.01", 99000, RTX3090),
        lock("2.10.0"),
        "cuda.driver",
        Status.OK,
        [],
    ),
    # A branch reports its own CUDA minor before (or without) a toolkit bundling it: no cuda-compat there
    (
        "R565 reports 12.7, which no toolkit carries",
        host("565.57.01", 12070, RTX4090),
        lock("2.10.0"),
        "cuda.driver",
        Status.WARN,
        ["minor-version compatibility"],
    ),
    (
        "R550 ahead of 550.54.14 reports 12.4",
        host("550.40.07", 12040, RTX4090),
        lock("2.10.0"),
        "cuda.driver",
        Status.WARN,
        ["minor-version compatibility"],
    ),
    (
        "WSL 566.36 reports 12.7",
        host("566.36", 12070, RTX4090, os="windows"),
        lock("2.10.0"),
        "cuda.driver",
        Status.WARN,
        ["minor-version compatibility"],
    ),
    (
        "WSL 560.70 reports 12.6",
        host("560.70", 12060, RTX4090, os="windows"),
        lock("2.10.0"),
        "cuda.driver",
        Status.WARN,
        ["minor-version compatibility"],
    ),
    (
        "cuda-compat 12.4 over R535 on a GeForce is still cuda-compat",
        host("535.183.01", 12040, RTX4090),
        lock("2.10.0"),
        "cuda.driver",
        Status.FAIL,
        ["cuda-compat forward-compatibility package"],
    ),
    # A driver branch knows only the GPUs released before it
    (
        "RTX 5090 on R550 (CUDA 12.4): the driver predates Blackwell",
        host("550.144.03", 12040, RTX5090),
        lock("2.10.0"),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["newer than the driver 550.144.03", "CUDA 12.8 first targets it", ">= 570.26"],
    ),
    (
        "B200 on R535 with cuda-compat 12.8: the kernel driver still predates it",
        host("535.183.01", 12080, ("NVIDIA B200", (10, 0))),
        lock("2.10.0"),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["newer than the driver 535.183.01"],
    ),
    (
        "native Windows has no cuda-compat to blame",
        host("561.17", 12080, RTX4090, os="windows"),
        lock("2.10.0+cu128", "win-64"),
        "cuda.driver",
        Status.OK,
        [],
    ),
    (
        "B200 on R535 from the driver number alone",
        host("535.183.01", None, ("NVIDIA B200", (10, 0))),
        lock("2.10.0"),
        "cuda.arch.gpu0",
        Status.FAIL,
        ["newer than the driver"],
    ),
    (
        "H100 on R520 (CUDA 11.8) is known to it",
        host("520.61.05", 11080, H200),
        lock("2.7.1+cu118"),
        "cuda.arch.gpu0",
        Status.OK,
        ["runs sm_90"],
    ),
    (
        "RTX 5090 on R570 (CUDA 12.8)",
        host("570.153.02", 12080, RTX5090),
        lock("2.10.0"),
        "cuda.arch.gpu0",
        Status.OK,
        ["runs sm_120"],
    ),
    # CPU torch, no driver, unknown build
    (
        "a lock of a CPU-only torch on a GPU host",
        host("580.95.05", 13000, H200),
        lock("2.8.0+cpu"),
        "torch.cuda_build",
        Status.FAIL,
        ["the lock holds a CPU build", "torch==2.8.0+cu128"],
    ),
    (
        "an installed CPU-only torch on a GPU host",
        host("580.95.05", 13000, H200),
        TorchTarget(version="2.8.0", cuda=None, variant="cpu"),
        "torch.cuda_build",
        Status.FAIL,
        ["reinstall the lock's CUDA wheel", "make env", "torch==2.8.0+cu128"],
    ),
    (
        "Windows PyPI torch is CPU-only",
        host("581.57", 13000, RTX3090, os="windows"),
        lock("2.8.0", "win-64"),
        "torch.cuda_build",
        Status.FAIL,
        ["the lock holds a CPU build", "torch==2.8.0+cu128"],
    ),
    ("CPU torch on a CPU host is fine", NO_DRIVER, lock("2.8.0+cpu"), "torch.cuda_build", Status.OK, []),
    ("no driver: CPU mode", NO_DRIVER, lock("2.8.0"), "cuda.driver", Status.SKIP, ["no NVIDIA driver"]),
    ("no driver: no GPU to check", NO_DRIVER, lock("2.8.0"), "cuda.arch", Status.SKIP, ["no NVIDIA GPU"]),
    ("torch outside the packaged table", host("580.95.05", 13000, H200), lock("3.1.0"), "cuda.driver", Status.SKIP, []),
]


@pytest.mark.parametrize(
    "facts, target, check_id, status, phrases", [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_rule_table(facts, target, check_id, status, phrases):
    checks = {c.id: c for c in evaluate(facts, target)}
    check = checks[check_id]
    assert check.status is status, check
    text = f"{check.observed} | {check.remedy}"
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} not in {text!r}"
    assert bool(check.remedy) == (status in (Status.WARN, Status.FAIL)), "warn/fail carry a remedy, ok/skip none"


def test_skips_say_why():
    assert "NVML library not found" in {c.id: c for c in evaluate(NO_DRIVER, lock("2.8.0"))}["cuda.driver"].detail
    unknown = {c.id: c for c in evaluate(host("580.95.05", 13000, H200), lock("3.1.0"))}
    assert "not in the packaged table" in unknown["cuda.driver"].detail
    no_arch = evaluate(host("580.95.05", 13000, H200), TorchTarget(version="2.8.0", cuda="12.8", arch_list=()))
    assert "_cuda_getArchFlags" in no_arch[-1].detail


def test_evaluate_never_raises_on_odd_facts():
    odd = DriverFacts(driver_version="not-a-number", gpus=(GpuFacts(0, "GPU 0", None),))
    statuses = {c.id: c.status for c in evaluate(odd, lock("2.8.0"))}
    assert statuses == {"torch.cuda_build": Status.OK, "cuda.driver": Status.SKIP, "cuda.arch.gpu0": Status.SKIP}


def test_driver_check_keeps_the_rows_provenance():
    check = evaluate(host("535.183.01", 12020, RTX3090), lock("2.8.0"))[1]
    assert "floor CUDA 12.x (high; https://docs.nvidia.com" in check.detail
    assert "full: CUDA 12.8 GA (high;" in check.detail


@pytest.mark.parametrize(
    "version, platform, cuda, variant, has, lacks",
    [
        ("2.10.0", "linux-64", "12.8", "", ["sm_70", "sm_120"], ["sm_60", "compute_120"]),
        ("2.8.0+cu126", "linux-64", "12.6", "cu126", ["sm_50", "sm_60", "sm_90"], ["sm_120"]),
        ("2.7.1+cu128", "linux-64", "12.8", "cu128", ["sm_120", "compute_120"], ["sm_70"]),
        ("2.11.0", "linux-64", "13.0", "", ["sm_75", "sm_120"], ["sm_70"]),
        ("2.15.0", "linux-64", "13.2", "", ["sm_75"], []),
        ("2.11.0", "linux-aarch64", "13.0", "", ["sm_80", "sm_110"], ["sm_75"]),
        ("2.10.0", "linux-aarch64", None, "cpu", [], []),
        ("2.8.0", "osx-arm64", None, "cpu", [], []),
        ("2.8.0", "win-64", None, "cpu", [], []),
        ("2.9.0+cpu", "linux-64", None, "cpu", [], []),
        ("2.12.1+cu126", "win-64", "12.6", "cu126", ["sm_61"], []),
    ],
)
def test_target_from_lock_entry(version, platform, cuda, variant, has, lacks):
    target = torch_target_from_lock_entry(version, platform)
    assert (target.cuda, target.variant, target.unknown) == (cuda, variant, "")
    for arch in has:
        assert arch in (target.arch_list or ())
    for arch in lacks:
        assert arch not in (target.arch_list or ())


def test_target_from_lock_entry_keeps_source_and_confidence():
    target = torch_target_from_lock_entry("2.10.0", "linux-64")
    assert target.confidence == "high"
    assert "PyPI default wheel of torch 2.10" in target.source
    assert (target.cudnn, target.nccl) == ("9.10.2.21", "2.27.5")


def test_target_from_lock_entry_flags_unconfirmed_ptx():
    target = torch_target_from_lock_entry("2.13.0", "linux-64")
    assert target.confidence == "low"
    assert any("PTX in this build unknown" in note for note in target.notes)


def test_target_from_url_and_requires_dist():
    url = "https://download.pytorch.org/whl/cu126/torch-2.8.0%2Bcu126-cp310-cp310-manylinux_2_28_x86_64.whl"
    by_url = torch_target_from_lock_entry("2.8.0", "linux-64", url=url)
    assert (by_url.variant, by_url.cuda) == ("cu126", "12.6")
    future = torch_target_from_lock_entry("2.16.0", "linux-64", dependencies={"cuda-toolkit[cudart,nvrtc]": "==13.2.2"})
    assert (future.cuda, future.arch_list, future.unknown) == ("13.2", None, "")
    unknown = torch_target_from_lock_entry("2.16.0", "linux-64")
    assert "not in the packaged table" in unknown.unknown


@pytest.mark.parametrize(
    "driver, os_name, cuda",
    [
        ("535.183.01", "linux", 12020),
        ("570.26", "linux", 12080),
        ("570.124.06", "linux", 12080),
        ("580.95.05", "linux", 13000),
        ("580.65.06", "linux", 13000),
        ("580.10.01", "linux", 12090),  # a 580 beta before CUDA 13.0's GA driver: the branch alone is not enough
        ("595.45.04", "linux", 13020),
        ("470.82.01", "linux", 11040),
        ("440.33.01", "linux", None),
        ("528.33", "windows", 12000),
        ("570.65", "windows", 12080),
        ("581.57", "windows", 13000),
    ],
)
def test_cuda_version_from_driver_number(driver, os_name, cuda):
    assert cuda_supported_by_driver_number(driver, os_name) == cuda


def test_driver_numbers_compare_field_by_field():
    assert driver_tuple("570.124.06") > driver_tuple("570.26")
    assert driver_tuple("580") < driver_tuple("580.65.06")
    assert driver_tuple("garbage") is None


@pytest.mark.parametrize(
    "cc, arch, sass, ptx",
    [
        ((8, 6), ["sm_80", "sm_86", "sm_90"], "sm_86", None),
        ((8, 9), ["sm_80", "sm_86"], "sm_86", None),
        ((8, 0), ["sm_86"], None, None),
        ((12, 0), ["sm_90", "compute_90"], None, "compute_90"),
        ((7, 5), ["compute_80"], None, None),
        ((10, 0), ["sm_100a"], "sm_100a", None),
        ((10, 3), ["sm_100a"], None, None),
    ],
)
def test_kernel_selection(cc, arch, sass, ptx):
    assert kernel_for(cc, arch, 12080) == (sass, ptx)


def test_suggestions_never_repeat_the_installed_build():
    target = lock("2.8.0")
    assert all(not s.pin.startswith("2.8.0+cu128") for s in suggest_builds([(9, 0)], target))


@pytest.mark.parametrize(
    ("cc", "cuda"),
    [
        ((12, 0), 12080),
        ((10, 3), 12090),
        ((8, 9), 11080),
        ((9, 0), 11080),
        ((12, 1), 12090),
        ((10, 7), 13040),
        ((7, 5), None),
        ((6, 1), None),
    ],
)
def test_the_cuda_that_first_targets_a_gpu(cc, cuda):
    assert first_cuda_for(cc) == cuda


def test_a_gpu_newer_than_the_driver_gets_no_build_suggested():
    facts = host("550.144.03", 12040, RTX5090)
    assert suggest_builds([(12, 0)], lock("2.6.0"), facts) == []
    assert suggest_builds([(12, 0)], lock("2.6.0"), host("570.153.02", 12080, RTX5090))


def test_packaged_rows_keep_source_and_confidence():
    rows = [
        *compat_data.MINOR_VERSION_FLOORS,
        *compat_data.TOOLKIT_DRIVERS,
        *compat_data.GPUS,
        *compat_data.TORCH_RELEASES,
        *compat_data.CAVEATS.values(),
        compat_data.WINDOWS_ARCH_LISTS,
    ]
    rows += [v for r in compat_data.TORCH_RELEASES for v in r["variants"]]
    rows += [cell for r in compat_data.TORCH_RELEASES for cell in r["pypi_default"].values()]
    for row in rows:
        assert row["source"] and row["confidence"] in ("high", "medium", "low"), row


def test_the_committed_tables_are_what_the_generator_makes_from_the_committed_yaml(tmp_path) -> None:
    """data.py is generated from cuda_compat.yml: a row edited in one and not regenerated fails here."""
    spec = importlib.util.spec_from_file_location("gen_compat_data", REPO / "scripts" / "gen_compat_data.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.DEFAULT_YAML == COMPAT_YAML and generator.DEFAULT_OUT == COMPAT_DATA  # what it reads by default
    out = tmp_path / "data.py"
    assert generator.main([str(COMPAT_YAML), str(out)]) == 0
    assert out.read_bytes() == COMPAT_DATA.read_bytes(), "stale: run `python scripts/gen_compat_data.py`"
    assert "from bootstrap/compat/cuda_compat.yml" in COMPAT_DATA.read_text(encoding="utf-8").split('"""')[1]


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES


@pytest.mark.parametrize(
    ("value", "indices", "devices"),
    [
        (None, list(range(8)), 8),  # unset: every GPU NVML lists
        ("2,3", [2, 3], 2),
        (" 3 , 1", [3, 1], 2),  # CUDA's order, not NVML's
        ("1gpu2,+2", [1, 2], 2),  # each index read as strtoul reads it
        ("GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b05", [5], 1),
        ("GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b07,GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b00", [7, 0], 2),
        ("GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b0", [], 0),  # a prefix of all eight names none
        ("GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b06,1", [6], 1),  # the first entry decides the kind
        ("1,GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b06", [1], 1),
        ("gpu-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b06", [], 0),
        ("0,9,1", [0], 1),  # the first entry naming no GPU ends the list
        ("", [], 0),
        ("-1", [], 0),
        ("1,-1,2", [1], 1),
        ("NoDevFiles", [], 0),
        ("\u00b2", [], 0),
        ("\u0663,\u0664", [], 0),  # digits, but not ones strtoul reads
        ("0,1,0", [], 0),  # a repeat empties the list
        ("MIG-4f3e2d1c-aaaa-bbbb-cccc-000000000001,MIG-4f3e2d1c-aaaa-bbbb-cccc-000000000002", [], 1),  # one per process
        ("MIG-", [], 0),
    ],
)
def test_cuda_visible_devices_as_cuda_reads_it(value, indices, devices) -> None:
    from bootstrap.compat.probe import probe_gpus
    from bootstrap.compat.visible import visible_gpus
    from tests.fixtures.fakes import FakeNvml, missing_binary_runner

    gpus = probe_gpus(nvml=FakeNvml.load("h200x8-580.95.05.json"), runner=missing_binary_runner).gpus
    visible = visible_gpus(gpus, value)
    assert [g.index for g in visible.gpus] == indices and visible.devices == devices
    assert visible.note == ("" if value is None else f"CUDA_VISIBLE_DEVICES={value!r}")


def test_a_long_cuda_visible_devices_is_abridged_in_the_notes() -> None:
    from bootstrap.compat.visible import visible_gpus

    visible = visible_gpus((), "0," * 60_000)
    assert visible.note == f"CUDA_VISIBLE_DEVICES={'0,' * 50!r}... (120000 characters)"
