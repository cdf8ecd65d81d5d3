"""A container's cgroup limits, read from fake /proc/self/cgroup and /sys/fs/cgroup trees as cgroup v2 and
v1 lay them out (Kubernetes and Docker, with and without a cgroup namespace): the CPU quota narrows the
usable CPUs, the memory limit the memory figures, and `doctor`'s host checks say which limit they read.
Generated trees check the reader against the tightest limit placed in them."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from bootstrap.compat import cgroup
from bootstrap.compat.facts import HostFacts
from bootstrap.compat.host import (
    LoaderNeeds,
    collect_host_facts,
    cpus_check,
    memory_check,
    probe_usable_cpus,
    probe_usable_memory,
)
from bootstrap.compat.visible import Visible

GIB = 1 << 30
POD = "kubepods.slice/kubepods-burstable.slice/pod1234.slice/cri-containerd-abcd.scope"
AFFINITY = len(os.sched_getaffinity(0))


def tree(root: Path, membership: str, files: dict[str, str]) -> str:
    """A fake root: /proc/self/cgroup holding `membership`, and `files` (relative to /sys/fs/cgroup)."""
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/cgroup").write_text(membership)
    (root / "proc/meminfo").write_text("MemTotal: 65536000 kB\nMemAvailable: 32768000 kB\n")
    for relative, text in files.items():
        path = root / cgroup.MOUNT / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


def v2(root: Path, files: dict[str, str], path: str = POD) -> str:
    return tree(root, f"0::/{path}\n", {"cgroup.controllers": "cpu memory\n", **files})


def test_a_v2_cpu_quota_in_the_pod_counts_as_its_cpus_rounded_up(tmp_path: Path) -> None:
    root = v2(tmp_path, {f"{POD}/cpu.max": "50000 100000\n", "kubepods.slice/cpu.max": "max 100000\n"})
    assert cgroup.cpu_quota(root) == 0.5
    assert probe_usable_cpus(root) == (1, "")


def test_the_tightest_quota_above_the_process_wins(tmp_path: Path) -> None:
    files = {f"{POD}/cpu.max": "800000 100000\n", "kubepods.slice/kubepods-burstable.slice/cpu.max": "150000 100000"}
    assert cgroup.cpu_quota(v2(tmp_path, files)) == 1.5


@pytest.mark.parametrize("text", ["max 100000\n", "", "garbage", "0 100000", "100000 0", "-1 100000"])
def test_no_quota_or_an_unreadable_one_is_none(tmp_path: Path, text: str) -> None:
    root = v2(tmp_path, {f"{POD}/cpu.max": text})
    assert cgroup.cpu_quota(root) is None
    assert probe_usable_cpus(root) == (AFFINITY, "")


def test_v1_docker_without_a_cgroup_namespace_reads_the_mount_root(tmp_path: Path) -> None:
    """Docker on cgroup v1 names the container's cgroup in /proc/self/cgroup, but mounts that cgroup itself."""
    membership = "4:cpu,cpuacct:/docker/0123abcd\n9:memory:/docker/0123abcd\n1:name=systemd:/docker/0123abcd\n"
    files = {
        "cpu,cpuacct/cpu.cfs_quota_us": "150000\n",
        "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "memory/memory.limit_in_bytes": f"{4 * GIB}\n",
        "memory/memory.usage_in_bytes": f"{GIB}\n",
        "memory/memory.stat": f"cache {GIB}\ntotal_inactive_file {GIB // 2}\n",
    }
    root = tree(tmp_path, membership, files)
    assert cgroup.cpu_quota(root) == 1.5
    assert cgroup.memory_limit(root) == (4 * GIB, 4 * GIB - GIB // 2)


def test_v1_without_a_limit_is_none(tmp_path: Path) -> None:
    files = {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}
    files["memory/memory.limit_in_bytes"] = "9223372036854771712\n"  # v1's "no limit"
    root = tree(tmp_path, "1:cpu:/\n4:memory:/process_api/99c1\n", files)
    assert cgroup.cpu_quota(root) is None and cgroup.memory_limit(root) is None


def test_a_v2_memory_limit_caps_the_memory_figures(tmp_path: Path) -> None:
    files = {
        f"{POD}/memory.max": f"{8 * GIB}\n",
        f"{POD}/memory.current": f"{3 * GIB}\n",
        f"{POD}/memory.stat": f"anon {2 * GIB}\ninactive_file {GIB}\n",
    }
    root = v2(tmp_path, files)
    assert cgroup.memory_limit(root) == (8 * GIB, 6 * GIB)
    assert probe_usable_memory(root) == ((8192, 6144), "")  # meminfo: 64,000 MiB, 32,000 available


def test_no_cgroup_file_is_no_limit(tmp_path: Path) -> None:
    root = str(tmp_path)  # no /proc/self/cgroup at all: not Linux, or /proc not mounted
    assert cgroup.cpu_quota(root) is None and cgroup.memory_limit(root) is None


def test_doctor_says_which_limit_it_read(tmp_path: Path) -> None:
    files = {f"{POD}/cpu.max": "100000 100000\n", f"{POD}/memory.max": f"{2 * GIB}\n", f"{POD}/memory.current": "0"}
    host = collect_host_facts(root=v2(tmp_path, files), disk_path=str(tmp_path), environ={})
    assert (host.cpus_usable, host.cpus_quota, host.memory_limit_mib) == (1, 1.0, 2048)
    assert (host.memory_total_mib, host.memory_available_mib) == (2048, 2048)
    assert HostFacts.from_dict(host.to_dict()) == host
    none = Visible(gpus=(), devices=0)
    assert "1 of" in cpus_check(host, none, LoaderNeeds()).observed
    assert "(a CPU quota of 1)" in cpus_check(host, none, LoaderNeeds()).observed
    assert memory_check(host, none, LoaderNeeds()).observed == "2048 MiB available of 2048 MiB (cgroup memory limit)"


def test_facts_without_a_limit_write_no_such_field() -> None:
    """Facts files recorded before these fields read and write back the same."""
    written = HostFacts(cpus_usable=4).to_dict()
    assert "cpus_quota" not in written and "memory_limit_mib" not in written


@pytest.mark.parametrize("seed", range(40))
def test_a_generated_tree_reads_as_its_tightest_valid_limit(tmp_path: Path, seed: int) -> None:
    """Random depth, random limits at random levels (some garbage, some 'max'), v1 or v2."""
    rng = random.Random(seed)
    depth, version = rng.randint(0, 4), rng.choice((1, 2))
    levels = [f"l{i}" for i in range(depth)]
    path = "/".join(levels)
    files: dict[str, str] = {}
    quotas, limits = [], []
    for level in range(depth + 1):
        here = "/".join(levels[:level])
        prefix = ("" if version == 2 else "cpu/") + (here + "/" if here else "")
        kind = rng.choice(("none", "max", "garbage", "quota"))
        if kind == "quota":
            quota, period = rng.randint(1, 64) * 10000, rng.choice((50000, 100000))
            quotas.append(quota / period)
            text = (f"{quota} {period}", f"{quota}")[version == 1]
        else:
            text = {"none": None, "max": ("max 100000", "-1")[version == 1], "garbage": "12ab"}[kind]
        if text is not None:
            files[prefix + ("cpu.max" if version == 2 else "cpu.cfs_quota_us")] = text
            if version == 1:
                files[prefix + "cpu.cfs_period_us"] = str(period if kind == "quota" else 100000)
        mem_prefix = ("" if version == 2 else "memory/") + (here + "/" if here else "")
        if rng.random() < 0.4:
            limit = rng.randint(1, 64) * GIB
            limits.append(limit)
            files[mem_prefix + ("memory.max" if version == 2 else "memory.limit_in_bytes")] = str(limit)
    if version == 2:
        root = v2(tmp_path, files, path)
    else:
        root = tree(tmp_path, f"3:cpu:/{path}\n5:memory:/{path}\n", {"cpu/tasks": "", "memory/tasks": "", **files})
    assert cgroup.cpu_quota(root) == (min(quotas) if quotas else None), files
    found = cgroup.memory_limit(root)
    assert (found[0] if found else None) == (min(limits) if limits else None), files
