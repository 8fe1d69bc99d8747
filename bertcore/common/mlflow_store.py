"""An MLflow store checked before any MLflow call: an HTTP server that does not answer, or a
SQLite database that cannot be written, is one line in seconds (MLflow itself would retry,
then fail with a database traceback); a SQLite database locked by another process (an open
transaction: another stage, `mlflow ui`, a `sqlite3` shell) is waited for, up to
`$BERT_MLFLOW_LOCK_WAIT` seconds (`LOCK_WAIT_S` by default), then `StoreLocked`."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from bertcore.common.errors import BertError, first_line
from bertcore.common.held_logs import logs_held

# MLflow's own defaults retry a failed HTTP call 7 times with exponential backoff (minutes): a
# training loop cannot wait that long for a metric, so unless the user chose otherwise, fail fast
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
LOCK_WAIT_ENV = "BERT_MLFLOW_LOCK_WAIT"  # seconds a locked SQLite store is waited for
LOCK_WAIT_S = 60.0
# SQLite's words for a lock held by another connection (sqlite3, through SQLAlchemy and MLflow)
_LOCKED = ("database is locked", "database table is locked")
STORE_LOGGERS = ("mlflow", "sqlalchemy")  # what they log about a failed call is held back
_SCHEMELESS_URIS = ("databricks", "databricks-uc", "uc")  # MLflow's URIs without "://"
_LOCKED_CALL_WAIT_S = 20  # what MLflow waits on a locked SQLite store (its busy_timeout)


class StoreLocked(BertError):
    """A SQLite store that another process kept locked for longer than the wait."""

    def __init__(self, uri: str, waited: float):
        super().__init__(
            f"MLflow tracking store {uri} is locked: another process (a stage writing to it, "
            f"`mlflow ui`, a sqlite3 shell in a transaction) held it for {waited:g} s; "
            f"${LOCK_WAIT_ENV} sets how long to wait")
        self.uri = uri


def lock_wait_s() -> float:
    """How long a locked store is waited for: $BERT_MLFLOW_LOCK_WAIT, else LOCK_WAIT_S."""
    value = os.environ.get(LOCK_WAIT_ENV, "").strip()
    try:
        return max(0.0, float(value)) if value else LOCK_WAIT_S
    except ValueError:
        raise BertError(f"${LOCK_WAIT_ENV} is {value!r}: give a number of seconds") from None


def is_lock_error(exc: BaseException) -> bool:
    """Whether an error (MLflow's, SQLAlchemy's, sqlite3's) is a lock held by another."""
    text = str(exc).lower()
    return any(words in text for words in _LOCKED)


def wait_unlocked(uri: str) -> None:
    """Return once a SQLite store could be written (a write lock taken and given back at
    once), waiting up to `lock_wait_s()`; StoreLocked if it stays locked. Other stores, and a
    database that does not exist yet, return at once."""
    database = sqlite_path(uri)
    if database is None or not database.is_file():
        return
    wait = lock_wait_s()
    try:
        connection = sqlite3.connect(database, timeout=wait, isolation_level=None)
    except sqlite3.Error:
        return  # MLflow's own calls will tell what is wrong
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
    except sqlite3.OperationalError as exc:
        if is_lock_error(exc):
            raise StoreLocked(uri, wait) from None
    finally:
        connection.close()


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
    store that cannot answer or be written; a locked one waited for."""
    for key, value in _HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    _check_reachable(uri)
    _check_writable(uri)
    wait_unlocked(uri)


def retried_on_lock(uri: str, func, *args, **kwargs) -> None:
    """One MLflow call, what MLflow logs about it held back; a call that failed on a lock
    (MLflow's own wait, SQLite's busy timeout, ran out) is tried once more when the store
    can be written again (`wait_unlocked`: StoreLocked if it stays locked)."""
    try:
        with logs_held(STORE_LOGGERS):
            func(*args, **kwargs)
        return
    except Exception as exc:
        if not is_lock_error(exc):
            raise
    wait_unlocked(uri)
    with logs_held(STORE_LOGGERS):
        func(*args, **kwargs)


@contextlib.contextmanager
def store_errors(uri: str) -> Iterator[None]:
    """Around the calls that open a run: a failure of the store is one BertError, and what
    MLflow and SQLAlchemy log about it (a database traceback) is held back to debug level."""
    try:
        with logs_held(STORE_LOGGERS):
            yield
    except BertError:
        raise
    except Exception as exc:  # MlflowException, or the database's own (sqlalchemy) errors
        raise store_failed(uri, exc) from None


def store_failed(uri: str, exc: BaseException) -> BertError:
    """The one line for a store that failed at its first call. A URI without a scheme is a
    folder to MLflow (its file store, which MLflow 3 refuses unless told otherwise): say so
    before MLflow's own words, which carry their advice whole."""
    if is_lock_error(exc):  # locked again after the wait, for longer than MLflow waits
        return StoreLocked(uri, _LOCKED_CALL_WAIT_S)
    problem = first_line(exc)
    if len(urllib.parse.urlsplit(uri).scheme) <= 1 and uri not in _SCHEMELESS_URIS:  # C:\...
        problem = (f"{uri!r} has no scheme (sqlite:///FILE.db, http://HOST:PORT or "
                   f"file:///FOLDER), so MLflow took it for a folder of its file store: {problem}")
    return BertError(f"MLflow tracking store {uri} failed: {problem} (fix tracking.uri or "
                     "MLFLOW_TRACKING_URI)")
