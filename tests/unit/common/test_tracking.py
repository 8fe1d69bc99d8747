"""MLflow tracking against real stores (SQLite files, an unreachable HTTP server)."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading

import pytest
from helpers.bert import REPO, assert_one_line_error
from helpers.tiny_fs import bert_on_tiny_fs, needs_mounts
from helpers.tiny_pretrain import build_data, write_params
from helpers.unprivileged import without_root_powers
from mlflow.tracking import MlflowClient

from bertcore.common.errors import BertError
from bertcore.common.tracking import (
    CLOSED_TAG,
    PROCESS_TAG,
    Tracker,
    resolve_uri,
    sqlite_uri,
)
from bertcore.downstream.tracking import child_run_name
from bertcore.training.checkpoints.identity import RunIdentity, run_name
from bertstages.repo import experiment_name, repo_root


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

    # a run id the store does not know: a new run; a run no tag names: find() says None
    other = Tracker.start(uri, "exp", run_id="0" * 32)
    assert other.run_id != tracker.run_id
    assert Tracker.find(uri, "resumed", "0" * 32) is None
    assert Tracker.find(uri, "resumed", "yes").run_id == tracker.run_id


def test_unreachable_server_at_start_is_one_clear_error():
    with pytest.raises(BertError, match=r"http://127\.0\.0\.1:9 is unreachable"):
        Tracker.start("http://127.0.0.1:9", "exp")
    with pytest.raises(BertError, match="unreachable"):
        Tracker.find("http://127.0.0.1:9", "model.sha256", "abc")


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
                Tracker.find(uri, "model.sha256", "abc")
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
    proc = subprocess.run([*prefix, sys.executable, "-m", "bertstages", "pretrain"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert_one_line_error(proc, "mlflow.db cannot be written", "mlflow.db is read-only",
                          "tracking.enabled: false")
    assert not (tmp_path / "models").exists()  # before any training
    # a writable file in a read-only folder: SQLite cannot write its journal there
    (tmp_path / "mlflow.db").chmod(0o644)
    (tmp_path / "models").mkdir()
    tmp_path.chmod(0o555)
    try:
        proc = subprocess.run([*prefix, sys.executable, "-m", "bertstages", "pretrain"],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        tmp_path.chmod(0o755)
    assert_one_line_error(proc, f"its folder {tmp_path} is not writable")


def test_a_store_that_fails_is_not_a_run_that_is_gone(tmp_path, mlflow_db):
    """A store whose tables cannot be read fails in one line; it does not pass for a store
    that has no such run (which would start a new run, or log nothing, without a word of
    the failure)."""
    database = mlflow_db(tmp_path)
    uri = sqlite_uri(database)
    run_id = Tracker.start(uri, "broken").run_id
    with sqlite3.connect(database) as connection:
        connection.execute("ALTER TABLE runs RENAME TO runs_gone")
    with pytest.raises(BertError, match=r"mlflow\.db failed: .*no such"):
        Tracker.find(uri, "model.sha256", "abc")
    with pytest.raises(BertError, match=r"mlflow\.db failed: .*no such"):
        Tracker.start(uri, "broken", run_id=run_id)


def _runs(uri: str, experiment: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id], order_by=["attributes.start_time"])


@needs_mounts
def test_a_store_that_fills_up_mid_run_costs_one_line_and_does_not_stay_running(tmp_path,
                                                                               mlflow_db):
    """The disk of the MLflow store fills up during `bert pretrain`: one warning line, not
    MLflow's own traceback of the database error; training goes on to its end with the local
    records whole; and the run does not stay RUNNING: it is ended FAILED, at its end if the
    store has room by then, else by the next run once it has."""
    build_data(tmp_path)
    (tmp_path / "seed").mkdir()
    database = mlflow_db(tmp_path / "seed")
    write_params(tmp_path / "params.yaml",
                 train={"max_steps": 60, "log_every": 1, "eval_every": 0,
                        "checkpoint_every": 1000},
                 tracking={"uri": sqlite_uri(tmp_path / "full" / "mlflow.db"),
                           "experiment": "full"})
    # room for the run's start (its params and tags) and some 30 steps of its curves
    proc, after = bert_on_tiny_fs(tmp_path, database.stat().st_size + (160 << 10),
                                  tmp_path / "seed", "pretrain")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "SQLAlchemy" not in proc.stderr, proc.stderr
    full = [line for line in proc.stderr.splitlines() if "disk is full" in line]
    assert len(full) == 1 and "MLflow stopped answering" in full[0], proc.stderr
    assert len((tmp_path / "metrics" / "pretrain_log.tsv").read_text().splitlines()) == 61
    pretrained = json.loads((tmp_path / "metrics" / "pretrain.json").read_text())["pretrain"]
    assert pretrained["steps"] == 60

    uri = sqlite_uri(after / "mlflow.db")  # the store, with room again
    Tracker.start(uri, "full").finish()  # the next run in its experiment
    trained = _runs(uri, "full")[0]
    assert trained.info.status == "FAILED"
    logged = MlflowClient(tracking_uri=uri).get_metric_history(trained.info.run_id,
                                                               "train/loss")
    assert 0 < len(logged) < 60  # the store did fill up mid-run


def test_a_run_left_running_by_a_process_that_ended_is_ended_by_the_next(store):
    """A run whose process was killed outright stays RUNNING in MLflow; the next run opened in
    its experiment ends it FAILED and says why. Runs of processes that still run, here or (as
    far as it can tell) on another machine, are left alone."""
    uri = store[1]
    killed = subprocess.run(
        [sys.executable, "-c", "import os, signal, sys\n"
         "from bertcore.common.tracking import Tracker\n"
         "print(Tracker.start(sys.argv[1], 'left').run_id, flush=True)\n"
         "os.kill(os.getpid(), signal.SIGKILL)", uri],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120).stdout.strip()
    running = Tracker.start(uri, "left")  # this process's: not ended
    elsewhere = Tracker.start(uri, "left")
    client = MlflowClient(tracking_uri=uri)
    label = client.get_run(elsewhere.run_id).data.tags[PROCESS_TAG].split(" ")
    client.set_tag(elsewhere.run_id, PROCESS_TAG, " ".join(["another-host", *label[1:]]))
    Tracker.start(uri, "left").finish()
    statuses = {run.info.run_id: run.info.status for run in _runs(uri, "left")}
    assert statuses[killed] == "FAILED"
    assert "process had ended" in client.get_run(killed).data.tags[CLOSED_TAG]
    assert statuses[running.run_id] == statuses[elsewhere.run_id] == "RUNNING"
    running.finish()
    elsewhere.finish()


def _identity(phase: int, steps: int, **fingerprints: str) -> RunIdentity:
    prints = {"params": "p", "vocab": "v", "samples": "s", "length": str(steps),
              **fingerprints}
    return RunIdentity(phase, prints, {})


def test_a_run_is_named_by_its_model_length_and_what_else_makes_it():
    name = run_name("tiny", [_identity(1, 1500)], [1500])
    assert re.fullmatch(r"tiny-1500steps-[0-9a-f]{6}", name)
    # only the length differs (an extended run): the same hash
    assert run_name("tiny", [_identity(1, 3000)], [3000]) == name.replace("1500", "3000")
    # anything else that makes the run differs: another name
    assert run_name("tiny", [_identity(1, 1500, params="q")], [1500]) != name
    assert run_name("tiny", [_identity(1, 1500, samples="t")], [1500]) != name
    two_phases = [_identity(1, 1500), _identity(2, 500, phase1="x", params="r")]
    assert re.fullmatch(r"base-1500\+500steps-[0-9a-f]{6}",
                        run_name("base", two_phases, [1500, 500]))
    assert re.fullmatch(r"tiny-1500steps-30min-[0-9a-f]{6}",
                        run_name("tiny", [_identity(1, 1500)], [1500], max_minutes=30))


def test_finetune_and_prune_runs_are_named_by_their_experiment_or_params(monkeypatch):
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    name = child_run_name("finetune", {"finetune.epochs": 1}, experiment_name())
    assert re.fullmatch(r"finetune-[0-9a-f]{6}", name)
    assert child_run_name("finetune", {"finetune.epochs": 2}, experiment_name()) != name
    monkeypatch.setenv("DVC_EXP_NAME", "brisk-owl")
    assert child_run_name("prune", {"prune.batches": 2}, experiment_name()) == "prune-brisk-owl"


def test_pretraining_runs_with_one_seed_get_names_that_tell_them_apart(tmp_path, mlflow_db,
                                                                      monkeypatch):
    """MLflow names a run at random from Python's global generator, which pretraining seeds:
    every run of one train.seed had the same name. Read back through MLflow's client: runs
    that differ are named apart, and a DVC experiment's run after the experiment."""
    build_data(tmp_path)
    mlflow_db(tmp_path)
    # in this process, where torch has computed already: cpu.isa native (pinning is refused)
    write_params(tmp_path / "params.yaml", train={"max_steps": 2, "eval_every": 0},
                 tracking={"experiment": "names"}, cpu={"isa": "native"})
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    bert_here("pretrain")
    bert_here("pretrain", "--set", "train.learning_rate=0.001")
    monkeypatch.setenv("DVC_EXP_NAME", "brisk-owl")
    bert_here("pretrain", "--set", "train.learning_rate=0.001", "--set", "train.max_steps=3")
    names = [run.info.run_name for run in _runs(sqlite_uri(tmp_path / "mlflow.db"), "names")]
    assert re.fullmatch(r"tiny-2steps-[0-9a-f]{6}", names[0]), names
    assert re.fullmatch(r"tiny-2steps-[0-9a-f]{6}", names[1]) and names[1] != names[0], names
    assert names[2] == "brisk-owl"  # the extended run, in a DVC experiment


def bert_here(*args: str) -> None:
    """`bert ARGS` through the click group, in this process (no torch import per call)."""
    from click.testing import CliRunner

    from bertstages.cli import cli

    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, f"bert {args} failed: {result.output}"
