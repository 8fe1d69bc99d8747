"""Tasks that kill their own worker process (as `kill -9` or the kernel's OOM killer would),
for the tests of a pool whose worker dies: imported by the test or the command under test,
and by its workers (tests/ is on their path, so as `helpers.dying_worker`)."""

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


def square_dying_while_sending(task: tuple[int, int, str]) -> int:
    """`square`, whose dying task first takes the pool's results lock and writes the start of
    a message into its pipe, as a worker killed while it sends its result leaves them."""
    import struct

    n, dying, marker = task
    if n == dying and not Path(marker).exists():
        Path(marker).touch()
        results = _pool_results_queue()
        results._wlock.acquire()
        os.write(results._writer.fileno(), struct.pack("!i", 1 << 20) + b"\0" * 64)  # of 1 MB
        _die()
    return n * n


def _pool_results_queue():
    """The queue a ProcessPoolExecutor worker sends its results into (its `_process_worker`'s)."""
    import sys

    frame = sys._getframe()
    while frame.f_code.co_name != "_process_worker":
        frame = frame.f_back
    return frame.f_locals["result_queue"]


def pair_shard(task):
    """The samples stage's pairing, whose worker dies on every pass over val's first shard."""
    if task.split == "val" and task.doc_lo == 0:
        _die()
    return _pair_shard(task)


def die_sending_a_batch(nth: int, sigterm_parent: bool) -> None:
    """Makes the first DataLoader worker of `bert pretrain` die on its `nth` batch as one
    killed while it sends a batch does (the OOM killer strikes where memory is taken): the
    start of a message in the pipe, the rest never coming. It says `dying worker PID` on
    stderr first; with `sigterm_parent`, it sends SIGTERM to the training process 1 s after
    the broken message, while that process waits for the rest, and dies 1 s later."""
    import struct
    import sys
    import time

    from torch.utils.data import get_worker_info

    from bertcore.training.data.masking import PretrainingCollator

    original, calls = PretrainingCollator.arrays, []

    def arrays(self, items):
        worker = get_worker_info()
        if worker is not None and worker.id == 0:
            calls.append(1)
            if len(calls) == nth:
                print(f"dying worker {os.getpid()}", file=sys.stderr, flush=True)
                pipe = _worker_data_queue()._writer.fileno()
                os.write(pipe, struct.pack("!i", 1 << 24) + b"\0" * 64)  # of 16 MB
                if sigterm_parent:
                    time.sleep(1)
                    os.kill(os.getppid(), signal.SIGTERM)
                    time.sleep(1)
                _die()
        return original(self, items)

    PretrainingCollator.arrays = arrays


def _worker_data_queue():
    """The queue a DataLoader worker sends its batches into (its `_worker_loop`'s)."""
    import sys

    frame = sys._getframe()
    while frame.f_code.co_name != "_worker_loop":
        frame = frame.f_back
    return frame.f_locals["data_queue"]
