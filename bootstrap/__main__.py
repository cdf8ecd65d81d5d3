"""`python -m bootstrap <verb>`."""

from __future__ import annotations

import os
import sys

from bootstrap.errors import EXIT_INTERRUPTED

for _name in ("stdout", "stderr"):
    _stream = getattr(sys, _name)
    if _stream is None:  # the shell closed it (`>&-`): what would be written there goes nowhere
        setattr(sys, _name, open(os.devnull, "w"))
    elif hasattr(_stream, "reconfigure") and _stream.errors != "backslashreplace":
        # A GPU name or path the locale's encoding cannot spell (LANG=C, PYTHONIOENCODING=ascii) is
        # printed escaped, not a UnicodeEncodeError traceback halfway through a report.
        _stream.reconfigure(errors="backslashreplace")

try:
    from bootstrap.cli import EXIT_BROKEN_PIPE, main  # in the try: Ctrl-C can land while it imports

    code = main()
    sys.stdout.flush()
except BrokenPipeError:  # the reader of stdout went away while an error was being reported
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = EXIT_BROKEN_PIPE
except KeyboardInterrupt:  # Ctrl-C before main could catch it, or a second while it reported the first
    from bootstrap import aio

    aio.interrupted()
    print("interrupted", file=sys.stderr)
    code = EXIT_INTERRUPTED
if "rattler" in sys.modules:
    # After a failed repodata fetch, py-rattler's runtime threads can still be
    # finishing a sibling request; if one calls back into Python while the
    # interpreter finalizes, the process aborts ("PyGILState_Release: thread
    # state must be current", seen in ~1 of 5 runs) and the exit code 2 becomes
    # 134. Every file was written and closed by now, so skip finalization.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
