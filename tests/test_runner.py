"""The subprocess chokepoint: argv in, decoded output out, and a timeout that ends what the tool started."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bootstrap.errors import ToolError
from bootstrap.runner import run


def test_output_and_exit_status_come_back_decoded() -> None:
    done = run(["sh", "-c", "printf 'caf\\303\\251'; echo oops >&2; exit 3"])
    assert (done.returncode, done.stdout, done.stderr) == (3, "café", "oops\n")


def test_a_timeout_ends_the_tool_and_what_it_started(tmp_path: Path) -> None:
    """A hung nvidia-smi's own children outlived the timeout when only the child was killed."""
    pid_file = tmp_path / "grandchild.pid"
    started = time.monotonic()
    with pytest.raises(ToolError, match="no answer after 0.5 s"):
        run(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], timeout=0.5)
    assert time.monotonic() - started < 10
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the tool's child {grandchild} still runs")
