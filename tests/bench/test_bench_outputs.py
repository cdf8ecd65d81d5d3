"""Where bench's report goes: --out checked before the run, strict JSON, all-or-nothing writes.

The read-only and full file systems are real: a tmpfs mounted in a private
mount namespace (`unshare -m`, root only; skipped elsewhere).
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bootstrap.bench import report
from bootstrap.bench.results import Metrics
from bootstrap.errors import InputError
from tests.fixtures.bench import SMALL, assert_bench_contract, bench, synthetic_result
from tests.fixtures.mounts import in_private_mounts, needs_unshare

# --------------------------------------------------------------------------- before the run


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda p: p.write_text("x"), "is not a directory"),
        (lambda p: (p.mkdir(), (p / "bench.json").mkdir()), "bench.json: is a directory"),
        (lambda p: None, None),  # missing: created after the run
    ],
)
def test_out_is_checked_before_any_work(tmp_path, make, problem):
    out = tmp_path / "out"
    make(out)
    if problem is None:
        assert report.check_out(out) == [out / "bench.json", out / "bench.png"] and not out.exists()
        return
    with pytest.raises(InputError, match=problem):
        report.check_out(out)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="Linux /proc")
def test_out_on_a_virtual_file_system_is_refused_before_the_run():
    """os.access says root may write anywhere, /proc included: the check creates a file to know."""
    with pytest.raises(InputError, match=r"^--out: cannot write in /proc[: ]"):
        report.check_out(Path("/proc/bench-out"))


def test_cli_refuses_an_existing_file_as_out_at_once(tmp_path):
    """An --out that is a file is refused before the run, in one line; the file is kept."""
    target = tmp_path / "file"
    target.write_text("keep")
    started = time.perf_counter()
    done = bench("--budget", "30", "--out", str(target), *SMALL)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: --out: {target} is not a directory (give a directory (it is created if missing))"
    ]
    assert time.perf_counter() - started < 15 and target.read_text() == "keep"


@needs_unshare
def test_read_only_out_fails_before_the_run():
    done = in_private_mounts(
        "mkdir -p /mnt/bench-ro && mount -t tmpfs -o ro,size=1m tmpfs /mnt/bench-ro\n"
        f"$PY -m bootstrap bench --budget 30 --out /mnt/bench-ro/sub {' '.join(SMALL)}"
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "error: --out: cannot write in /mnt/bench-ro (no permission, or a read-only "
        "file system) (give another directory)"
    )


# --------------------------------------------------------------------------- after the run


def test_cli_prints_the_report_it_writes(tmp_path):
    """`bench --json`: the envelope on stdout is bench.json, in the pinned layout, beside a PNG that opens; the
    command costs its run plus start-up and report writing."""
    from PIL import Image

    started = time.perf_counter()
    done = bench("--budget", "2", "--json", "--quiet", "--out", str(tmp_path), *SMALL)
    wall = time.perf_counter() - started
    assert done.returncode in (0, 1), done.stderr
    envelope = json.loads(done.stdout)
    assert_bench_contract(envelope)
    assert json.loads((tmp_path / "bench.json").read_text()) == envelope
    from bootstrap.bench.plot import WIDTH, chart_height

    extra = envelope["extra"]  # the chart has a row per measurement and a timeline where the sampler had one,
    rows = len(extra["measurements"])  # however many a busy host left time for
    timeline = bool(extra["sampler"]["gpu_timeline"] or extra["sampler"]["host_timeline"])
    with Image.open(tmp_path / "bench.png") as image:
        assert image.format == "PNG" and image.size == (WIDTH, chart_height(rows, timeline))
    assert wall <= envelope["extra"]["seconds"] + 15.0  # interpreter and torch start-up, report writing


@pytest.mark.slow  # a whole bench run on a tmpfs made full
@needs_unshare
def test_full_disk_after_the_run_prints_the_report_and_keeps_the_old_pair():
    """A full disk after the run: the report is printed, and the old bench.json and bench.png are kept as a pair."""
    done = in_private_mounts(
        "mkdir -p /mnt/bench-full && mount -t tmpfs -o size=4k tmpfs /mnt/bench-full\n"
        "echo '{}' > /mnt/bench-full/bench.json\n"
        f"$PY -m bootstrap bench --budget 2 --quiet --out /mnt/bench-full {' '.join(SMALL)} && rc=0 || rc=$?\n"
        'echo "rc=$rc"; ls -A /mnt/bench-full; cat /mnt/bench-full/bench.json'
    )
    lines = done.stdout.strip().splitlines()
    assert lines[-3:] == ["rc=2", "bench.json", "{}"], done.stdout + done.stderr
    assert "STATUS  CHECK" in done.stdout and "bench.efficiency" in done.stdout  # the report, printed anyway
    assert done.stderr.strip().splitlines() == [
        "error: no space left on device while writing bench.json and bench.png on /mnt/bench-full "
        "(--out: 0 MiB free); bench.json and bench.png not written (any from an earlier run are left as they "
        "were); the report is above (free space or give --out another directory)"
    ]


def test_json_report_not_written_keeps_stdout_one_document(tmp_path, monkeypatch, capsys):
    """`bench --json` whose report cannot be stored: before, the report's envelope and then the error envelope,
    two JSON documents on stdout that no parser reads. Now the report's, with the error on stderr and exit 2."""
    import bootstrap.bench.run as bench_run
    from bootstrap.cli import main

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(bench_run, "run_bench", lambda options, progress=None: synthetic_result())
    monkeypatch.setattr(report, "write_reports", full)
    assert main(["bench", "--json", "--quiet", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    envelope = json.loads(captured.out)  # one document: the report
    assert envelope["kind"] == "bench" and "checks" in envelope
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: no space left on device")


def test_a_failed_write_leaves_the_previous_pair_and_no_staging_files(tmp_path, monkeypatch):
    (tmp_path / "bench.json").write_text("old json")
    (tmp_path / "bench.png").write_bytes(b"old png")
    import bootstrap.fsutil as fsutil

    real = fsutil.atomic_write_bytes

    def full_on_png(path, data, fsync=True):
        if "bench.png" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data, fsync)

    monkeypatch.setattr(fsutil, "atomic_write_bytes", full_on_png)
    with pytest.raises(OSError):
        report.write_reports(synthetic_result(), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "bench.png"]
    assert (tmp_path / "bench.json").read_text() == "old json" and (tmp_path / "bench.png").read_bytes() == b"old png"


def test_reports_replace_the_pair_through_a_symlink_and_keep_the_mode(tmp_path):
    elsewhere = tmp_path / "kept.json"
    elsewhere.write_text("old")
    elsewhere.chmod(0o600)
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.json").symlink_to(elsewhere)
    report.write_reports(synthetic_result(), out)
    assert (out / "bench.json").is_symlink() and json.loads(elsewhere.read_text())["kind"] == "bench"
    assert elsewhere.stat().st_mode & 0o777 == 0o600 and (out / "bench.png").stat().st_size > 0


def test_json_is_strict_even_when_a_figure_is_not_finite(tmp_path):
    result = replace(
        synthetic_result(),
        budget_s=float("nan"),
        metrics=Metrics(efficiency=float("inf"), speedup=float("nan"), tuned_samples_per_s=1.0),
    )

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    text = report.envelope_json(result)
    envelope = json.loads(text, parse_constant=refuse)
    assert envelope["extra"]["budget_s"] is None and envelope["extra"]["metrics"]["speedup"] is None
    report.write_reports(result, tmp_path, png=False)
    assert json.loads((tmp_path / "bench.json").read_text(), parse_constant=refuse) == envelope
