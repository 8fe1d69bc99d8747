"""MLflow tracking against real stores (SQLite files, an unreachable HTTP server)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading

import pytest
from conftest import REPO, assert_one_line_error
from mlflow.tracking import MlflowClient
from tiny_pretrain import build_data, write_params
from unprivileged import without_root_powers

from bertcore.common.errors import BertError
from bertcore.common.tracking import Tracker, resolve_uri, sqlite_uri
from stages.repo import repo_root


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite store for the module (creating one takes seconds)."""
    folder = tmp_path_factory.mktemp("mlflow")
    return folder, sqlite_uri(folder / "mlflow.db")


def test_uri_precedence(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_uri(None, "sqlite:///d.db") == "sqlite:///d.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env:5000")
    assert resolve_uri(None, "sqlite:///d.db") == "http://env:5000"
    assert resolve_uri("http://param:5000", "sqlite:///d.db") == "http://param:5000"


def test_repo_root_leaves_dvc_experiment_copies(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / ".dvc" / "tmp" / "exps" / "tmpab12" / "stages").mkdir(parents=True)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    assert repo_root(root / ".dvc" / "tmp" / "exps" / "tmpab12") == root
    assert repo_root(root / ".dvc" / "tmp" / "exps" / "tmpab12" / "stages") == root
    assert repo_root(root / ".dvc" / "tmp" / "exps" / "run" / "x") == root
    (root / "sub").mkdir()
    assert repo_root(root / "sub") == root  # the folder holding .dvc
    monkeypatch.setenv("DVC_ROOT", str(root / ".dvc" / "tmp" / "exps" / "tmpab12"))
    assert repo_root() == root


def test_a_run_logs_params_tags_metrics_and_resumes(store, tmp_path):
    folder, uri = store
    params = {"train.learning_rate": 0.001, "train.batch_size": 32, "tracking.uri": None}
    tracker = Tracker.start(uri, "exp", run_name="first", params=params,
                            tags={"DVC_STAGE": "pretrain", "DVC_EXP_NAME": None})
    tracker.log_metrics({"train/loss": 5.0, "lr": 0.1}, step=1)
    tracker.log_metrics({"train/loss": 4.0, "lr": 0.2}, step=2)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "meta.json").write_text("{}")
    tracker.log_artifacts(tmp_path / "ckpt", "checkpoints/step-2")
    tracker.finish("KILLED")

    # resume: same run, params kept (logging them again with other values would fail)
    resumed = Tracker.start(uri, "exp", run_id=tracker.run_id,
                            params={"train.learning_rate": 0.5}, tags={"resumed": "yes"})
    assert resumed.run_id == tracker.run_id
    resumed.log_metrics({"train/loss": 3.0}, step=3)
    resumed.finish()

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"train.learning_rate": "0.001", "train.batch_size": "32",
                               "tracking.uri": "null"}
    assert run.data.tags["DVC_STAGE"] == "pretrain" and run.data.tags["resumed"] == "yes"
    assert "DVC_EXP_NAME" not in run.data.tags
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [(m.step, m.value) for m in history] == [(1, 5.0), (2, 4.0), (3, 3.0)]
    assert [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints/step-2")] == [
        "checkpoints/step-2/meta.json"
    ]
    assert (folder / "mlartifacts").is_dir()  # next to the database

    # a run id the store does not know: a new run, and attach() says None
    other = Tracker.start(uri, "exp", run_id="0" * 32)
    assert other.run_id != tracker.run_id
    assert Tracker.attach(uri, "0" * 32) is None
    assert Tracker.attach(uri, tracker.run_id).run_id == tracker.run_id


def test_unreachable_server_at_start_is_one_clear_error():
    with pytest.raises(BertError, match=r"http://127\.0\.0\.1:9 is unreachable"):
        Tracker.start("http://127.0.0.1:9", "exp")
    with pytest.raises(BertError, match="unreachable"):
        Tracker.attach("http://127.0.0.1:9", "abc")


def test_a_server_that_hangs_up_is_tried_once_not_retried_for_minutes():
    """A server that accepts and closes every connection: one attempt, then the error (MLflow's
    own client would retry with exponential backoff for minutes)."""
    attempts = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.2)

        def hang_up():
            while not stop.is_set():
                try:
                    connection, _ = server.accept()
                except TimeoutError:
                    continue
                attempts.append(1)
                connection.close()

        stop = threading.Event()
        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        uri = f"http://127.0.0.1:{server.getsockname()[1]}"
        try:
            with pytest.raises(BertError, match="unreachable"):
                Tracker.start(uri, "exp")
            with pytest.raises(BertError, match="unreachable"):
                Tracker.attach(uri, "abc")
        finally:
            stop.set()
            thread.join()
    assert len(attempts) == 2


def test_a_store_lost_mid_run_warns_once_and_training_goes_on(store, tmp_path, monkeypatch,
                                                              caplog):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    tracker = Tracker.start(store[1], "exp")
    tracker.log_metrics({"x": 1.0}, step=1)
    # the store goes away: from now on the client talks to a server that does not answer
    tracker.client = MlflowClient(tracking_uri="http://127.0.0.1:9")
    with caplog.at_level(logging.WARNING, logger="bertcore.common.tracking"):
        tracker.log_metrics({"x": 2.0}, step=2)
        tracker.log_metrics({"x": 3.0}, step=3)
        tracker.log_artifacts(tmp_path, "nothing")
        tracker.finish()
    assert tracker.lost
    warnings = [r for r in caplog.records if "stopped answering" in r.getMessage()]
    assert len(warnings) == 1


def test_a_read_only_store_is_one_line_at_start_up(tmp_path, mlflow_db):
    build_data(tmp_path)
    write_params(tmp_path / "params.yaml", tracking={"experiment": "read-only"})
    mlflow_db(tmp_path)
    Tracker.start(sqlite_uri(tmp_path / "mlflow.db"), "read-only").finish()  # a real store
    prefix = without_root_powers()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    (tmp_path / "mlflow.db").chmod(0o444)
    proc = subprocess.run([*prefix, sys.executable, "-m", "stages", "pretrain"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert_one_line_error(proc, "mlflow.db cannot be written", "mlflow.db is read-only",
                          "tracking.enabled: false")
    assert not (tmp_path / "models").exists()  # before any training
    # a writable file in a read-only folder: SQLite cannot write its journal there
    (tmp_path / "mlflow.db").chmod(0o644)
    (tmp_path / "models").mkdir()
    tmp_path.chmod(0o555)
    try:
        proc = subprocess.run([*prefix, sys.executable, "-m", "stages", "pretrain"],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        tmp_path.chmod(0o755)
    assert_one_line_error(proc, f"its folder {tmp_path} is not writable")
