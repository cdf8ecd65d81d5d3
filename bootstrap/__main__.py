"""`python -m bootstrap <verb>`."""

from __future__ import annotations

import sys

from bootstrap.cli import main

sys.exit(main())
