"""Unusual hosts: a driver without GPUs, a container without --gpus, WSL2, Jetson (generated cases)."""

from __future__ import annotations

import itertools

import pytest

from bootstrap.checks.nvidia import nvidia_checks
from bootstrap.compat.facts import DriverFacts, HostFacts
from bootstrap.report import Status

DRIVERS = ("470.82.01", "535.183.01", "570.124.06", "580.95.05", "590.44.01")
WHY_NONE = ("", "NVML: GPU 0: GPU is lost (fell off the bus; see `dmesg`)", "NVML: GPU 0: not found")


@pytest.mark.parametrize(
    ("driver", "source", "reason"), list(itertools.product(DRIVERS, ("nvml", "nvidia-smi"), WHY_NONE))
)
def test_a_driver_that_lists_no_gpu_is_a_warning_with_the_way_to_find_out_why(driver, source, reason) -> None:
    facts = DriverFacts(driver_version=driver, cuda_driver_version=None, source=source, reason=reason)
    for host in (None, HostFacts(), HostFacts(cuda_visible_devices="0")):
        (check,) = nvidia_checks(facts, host)
        assert check.id == "nvidia.driver" and check.status is Status.WARN
        assert "0 GPU(s)" in check.observed and reason in check.detail
        assert all(word in check.remedy for word in ("nvidia-smi", "dmesg | grep -i nvrm", "newer driver"))


# --------------------------------------------------------------------------- the probes, on fake roots


def make_root(tmp_path, files=(), dirs=()):
    for name in dirs:
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
    for name, text in dict(files).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return str(tmp_path)


def probe(root, environ=None, nvml_error=12):
    from bootstrap.compat.probe import probe_gpus
    from tests.fixtures.fakes import FakeNvml, missing_binary_runner

    return probe_gpus(
        nvml=FakeNvml({}, init_error=nvml_error), runner=missing_binary_runner, root=root, environ=environ or {}
    )


WSL_SIGNS = [
    ({"proc/sys/kernel/osrelease": "5.15.153.1-microsoft-standard-WSL2\n"}, {}),
    ({"proc/sys/kernel/osrelease": "6.6.36.3-Microsoft-standard-WSL2\n"}, {}),
    ({"proc/sys/kernel/osrelease": "6.8.0-45-generic\n"}, {"WSL_DISTRO_NAME": "Ubuntu-24.04"}),
    ({"usr/lib/wsl/lib/libcuda.so": ""}, {}),
]


@pytest.mark.parametrize(("files", "environ"), WSL_SIGNS)
def test_under_wsl_the_driver_is_read_in_the_windows_series(tmp_path, files, environ) -> None:
    from bootstrap.compat.probe import probe_gpus
    from tests.fixtures.fakes import FakeNvml, missing_binary_runner

    recorded = {
        "nvmlSystemGetDriverVersion": "528.24",
        "nvmlSystemGetCudaDriverVersion_v2": 12000,
        "nvmlDeviceGetCount": 1,
        "devices": [{"nvmlDeviceGetName": "NVIDIA GeForce RTX 3090", "nvmlDeviceGetCudaComputeCapability": [8, 6]}],
    }
    facts = probe_gpus(
        nvml=FakeNvml(recorded), runner=missing_binary_runner, root=make_root(tmp_path, files), environ=environ
    )
    assert facts.os == "windows" and facts.wsl and facts.os_label == "windows, WSL2"


def test_a_linux_host_is_not_taken_for_wsl(tmp_path) -> None:
    root = make_root(tmp_path, {"proc/sys/kernel/osrelease": "6.8.0-45-generic\n"})
    facts = probe(root)
    assert facts.os == "linux" and not facts.wsl and not facts.jetson and facts.gpu_signs == ()


def test_a_jetson_is_known_by_its_l4t_release(tmp_path) -> None:
    line = "# R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic, EABI: aarch64, DATE: Fri Sep 13 2024\n"
    facts = probe(make_root(tmp_path, {"etc/nv_tegra_release": line}))
    assert facts.jetson.startswith("R36 (release), REVISION: 4.0")
    (check,) = nvidia_checks(facts, HostFacts())
    assert check.status is Status.SKIP and "Jetson" in check.observed and "JetPack" in check.detail


GPU_SIGN_FILES = [
    ({"proc/driver/nvidia/gpus/0000:17:00.0/information": "Model: NVIDIA H100\n"}, ["/proc/driver/nvidia/gpus/"]),
    (
        {
            "proc/driver/nvidia/gpus/0000:17:00.0/information": "",
            "proc/driver/nvidia/gpus/0000:65:00.0/information": "",
            "dev/nvidia0": "",
            "dev/nvidia1": "",
            "dev/nvidiactl": "",
        },
        ["0000:65:00.0", "/dev/nvidia1"],
    ),
    ({"dev/nvidia0": "", "dev/nvidia-uvm": ""}, ["/dev/nvidia0"]),
]
CONTAINERS = [(), ("/.dockerenv",), ("cgroup:kubepods", "env:KUBERNETES_SERVICE_HOST"), ("/run/.containerenv",)]


@pytest.mark.parametrize(("files", "shown"), GPU_SIGN_FILES)
@pytest.mark.parametrize("hints", CONTAINERS)
def test_gpus_the_kernel_shows_without_a_driver_fail_with_the_way_in(tmp_path, files, shown, hints) -> None:
    facts = probe(make_root(tmp_path, files))
    assert all(any(s in sign for sign in facts.gpu_signs) for s in shown)
    assert "/dev/nvidiactl" not in facts.gpu_signs and "/dev/nvidia-uvm" not in facts.gpu_signs
    (check,) = nvidia_checks(facts, HostFacts(container_hints=hints))
    assert check.status is Status.FAIL and "kernel shows NVIDIA GPUs" in check.observed
    if hints:
        assert "`docker run --gpus all" in check.remedy and "NVIDIA Container Toolkit" in check.remedy
    else:
        assert "libnvidia-ml.so.1" in check.remedy and "/proc/driver/nvidia/version" in check.remedy
    again = DriverFacts.from_dict(facts.to_dict())
    assert again == facts


def test_no_signs_stays_cpu_mode_and_old_files_read_back_the_same(tmp_path) -> None:
    facts = probe(make_root(tmp_path))
    (check,) = nvidia_checks(facts, HostFacts(container_hints=("/.dockerenv",)))
    assert check.status is Status.SKIP and check.observed == "no NVIDIA driver (CPU mode)"
    assert set(facts.to_dict()) == {"os", "driver_version", "cuda_driver_version", "gpus", "source", "reason", "peers"}


# --------------------------------------------------------------------------- the rules on those facts

WIN_DRIVERS = [
    ("527.41", 12000),
    ("528.24", 12000),
    ("528.33", 12000),
    ("531.14", 12010),
    ("546.12", 12030),
    ("560.94", 12060),
    ("572.61", 12080),
    ("576.02", 12090),
    ("581.15", 13000),
]
TORCHES = ["2.4.1", "2.5.1", "2.7.1", "2.8.0", "2.10.0"]


def wsl_host(driver, cuda, jetson=""):
    from bootstrap.compat.facts import GpuFacts

    return DriverFacts(
        os="windows",
        wsl="/proc/sys/kernel/osrelease: 5.15.153.1-microsoft-standard-WSL2",
        driver_version=driver,
        cuda_driver_version=cuda,
        source="test",
        gpus=(GpuFacts(index=0, name="NVIDIA GeForce RTX 3090", compute_capability=(8, 6)),),
    )


def test_a_windows_528_24_driver_under_wsl_fails_against_the_windows_floor() -> None:
    from bootstrap.compat.rules import check_driver
    from bootstrap.compat.target import torch_target_from_lock_entry

    check = check_driver(wsl_host("528.24", 12000), torch_target_from_lock_entry("2.8.0", "linux-64"))
    assert check.status is Status.FAIL and ">= 528.33" in check.remedy and "(windows, WSL2)" in check.observed


@pytest.mark.parametrize(("driver", "cuda"), WIN_DRIVERS)
def test_under_wsl_the_driver_gets_the_windows_verdict_on_linux_wheels(driver, cuda) -> None:
    from dataclasses import replace

    from bootstrap.compat.rules import check_driver
    from bootstrap.compat.target import torch_target_from_lock_entry

    for version in TORCHES:
        target = torch_target_from_lock_entry(version, "linux-64")
        wsl, native = (
            check_driver(wsl_host(driver, cuda), target),
            check_driver(replace(wsl_host(driver, cuda), wsl=""), target),
        )
        windows_host = "upgrade the Windows host's NVIDIA driver (WSL2 uses it; install no Linux driver inside WSL) to"
        assert wsl.status is native.status, (driver, version)
        assert wsl.remedy == native.remedy.replace("upgrade the NVIDIA driver to", windows_host), (driver, version)
        assert "linux driver" not in wsl.remedy + wsl.detail


JETSONS = [("R35 (release), REVISION: 5.0", "35.5"), ("R36 (release), REVISION: 4.0", "36.4")]


@pytest.mark.parametrize(("release", "_"), JETSONS)
@pytest.mark.parametrize(
    ("driver", "cuda", "wheel", "status"),
    [
        ("540.3.0", 12020, "12.8", Status.WARN),
        ("540.4.0", 12060, "13.0", Status.FAIL),
        ("35.5.0", 11040, "12.6", Status.FAIL),
        ("540.4.0", 12060, "12.6", Status.OK),
        (None, 12060, "13.0", Status.FAIL),
    ],
)
def test_a_jetson_driver_is_not_upgraded_on_its_own(release, _, driver, cuda, wheel, status) -> None:
    from bootstrap.compat.facts import GpuFacts
    from bootstrap.compat.rules import evaluate
    from bootstrap.compat.target import TorchTarget

    facts = DriverFacts(
        driver_version=driver,
        cuda_driver_version=cuda,
        jetson=release,
        source="test",
        gpus=(GpuFacts(index=0, name="Orin", compute_capability=(8, 7)),),
    )
    target = TorchTarget(
        version="2.8.0",
        cuda=wheel,
        arch_list=("sm_87", "compute_87"),
        platform="linux_aarch64",
        source="constructed Jetson build",
    )
    checks = evaluate(facts, target)
    remedies = " ".join(c.remedy for c in checks if c.status in (Status.WARN, Status.FAIL))
    assert "upgrade the NVIDIA driver" not in remedies
    driver_check = next(c for c in checks if c.id == "cuda.driver")
    assert driver_check.status is status
    if status is not Status.OK:
        assert "JetPack" in driver_check.remedy and release in driver_check.remedy
