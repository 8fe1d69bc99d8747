"""A SQLite MLflow store held locked by another connection (an open `BEGIN EXCLUSIVE`, as a
`sqlite3` shell or another process writing leaves it): a stage's report waits for it, and when
the lock outlasts the wait, the report is kept and logged later, by the next stage that reaches
the store or by `bert mlflow-sync`. No result is lost, and the warning says it is a lock."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from bertcore.common.digests import file_sha256
from bertcore.common.mlflow_store import LOCK_WAIT_ENV
from bertcore.common.pending import pending_dir
from bertcore.common.tracking import Tracker, TrackingTarget, sqlite_uri
from bertcore.saved.model_run import MODEL_TAG
from bertcore.saved.run_reports import log_report_into, report_run
from bertstages.cli import cli

REPORT = {"mlm_accuracy": 0.25, "mlm_accuracy_ci95": [0.2, 0.3], "nsp_accuracy": 0.5}


@pytest.fixture
def logged(tmp_path, mlflow_db):
    """A store with a finished pretraining run that wrote the model in model/, and an
    evaluate report of that model in metrics/; returns (uri, run id, model dir, files)."""
    uri = sqlite_uri(mlflow_db(tmp_path))
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "training.json").write_text(json.dumps({"step": 12}))
    run = Tracker.start(uri, "locked", run_name="pretrain",
                        tags={MODEL_TAG: file_sha256(model / "model.safetensors")})
    run.finish()
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "eval.json").write_text(json.dumps({"eval": REPORT}))
    (metrics / "eval_details.json").write_text(json.dumps({"mlm_baseline_accuracy": 0.1}))
    return uri, run.run_id, model, (metrics / "eval.json", metrics / "eval_details.json")


class Lock:
    """An exclusive transaction on the database, from another connection (and thread)."""

    def __init__(self, database: Path):
        self.connection = sqlite3.connect(database, isolation_level=None,
                                          check_same_thread=False)
        self.connection.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        self.connection.execute("ROLLBACK")
        self.connection.close()

    def release_after(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self.release)
        timer.start()
        return timer


def _database(uri: str) -> Path:
    return Path(uri[len("sqlite:///"):])


def _evaluate_logs(uri: str, model: Path, files, caplog) -> None:
    """What evaluate (and probe) do with their report: find the model's run, log into it."""
    with caplog.at_level(logging.WARNING):
        tracker, step = report_run(TrackingTarget(uri, "locked"), model, files[0],
                                   logging.getLogger("bert.evaluate"))
        log_report_into(tracker, step, files, REPORT, "eval")


def _results(uri: str, run_id: str) -> dict:
    return MlflowClient(uri).get_run(run_id).data.metrics


def test_a_lock_released_within_the_wait_is_waited_for(logged, monkeypatch, caplog):
    uri, run_id, model, files = logged
    monkeypatch.setenv(LOCK_WAIT_ENV, "30")
    lock = Lock(_database(uri))
    timer = lock.release_after(1.5)
    started = time.monotonic()
    _evaluate_logs(uri, model, files, caplog)
    timer.join()

    assert time.monotonic() - started >= 1.5  # it waited for the lock, then logged
    assert _results(uri, run_id)["eval_mlm_accuracy"] == 0.25
    assert _results(uri, run_id)["eval_mlm_accuracy_ci95_high"] == 0.3
    assert not pending_dir(uri).exists()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_lock_held_past_the_wait_keeps_the_report_for_the_next_stage(logged, monkeypatch,
                                                                        caplog):
    uri, run_id, model, files = logged
    monkeypatch.setenv(LOCK_WAIT_ENV, "0.5")
    lock = Lock(_database(uri))
    try:
        _evaluate_logs(uri, model, files, caplog)
    finally:
        lock.release()

    # one warning, which says it is a lock and where the report waits, not "fix tracking.uri"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "is locked" in warnings[0] and str(pending_dir(uri)) in warnings[0], warnings[0]
    assert "bert mlflow-sync" in warnings[0] and "tracking.uri or" not in warnings[0]
    assert "eval_mlm_accuracy" not in _results(uri, run_id)
    # the files kept as they were: evaluate may run again before the store is free
    files[0].write_text(json.dumps({"eval": {"mlm_accuracy": 0.9}}))

    # the next stage that reaches the store (here: a search for a run) logs it, once
    Tracker.find(uri, MODEL_TAG, "another model")
    Tracker.find(uri, MODEL_TAG, "another model")
    client = MlflowClient(uri)
    assert [m.value for m in client.get_metric_history(run_id, "eval_mlm_accuracy")] == [0.25]
    assert [m.step for m in client.get_metric_history(run_id, "eval_nsp_accuracy")] == [12]
    artifact = client.download_artifacts(run_id, "metrics/eval.json", str(files[0].parent.parent
                                                                          / "dl"))
    assert json.loads(Path(artifact).read_text())["eval"] == REPORT
    assert not pending_dir(uri).exists()


def test_bert_mlflow_sync_logs_what_waited_and_says_a_lock_in_one_line(logged, monkeypatch,
                                                                        caplog):
    uri, run_id, model, files = logged
    monkeypatch.setenv(LOCK_WAIT_ENV, "0.5")
    params = files[0].parent.parent / "params.yaml"
    params.write_text(f"tracking:\n  uri: {uri}\n")
    sync = ["mlflow-sync", "--params", str(params)]
    lock = Lock(_database(uri))
    try:
        _evaluate_logs(uri, model, files, caplog)
        still = CliRunner().invoke(cli, sync)
    finally:
        lock.release()
    assert still.exit_code != 0 and "Traceback" not in still.output
    assert "is locked" in still.output and len(still.output.strip().splitlines()) == 1, (
        still.output)
    assert "eval_mlm_accuracy" not in _results(uri, run_id)

    synced = CliRunner().invoke(cli, sync)
    assert synced.exit_code == 0, synced.output
    assert "logged 1 pending result(s)" in synced.output
    assert _results(uri, run_id)["eval_mlm_accuracy"] == 0.25
    again = CliRunner().invoke(cli, sync)
    assert "nothing waits" in again.output
