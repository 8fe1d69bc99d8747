"""Tasks that kill their own worker process (as `kill -9` or the kernel's OOM killer would),
for the tests of a pool whose worker dies: imported by the test or the command under test,
and by its workers (tests/ is on their path)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from bertcore.data.samples.pairing import pair_shard as _pair_shard


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def square(task: tuple[int, int, str]) -> int:
    """n * n for task (n, dying, marker): task n == dying kills its worker instead, the first
    time only when `marker` (a file it creates) is set, else every time."""
    n, dying, marker = task
    if n == dying:
        if not marker:
            _die()
        try:
            Path(marker).touch(exist_ok=False)
            _die()
        except FileExistsError:
            pass
    return n * n


def pair_shard(task):
    """The samples stage's pairing, whose worker dies on every pass over val's first shard."""
    if task.split == "val" and task.doc_lo == 0:
        _die()
    return _pair_shard(task)
