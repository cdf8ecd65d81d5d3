"""lock.system: doctor holds the host's glibc (or macOS) against the floor of the lock it would install,
as `make env` does before downloading anything, so that a CentOS 7 node or an old Mac fails in doctor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bootstrap.cli import main
from bootstrap.report import Status, from_json
from tests.fixtures import REPO
from tests.fixtures.variants import R580, facts_file

H200 = ("NVIDIA H200", (9, 0))


def doctor_checks(capsys, facts: Path) -> tuple:
    capsys.readouterr()
    code = main(["doctor", "--json", "--root", str(REPO), "--facts", str(facts)])
    return code, {c.id: c for c in from_json(json.loads(capsys.readouterr().out))}


def with_host(path: Path, platform: str = "linux_x86_64", **host: str) -> Path:
    facts_file(
        path,
        [H200] if platform.startswith("linux") else [],
        platform=platform,
        driver=None if platform == "macos" else R580,
    )
    data = json.loads(path.read_text())
    data["host"].update(host)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("platform", "host", "status", "phrase"),
    [
        ("linux_x86_64", {"libc": "glibc 2.17"}, Status.FAIL, "this host has 2.17: use a machine with a newer OS"),
        ("linux_x86_64", {"libc": "not glibc"}, Status.FAIL, "not glibc (musl?)"),
        ("linux_x86_64", {"libc": "glibc 2.28"}, Status.OK, ""),
        ("linux_x86_64", {"libc": "glibc 2.39"}, Status.OK, ""),
        ("linux_x86_64", {}, Status.SKIP, ""),  # facts from before the field: not judged
        ("macos", {"macos": "13.6"}, Status.FAIL, "this host has 13.6: use a newer macOS"),
        ("macos", {"macos": "14.5"}, Status.OK, ""),
    ],
)
def test_the_host_system_is_held_against_the_locks_floor(
    tmp_path: Path, capsys, platform, host, status, phrase
) -> None:
    code, checks = doctor_checks(capsys, with_host(tmp_path / "facts.json", platform, **host))
    check = checks["lock.system"]
    assert check.status is status, check
    assert phrase in check.detail and (check.remedy != "") == (status is Status.FAIL)
    assert check.expected.startswith(("glibc >= 2.28 (torch ", "macOS >= 14.0 ("))
    assert (code == 1) == (status is Status.FAIL) or any(c.status is Status.FAIL for c in checks.values())


def test_windows_has_no_floor_to_hold(tmp_path: Path, capsys) -> None:
    _, checks = doctor_checks(capsys, with_host(tmp_path / "facts.json", "windows_x86_64"))
    assert "lock.system" not in checks


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("libc", "glibc 2"),
        ("libc", "musl"),
        ("libc", "glibc 2.17\n"),
        ("macos", "fourteen"),
        ("macos", "14.5.1.2"),
        ("macos", "14.5"),
    ],
)
def test_a_system_no_machine_reports_is_refused(tmp_path: Path, capsys, field: str, value: str) -> None:
    facts = with_host(tmp_path / "facts.json", **{field: value})
    assert main(["doctor", "--root", str(REPO), "--facts", str(facts)]) == 2
    assert f"host.{field}: " in capsys.readouterr().err


def test_this_host_records_its_c_library() -> None:
    from bootstrap.compat.host import collect_host_facts

    host = collect_host_facts()
    assert host.libc.startswith(("glibc ", "not glibc"))  # the suite runs on Linux
