"""`doctor --fleet DIR` over a cluster's facts files, generated here from the recorded ones in
tests/data/verify/ (each changed to another host's driver and GPUs): the variant each kind of host
gets, the newest release every host runs, what blocks each locked variant, and the files left out.

The expected answers are written out below, and the fleet-wide release is also worked out here from
the packaged tables by a rule of this test's own (driver and kernel images only), not by the code
under test.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Optional

import pytest

from bootstrap.cli import main
from bootstrap.compat import data
from tests.fixtures import DATA
from tests.fixtures.variants import variant_project

RECORDED = DATA / "verify"
# cu128: the default, every platform of the spec; cu130: linux-64 only, as the committed py310 declares
VARIANTS = [("cu128", "2.10.0+cu128", ()), ("cu130", "2.14.1+cu130", ("linux-64",))]

V100 = ("Tesla V100-SXM2-32GB", (7, 0))
T4 = ("Tesla T4", (7, 5))
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0))
H100 = ("NVIDIA H100 80GB HBM3", (9, 0))
L4 = ("NVIDIA L4", (8, 9))
RTX4090 = ("NVIDIA GeForce RTX 4090", (8, 9))
RTX5090 = ("NVIDIA GeForce RTX 5090", (12, 0))
R470 = ("470.82.01", 11040)
R535 = ("535.183.01", 12020)
R550 = ("550.54.15", 12040)
R560 = ("560.35.05", 12060)
R570 = ("570.124.06", 12080)
R575 = ("575.57.08", 12090)
R580 = ("580.95.05", 13000)

# hostname -> (GPUs, how many, driver); the x86 Linux hosts, built from the recorded HGX H200 node
LINUX = {
    "v100-r470-01": (V100, 4, R470),
    "v100-r470-02": (V100, 4, R470),
    "t4-r470-01": (T4, 1, R470),
    "t4-r535-01": (T4, 1, R535),
    "t4-r535-02": (T4, 1, R535),
    "a100-r535-01": (A100, 8, R535),
    "a100-r535-02": (A100, 8, R535),
    "a100-r535-03": (A100, 8, R535),
    "a100-r550-01": (A100, 8, R550),
    "h100-r570-01": (H100, 8, R570),
    "h100-r570-02": (H100, 8, R570),
    "h100-r580-01": (H100, 8, R580),
    "h100-r580-02": (H100, 8, R580),
    "h100-r580-03": (H100, 8, R580),
    "h100-r580-04": (H100, 8, R580),
    "l4-r560-01": (L4, 2, R560),
    "rtx4090-r575-01": (RTX4090, 2, R575),
    "rtx5090-r580-01": (RTX5090, 1, R580),
    "v100-r580-01": (V100, 8, R580),
}
OTHERS = ("mig-a100-r580-01", "cpu-01", "wsl-01", "jetson-orin-01", "jetson-r35-01")

# The verdicts, worked out from the rules by hand: the variant each host gets and its status.
PICKED = {
    **{h: (None, "fail") for h in ("v100-r470-01", "v100-r470-02", "t4-r470-01")},  # CUDA 12 needs >= 525.60.13
    **{h: ("cu128", "warn") for h in ("t4-r535-01", "t4-r535-02", "a100-r535-01", "a100-r535-02", "a100-r535-03")},
    "a100-r550-01": ("cu128", "warn"),  # CUDA 12.8 on a 12.4 driver: minor-version compatibility
    "l4-r560-01": ("cu128", "warn"),
    "h100-r570-01": ("cu128", "ok"),
    "h100-r570-02": ("cu128", "ok"),
    "rtx4090-r575-01": ("cu128", "ok"),
    "v100-r580-01": ("cu128", "ok"),  # cu130 has no sm_70
    **{f"h100-r580-0{i}": ("cu130", "ok") for i in (2, 3, 4)},  # h100-r580-01 is recorded twice: left out
    "rtx5090-r580-01": ("cu130", "ok"),
    "mig-a100-r580-01": ("cu130", "ok"),
    "cpu-01": ("cu128", "ok"),  # no GPU and no CPU variant: the default runs on the CPU
    "wsl-01": ("cu128", "ok"),  # Windows 572.61 fully supports CUDA 12.8, not 13.0
    "jetson-orin-01": (None, "fail"),  # nothing is locked for linux-aarch64
    "jetson-r35-01": (None, "fail"),
}
# Hosts each locked variant does not run on, and what each needs.
BLOCKED = {
    "cu130": {
        **{
            h: "no kernel for the Tesla V100-SXM2-32GB (CC 7.0) in torch 2.14.1+cu130: no driver helps"
            for h in ("v100-r470-01", "v100-r470-02", "v100-r580-01")
        },
        **{h: "driver >= 580.65.06 (has 470.82.01)" for h in ("t4-r470-01",)},
        **{
            h: "driver >= 580.65.06 (has 535.183.01)"
            for h in ("t4-r535-01", "t4-r535-02", "a100-r535-01", "a100-r535-02", "a100-r535-03")
        },
        "a100-r550-01": "driver >= 580.65.06 (has 550.54.15)",
        "h100-r570-01": "driver >= 580.65.06 (has 570.124.06)",
        "h100-r570-02": "driver >= 580.65.06 (has 570.124.06)",
        "l4-r560-01": "driver >= 580.65.06 (has 560.35.05)",
        "rtx4090-r575-01": "driver >= 580.65.06 (has 575.57.08)",
        "wsl-01": "Windows host's driver >= 580 (has 572.61)",
        "jetson-orin-01": "not locked for linux-aarch64 (the variant's platforms: linux-64)",
        "jetson-r35-01": "not locked for linux-aarch64 (the variant's platforms: linux-64)",
    },
    "cu128": {
        **{
            h: "driver >= 525.60.13 (has 470.82.01; >= 570.26 for full CUDA 12.8 support)"
            for h in ("v100-r470-01", "v100-r470-02", "t4-r470-01")
        },
        **{
            h: "not locked for linux-aarch64 (the variant's platforms: linux-64, osx-arm64, win-64)"
            for h in ("jetson-orin-01", "jetson-r35-01")
        },
    },
}
FLEET_RELEASE = "2.7"  # the R470 hosts run CUDA 11.8 builds at most, and cu118's last release is 2.7


def recorded(name: str) -> dict[str, Any]:
    return json.loads((RECORDED / name).read_text())


def gpu_list(gpu: tuple[str, tuple[int, int]], count: int, mig: bool = False) -> list[dict[str, Any]]:
    base = recorded("h200x8-580.95.05.facts.json")["nvidia"]["gpus"][0]
    out = []
    for index in range(count):
        one = copy.deepcopy(base)
        one.update(index=index, name=gpu[0], compute_capability=list(gpu[1]), uuid=f"GPU-0000000{index}-fleet")
        if mig:
            one["mig_uuids"] = [f"MIG-0000000{index}-slice-{n}" for n in range(7)]
        out.append(one)
    return out


def linux_host(hostname: str, gpu: tuple[str, tuple[int, int]], count: int, driver: tuple[str, int]) -> dict:
    """The recorded HGX H200 node, turned into another host of the fleet."""
    facts = recorded("h200x8-580.95.05.facts.json")
    facts["hostname"] = hostname
    facts["nvidia"].update(driver_version=driver[0], cuda_driver_version=driver[1], gpus=gpu_list(gpu, count), peers=[])
    return facts


def other_hosts() -> dict[str, dict]:
    mig = linux_host("mig-a100-r580-01", A100, 1, R580)
    mig["nvidia"]["gpus"] = gpu_list(A100, 1, mig=True)
    mig["host"]["cuda_visible_devices"] = "MIG-00000000-slice-3"
    cpu = recorded("constructed-docker-without-gpus.facts.json")  # a CPU node: no GPU, no driver, no sign of one
    cpu["nvidia"].update(gpu_signs=[], reason="no NVIDIA driver found (NVML: NVML library not found)")
    del cpu["nvidia"]["gpu_signs"]
    cpu["hostname"] = "cpu-01"
    wsl = recorded("constructed-wsl2-528.24.facts.json")
    wsl["nvidia"].update(driver_version="572.61", cuda_driver_version=12080)
    wsl["hostname"] = "wsl-01"
    orin = recorded("constructed-jetson-orin-r36.facts.json")
    orin["hostname"] = "jetson-orin-01"
    old = recorded("constructed-jetson-r35-cpu-torch.facts.json")
    old["hostname"] = "jetson-r35-01"
    return {"mig-a100-r580-01": mig, "cpu-01": cpu, "wsl-01": wsl, "jetson-orin-01": orin, "jetson-r35-01": old}


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory) -> Path:
    """24 hosts' facts files as `srun ... doctor --save-facts facts/%h.json` leaves them, one host recorded
    twice, a truncated file, a file of another format, and a file that is not JSON by name."""
    root = tmp_path_factory.mktemp("fleet") / "facts"
    root.mkdir()
    hosts = {name: linux_host(name, *spec) for name, spec in LINUX.items()}
    hosts.update(other_hosts())
    assert len(hosts) == 24
    for name, facts in hosts.items():
        (root / f"{name}.json").write_text(json.dumps(facts, indent=2))
    (root / "h100-r580-01.old.json").write_text(json.dumps(hosts["h100-r580-01"]))  # the same host again
    (root / "truncated.json").write_text(json.dumps(hosts["a100-r535-01"])[:500])
    (root / "schema.json").write_text(json.dumps({**hosts["cpu-01"], "format": "bootstrap.checks"}))
    (root / "notes.txt").write_text("not a facts file, and not named like one\n")
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return variant_project(tmp_path_factory.mktemp("fleet-proj") / "proj", VARIANTS).root


def run_fleet(capsys, project: Path, directory: Path, *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["doctor", "--fleet", str(directory), "--root", str(project), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_each_host_gets_its_variant_and_the_fleet_its_release(capsys, project: Path, fleet_dir: Path) -> None:
    code, out, err = run_fleet(capsys, project, fleet_dir, "--json")
    assert code == 1  # the R470 hosts and the Jetsons get no locked variant that runs
    body = json.loads(out)
    assert (body["format"], body["version"], body["env"], body["hosts"]) == ("bootstrap.fleet", 1, "py310", 23)
    got = {host: (g["variant"], g["status"]) for g in body["groups"] for host in g["hosts"]}
    assert got == PICKED
    assert body["release"] == FLEET_RELEASE == independent_fleet_release()
    assert body["beyond"] == ["jetson-orin-01", "jetson-r35-01"]
    assert sorted(body["unserved"]) == sorted(h for h, (v, _) in PICKED.items() if v is None)
    reach = {v["name"]: v for v in body["variants"]}
    assert [v["name"] for v in body["variants"]] == ["cu130", "cu128"]  # the newest torch first
    for name, blocked in BLOCKED.items():
        assert {b["host"]: b["need"] for b in reach[name]["blocked"]} == blocked, name
        assert sorted(reach[name]["runs_on"]) == sorted(set(PICKED) - set(blocked))
    # hosts of one kind form one group: the three A100s on R535 are one row
    a100 = next(g for g in body["groups"] if "a100-r535-01" in g["hosts"])
    assert a100["hosts"] == ["a100-r535-01", "a100-r535-02", "a100-r535-03"]
    assert a100["kind"] == "linux_x86_64; driver 535.183.01 (CUDA 12.2); 8x NVIDIA A100-SXM4-80GB (CC 8.0)"
    assert (a100["newest_release"], a100["newest_build"]) == ("2.15", "cu126")
    mig = next(g for g in body["groups"] if g["hosts"] == ["mig-a100-r580-01"])
    assert mig["kind"].endswith("1x NVIDIA A100-SXM4-80GB (CC 8.0, MIG)")
    for group in body["groups"]:
        newest = independent_newest(group["hosts"][0])
        assert group["newest_release"] == newest, group["hosts"]


def test_bad_and_duplicate_files_are_named_once_each_and_left_out(capsys, project: Path, fleet_dir: Path) -> None:
    code, out, err = run_fleet(capsys, project, fleet_dir, "--json")
    lines = err.splitlines()
    assert len(lines) == 4, err
    assert all(line.startswith("doctor --fleet: left out: ") for line in lines)
    named = sorted(line.split("left out: ", 1)[1].split(":", 1)[0] for line in lines)
    assert named == sorted(
        str(fleet_dir / n) for n in ("h100-r580-01.json", "h100-r580-01.old.json", "schema.json", "truncated.json")
    )
    assert "host h100-r580-01 is also recorded in h100-r580-01.old.json: left out, not merged" in err
    assert "not a bootstrap.facts v1 file" in err and "not a readable JSON facts file" in err
    left = json.loads(out)["left_out"]
    assert sorted(Path(f["file"]).name for f in left) == [
        "h100-r580-01.json",
        "h100-r580-01.old.json",
        "schema.json",
        "truncated.json",
    ]


def test_the_table_for_people(capsys, project: Path, fleet_dir: Path) -> None:
    code, out, _ = run_fleet(capsys, project, fleet_dir)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"fleet: 23 host(s) from {fleet_dir} (4 file(s) left out); variants of py310"
    assert lines[1].split() == ["HOSTS", "VARIANT", "STATUS", "NEWEST", "TORCH", "KIND"]
    # the largest kinds first (the A100s on R535 and three H100s on R580), then by what they are
    assert lines[2].split()[:4] == ["3", "cu128", "warn", "2.15"]
    assert lines[3] == "    a100-r535-01, a100-r535-02, a100-r535-03"
    assert (
        "fleet: torch 2.7 is the newest release every host runs; not counted, no release is known to run "
        "there: jetson-orin-01, jetson-r35-01" in lines
    )
    assert "cu130: torch 2.14.1+cu130 (CUDA 13.0) runs on 6 host(s), not on 17:" in lines
    assert "    t4-r470-01: driver >= 580.65.06 (has 470.82.01)" in lines


def test_without_the_old_drivers_the_fleet_moves_on(capsys, project: Path, fleet_dir: Path, tmp_path: Path) -> None:
    for path in fleet_dir.glob("*.json"):
        if "r470" not in path.name and path.name not in ("truncated.json", "schema.json"):
            (tmp_path / path.name).write_bytes(path.read_bytes())
    (tmp_path / "h100-r580-01.old.json").unlink()
    code, out, err = run_fleet(capsys, project, tmp_path, "--json")
    assert err == ""
    body = json.loads(out)
    # every remaining GPU host runs a CUDA 12.6 build of the newest release (legacy, sm_50..sm_90), or
    # cu130 where there is no kernel in cu126 (sm_120)
    assert body["release"] == "2.15" == independent_fleet_release(skip=("r470",))


def test_bad_input(capsys, project: Path, tmp_path: Path) -> None:
    code, out, err = run_fleet(capsys, project, tmp_path)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "no readable facts file (*.json) here" in err and "--save-facts" in err
    code, _, err = run_fleet(capsys, project, tmp_path / "nowhere")
    assert code == 2 and "not a directory" in err
    code, _, err = run_fleet(capsys, project, tmp_path, "--facts", str(RECORDED / "h200x1-580.159.04.facts.json"))
    assert code == 2 and "--facts: does not apply to --fleet" in err


# --------------------------------------------------------------------------- the test's own rule


def _runs(variant: dict, driver: Optional[tuple[str, int]], ccs: list[tuple[int, int]]) -> bool:
    """A CUDA build runs where the driver supports its CUDA (fully, or the same major from the major's
    floor on: Table 2) and every GPU has SASS of its major at a minor up to its own."""
    if driver is None:
        return True
    major, minor = (int(p) for p in variant["cuda"].split("."))
    wheel = major * 1000 + minor * 10
    if wheel > driver[1]:
        floor = next(r for r in data.MINOR_VERSION_FLOORS if r["cuda_major"] == major)["linux"]
        same_major = driver[1] // 1000 == major
        if not same_major or tuple(map(int, driver[0].split("."))) < tuple(map(int, floor.split("."))):
            return False
    sass = [(int(s[3:-1]), int(s[-1])) for s in variant["sass"]]
    return all(any(m == cc[0] and n <= cc[1] for m, n in sass) for cc in ccs)


def independent_newest(host: str) -> Optional[str]:
    """The newest release a host runs, by this test's rule; None on a Jetson (no PyPI build is known to
    run its GPU)."""
    if host.startswith("jetson"):
        return None
    runs = _releases(host)
    return max(runs, key=lambda r: tuple(map(int, r.split(".")))) if runs else None


def _releases(host: str) -> set[str]:
    driver, ccs = _host_driver_ccs(host)
    return {r["release"] for r in data.TORCH_RELEASES if any(_runs(v, driver, ccs) for v in r["variants"])}


def independent_fleet_release(skip: tuple[str, ...] = ()) -> str:
    hosts = [h for h in PICKED if h != "h100-r580-01" and not any(s in h for s in skip)]
    common = None
    for host in hosts:
        if host.startswith("jetson"):
            continue
        common = _releases(host) if common is None else common & _releases(host)
    assert common
    return max(common, key=lambda r: tuple(map(int, r.split("."))))


def _host_driver_ccs(host: str) -> tuple[Optional[tuple[str, int]], list[tuple[int, int]]]:
    if host in LINUX:
        (name, cc), _, driver = LINUX[host]
        return driver, [cc]
    return {
        "mig-a100-r580-01": (R580, [A100[1]]),
        "wsl-01": (("999", 12080), [(8, 6)]),  # on Windows numbers: 572.61 reports CUDA 12.8 in full
        "cpu-01": (None, []),
    }[host]


def test_saved_facts_name_their_host_and_a_bad_name_is_refused(tmp_path: Path, monkeypatch) -> None:
    from bootstrap.compat import probe
    from bootstrap.errors import InputError
    from tests.fixtures.fakes import FakeNvml, missing_binary_runner

    monkeypatch.setattr(probe.socket, "gethostname", lambda: "gpu-node07.cluster")
    saved = tmp_path / "gpu-node07.json"
    probe.save_facts(probe.collect_facts(FakeNvml.load("h200x8-580.95.05.json"), missing_binary_runner), saved)
    assert json.loads(saved.read_text())["hostname"] == "gpu-node07.cluster"
    assert probe.load_facts(saved).hostname == "gpu-node07.cluster"
    monkeypatch.setattr(probe.socket, "gethostname", lambda: "bad name")  # not one a facts file takes: not recorded
    assert probe.collect_facts(FakeNvml.load("h200x8-580.95.05.json"), missing_binary_runner).hostname == ""
    raw = json.loads(saved.read_text())
    raw["hostname"] = "node 07"
    saved.write_text(json.dumps(raw))
    with pytest.raises(InputError, match="hostname: 'node 07' is not a host name like 'node07'"):
        probe.load_facts(saved)
