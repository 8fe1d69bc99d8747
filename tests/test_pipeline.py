"""End to end: the repo's dvc.yaml in a fresh git + DVC repo with tiny params. `dvc repro`
runs corpus → vocab → samples → pretrain → evaluate → export, finetune, prune; `dvc exp run
-S ...` makes a second MLflow run; both runs (and the finetune/prune child runs of each) are read
back with MlflowClient; `dvc metrics show` and
`dvc plots show` work."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from tiny_pretrain import TINY_MODEL, write_corpus

VENV_BIN = Path(sys.executable).parent
DVC = shutil.which("dvc", path=str(VENV_BIN)) or shutil.which("dvc")

pytestmark = pytest.mark.skipif(DVC is None, reason="dvc is not installed")


def tiny_pipeline_params() -> dict:
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params["corpus"].update(source="corpus.txt", format="lines", val_fraction=0.2)
    params["vocab"].update(vocab_size=96, min_frequency=1)
    params["samples"].update(max_seq_length=32, dupe_factor=2, workers=1)
    params["model"] = dict(TINY_MODEL)
    params["masking"]["max_predictions_per_seq"] = 5
    params["train"].update(max_steps=6, batch_size=8, learning_rate=0.003, warmup_steps=2,
                           log_every=2, eval_every=3, checkpoint_every=3)
    params["eval"].update(batch_size=16)
    params["tracking"].update(uri=None, experiment="e2e", log_checkpoints="last")
    params["finetune"].update(learning_rate=1e-3, epochs=1, max_seq_length=32)
    params["prune"].update(batches=2, batch_size=8, recovery_steps=2, throughput_steps=1)
    return params


def run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_dvc_repro_then_an_experiment_give_two_mlflow_runs(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for folder in ("bertcore", "stages"):
        shutil.copytree(REPO / folder, repo / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", repo / "dvc.yaml")
    shutil.copy(REPO / ".gitignore", repo / ".gitignore")
    (repo / "params.yaml").write_text(yaml.safe_dump(tiny_pipeline_params(), sort_keys=False))
    write_corpus(tmp_path / "corpus", train_docs=60, val_docs=15)
    corpus = (tmp_path / "corpus" / "train.txt").read_text()
    (repo / "corpus.txt").write_text(corpus + "\n" + (tmp_path / "corpus" / "val.txt").read_text())
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(repo),
        "OMP_NUM_THREADS": "1",
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.com",
        "DVC_NO_ANALYTICS": "1",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    run(["git", "init", "-q", "-b", "main"], repo, env)
    run([DVC, "init", "-q"], repo, env)
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-q", "-m", "pipeline"], repo, env)
    commit = run(["git", "rev-parse", "HEAD"], repo, env).stdout.strip()

    run([DVC, "repro"], repo, env)
    evaluation = json.loads((repo / "metrics" / "eval.json").read_text())
    for key in ("mlm_loss", "mlm_accuracy", "perplexity", "nsp_loss", "nsp_accuracy",
                "mlm_baseline_accuracy"):
        assert key in evaluation
    assert (repo / "models" / "hf" / "tokenizer.json").is_file()
    finetune = json.loads((repo / "metrics" / "finetune.json").read_text())
    assert {"pretrained", "scratch", "gain"} <= set(finetune)
    assert (repo / "models" / "finetuned" / "config.json").is_file()
    prune = json.loads((repo / "metrics" / "prune.json").read_text())
    assert prune["heads_per_layer"] == {"before": [2], "after": [1]}
    assert (repo / "models" / "pruned" / "config.json").is_file()
    assert (repo / "mlflow.db").is_file()  # at the repo root, not in a stage's folder
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-q", "-m", "baseline results"], repo, env)

    proc = run([DVC, "exp", "run", "-S", "train.learning_rate=0.001"], repo, env)
    assert "starting fresh" in proc.stdout + proc.stderr  # the baseline's checkpoints differ

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("e2e")
    everything = client.search_runs([experiment.experiment_id],
                                    order_by=["attributes.start_time"])
    runs = [r for r in everything if "mlflow.parentRunId" not in r.data.tags]
    assert len(runs) == 2
    # finetune and prune log child runs of the pretraining run of the model they started from
    children = sorted((r.data.tags["mlflow.parentRunId"], r.info.run_name) for r in everything
                      if "mlflow.parentRunId" in r.data.tags)
    assert children == sorted((r.info.run_id, name) for r in runs
                              for name in ("finetune", "prune"))
    assert [r.data.params["train.learning_rate"] for r in runs] == ["0.003", "0.001"]
    vocab_size = len((repo / "data" / "vocab" / "vocab.txt").read_text().splitlines())
    for r in runs:
        assert r.info.status == "FINISHED"
        assert r.data.params["vocab.vocab_size_actual"] == str(vocab_size)  # data/vocab
        assert r.data.tags["DVC_STAGE"] == "pretrain"
        assert len(r.data.tags["fingerprint.params"]) == 64
        history = client.get_metric_history(r.info.run_id, "train/loss")
        assert [m.step for m in history] == [2, 4, 6]
        assert [m.step for m in client.get_metric_history(r.info.run_id, "val/mlm_loss")] == [
            3, 6]
        assert "eval/mlm_accuracy" in r.data.metrics
        artifacts = {a.path for a in client.list_artifacts(r.info.run_id)}
        assert {"checkpoints", "hf_model"} <= artifacts
    assert runs[0].data.tags["mlflow.source.git.commit"] == commit
    assert runs[1].data.tags.get("DVC_EXP_NAME")
    assert runs[0].data.params["train.learning_rate"] != runs[1].data.params[
        "train.learning_rate"]
    assert not (repo / "mlruns").exists()  # artifacts sit next to mlflow.db

    shown = json.loads(run([DVC, "metrics", "show", "--json"], repo, env).stdout)
    workspace = json.dumps(shown)
    assert "mlm_accuracy" in workspace and "nsp_accuracy" in workspace
    plots = run([DVC, "plots", "show", "--json"], repo, env).stdout
    assert "train_loss" in plots and "val_accuracy" in plots

    # A stage sees only its own params: a new vocab_size invalidates vocab, not corpus
    # (samples and what follows rerun through their data deps).
    params = yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8"))
    params["vocab"]["vocab_size"] = 100
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = json.loads(run([DVC, "status", "--json"], repo, env).stdout)
    assert set(status) == {"vocab"}, status
