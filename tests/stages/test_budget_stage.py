"""The pretrain stage with train.max_minutes: it records its budget run in MLflow and its rerun
is the same run bit for bit; a bad budget is one line (tests/unit/training/run/test_budget.py:
the plan, on a fake clock)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.bert import assert_one_line_error, run_bert
from helpers.tiny_pretrain import write_params
from safetensors.torch import load_file

bert = run_bert


@pytest.mark.slow
def test_the_stage_records_a_budget_run_and_its_rerun_is_exact(data, tmp_path, mlflow_db):
    from mlflow.tracking import MlflowClient

    from bertcore.common.tracking import sqlite_uri

    train = {"max_steps": 8, "warmup_steps": 3, "log_every": 1, "eval_every": 0,
             "checkpoint_every": 4}
    budget_dir, rerun_dir = tmp_path / "budget", tmp_path / "rerun"
    for workdir in (budget_dir, rerun_dir):
        workdir.mkdir()
        (workdir / "data").symlink_to(data)
        write_params(workdir / "params.yaml", train=train, tracking={"experiment": "budget"})
    mlflow_db(budget_dir)

    # a budget far too small for even the 3 steps before the plan: those 3 are the run
    proc = bert("pretrain", "--set", "train.max_minutes=0.0001", cwd=budget_dir)
    assert proc.returncode == 0, proc.stderr
    (warning,) = [line for line in proc.stderr.splitlines() if "time budget" in line]
    assert "time budget 0.0001 min:" in warning and "over steps 2-3 -> 3 of 8 steps" in warning
    assert "does not fit more than the 3 steps" in warning
    metrics = json.loads((budget_dir / "metrics" / "pretrain.json").read_text())["pretrain"]
    details = json.loads((budget_dir / "metrics" / "pretrain_details.json").read_text())
    assert metrics["steps"] == 3 and "planned_steps" not in metrics
    assert details["planned_steps"] == 3 and details["timed_steps"] == "2-3"
    assert details["seconds_per_step"] > 0
    client = MlflowClient(tracking_uri=sqlite_uri(budget_dir / "mlflow.db"))
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("budget").experiment_id])
    tags = mlflow_run.data.tags
    assert tags["train.planned_steps"] == "3" and tags["train.steps_run"] == "3"
    assert float(tags["train.seconds_per_step"]) > 0

    # the README's rerun: the recorded steps, no budget
    proc = bert("pretrain", "--set", "train.max_steps=3", "--set", "train.max_minutes=null",
                "--set", "tracking.enabled=false", cwd=rerun_dir)
    assert proc.returncode == 0, proc.stderr
    assert "time budget" not in proc.stderr
    rerun_details = json.loads((rerun_dir / "metrics" / "pretrain_details.json").read_text())
    assert rerun_details["planned_steps"] == 3 and rerun_details["seconds_per_step"] is None
    budget_weights = load_file(budget_dir / "models" / "pretrained" / "model.safetensors")
    rerun_weights = load_file(rerun_dir / "models" / "pretrained" / "model.safetensors")
    assert budget_weights.keys() == rerun_weights.keys()
    for name, tensor in budget_weights.items():
        assert torch.equal(tensor, rerun_weights[name]), name

    # run again as it was: the finished run is resumed at its planned end, not re-timed
    proc = bert("pretrain", "--set", "train.max_minutes=0.0001", cwd=budget_dir)
    assert proc.returncode == 0, proc.stderr
    assert "starting fresh" not in proc.stderr and "time budget" not in proc.stderr
    assert "step 3 of 3" in proc.stderr
    # a bigger budget extends it, re-planned from the recorded timing (not timed again)
    proc = bert("pretrain", "--set", "train.max_minutes=30", "--set", "tracking.enabled=false",
                cwd=budget_dir)
    assert proc.returncode == 0, proc.stderr
    assert "re-planned to end at step 8 instead of 3" in proc.stderr
    assert "time budget" not in proc.stderr
    pretrained = json.loads((budget_dir / "metrics" / "pretrain.json").read_text())["pretrain"]
    assert pretrained["steps"] == 8

    # other params: a fresh start, which times its own first steps rather than plan from the
    # timing of the run it replaces
    proc = bert("pretrain", "--set", "train.max_minutes=0.0001", "--set",
                "train.learning_rate=0.002", "--set", "tracking.enabled=false", cwd=budget_dir)
    assert proc.returncode == 0, proc.stderr
    assert "starting fresh" in proc.stderr
    assert "over steps 2-3 -> 3 of 8 steps" in proc.stderr


@pytest.mark.parametrize("value", ["0", "-2", "abc"])
def test_a_bad_budget_is_one_line(data, tmp_path, value):
    (tmp_path / "data").symlink_to(data)
    write_params(tmp_path / "params.yaml", tracking={"enabled": False})
    proc = bert("pretrain", "--set", f"train.max_minutes={value}", cwd=tmp_path)
    assert_one_line_error(proc, "train.max_minutes")
