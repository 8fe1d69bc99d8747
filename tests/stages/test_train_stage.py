"""The pretrain stage stopped by SIGTERM checkpoints and resumes to the end; bad input is one line
(tests/unit/training/loop/test_train.py: the training loop in the test's process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from helpers.bert import ONE_THREAD, REPO, assert_one_line_error, run_bert, wait_for_lines
from helpers.tiny_pretrain import write_params

from bertcore.common.tracking import sqlite_uri
from bertcore.training.checkpoints.checkpoint import CheckpointDir

bert = run_bert


@pytest.mark.slow
def test_sigterm_checkpoints_then_resume_completes(workdir, mlflow_db):
    mlflow_db(workdir)
    write_params(workdir / "params.yaml",
                 train={"max_steps": 60, "checkpoint_every": 1000, "eval_every": 0,
                        "log_every": 1},
                 tracking={"experiment": "sigterm"})
    env = {**os.environ, "PYTHONPATH": str(REPO), **ONE_THREAD}
    proc = subprocess.Popen([sys.executable, "-m", "bertstages", "pretrain"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = workdir / "metrics" / "pretrain_log.tsv"
    wait_for_lines(log, 4, proc)  # header + 4 steps done: then the signal
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert_one_line_error(subprocess.CompletedProcess([], proc.returncode, "", stderr),
                          "interrupted by SIGTERM", "run again to resume")
    latest = CheckpointDir(workdir / "models" / "checkpoints").latest()
    stopped_at = latest.step
    assert 4 <= stopped_at < 60
    assert not (workdir / "models" / "pretrained").exists()
    rows_before = log.read_text().splitlines()

    resumed = bert("pretrain", cwd=workdir, check=True)
    assert "resuming from" in resumed.stderr and f"step {stopped_at} of 60" in resumed.stderr
    rows = log.read_text().splitlines()
    assert [int(r.split("\t")[0]) for r in rows[1:]] == list(range(1, 61))
    assert rows[: len(rows_before)] == rows_before
    summary = json.loads((workdir / "metrics" / "pretrain.json").read_text())["pretrain"]
    assert summary["steps"] == 60
    assert (workdir / "models" / "pretrained" / "model.safetensors").is_file()
    # one MLflow run, continued after the interruption, with every step once
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(workdir / "mlflow.db"))
    experiment = client.get_experiment_by_name("sigterm")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert steps == list(range(1, 61))


@pytest.mark.slow
def test_stage_answers_bad_input_in_one_line(workdir, tmp_path):
    write_params(workdir / "params.yaml", train={"max_steps": 2, "eval_every": 0},
                 tracking={"enabled": False})
    # missing samples
    proc = bert("pretrain", "--samples", "nowhere", cwd=workdir)
    assert_one_line_error(proc, "no samples at nowhere", "bert samples")
    # samples built with another vocabulary
    other = tmp_path / "other_vocab"
    other.mkdir()
    vocab = (workdir / "data" / "vocab" / "vocab.txt").read_text().splitlines()
    (other / "vocab.txt").write_text("\n".join(vocab[:-1]) + "\n")
    proc = bert("pretrain", "--vocab", str(other), cwd=workdir)
    assert_one_line_error(proc, "another vocabulary", "bert samples")
    # unreachable tracking server: fails before any training, nothing written
    proc = bert("pretrain", "--set", "tracking.enabled=true",
                    "--set", "tracking.uri=http://127.0.0.1:9", cwd=workdir)
    assert_one_line_error(proc, "http://127.0.0.1:9", "unreachable")
    assert not (workdir / "models").exists()
    # a checkpoint made with other params: start fresh, saying what changed
    bert("pretrain", cwd=workdir, check=True)
    proc = bert("pretrain", "--set", "train.learning_rate=0.001", cwd=workdir, check=True)
    assert "starting fresh" in proc.stderr
    assert "train.learning_rate 0.003 -> 0.001" in proc.stderr
    steps = [c.step for c in CheckpointDir(workdir / "models" / "checkpoints").all()]
    assert steps == [2]
    meta = CheckpointDir(workdir / "models" / "checkpoints").latest().meta
    assert meta["params"]["train"]["learning_rate"] == 0.001
    # bookkeeping values (logging, checkpoint cadence) do not restart training: the finished
    # run is restored, not retrained (same weights, same curve, same final numbers)
    weights = workdir / "models" / "pretrained" / "model.safetensors"
    finished = weights.read_bytes()
    before = json.loads((workdir / "metrics" / "pretrain.json").read_text())["pretrain"]
    curve = (workdir / "metrics" / "pretrain_log.tsv").read_text()
    proc = bert("pretrain", "--set", "train.learning_rate=0.001",
                    "--set", "train.log_every=1", cwd=workdir, check=True)
    assert "resuming from" in proc.stderr and "starting fresh" not in proc.stderr
    summary = json.loads((workdir / "metrics" / "pretrain.json").read_text())["pretrain"]
    assert summary["steps"] == 2 and summary["train"]["loss"] > 0
    assert weights.read_bytes() == finished
    assert (workdir / "metrics" / "pretrain_log.tsv").read_text() == curve
    for key in ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy"):
        assert summary["train"][key] == pytest.approx(before["train"][key], rel=1e-6), key
