"""Results bound for an MLflow run that the store did not take (locked, full, gone), kept on
disk until it does: the next stage that reaches the store logs them (`tracking.py`'s
`flush_pending`), or `bert mlflow-sync`.

A run's results (`RunResults`) are its one-point metrics at a step, the files uploaded beside
them and, for a stage's report, the tag that says the run holds it (`done_tag`), which makes
logging them twice log them once. A record is a folder in the store's pending folder
(`pending_dir`): `results.json` and a copy of each file as it was when the stage wrote it,
written whole (`common/atomic.py`) and removed once logged. The run is named by its id, or,
when the store could not even be searched, by a tag it carries (`model.sha256`: the run
that wrote the weights scored), looked up when the record is logged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertcore.common.atomic import atomic_dir, dump_json
from bertcore.common.errors import BertError
from bertcore.common.mlflow_store import sqlite_path
from bertcore.common.null_tracker import NullTracker

RECORD_FILE = "results.json"


@dataclass(frozen=True)
class RunResults:
    """What one logging of results puts into a run: `results` (one-point metrics at `step`,
    with the time they were made, so that logging them again adds no point), `files`
    uploaded under `artifact_path`, then `done_tag` (name, value), the sign they are there.
    `link_model`: the metrics are also the run's logged model's (MLflow 3's model page)."""

    results: Mapping[str, float]
    step: int
    files: tuple[Path, ...] = ()
    artifact_path: str = "metrics"
    done_tag: tuple[str, str] | None = None
    link_model: bool = False
    timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))


@dataclass(frozen=True)
class PendingRecord:
    """Results kept for run `run_id`, or for the latest run whose tag `run_tag` has its value."""

    folder: Path
    results: RunResults
    run_id: str | None = None
    run_tag: tuple[str, str] | None = None


def pending_dir(uri: str) -> Path:
    """Where a store's pending results wait: beside a SQLite database (`mlflow.db.pending/`),
    else in the user's cache, one folder per store."""
    database = sqlite_path(uri)
    if database is not None:
        return database.with_name(database.name + ".pending")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "bert" / "mlflow-pending" / hashlib.sha256(uri.encode()).hexdigest()[:16]


def keep_pending(uri: str, results: RunResults, *, run_id: str | None = None,
                 run_tag: tuple[str, str] | None = None) -> Path:
    """Keep `results` for run `run_id` (or the run tagged `run_tag`) of the store `uri` until
    it takes them; returns the record's folder. The files are copied as they are now."""
    name = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    folder = pending_dir(uri) / name
    with atomic_dir(folder, "free space there, or set tracking.enabled: false") as staging:
        for path in results.files:
            shutil.copy2(path, staging / Path(path).name)
        record = {"run_id": run_id, "run_tag": list(run_tag) if run_tag else None,
                  **dataclasses.asdict(results),
                  "results": {key: float(value) for key, value in results.results.items()
                              if value is not None},
                  "files": [Path(path).name for path in results.files],
                  "done_tag": list(results.done_tag) if results.done_tag else None}
        with open(staging / RECORD_FILE, "w", encoding="utf-8") as handle:
            dump_json(handle, record, sort_keys=False)
    return folder


def pending_records(uri: str) -> Iterator[PendingRecord]:
    """The store's pending records, oldest first (a record half written is not one yet)."""
    root = pending_dir(uri)
    if not root.is_dir():
        return
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not (folder / RECORD_FILE).is_file():
            continue
        data = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
        results = RunResults(
            results=data["results"], step=data["step"],
            files=tuple(folder / name for name in data["files"]),
            artifact_path=data["artifact_path"],
            done_tag=tuple(data["done_tag"]) if data["done_tag"] else None,
            link_model=data["link_model"], timestamp_ms=data["timestamp_ms"])
        yield PendingRecord(folder, results, data["run_id"],
                            tuple(data["run_tag"]) if data["run_tag"] else None)


def drop_record(record: PendingRecord) -> None:
    """Remove a record once its results are logged (or its run is gone)."""
    shutil.rmtree(record.folder, ignore_errors=True)
    root = record.folder.parent
    if root.is_dir() and not any(root.iterdir()):
        root.rmdir()


class PendingRun(NullTracker):
    """The run a stage's results are bound for when the store could not even be searched for
    it (locked): the latest run whose tag `tag` is `value`. Its results are kept
    (`keep_pending`); it opens no child run (`error`, the store's failure, is raised)."""

    def __init__(self, uri: str, tag: str, value: str, error: BertError):
        self.uri, self.tag, self.value, self.error = uri, tag, value, error

    def start_child(self, run_name: str, **kwargs: Any) -> NullTracker:
        raise self.error

    def log_report(self, results: RunResults) -> bool:
        keep_pending(self.uri, results, run_tag=(self.tag, self.value))
        return False  # not logged yet

    def log_results(self, results: Mapping[str, float], step: int) -> None:
        self.log_report(RunResults(results, step))
