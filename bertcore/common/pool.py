"""Tasks run in worker processes, their results taken in task order: `TaskRunner`; how many
workers a data stage runs: `worker_count`.

The data stages' outputs do not depend on the number of workers, because every task is a
pure function of its arguments and the results are consumed in the order of the tasks. For
the same reason a task whose worker died (killed: out of memory, `kill -9`) can run again,
once, in new workers, and give the same bytes.

Kept over `Executor.map`, which before Python 3.14 (no `buffersize`) submits every task at
once, and for that re-run (ARCHITECTURE.md, tests/stages/test_worker_faults.py): a killed worker
costs a warning, where a bare `BrokenProcessPool` would stop the stage.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from itertools import chain, islice

from bertcore.common.errors import BertError
from bertcore.common.fork_server import fork_server, leave_fork_server_to_stage, quiet_tracker
from bertcore.common.interrupt import (
    ctrl_c_held,
    ignore_interrupts_in_worker,
    signal_when_parent_dies,
)
from bertcore.common.processes import how_it_ended

log = logging.getLogger(__name__)

# Tasks handed to the pool ahead of the one whose result is awaited, per worker: enough to
# keep every worker busy, few enough that memory in flight stays bounded.
TASKS_AHEAD_PER_WORKER = 2


def available_cores() -> int:
    """The cores this process may run on (its affinity: a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def worker_count(requested: int, key: str) -> int:
    """`requested` (the value of `key`, e.g. corpus.workers), or one per core for 0. More
    than the cores is allowed, the output being the same, but warned of: the workers then
    take turns on the cores, each holding its own memory (64 on 2 cores ran 4x slower)."""
    cores = available_cores()
    if requested > cores:
        log.warning("%s: %d workers on the %d cores this stage may use take turns on them, "
                    "each with its own memory, and run slower than %d: set %s: 0 (one per "
                    "core)", key, requested, cores, cores, key)
    return requested or cores


class WorkerDied(BertError):
    """A worker process died running a task that had run once already in one that died."""


# How often a wait for a result looks for a dead worker, and how long a worker may be dead
# with the pool not broken before it is taken for wedged (`TaskRunner._wait`): the pool's
# own thread notices a death at once, unless the worker died sending its result.
WEDGE_CHECK_S = 0.5
WEDGED_AFTER_S = 5.0

# The board: a pid and a task number per worker of a pool (0: none), in memory its processes
# share: `BrokenProcessPool` says that a worker died, the board which task it was running.
# In a worker process: the board and this worker's task cell on it.
_board_row: tuple | None = None


def _task_of(board, pid: int) -> int:
    """The number of the task worker `pid` was running; 0: none."""
    with board.get_lock():
        cells = list(board)
    return dict(zip(cells[::2], cells[1::2], strict=True)).get(pid, 0)


def start_worker(cells, parent: int, environ: dict[str, str] | None = None) -> None:
    """A worker process's initializer: Ctrl-C is the parent's to handle, a worker whose
    parent (pid `parent`: the stage, or the fork server that forked it) is gone (killed
    outright, even before this worker started) ends at once and quietly instead of waiting
    for ever, and it takes a row of the pool's board (`cells`). `environ`: the stage's
    environment, for a worker forked with the server's."""
    global _board_row
    ignore_interrupts_in_worker()
    signal_when_parent_dies(signal.SIGKILL, parent)
    leave_fork_server_to_stage()
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    with cells.get_lock():
        row = next(i for i in range(0, len(cells), 2) if cells[i] == 0)
        cells[row] = os.getpid()
    _board_row = (cells, row + 1)


def _run_numbered(func: Callable, number: int, task: object):
    """`func(task)` in a worker, task `number` on the board while it runs."""
    cells, cell = _board_row
    cells[cell] = number
    try:
        return func(task)
    finally:
        cells[cell] = 0


@dataclass
class _InFlight:
    """A task handed to the pool, its number in the stream (from 1) and the times it was
    running in a worker that died."""

    number: int
    task: object
    future: Future
    deaths: int = 0


class TaskRunner:
    """`with TaskRunner(workers) as run:` then `run(func, tasks)` yields `func(task)` for each
    task, in task order: in this process with one worker, else in a pool of `workers`
    processes, with at most TASKS_AHEAD_PER_WORKER tasks per worker taken from `tasks` and
    not yet consumed, so that a long stream of tasks is never held in memory.

    `lazy`: start the pool only once a run has two tasks (a small input then spawns nothing).
    `preload`: modules the workers import (torch, ...): imported once, in a fork server
    (`fork_server`) that forks the workers, instead of by each worker spawned.
    A worker that dies breaks the pool (`BrokenProcessPool`): the tasks in flight without a
    result run again in a new pool; a task running in a worker that dies a second time
    stops the work (`WorkerDied`, naming the worker and the task: its `where`, if it has
    one).
    On SIGTERM or Ctrl-C (`bertcore.common.interrupt`) the parent stops the pool on the way out
    (`__exit__`); the workers ignore Ctrl-C and leave it to the parent. It waits for the tasks
    running then, unless they are `long` (a fine-tune: minutes): then it ends their workers
    at once, and their tasks are lost.
    """

    def __init__(self, workers: int, lazy: bool = False, long: bool = False,
                 preload: Sequence[str] = ()):
        self.workers = workers
        self.lazy = lazy
        self.long = long
        self.preload = tuple(preload)
        self.pool: ProcessPoolExecutor | None = None
        self.board = None  # the pool's board: a shared array of (pid, task) rows
        self.processes: dict = {}  # pid -> Process, of the current pool

    def __enter__(self) -> Callable[[Callable, Iterable], Iterator]:
        if self.workers > 1 and not self.lazy:
            self._start()
        return self.run

    def __exit__(self, *exc) -> None:
        if self.pool is None:
            return
        if exc[0] is not None and self.long:
            self._unwedge()  # ends the workers, and the pool's thread does not wait for them
        self._stop(cancel=exc[0] is not None)

    def run(self, func: Callable, tasks: Iterable) -> Iterator:
        """`func(task)` for each task, in task order (the tasks numbered from 1)."""
        if self.workers == 1:
            yield from map(func, tasks)
            return
        numbered = enumerate(tasks, start=1)
        if self.pool is None:  # lazy: a pool only once there is a second task
            first = list(islice(numbered, 2))
            if len(first) < 2:
                yield from (func(task) for _, task in first)
                return
            numbered = chain(first, numbered)
            self._start()
        pending: deque[_InFlight] = deque()
        for number, task in numbered:
            pending.append(self._submit(func, number, task, pending))
            if len(pending) >= TASKS_AHEAD_PER_WORKER * self.workers:
                yield self._result(func, pending)
        while pending:
            yield self._result(func, pending)

    def _submit(self, func: Callable, number: int, task: object, pending: deque) -> _InFlight:
        """Hand `task` to the pool; a pool found broken is replaced and `pending` resubmitted."""
        try:
            future = self._hand(func, number, task)
        except BrokenProcessPool:
            self._rerun(func, pending)
            future = self._hand(func, number, task)
        return _InFlight(number, task, future)

    def _hand(self, func: Callable, number: int, task: object) -> Future:
        with ctrl_c_held():  # a submit may start a worker
            future = self.pool.submit(_run_numbered, func, number, task)
        self.processes.update(self.pool._processes)  # the workers started so far
        return future

    def _result(self, func: Callable, pending: deque):
        """The first pending task's result, its tasks rerun in a new pool if a worker died."""
        while True:
            try:
                result = self._wait(pending[0].future)
            except BrokenProcessPool:
                self._rerun(func, pending)
                continue
            pending.popleft()
            return result

    def _wait(self, future: Future):
        """`future.result()`, or BrokenProcessPool once the pool is wedged: a worker killed
        while it sends a result leaves the pool's thread waiting for the rest of the message
        and the other workers waiting for the queue's lock it held, for ever (CPython 3.11).
        A worker dead for WEDGED_AFTER_S with the pool not broken is taken for that."""
        dead_since = None
        while True:
            try:
                return future.result(timeout=WEDGE_CHECK_S)
            except TimeoutError:
                pass
            if not any(p.exitcode is not None for p in self.processes.values()):
                dead_since = None
            elif dead_since is None:
                dead_since = time.monotonic()
            elif time.monotonic() - dead_since > WEDGED_AFTER_S:
                self._unwedge()

    def _unwedge(self) -> None:
        """End the wedged pool's other workers (SIGTERM: not taken for the one that died)
        and close this process's end of the results pipe, the last one open: the pool's
        thread then reads the end of the pipe, and the pool breaks as for any death."""
        for process in self.processes.values():
            if process.exitcode is None:
                process.terminate()
        for process in self.processes.values():
            process.join()
        self.pool._result_queue._writer.close()

    def _rerun(self, func: Callable, pending: deque) -> None:
        """A worker died: run the tasks in flight that have no result again in a new pool,
        unless the dead worker's task had run in one that died already (`WorkerDied`). A
        worker not found (no pid) may have run any of them: each counts a death."""
        pid, how = self._dead_worker()
        dead = f"{pid} ({how})" if pid else "(pid unknown)"
        lost = [item for item in pending if not _has_result(item.future)]
        number = _task_of(self.board, pid) if pid else 0
        suspects = [item for item in lost if item.number == number] if pid else lost
        for item in suspects:
            if item.deaths:
                raise WorkerDied(f"worker process {dead} died running task {item.number}"
                                 f"{_where(item.task)}, which had run once already in a "
                                 "worker that died")
            item.deaths += 1
        running = (f" running task {suspects[0].number}{_where(suspects[0].task)}"
                   if len(suspects) == 1 else "")
        log.warning("worker process %s died%s: %d task(s) in flight run again in new workers",
                    dead, running, len(lost))
        self._stop(cancel=True)
        self._start()
        for item in lost:
            item.future = self._hand(func, item.number, item.task)

    def _dead_worker(self) -> tuple[int, str]:
        """(pid, how it ended) of the worker that died (one that ended by itself rather than
        those the broken pool terminated after it); pid 0 when none is found. Its exit code
        may take a moment: the pool's own thread may be reaping it just then."""
        deadline = time.monotonic() + 1
        while True:
            ended = [(pid, p.exitcode) for pid, p in self.processes.items()
                     if p.exitcode is not None]
            # the ones it terminated may be reaped before the one that died: wait for that one
            if any(code != -signal.SIGTERM for _, code in ended) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if not ended:
            return 0, ""
        pid, code = min(ended, key=lambda e: e[1] == -signal.SIGTERM)
        return pid, how_it_ended(code)

    def _start(self) -> None:
        # not forked from this process: it may hold threads (tokenizers', torch's), which a
        # fork loses; spawned, or with `preload`, forked from a fork server that holds none
        if self.preload:
            (context, parent), environ = fork_server(self.preload), dict(os.environ)
        else:
            context, parent, environ = multiprocessing.get_context("spawn"), os.getpid(), None
            quiet_tracker()
        self.board = context.Array("q", 2 * self.workers)
        self.pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=start_worker,
                                        initargs=(self.board, parent, environ))
        self.processes = {}

    def _stop(self, cancel: bool) -> None:
        """Shut the pool down after its tasks, or (`cancel`) after those running (tasks are
        short). Never by terminating its workers: one stopped while it sends a result
        leaves the pool's thread waiting for the rest of it, and the process never ends."""
        pool, self.pool = self.pool, None
        pool.shutdown(wait=True, cancel_futures=cancel)


def _has_result(future: Future) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


def _where(task: object) -> str:
    """" (what the task works on)" for a task with a `where`, else nothing."""
    where = getattr(task, "where", None)
    return f" ({where})" if where else ""
