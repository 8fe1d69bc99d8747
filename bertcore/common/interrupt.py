"""Stopping at once on SIGTERM or Ctrl-C, for work whose outputs appear whole or not at all
(`atomic`): the signal becomes an `Interrupted` exception where the program is, so every
`finally` and `with` on the way out runs (the temporary output is removed, a worker pool is
shut down) instead of the process vanishing mid-write. Training stops differently, after a
step and with a checkpoint (`bertcore.training.loop.stopping`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGINT)


# the outputs put in place since `interrupt_on_signals` began (`note_replaced`), in order
_replaced: list[str] = []


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived. A BaseException, like KeyboardInterrupt, so that no
    `except Exception` on the way out takes it for a failure to report or retry. `replaced`:
    the outputs this run had put in place (each whole) when it arrived; the others are as
    they were."""

    def __init__(self, signum: int, replaced: tuple[str, ...] = ()):
        self.signum = signum
        self.exit_code = 128 + signum  # what a shell reports for a process the signal killed
        self.replaced = replaced
        super().__init__(signal.Signals(signum).name)


def note_replaced(path: str | os.PathLike) -> None:
    """An output is in place, whole (`bertcore.common.atomic`): a signal after this says so."""
    _replaced.append(str(path))


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
        raise Interrupted(signum, tuple(_replaced))

    _replaced.clear()
    for signum in SIGNALS:
        previous[signum] = signal.signal(signum, handle)
    try:
        yield
    finally:
        restore()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Within the block (main thread only, kept short: outputs renamed into place together),
    SIGTERM and SIGINT wait: each is noted, and the first is raised again once the block is
    done, to whatever handler was in place (`Interrupted` under `interrupt_on_signals`), so
    that a signal lands before the block or after it, never in its middle."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: arrived.append(signum))
                for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if arrived:
            signal.raise_signal(arrived[0])


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Within the block (main thread only, kept short: a pool's submit), Ctrl-C is ignored,
    and one pressed in it is lost (a second one stops the stage). A process started in it is
    born ignoring Ctrl-C (a disposition that survives `exec` and that Python keeps), so one
    in its first moments prints no traceback of its interpreter's start-up. Blocking the
    signal instead did not reach a child that multiprocessing spawns (Python 3.11.7)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def ignore_interrupts_in_worker() -> None:
    """A worker process's initializer: Ctrl-C in a terminal reaches every process of the
    group, and the parent, not each worker, decides what stopping means (it stops the pool).
    One started within `ctrl_c_held` ignores it from its first moment."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent ends


def signal_when_parent_dies(signum: int, parent: int | None = None) -> None:
    """Have the kernel send this process `signum` when its parent ends (Linux's
    PR_SET_PDEATHSIG; elsewhere nothing). A parent that ended before the call (this process
    already adopted by another) is caught by comparing the parent after it with `parent`,
    the pid the parent gave (a spawned worker may start after its parent was killed), or
    else the parent before it: the signal is then sent at once."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid() if parent is None else parent
    with contextlib.suppress(OSError, AttributeError):  # no libc, or no prctl in it
        if ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            return
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)
