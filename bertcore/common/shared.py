"""Values that every task of a worker pool reads (a model's weights, a task's examples), sent
to each worker once instead of with every task: `Shared`.

A task handed to a pool is pickled whole, each time (`pool.TaskRunner`): a model in it would
cross to a worker once per task, at the cost of loading it. A `Shared` value is pickled once,
into a private folder (`shared_folder`), and what a task carries is its path: a worker reads
the file at its first task that needs it and keeps the value for the next ones (the last
`KEPT` values read, so that a suite over many tasks does not hold every task's examples). With
tasks run in this process (one worker: no folder) the value is the object itself.

The files are this process's own, written a moment before into a folder only its user can
read, and read by its own workers: the pickle a pool's queue sends them anyway.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# values a worker keeps once read (the most recent): a model and a task's examples or two
KEPT = 3
_read: OrderedDict[str, Any] = OrderedDict()  # in a worker: path -> value


class Shared:
    """`value` for the tasks of a pool: `get()` gives it. With a `folder`, `pack(value)` is
    pickled into it, and in a worker `get()` gives `unpack(packed)`, read once per worker
    (both module-level functions; by default the value itself)."""

    def __init__(self, value: Any, folder: Path | None,
                 pack: Callable[[Any], Any] | None = None,
                 unpack: Callable[[Any], Any] | None = None):
        self.path: str | None = None
        self._value = value
        if folder is not None:
            with tempfile.NamedTemporaryFile(dir=folder, suffix=".pickle", delete=False) as out:
                pickle.dump((unpack, pack(value) if pack else value), out,
                            protocol=pickle.HIGHEST_PROTOCOL)
            self.path = out.name

    def __getstate__(self) -> dict:
        if self.path is None:
            raise TypeError("a Shared value without a folder stays in its process")
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.path, self._value = state["path"], _NOT_READ

    def get(self) -> Any:
        if self._value is not _NOT_READ:
            return self._value
        if self.path not in _read:
            while len(_read) >= KEPT:
                _read.popitem(last=False)
            unpack, packed = pickle.loads(Path(self.path).read_bytes())
            _read[self.path] = unpack(packed) if unpack else packed
        _read.move_to_end(self.path)
        return _read[self.path]


_NOT_READ = object()


@contextmanager
def shared_folder(workers: int) -> Iterator[Path | None]:
    """A private folder for the `Shared` values of a pool of `workers` processes while it
    runs, removed after (None with one worker: its tasks run in this process)."""
    if workers <= 1:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="bert-shared-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
