"""A hostile or corrupt `--facts` file: refused in one line (exit 2), or shown harmlessly.

Facts files are shared with support engineers and replayed on their terminals, so what such a
file holds is data for display: no escape sequence or bidi override reaches the terminal, no
URL credentials are echoed, no size makes a row or the run unbounded, and values no machine
reports (a 400-digit CUDA version, an unknown platform, `sm_xx`) are refused naming the field.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bootstrap.checks.doctor import _platform
from bootstrap.cli import main
from bootstrap.compat.facts import COMPAT_KEYS
from bootstrap.compat.probe import Facts, load_facts
from bootstrap.compat.target import TorchTarget
from bootstrap.compat.typed import MAX_ITEMS, MAX_TEXT
from bootstrap.errors import InputError
from tests.fixtures import REPO

BASE = json.loads((REPO / "tests" / "data" / "verify" / "h200x8-580.95.05.facts.json").read_text())
TORCH = TorchTarget(version="2.8.0", cuda="12.8", arch_list=("sm_80", "sm_90"), variant="cu128").to_dict()

CONTROLS = [
    "\x00",
    "\x07",
    "\x08",
    "\t",
    "\n",
    "\r",
    "\x1b",
    "\x1b[31m",
    "\x7f",
    "\x85",
    "\x9b",
    "\u061c",
    "\u200e",
    "\u200f",
    "\u2028",
    "\u2029",
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
]
# The default suite tries the characters most often met (NUL, an escape sequence, a right-to-left override)
# and every fifth of the rest in each field; `make test-slow` tries them all.
COMMON = ("\x00", "\x1b[31m", "\u202e")
SOME_CONTROLS = [
    pytest.param(c, marks=() if c in COMMON or i % 5 == 0 else pytest.mark.slow, id=ascii(c))
    for i, c in enumerate(CONTROLS)
]
# Fields that name or number something: a control character there is refused.
STRICT = [
    ("uuid", ("nvidia", "gpus", 0, "uuid")),
    ("driver", ("nvidia", "driver_version")),
    ("os", ("nvidia", "os")),
    ("platform", ("platform",)),
    ("python", ("python",)),
    ("start_method", ("host", "start_method")),
    ("cvd", ("host", "cuda_visible_devices")),
    ("hostname", ("hostname",)),
]
# Free text from drivers and tools: a control character is shown as its escape.
FREE = [
    ("gpu_name", ("nvidia", "gpus", 0, "name")),
    ("gpu_missing", ("nvidia", "gpus", 0, "missing", 0)),
    ("disk_path", ("host", "disk_path")),
    ("hint", ("host", "container_hints", 0)),
    ("host_missing", ("host", "missing", 0)),
    ("reason", ("nvidia", "reason")),
    ("source", ("nvidia", "source")),
    ("torch_reason", ("torch_reason",)),
]
SECRETS = [
    "https://user:hunter2@example.com/t/SECRETTOKEN/x",
    "https://user:hunter2@example.com/x",
    "https://example.com/t/SECRETTOKEN/conda-forge",
    "see https://bob:hunter2@host/t/SECRETTOKEN/cf now",
    "s3+https://key:hunter2@bucket.example/t/SECRETTOKEN",
]
# The default suite shows each free-text field a URL with both a password and a token, in and out of prose;
# `make test-slow` tries every form.
SOME_SECRETS = [
    pytest.param(s, marks=() if i in (0, 3) else pytest.mark.slow, id=str(i)) for i, s in enumerate(SECRETS)
]


def facts_with(path: tuple[Any, ...], value: Any, raw: Any = None) -> dict:
    raw = copy.deepcopy(BASE if raw is None else raw)
    target = raw
    for key in path[:-1]:
        if isinstance(key, int) and not target:  # an empty list: give it the entry to set
            target.append("")
        target = target[key]
    if isinstance(path[-1], int) and not target:
        target.append("")
    target[path[-1]] = value
    return raw


def dotted(path: tuple[Any, ...]) -> str:
    """('nvidia', 'gpus', 0, 'uuid') -> 'nvidia.gpus[0].uuid', as the errors name a field."""
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)[1:]


def doctor(tmp_path: Path, capsys, raw: dict, *extra: str) -> tuple[int, str, str]:
    file = tmp_path / "hostile.facts.json"
    file.write_text(json.dumps(raw))
    capsys.readouterr()
    code = main(["doctor", "--facts", str(file), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def refused(tmp_path: Path, capsys, raw: dict, field: str) -> str:
    code, out, err = doctor(tmp_path, capsys, raw)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and field in err, err
    assert len(err) < 600, "the bad value is quoted as an excerpt, not whole"
    assert not any(c in err[:-1] for c in CONTROLS if len(c) == 1), repr(err)
    return err


# --------------------------------------------------------------------------- 1: terminal controls


@pytest.mark.parametrize("control", SOME_CONTROLS)
@pytest.mark.parametrize(("name", "path"), STRICT, ids=[n for n, _ in STRICT])
def test_a_control_character_in_an_identifier_is_refused_naming_the_field(
    tmp_path, capsys, name, path, control
) -> None:
    value = {"driver": "580.95.05", "platform": "linux_x86_64", "os": "linux"}.get(name, "GPU-1")
    field = dotted(path)
    err = refused(tmp_path, capsys, facts_with(path, value + control + "tail"), field)
    assert "control character" in err


@pytest.mark.slow  # the whole generated sweep: CI runs it with the slow ones
@pytest.mark.parametrize("control", SOME_CONTROLS)
@pytest.mark.parametrize(("name", "path"), FREE, ids=[n for n, _ in FREE])
def test_a_control_character_in_free_text_is_shown_as_its_escape(tmp_path, capsys, name, path, control) -> None:
    code, out, err = doctor(tmp_path, capsys, facts_with(path, "X" + control + "RED"), "--json")
    assert code in (0, 1), err
    assert not any(c in out for c in CONTROLS if len(c) == 1 and c != "\n"), "no control reaches the terminal"
    assert not any(c in json.dumps(json.loads(out), ensure_ascii=False) for c in CONTROLS if len(c) == 1)


def test_the_testers_gpu_name_reaches_neither_row_raw(tmp_path, capsys) -> None:
    name = "X\u202e \x1b[31mRED\x00"
    code, out, err = doctor(tmp_path, capsys, facts_with(("nvidia", "gpus", 0, "name"), name))
    row = next(line for line in out.splitlines() if "nvidia.gpu0" in line)
    assert "X\\u202e \\x1b[31mRED\\x00" in row and "\x1b" not in out and "\u202e" not in out
    facts = Facts.from_dict(facts_with(("nvidia", "gpus", 0, "name"), name))
    assert facts.nvidia.gpus[0].name == "X\\u202e \\x1b[31mRED\\x00"  # every row reads this one value


def test_a_control_character_in_a_key_is_not_echoed(tmp_path, capsys) -> None:
    raw = copy.deepcopy(BASE)
    raw["host"]["\x1b[2J\u202e"] = 1
    refused(tmp_path, capsys, raw, "unknown field")


# --------------------------------------------------------------------------- 2: credentials


@pytest.mark.parametrize("secret", SOME_SECRETS)
@pytest.mark.parametrize(("name", "path"), FREE, ids=[n for n, _ in FREE])
def test_credentials_in_free_text_are_never_shown(tmp_path, capsys, name, path, secret) -> None:
    for extra in ((), ("--json",)):
        code, out, err = doctor(tmp_path, capsys, facts_with(path, secret), *extra)
        assert code in (0, 1), err
        assert "hunter2" not in out + err and "SECRETTOKEN" not in out + err


def test_the_disk_row_shows_the_path_without_its_credentials(tmp_path, capsys) -> None:
    code, out, _ = doctor(tmp_path, capsys, facts_with(("host", "disk_path"), SECRETS[0]))
    row = next(line for line in out.splitlines() if "host.disk" in line)
    assert "https://example.com/t/<TOKEN>/x" in row


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize(("name", "path"), STRICT, ids=[n for n, _ in STRICT])
def test_credentials_in_a_refused_value_are_not_quoted(tmp_path, capsys, name, path, secret) -> None:
    code, out, err = doctor(tmp_path, capsys, facts_with(path, secret + "\x1b" + "y" * MAX_TEXT))
    assert code == 2 and "hunter2" not in err and "SECRETTOKEN" not in err


# --------------------------------------------------------------------------- 3: sizes


@pytest.mark.parametrize("length", [MAX_TEXT + 1, 10 * MAX_TEXT, 100_000])
@pytest.mark.parametrize(("name", "path"), STRICT + FREE, ids=[n for n, _ in STRICT + FREE])
def test_a_string_longer_than_any_real_value_is_refused_in_one_short_line(tmp_path, capsys, name, path, length) -> None:
    field = dotted(path)
    err = refused(tmp_path, capsys, facts_with(path, "x" * length), field)
    assert f"{length} characters" in err


@pytest.mark.parametrize(("field", "limit"), [("name", 95), ("uuid", 95)])
def test_gpu_names_and_uuids_are_bounded_by_nvmls_buffers(tmp_path, capsys, field, limit) -> None:
    value = "GPU-" + "G" * limit  # a UUID starts with GPU-, as NVML's do
    assert Facts.from_dict(facts_with(("nvidia", "gpus", 0, field), value[:limit])).nvidia.gpus[0]
    refused(tmp_path, capsys, facts_with(("nvidia", "gpus", 0, field), value[: limit + 1]), f"gpus[0].{field}")


def gpus(count: int) -> list[dict]:
    gpu = BASE["nvidia"]["gpus"][0]
    return [dict(gpu, index=i, uuid=f"GPU-{i}") for i in range(count)]


@pytest.mark.parametrize("count", [MAX_ITEMS + 1, 2 * MAX_ITEMS, 20_000])
def test_more_gpus_than_any_host_has_are_refused(tmp_path, capsys, count) -> None:
    raw = facts_with(("nvidia", "peers"), [])
    raw["nvidia"]["gpus"] = gpus(count)
    assert f"{count} entries" in refused(tmp_path, capsys, raw, "nvidia.gpus")


@pytest.mark.parametrize(
    "path",
    [
        ("host", "container_hints"),
        ("host", "missing"),
        ("nvidia", "gpu_signs"),
        ("nvidia", "gpus", 0, "missing"),
        ("nvidia", "gpus", 0, "mig_uuids"),
    ],
)
def test_any_list_longer_than_the_limit_is_refused(tmp_path, capsys, path) -> None:
    refused(tmp_path, capsys, facts_with(path, ["x"] * (MAX_ITEMS + 1)), path[-1])


def test_the_most_gpus_a_file_may_hold_still_read(tmp_path, capsys) -> None:
    raw = facts_with(("nvidia", "peers"), [])
    raw["nvidia"]["gpus"] = gpus(MAX_ITEMS)
    code, out, err = doctor(tmp_path, capsys, raw)
    assert code in (0, 1) and err == "" and "nvidia.gpu1023" in out


def test_a_gpu_index_given_twice_is_refused(tmp_path, capsys) -> None:
    refused(tmp_path, capsys, facts_with(("nvidia", "gpus", 1, "index"), 0), "index 0 is given twice")


# --------------------------------------------------------------------------- 4: nonsense values


@pytest.mark.parametrize("value", [10**400, 2**63, 2**64, -(2**63) - 1, -(10**400)])
@pytest.mark.parametrize(
    "path",
    [
        ("nvidia", "cuda_driver_version"),
        ("nvidia", "gpus", 0, "memory_total_mib"),
        ("nvidia", "gpus", 0, "index"),
        ("host", "disk_free_mib"),
        ("host", "nofile_soft"),
        ("host", "cpus_usable"),
    ],
)
def test_an_integer_beyond_64_bits_is_refused_without_its_digits(tmp_path, capsys, path, value) -> None:
    err = refused(tmp_path, capsys, facts_with(path, value), str(path[-1]))
    assert "0000000000" not in err and "9999999999" not in err


@pytest.mark.parametrize("value", [0, 999, 99991, 100000, 10**9, 2**63 - 1, 12085, 12081, 13001])
def test_a_cuda_driver_version_nvml_cannot_report_is_refused(tmp_path, capsys, value) -> None:
    refused(tmp_path, capsys, facts_with(("nvidia", "cuda_driver_version"), value), "cuda_driver_version")


@pytest.mark.parametrize("cc", [[9, 100], [9, 10**12], [0, 0], [100, 0], [8, 99], [8, 10]])
def test_a_compute_capability_no_gpu_has_is_refused(tmp_path, capsys, cc) -> None:
    refused(tmp_path, capsys, facts_with(("nvidia", "gpus", 0, "compute_capability"), cc), "compute_capability")


@pytest.mark.parametrize(
    "value", ["plan9_mips", "linux-64", "Linux_x86_64", "linux_x86_64 ", "freebsd13-amd64", "macOS", "../../etc"]
)
def test_an_unknown_platform_is_refused_listing_the_known_ones(tmp_path, capsys, value) -> None:
    err = refused(tmp_path, capsys, facts_with(("platform",), value), "platform")
    assert all(key in err for key in COMPAT_KEYS)


OS_OF_KEY = {
    "linux_x86_64": "linux",
    "linux_aarch64": "linux",
    "linux_ppc64le": "linux",
    "macos": "macos",
    "windows_x86_64": "windows",
    "windows_aarch64": "windows",
}


@pytest.mark.parametrize("value", COMPAT_KEYS)
def test_every_known_platform_reads(value) -> None:
    raw = facts_with(("nvidia", "os"), OS_OF_KEY[value], facts_with(("platform",), value))
    assert Facts.from_dict(raw).platform == value


@pytest.mark.parametrize("value", ["darwin", "plan9", "", "Linux"])
def test_an_os_that_is_no_driver_series_is_refused(tmp_path, capsys, value) -> None:
    refused(tmp_path, capsys, facts_with(("nvidia", "os"), value), "nvidia.os")


BAD_ARCHES = [
    "sm_xx",
    "compute_9a",
    "sm_9",
    "sm_090",
    "sm_1000",
    "sm_90b",
    "SM_90",
    "sm90",
    "sm_90 ",
    " sm_90",
    "gfx90a",
    "compute_",
    "sm_90\x1b",
    "lto_90",
    "sm_-90",
    "sm_9.0",
]
GOOD_ARCHES = [
    "sm_37",
    "sm_50",
    "sm_86",
    "sm_87",
    "sm_90",
    "sm_90a",
    "sm_100",
    "sm_100a",
    "sm_100f",
    "sm_120",
    "sm_121",
    "compute_90",
    "compute_120",
]


@pytest.mark.parametrize("entry", BAD_ARCHES, ids=ascii)
def test_an_arch_list_entry_torch_never_lists_is_refused(entry) -> None:
    raw = facts_with(("torch",), dict(TORCH, arch_list=["sm_80", entry]))
    with pytest.raises(InputError, match=r"torch\.arch_list(\[1\])?: "):
        Facts.from_dict(raw)


def test_every_arch_entry_torch_lists_reads() -> None:
    raw = facts_with(("torch",), dict(TORCH, arch_list=GOOD_ARCHES))
    assert Facts.from_dict(raw).torch.arch_list == tuple(GOOD_ARCHES)


@pytest.mark.parametrize("value", ["plan9_mips", "linux-64", ""])
def test_an_unknown_torch_platform_is_refused(value) -> None:
    with pytest.raises(InputError, match=r"torch\.platform: "):
        Facts.from_dict(facts_with(("torch",), dict(TORCH, platform=value)))


def test_the_recorded_files_still_read() -> None:
    for file in sorted((REPO / "tests" / "data" / "verify").glob("*.facts.json")):
        raw = json.loads(file.read_text())
        assert Facts.from_dict(raw).to_dict() == Facts.from_dict(Facts.from_dict(raw).to_dict()).to_dict()


# Values each field could hold alone, but no machine reports: a driver number int() reads yet no
# driver has, a CUDA version NVML cannot encode, a platform contradicting what was seen on it.
IMPOSSIBLE = [
    pytest.param(("nvidia", "driver_version"), "-580.95", "nvidia.driver_version", id="driver-negative"),
    pytest.param(("nvidia", "driver_version"), "580", "nvidia.driver_version", id="driver-one-part"),
    pytest.param(("nvidia", "driver_version"), "580.95.05.1", "nvidia.driver_version", id="driver-four-parts"),
    pytest.param(("nvidia", "driver_version"), "580.+95", "nvidia.driver_version", id="driver-sign"),
    pytest.param(
        ("nvidia", "driver_version"), "\u0665\u0668\u0660.95", "nvidia.driver_version", id="driver-arabic-digits"
    ),
    pytest.param(("nvidia", "cuda_driver_version"), 12085, "nvidia.cuda_driver_version", id="cuda-not-x10"),
    pytest.param(("nvidia", "gpus", 0, "compute_capability"), [8, 99], "compute_capability", id="cc-8.99"),
    pytest.param(("nvidia", "os"), "macos", "contradicts platform 'linux_x86_64'", id="os-macos-on-linux"),
    pytest.param(("nvidia", "os"), "windows", "only under WSL2", id="os-windows-on-linux-without-wsl"),
    pytest.param(("platform",), "windows_x86_64", "nvidia.os: 'linux' contradicts", id="os-linux-on-windows"),
    pytest.param(("platform",), "macos", "nvidia.os: 'linux' contradicts", id="os-linux-on-macos"),
    pytest.param(("nvidia", "wsl"), "WSL_DISTRO_NAME=Ubuntu", "contradicts nvidia.wsl", id="wsl-with-os-linux"),
    pytest.param(("nvidia", "jetson"), "R36 (release)", "nvidia.jetson", id="jetson-on-x86_64"),
    pytest.param(("nvidia", "gpus", 0, "uuid"), "5b1c7e2a-0f4d-4c8e", "gpus[0].uuid", id="uuid-without-GPU-"),
    pytest.param(("nvidia", "gpus", 0, "uuid"), "MIG-5b1c7e2a", "gpus[0].uuid", id="uuid-a-MIG-one"),
    pytest.param(
        ("nvidia", "gpus", 1, "uuid"), "GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b00", "given twice", id="uuid-twice"
    ),
    pytest.param(
        ("nvidia", "gpus", 0, "mig_uuids"), ["MIG-1", "GPU-2"], "gpus[0].mig_uuids[1]", id="mig-uuid-without-MIG-"
    ),
    pytest.param(
        ("nvidia", "gpus", 0, "memory_used_mib"), 143772, "gpus[0].memory_used_mib", id="gpu-memory-used-over-total"
    ),
    pytest.param(("python",), "banana", "python", id="python-banana"),
    pytest.param(("python",), "3", "python", id="python-one-part"),
    pytest.param(("python",), "3.12.x", "python", id="python-x"),
    pytest.param(("torch",), dict(TORCH, platform="windows_x86_64"), "torch.platform", id="torch-on-windows"),
]


@pytest.mark.parametrize(("path", "value", "field"), IMPOSSIBLE)
def test_a_value_no_machine_reports_is_refused_naming_the_field(tmp_path, capsys, path, value, field) -> None:
    err = refused(tmp_path, capsys, facts_with(path, value), field)
    assert err.startswith(f"error: {tmp_path / 'hostile.facts.json'}: ") and "--save-facts" in err


@pytest.mark.parametrize(
    ("path", "value"), [(("platform",), "macos"), (("platform",), "linux_aarch64"), (("platform",), "windows_x86_64")]
)
def test_wsl_only_on_linux_and_jetson_only_on_aarch64(tmp_path, capsys, path, value) -> None:
    os_name = OS_OF_KEY[value]
    raw = facts_with(("nvidia", "os"), "windows" if os_name == "linux" else os_name, facts_with(path, value))
    if value == "linux_aarch64":  # WSL2 on Windows on Arm reads; a Jetson under WSL does not exist
        Facts.from_dict(facts_with(("nvidia", "wsl"), "WSL_DISTRO_NAME=Ubuntu", raw))
        raw = facts_with(("nvidia", "os"), "linux", facts_with(("nvidia", "jetson"), "R36 (release)", raw))
        assert Facts.from_dict(raw).nvidia.jetson
        return
    refused(tmp_path, capsys, facts_with(("nvidia", "jetson"), "R36 (release)", raw), "nvidia.jetson")
    if value == "macos":
        refused(tmp_path, capsys, facts_with(("nvidia", "wsl"), "WSL_DISTRO_NAME=Ubuntu", raw), "nvidia.wsl")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("nvidia", "driver_version"), "566.36"),
        (("nvidia", "driver_version"), "535.183.01"),
        (("nvidia", "driver_version"), "390.48"),
        (("nvidia", "cuda_driver_version"), 12090),
        (("nvidia", "gpus", 0, "compute_capability"), [12, 1]),
        (("nvidia", "gpus", 0, "compute_capability"), [10, 3]),
        (("nvidia", "gpus", 0, "memory_used_mib"), 143771),
        (("nvidia", "gpus", 0, "uuid"), None),
        (
            ("nvidia", "gpus", 0, "mig_uuids"),
            ["MIG-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b00", "MIG-GPU-5b1c7e2a-0f4d-4c8e-9a61-2d3e4f5a6b00/1/0"],
        ),
        (("python",), "3.13.0rc1"),
        (("python",), "3.14.0a1+"),
        (("python",), "3.9"),
        (("python",), ""),
        (("platform",), ""),
        (("torch",), dict(TORCH, platform="linux_x86_64")),
    ],
)
def test_values_real_machines_report_still_read(path, value) -> None:
    assert Facts.from_dict(facts_with(path, value))


def test_a_wsl2_file_reads_with_the_windows_driver_on_a_linux_platform() -> None:
    raw = json.loads((REPO / "tests" / "data" / "verify" / "constructed-wsl2-528.24.facts.json").read_text())
    assert (raw["platform"], raw["nvidia"]["os"]) == ("linux_x86_64", "windows") and raw["nvidia"]["wsl"]
    assert Facts.from_dict(raw).nvidia.os_label == "windows, WSL2"


def test_a_file_without_a_platform_is_judged_on_the_one_its_jetson_or_wsl_implies() -> None:
    """Every platform (none included) x Jetson, WSL2 or neither x every driver OS: a file reads only where
    they agree, and a Jetson's without a platform reads as linux_aarch64, not the replaying host's."""
    signs = {"": {}, "jetson": {"jetson": "R36 (release)"}, "wsl": {"wsl": "WSL_DISTRO_NAME=Ubuntu"}}
    for platform in ("",) + COMPAT_KEYS:
        for sign, fields in signs.items():
            for os_name in ("linux", "windows", "macos"):
                raw = facts_with(("platform",), platform)
                raw["nvidia"] = {**raw["nvidia"], "os": os_name, **fields}
                agree = (
                    (sign != "wsl" or os_name == "windows")
                    and (sign != "jetson" or os_name == "linux")
                    and (
                        not platform
                        or (sign == "jetson") <= (platform == "linux_aarch64")
                        and (OS_OF_KEY[platform] == ("linux" if sign == "wsl" else os_name))
                    )
                )
                try:
                    facts = Facts.from_dict(raw)
                except InputError as exc:
                    assert not agree and "\n" not in str(exc), (platform, sign, os_name, exc)
                    continue
                assert agree, (platform, sign, os_name)
                if sign == "jetson":
                    assert facts.platform == "linux_aarch64"
                    assert _platform(False, facts, None) == "linux-aarch64"


def _with_key_twice(value: Any, where: tuple[Any, ...], at: tuple[Any, ...] = ()) -> str:
    """`value` as JSON text, the first key of the object at path `where` written twice."""
    if isinstance(value, dict):
        members = [f"{json.dumps(k)}: {_with_key_twice(v, where, at + (k,))}" for k, v in value.items()]
        if at == where and members:
            members.insert(1, members[0])
        return "{" + ", ".join(members) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_with_key_twice(v, where, at + (i,)) for i, v in enumerate(value)) + "]"
    return json.dumps(value)


def _objects(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [at] * bool(value) + [p for k, v in value.items() for p in _objects(v, at + (k,))]
    return [p for i, v in enumerate(value) for p in _objects(v, at + (i,))] if isinstance(value, list) else []


def test_a_key_given_twice_in_any_object_is_refused_naming_it(tmp_path, capsys) -> None:
    """json keeps the last of a repeated key: a file that says two things is refused, whichever object."""
    raw = facts_with(("torch",), TORCH)
    paths = _objects(raw)
    assert len(paths) > 5
    for where in paths:
        first = next(iter(raw if not where else _at(raw, where)))
        file = tmp_path / "twice.facts.json"
        file.write_text(_with_key_twice(raw, where))
        capsys.readouterr()
        assert main(["doctor", "--facts", str(file)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and f"key {first!r} is given twice" in err, (where, err)


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def test_a_byte_order_mark_before_the_json_is_no_part_of_it(tmp_path) -> None:
    plain, marked = tmp_path / "plain.facts.json", tmp_path / "marked.facts.json"
    plain.write_text(json.dumps(BASE), encoding="utf-8")
    marked.write_text(json.dumps(BASE), encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    assert load_facts(marked) == load_facts(plain)
