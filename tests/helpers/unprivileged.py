"""Running a command under which file permissions hold, also for root (who ignores them)."""

from __future__ import annotations

import os
import shutil

import pytest


def without_root_powers() -> tuple[str, ...]:
    """A command prefix that drops root's power to ignore file permissions (none needed for
    other users); skips the test where that cannot be done."""
    if os.geteuid() != 0:
        return ()
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: permissions cannot be tested")
    return ("setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--")
