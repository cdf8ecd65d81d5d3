"""The checks of `bootstrap.report`: exit code, table rendering, and the pinned JSON envelope."""

from __future__ import annotations

import json

import pytest

from bootstrap.errors import InputError
from bootstrap.report import (
    FORMAT,
    FORMAT_VERSION,
    Check,
    Status,
    exit_code,
    from_json,
    remedies,
    render_table,
    summary,
    to_json,
)

CHECKS = [
    Check(
        "cuda.driver",
        Status.WARN,
        "driver 535.183.01, CUDA 12.2",
        "CUDA >= 12.8",
        remedy="upgrade the NVIDIA driver to >= 570.26",
        detail="floor CUDA 12.x (high)",
    ),
    Check("cuda.arch.gpu0", Status.OK, "NVIDIA H200 CC 9.0: runs sm_90", "a kernel for CC 9.0"),
    Check(
        "cuda.arch.gpu1",
        Status.FAIL,
        "GTX 1080 CC 6.1: no kernel image",
        "a kernel for CC 6.1",
        remedy="lock torch==2.11.0+cu126",
    ),
    Check("host.shm", Status.SKIP, "no /dev/shm", "/dev/shm >= 1 GiB"),
]


def test_status_values_are_the_documented_words():
    assert [s.value for s in Status] == ["ok", "warn", "fail", "skip", "inconclusive"]


@pytest.mark.parametrize(
    "statuses, code",
    [
        ([], 0),
        ([Status.OK, Status.WARN, Status.SKIP], 0),
        ([Status.OK, Status.FAIL], 1),
        ([Status.SKIP, Status.SKIP], 0),
        ([Status.OK, Status.INCONCLUSIVE, Status.WARN], 0),
    ],
)
def test_exit_code_is_one_only_when_a_check_failed(statuses, code):
    assert exit_code([Check(f"c{i}", s, "", "") for i, s in enumerate(statuses)]) == code


def test_summary_counts_every_status_even_when_zero():
    assert summary(CHECKS) == {"ok": 1, "warn": 1, "fail": 1, "skip": 1, "inconclusive": 0}
    assert summary([]) == {"ok": 0, "warn": 0, "fail": 0, "skip": 0, "inconclusive": 0}


def test_table_columns_are_aligned_and_remedies_follow_their_row():
    lines = render_table(CHECKS).splitlines()
    header, rows = lines[0], [line for line in lines[1:] if not line.startswith(" ")]
    assert header.split() == ["STATUS", "CHECK", "OBSERVED", "EXPECTED"]
    observed_at = header.index("OBSERVED")
    for row, check in zip(rows, CHECKS):
        assert row.startswith(check.status.value)
        assert row[observed_at:].startswith(check.observed)
    warn_at = lines.index(next(line for line in lines if line.startswith("warn")))
    assert lines[warn_at + 1] == "    -> upgrade the NVIDIA driver to >= 570.26"
    ok_at = lines.index(next(line for line in lines if line.startswith("ok ")))
    assert not lines[ok_at + 1].startswith(" "), "a check without remedy gets no remedy line"
    assert lines[-1] == "1 ok, 1 warn, 1 fail, 1 skip"


def test_table_shows_detail_only_when_asked():
    assert "floor CUDA 12.x" not in render_table(CHECKS)
    assert "floor CUDA 12.x (high)" in render_table(CHECKS, show_detail=True)


def test_json_envelope_contract():
    """Pinned: CI parses this. Changing a key means bumping FORMAT_VERSION."""
    envelope = to_json(CHECKS, "doctor", extra={"facts": {"driver": "535.183.01"}})
    assert list(envelope) == ["format", "version", "kind", "checks", "summary", "extra"]
    assert (envelope["format"], envelope["version"]) == ("bootstrap.checks", 1) == (FORMAT, FORMAT_VERSION)
    assert envelope["kind"] == "doctor"
    assert list(envelope["checks"][0]) == ["id", "status", "observed", "expected", "remedy", "detail"]
    assert envelope["checks"][0]["status"] == "warn"
    assert envelope["summary"] == {"ok": 1, "warn": 1, "fail": 1, "skip": 1, "inconclusive": 0}
    assert envelope["extra"] == {"facts": {"driver": "535.183.01"}}
    assert to_json([], "verify")["extra"] == {}


def test_json_round_trips_through_text():
    envelope = json.loads(json.dumps(to_json(CHECKS, "verify")))
    assert from_json(envelope) == CHECKS


def test_reading_another_format_version_is_an_input_error():
    envelope = to_json(CHECKS, "verify")
    envelope["version"] = 2
    with pytest.raises(InputError, match="bootstrap.checks v1"):
        from_json(envelope)


def test_checks_sharing_a_remedy_are_named_together_before_it() -> None:
    checks = [
        Check(f"cuda.arch.gpu{i}", Status.FAIL, "", "", remedy="lock cu126" if i != 2 else "lock cu118")
        for i in range(4)
    ] + [Check("cuda.driver", Status.FAIL, "", "", remedy="lock cu126"), Check("host.cpus", Status.OK, "", "")]
    assert remedies(checks) == ["cuda.arch.gpu0, gpu1, gpu3, cuda.driver: lock cu126", "cuda.arch.gpu2: lock cu118"]
