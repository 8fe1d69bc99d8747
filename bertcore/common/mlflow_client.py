"""A client of an MLflow store (`store_client`): the store checked first (`open_store`: MLflow
itself would retry for minutes, or fail with a database traceback), then the results it did
not take earlier logged (`flush_pending`), so every client of the store delivers them. And
what is read of a store with no run open: a run's record downloaded (`download_run`, for
`bert compare`), the results still pending synced (`sync_pending`, `bert mlflow-sync`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bertcore.common.mlflow_store import open_store, sqlite_path, store_errors
from bertcore.common.pending import pending_records
from bertcore.common.run_results import flush_pending


def store_client(uri: str) -> Any:
    """A client of the store `uri`, checked first, its pending results logged."""
    open_store(uri)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    flush_pending(client, uri)
    return client


@dataclass(frozen=True)
class RunRecord:
    """What a finished run holds that a later reader needs: its params and tags."""

    run_id: str
    params: Mapping[str, str]
    tags: Mapping[str, str]


def download_run(uri: str, run_id: str, artifact_path: str,
                 dst: str | os.PathLike) -> RunRecord | None:
    """Run `run_id`'s artifacts under `artifact_path`, downloaded into `dst`, and its params
    and tags; None when the store has no such run (a SQLite store that does not exist has
    none, and is not created). A store that fails is one BertError."""
    database = sqlite_path(uri)
    if database is not None and not database.exists():
        return None
    from mlflow.exceptions import MlflowException

    with store_errors(uri):
        client = store_client(uri)
        try:
            run = client.get_run(run_id)
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return None
            raise
        if client.list_artifacts(run_id, artifact_path):
            client.download_artifacts(run_id, artifact_path, str(dst))
    return RunRecord(run_id, dict(run.data.params), dict(run.data.tags))


def sync_pending(uri: str) -> tuple[int, int]:
    """`bert mlflow-sync`: log into the store `uri` the results kept while it did not take
    them (`flush_pending`); returns how many records were logged and how many still wait. A
    store that fails (locked past the wait, unreachable) is one BertError."""
    before = len(list(pending_records(uri)))
    if before:
        with store_errors(uri):
            store_client(uri)  # which logs them
    left = len(list(pending_records(uri)))
    return before - left, left
