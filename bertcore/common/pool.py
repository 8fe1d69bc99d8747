"""Tasks run in worker processes, their results taken in task order: `TaskRunner`.

The data stages' outputs do not depend on the number of workers, because every task is a
pure function of its arguments and the results are consumed in the order of the tasks.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from bertcore.common.interrupt import ignore_interrupts_in_worker

# Tasks handed to the pool ahead of the one whose result is awaited, per worker: enough to
# keep every worker busy, few enough that memory in flight stays bounded.
TASKS_AHEAD_PER_WORKER = 2


def available_cores() -> int:
    """The cores this process may run on (its affinity: a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class TaskRunner:
    """`with TaskRunner(workers) as run:` then `run(func, tasks)` yields `func(task)` for each
    task, in task order: in this process with one worker, else in a pool of `workers`
    processes, with at most TASKS_AHEAD_PER_WORKER tasks per worker taken from `tasks` and
    not yet consumed, so that a long stream of tasks is never held in memory.

    `lazy`: start the pool only once there are two tasks (a small input then spawns nothing).
    Tasks for which `in_parent` holds run in this process, in their turn (see `run`).
    On SIGTERM or Ctrl-C (`bertcore.common.interrupt`) the parent stops the pool on the way out
    (`__exit__`); the workers ignore Ctrl-C and leave it to the parent.
    """

    def __init__(self, workers: int, lazy: bool = False):
        self.workers = workers
        self.lazy = lazy
        self.pool = None

    def __enter__(self) -> Callable[[Callable, Iterable], Iterator]:
        if self.workers > 1 and not self.lazy:
            self._start()
        return self.run

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.terminate() if exc[0] else self.pool.close()
            self.pool.join()

    def run(self, func: Callable, tasks: Iterable,
            in_parent: Callable[[object], bool] | None = None) -> Iterator:
        """`in_parent(task)` true: run that task here, once the results before it are taken,
        and take the next task only once its result is (it may share state with the stream
        of tasks: a file being read)."""
        if self.workers == 1:
            yield from map(func, tasks)
            return
        waiting = None  # lazy: the first task, until a second one makes a pool worth it
        pending = deque()
        for task in tasks:
            if in_parent is not None and in_parent(task):
                yield from self._finish(func, pending, waiting)
                waiting = None
                yield func(task)
            elif self.pool is None and waiting is None:
                waiting = task
            else:
                self._start()
                for ready in (waiting, task) if waiting is not None else (task,):
                    pending.append(self.pool.apply_async(func, (ready,)))
                waiting = None
                if len(pending) >= TASKS_AHEAD_PER_WORKER * self.workers:
                    yield pending.popleft().get()
        yield from self._finish(func, pending, waiting)

    @staticmethod
    def _finish(func: Callable, pending: deque, waiting) -> Iterator:
        """The results of the tasks given so far: those in the pool, or the one held here."""
        while pending:
            yield pending.popleft().get()
        if waiting is not None:
            yield func(waiting)

    def _start(self) -> None:
        if self.pool is None:
            # spawn: the parent may hold threads (tokenizers', torch's), which a fork loses.
            self.pool = multiprocessing.get_context("spawn").Pool(
                self.workers, initializer=ignore_interrupts_in_worker)

