"""fsutil: the helpers behind atomic writes and the disk-full message."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from bootstrap.errors import ToolError
from bootstrap.fsutil import free_space, out_of_space


def test_out_of_space_is_read_from_errno_or_from_an_engine_message_anywhere_in_the_chain() -> None:
    assert out_of_space(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert out_of_space(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)))
    rattler = "failed to copy file to destination\nCaused by: No space left on device (os error 28)"
    assert out_of_space(ToolError(f"linking into /x failed: {rattler}"))
    try:
        try:
            raise OSError(errno.ENOSPC, "write")  # our own write, wrapped on the way up
        except OSError as inner:
            raise ToolError("uv pip install failed") from inner
    except ToolError as outer:
        assert out_of_space(outer)
    assert not out_of_space(OSError(errno.EACCES, os.strerror(errno.EACCES)))
    assert not out_of_space(ToolError("linking into /x failed: Permission denied (os error 13)"))


def test_free_space_is_asked_of_the_nearest_existing_directory(tmp_path: Path) -> None:
    mount, free = free_space(tmp_path / "not" / "yet" / "made")
    assert os.path.ismount(mount) and str(tmp_path).startswith(str(mount))
    assert free > 0
