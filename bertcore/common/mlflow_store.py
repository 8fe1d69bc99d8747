"""An MLflow store checked before any MLflow call: an HTTP server that does not answer, or a
SQLite database that cannot be written, is one line in seconds (MLflow itself would retry,
then fail with a database traceback)."""

from __future__ import annotations

import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from bertcore.common.errors import BertError

# MLflow's own defaults retry a failed HTTP call 7 times with exponential backoff (minutes): a
# training loop cannot wait that long for a metric, so unless the user chose otherwise, fail fast
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI; None for any other store."""
    return Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None


def _check_reachable(uri: str) -> None:
    """Fail in seconds when an HTTP tracking server does not answer at all."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=10).close()
    except urllib.error.HTTPError:
        return  # it answered (perhaps 401/404): reachable; MLflow's own calls will tell more
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BertError(
            f"MLflow tracking server {uri} is unreachable ({reason}): start it, or set "
            "tracking.uri (or MLFLOW_TRACKING_URI) to a reachable store"
        ) from None


def _check_writable(uri: str) -> None:
    """Fail at once when a SQLite store cannot be written (MLflow would retry, then fail
    with a database traceback). SQLite writes the database file and a journal beside it."""
    database = sqlite_path(uri)
    if database is None:
        return
    try:
        if database.exists():
            open(database, "r+b").close()
    except OSError as exc:
        problem = f"{database} is read-only ({exc.strerror or exc})"
    else:
        try:
            tempfile.TemporaryFile(dir=database.parent).close()
            return
        except OSError as exc:
            problem = f"its folder {database.parent} is not writable ({exc.strerror or exc})"
    raise BertError(
        f"MLflow tracking store {uri} cannot be written: {problem}; make it writable, point "
        "tracking.uri (or MLFLOW_TRACKING_URI) elsewhere, or set tracking.enabled: false"
    )


def open_store(uri: str) -> None:
    """Before any MLflow call: HTTP timeouts that fail in seconds, and one line now for a
    store that cannot answer or be written."""
    for key, value in _HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    _check_reachable(uri)
    _check_writable(uri)
