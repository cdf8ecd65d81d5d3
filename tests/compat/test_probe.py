"""Probes fed recorded NVML answers and recorded nvidia-smi output; absence is a reason, never a crash."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sys
from pathlib import Path

import pytest

from bootstrap.compat.facts import DriverFacts, HostFacts
from bootstrap.compat.host import (
    collect_host_facts,
    probe_container_hints,
    probe_glibc,
    probe_macos,
    probe_memory,
    probe_nofile,
    probe_start_method,
    probe_statvfs,
)
from bootstrap.compat.nvml import Nvml
from bootstrap.compat.probe import Facts, collect_facts, parse_nvidia_smi_csv, probe_gpus, probe_torch
from bootstrap.compat.rules import evaluate
from bootstrap.compat.target import torch_target_from_lock_entry
from bootstrap.errors import InputError
from bootstrap.report import Status
from tests.fixtures.fakes import DATA, FakeNvml, fake_runner, fake_torch, missing_binary_runner

SMI_ARGV = ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader,nounits"]


def smi_text(name):
    return (DATA / "nvidia-smi" / name).read_text()


# --------------------------------------------------------------------------- NVML


def test_nvml_h200_host():
    facts = probe_gpus(nvml=FakeNvml.load("h200x8-580.95.05.json"), runner=missing_binary_runner, os_name="linux")
    assert (facts.driver_version, facts.cuda_driver_version, facts.source) == ("580.95.05", 13000, "nvml")
    assert len(facts.gpus) == 8 and [g.index for g in facts.gpus] == list(range(8))
    gpu = facts.gpus[0]
    assert (gpu.name, gpu.compute_capability, gpu.memory_total_mib, gpu.memory_used_mib) == (
        "NVIDIA H200",
        (9, 0),
        143771,
        4,
    )
    assert (gpu.persistence_mode, gpu.ecc_enabled, gpu.remapped_rows_pending, gpu.remapped_rows_failed) == (
        True,
        True,
        False,
        False,
    )
    assert gpu.retired_pages is None and gpu.retired_pages_pending is None
    assert "retired_pages: not supported on this GPU" in gpu.missing
    assert gpu.uuid.startswith("GPU-")


def test_nvml_rtx3090_on_r535():
    facts = probe_gpus(nvml=FakeNvml.load("rtx3090-535.183.01.json"), runner=missing_binary_runner)
    (gpu,) = facts.gpus
    assert (facts.driver_version, facts.cuda_driver_version) == ("535.183.01", 12020)
    assert (gpu.compute_capability, gpu.memory_total_mib, gpu.persistence_mode) == ((8, 6), 24576, False)
    assert gpu.ecc_enabled is None and gpu.remapped_rows_pending is None
    assert "ecc_enabled: not supported on this GPU" in gpu.missing
    checks = {c.id: c for c in evaluate(facts, torch_target_from_lock_entry("2.8.0", "linux-64"))}
    assert checks["cuda.driver"].status is Status.WARN
    assert checks["cuda.arch.gpu0"].status is Status.OK


def test_nvml_initialises_once_and_shuts_down():
    module = FakeNvml.load("rtx3090-535.183.01.json")
    with Nvml(module) as session:
        session.driver_version()
        session.cuda_driver_version()
        session.facts()
    assert module.calls == ["nvmlInit", "nvmlShutdown"]


def test_nvml_v2_missing_libcuda_falls_back_to_v1():
    recorded = json.loads((DATA / "nvml" / "rtx3090-535.183.01.json").read_text())
    recorded["nvmlSystemGetCudaDriverVersion_v2"] = {"error": 12}
    value, reason = Nvml(FakeNvml(recorded)).cuda_driver_version()
    assert value == 12020 and "used v1" in reason


RESERVED = 615 << 20  # what the driver keeps of an idle H200's memory


def h200_with_reserved_memory(v2=None):
    """The H200 recording as a driver answers both memory calls: v1's `used` counts the reserved memory,
    v2 (`nvmlDeviceGetMemoryInfo(handle, nvmlMemory_v2)`) tells it apart; `v2` replaces its answer."""
    recorded = json.loads((DATA / "nvml" / "h200x8-580.95.05.json").read_text())
    for device in recorded["devices"]:
        total, free, used = (device["nvmlDeviceGetMemoryInfo"][k] for k in ("total", "free", "used"))
        device["nvmlDeviceGetMemoryInfo"] = {"total": total, "free": free - RESERVED, "used": used + RESERVED}
        device["nvmlDeviceGetMemoryInfo_v2"] = v2 or {
            "version": 0x02000028,
            "total": total,
            "reserved": RESERVED,
            "free": free - RESERVED,
            "used": used,
        }
    return recorded


def test_nvml_memory_used_leaves_out_what_the_driver_reserves():
    """As nvidia-smi: nvmlDeviceGetMemoryInfo_v2's used, not v1's (which counts the reserved 615 MiB)."""
    gpu = probe_gpus(nvml=FakeNvml(h200_with_reserved_memory()), runner=missing_binary_runner).gpus[0]
    assert (gpu.memory_total_mib, gpu.memory_used_mib) == (143771, 4)
    assert not any(m.startswith("memory") for m in gpu.missing)


def test_nvml_memory_from_v1_where_the_driver_or_pynvml_has_no_v2():
    old_driver = FakeNvml(h200_with_reserved_memory(v2={"error": 13}))  # FUNCTION_NOT_FOUND: before R510
    gpu = probe_gpus(nvml=old_driver, runner=missing_binary_runner).gpus[0]
    assert (gpu.memory_total_mib, gpu.memory_used_mib) == (143771, 4 + 615)

    class OldPynvml(FakeNvml):  # nvidia-ml-py before 11.510: nvmlDeviceGetMemoryInfo(handle) only
        def nvmlDeviceGetMemoryInfo(self, handle):
            return self._device_answer(handle, "nvmlDeviceGetMemoryInfo")

    gpu = probe_gpus(nvml=OldPynvml(h200_with_reserved_memory()), runner=missing_binary_runner).gpus[0]
    assert gpu.memory_used_mib == 4 + 615


def test_nvml_library_missing_is_a_reason_not_a_crash():
    facts = Nvml(FakeNvml({}, init_error=12)).facts()
    assert not facts.has_driver and facts.gpus == ()
    assert "NVML library not found" in facts.reason


def test_driver_not_loaded_reason_names_the_fix():
    facts = Nvml(FakeNvml({}, init_error=9)).facts()
    assert "lsmod | grep nvidia" in facts.reason


def test_pynvml_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    facts = Nvml().facts()
    assert "pip install nvidia-ml-py" in facts.reason


def test_one_broken_gpu_does_not_hide_the_others():
    recorded = json.loads((DATA / "nvml" / "h200x8-580.95.05.json").read_text())
    recorded["devices"][3]["nvmlDeviceGetName"] = {"error": 15}
    facts = Nvml(FakeNvml(recorded)).facts()
    assert len(facts.gpus) == 8 and facts.gpus[3].name == "GPU 3"
    assert any("GPU is lost" in m for m in facts.gpus[3].missing)


# --------------------------------------------------------------------------- nvidia-smi


def test_falls_back_to_nvidia_smi_csv():
    runner = fake_runner([(0, smi_text("h200x8-580.95.05.csv"))])
    facts = probe_gpus(nvml=FakeNvml({}, init_error=12), runner=runner)
    assert runner.calls == [SMI_ARGV]
    assert (facts.source, facts.driver_version, facts.cuda_driver_version) == ("nvidia-smi", "580.95.05", None)
    assert [(g.index, g.compute_capability, g.memory_total_mib) for g in facts.gpus] == [
        (i, (9, 0), 143771) for i in range(8)
    ]
    assert "NVML library not found" in facts.reason
    # Without NVML's CUDA version the rules fall back to the driver-number table.
    checks = {c.id: c for c in evaluate(facts, torch_target_from_lock_entry("2.11.0", "linux-64"))}
    assert checks["cuda.driver"].status is Status.OK
    assert "derived from the linux driver number" in checks["cuda.driver"].observed


@pytest.mark.parametrize(
    "name, expected",
    [
        ("rtx3090-535.183.01.csv", ("535.183.01", [("NVIDIA GeForce RTX 3090", (8, 6), 24576)])),
        (
            "mixed-na-570.133.20.csv",
            ("570.133.20", [("Tesla T4", (7, 5), 15360), ("NVIDIA A100-SXM4-80GB", (8, 0), None)]),
        ),
    ],
)
def test_parse_recorded_csv(name, expected):
    driver, gpus = parse_nvidia_smi_csv(smi_text(name))
    assert (driver, [(g.name, g.compute_capability, g.memory_total_mib) for g in gpus]) == expected


def test_r470_nvidia_smi_without_compute_cap_is_retried():
    runner = fake_runner(
        [(2, smi_text("r470-compute-cap-rejected.txt")), (0, smi_text("k80-470.182.03-no-compute-cap.csv"))]
    )
    facts = probe_gpus(nvml=FakeNvml({}, init_error=12), runner=runner)
    assert runner.calls[1][1] == "--query-gpu=name,driver_version,memory.total"
    assert facts.driver_version == "470.182.03"
    assert [(g.name, g.compute_capability, g.memory_total_mib) for g in facts.gpus] == [("Tesla K80", None, 11441)] * 2
    assert "no compute_cap field" in facts.reason
    arch = {c.id: c for c in evaluate(facts, torch_target_from_lock_entry("2.8.0", "linux-64"))}["cuda.arch.gpu0"]
    assert arch.status is Status.SKIP


def test_nvidia_smi_driver_failure_is_a_reason():
    runner = fake_runner([(9, smi_text("driver-not-loaded.txt"))])
    facts = probe_gpus(nvml=FakeNvml({}, init_error=9), runner=runner)
    assert not facts.has_driver
    assert "couldn't communicate with the NVIDIA driver" in facts.reason


def test_nvidia_smi_that_hangs_is_asked_once():
    """The timeout message names the query (with compute_cap): that is no R470 refusal to retry."""
    from bootstrap.runner import run

    calls = []

    def hanging(argv, timeout=300.0, **_):
        calls.append(argv)
        return run(["sleep", "5"], timeout=0.2)

    facts = probe_gpus(nvml=FakeNvml({}, init_error=12), runner=hanging)
    assert len(calls) == 1 and "no answer after" in facts.reason and not facts.has_driver


def test_nvidia_smi_output_that_is_no_gpu_is_not_taken_for_one():
    facts = probe_gpus(nvml=FakeNvml({}, init_error=12), runner=fake_runner([(0, "hello, world, foo, bar\n")]))
    assert not facts.has_driver and facts.gpus == ()
    assert "nvidia-smi: output not understood: 'hello, world, foo, bar'" in facts.reason


def test_an_nvidia_smi_that_cannot_run_is_a_reason(tmp_path: Path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("echo hi\n")
    smi.chmod(0o644)  # on PATH, not executable
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    facts = probe_gpus(nvml=FakeNvml({}, init_error=12))
    assert not facts.has_driver and "nvidia-smi: nvidia-smi: cannot run it (Permission denied)" in facts.reason


def test_no_nvml_and_no_nvidia_smi_is_no_driver():
    facts = probe_gpus(nvml=FakeNvml({}, init_error=12), runner=missing_binary_runner)
    assert (facts.driver_version, facts.gpus) == (None, ())
    assert facts.reason.startswith("no NVIDIA driver found")
    assert "nvidia-smi: not found on PATH" in facts.reason


@pytest.mark.skipif(
    shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia").exists(),
    reason="this machine has an NVIDIA driver",
)
def test_real_probe_on_a_machine_without_driver():
    facts = probe_gpus()
    assert not facts.has_driver and facts.gpus == ()
    assert "no NVIDIA driver" in facts.reason
    checks = evaluate(facts, torch_target_from_lock_entry("2.8.0", "linux-64"))
    assert {c.id: c.status for c in checks}["cuda.driver"] is Status.SKIP


# --------------------------------------------------------------------------- torch


def test_probe_torch_reads_the_build():
    target, reason = probe_torch(fake_torch())
    assert reason == ""
    assert (target.version, target.variant, target.cuda, target.cudnn, target.nccl) == (
        "2.8.0",
        "cu128",
        "12.8",
        "9.10.2",
        "2.27.3",
    )
    assert target.arch_list[-1] == "sm_120"


def test_probe_torch_treats_an_empty_arch_list_as_unknown():
    target, _ = probe_torch(fake_torch(arch_flags=None, arch_list=[], cudnn=8902))
    assert target.arch_list is None and target.cudnn == "8.9.2"


def test_probe_torch_cpu_and_rocm_builds():
    cpu, _ = probe_torch(fake_torch(version="2.8.0+cpu", cuda=None))
    assert (cpu.cuda, cpu.variant, cpu.arch_list) == (None, "cpu", None)
    rocm, _ = probe_torch(fake_torch(version="2.8.0+rocm6.3", cuda=None, hip="6.3.42131"))
    assert "ROCm" in rocm.unknown


def test_probe_torch_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert probe_torch() == (None, "torch is not installed in this interpreter")


# --------------------------------------------------------------------------- host


def test_probe_memory_reads_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       65536000 kB\nMemFree:         1000000 kB\nMemAvailable:   32768000 kB\n")
    assert probe_memory(str(meminfo)) == ((64000, 32000), "")
    value, reason = probe_memory(str(tmp_path / "absent"))
    assert value is None and "absent" in reason


def test_probe_statvfs_of_a_directory(tmp_path):
    (size, free), reason = probe_statvfs(str(tmp_path))
    assert reason == "" and size >= free > 0
    assert probe_statvfs(str(tmp_path / "nope"))[0] is None


def test_container_hints(tmp_path):
    (tmp_path / ".dockerenv").touch()
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/1/cgroup").write_text("0::/kubepods/besteffort/pod1234/abcd\n")
    assert {"/.dockerenv", "cgroup:kubepods"} <= set(probe_container_hints(str(tmp_path)))
    bare = tmp_path / "bare"
    bare.mkdir()
    assert not [h for h in probe_container_hints(str(bare)) if not h.startswith("env:")]


def test_start_method_probe_does_not_fix_the_method():
    before = multiprocessing.get_start_method(allow_none=True)
    method, explicit = probe_start_method()
    assert method in multiprocessing.get_all_start_methods()
    assert explicit is (before is not None)
    assert multiprocessing.get_start_method(allow_none=True) == before


@pytest.mark.skipif(os.name == "nt", reason="no resource module on Windows")
def test_nofile_limits():
    (soft, hard), reason = probe_nofile()
    assert reason == "" and (hard == -1 or soft <= hard)


def answers(value=None, error=None):
    """A stand-in for os.confstr that answers `value` (or raises `error`) for CS_GNU_LIBC_VERSION."""

    def confstr(name):
        assert name == "CS_GNU_LIBC_VERSION"
        if error is not None:
            raise error
        return value

    return confstr


@pytest.mark.parametrize(
    "confstr, expected",
    [
        (answers("glibc 2.17"), "2.17"),
        (answers("glibc 2.39"), "2.39"),
        (answers(None), None),  # musl: no answer
        (answers(error=OSError(22, "Invalid argument")), None),  # musl: the C library refuses the name
        (answers(error=ValueError("unrecognized configuration name")), None),  # macOS: Python does not know it
        (answers("uClibc 1.0"), None),
    ],
)
def test_probe_glibc(confstr, expected):
    version, reason = probe_glibc(confstr)
    assert version == expected and bool(reason) is (expected is None)


def test_probe_glibc_here():
    version, reason = probe_glibc()
    if sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION"):
        assert version == os.confstr("CS_GNU_LIBC_VERSION").split()[1] and reason == ""
    else:
        assert version is None and reason


def test_probe_macos():
    assert probe_macos(lambda: ("12.7.6", ("", "", ""), "arm64")) == ("12.7.6", "")
    assert probe_macos(lambda: ("", ("", "", ""), "")) == (None, "not macOS")


def test_host_facts_on_a_fake_root(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal: 2048000 kB\nMemAvailable: 1024000 kB\n")
    facts = collect_host_facts(root=str(tmp_path), disk_path=str(tmp_path), environ={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert facts.cuda_visible_devices == "2,3"
    assert collect_host_facts(root=str(tmp_path), environ={}).cuda_visible_devices is None
    assert (facts.memory_total_mib, facts.memory_available_mib) == (2000, 1000)
    assert facts.shm_total_mib is None and any(m.startswith("shm:") for m in facts.missing)
    assert facts.cpus_usable and facts.disk_free_mib


# --------------------------------------------------------------------------- facts files


def test_facts_round_trip_through_json():
    facts = Facts(
        host=HostFacts(
            cpus_usable=8,
            shm_total_mib=64,
            container_hints=("/.dockerenv",),
            cuda_visible_devices="",
            missing=("x: y",),
        ),
        nvidia=probe_gpus(nvml=FakeNvml.load("h200x8-580.95.05.json"), runner=missing_binary_runner),
        torch=torch_target_from_lock_entry("2.8.0", "linux-64"),
        python="3.9.19",
        platform="linux_x86_64",
    )
    again = Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again == facts
    assert evaluate(again.nvidia, again.torch) == evaluate(facts.nvidia, facts.torch)


def test_facts_file_of_another_format_is_an_input_error():
    with pytest.raises(InputError, match="doctor --save-facts"):
        Facts.from_dict({"format": "bootstrap.facts", "version": 99}, where="user.json")


def test_collect_facts_runs_here():
    facts = collect_facts(nvml=FakeNvml({}, init_error=12), runner=missing_binary_runner)
    assert isinstance(facts.nvidia, DriverFacts) and facts.torch is None
    assert json.loads(json.dumps(facts.to_dict()))["format"] == "bootstrap.facts"
