"""Stopping at once on SIGTERM or Ctrl-C, for work whose outputs appear whole or not at all
(`atomic`): the signal becomes an `Interrupted` exception where the program is, so every
`finally` and `with` on the way out runs (the temporary output is removed, a worker pool is
shut down) instead of the process vanishing mid-write. Training stops differently, after a
step and with a checkpoint (`bertcore.training.stopping`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived. A BaseException, like KeyboardInterrupt, so that no
    `except Exception` on the way out takes it for a failure to report or retry."""

    def __init__(self, signum: int):
        self.signum = signum
        self.exit_code = 128 + signum  # what a shell reports for a process the signal killed
        super().__init__(signal.Signals(signum).name)


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise `Interrupted` (main thread only: elsewhere
    Python cannot set handlers). The first one restores the previous handlers, so that a
    second signal acts as it did before (a second Ctrl-C while cleaning up stops at once)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def handle(signum, frame):
        restore()
        raise Interrupted(signum)

    for signum in SIGNALS:
        previous[signum] = signal.signal(signum, handle)
    try:
        yield
    finally:
        restore()


def ignore_interrupts_in_worker() -> None:
    """A worker process's initializer: Ctrl-C in a terminal reaches every process of the
    group, and the parent, not each worker, decides what stopping means (it stops the pool)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
