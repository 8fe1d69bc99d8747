"""BERT's two phases as one declared pipeline: `dvc repro` with phase2 on (32 tokens, then 64)
builds the samples at both lengths, pretrains both phases, evaluates at both lengths and
exports a model that reads 64 tokens. A repro killed in phase 2 and run again, and a pipeline
whose phase 2 is turned on after phase 1 finished, end with every output dvc.lock records the
same bytes as a straight repro; the second is a new MLflow run that carries the whole curve."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml
from helpers import preloaded
from helpers.bert import _PAUSE_AT
from test_pipeline import DVC, VENV_BIN, new_repo, run, tiny_pipeline_params

from bertcore.saved.card import written_decimals

pytestmark = [pytest.mark.skipif(DVC is None, reason="dvc is not installed"), pytest.mark.slow]

PHASE2 = {"enabled": True, "max_seq_length": 64, "max_steps": 6, "batch_size": 4,
          "learning_rate": 0.002, "warmup_steps": 2}
TARGETS = ["evaluate", "export"]  # and the stages before them; finetune and prune read no phase


def two_phase_repo(tmp_path: Path, name: str, store: Path, **phase2) -> tuple[Path, dict]:
    """One process (the kill test's shim pauses the command it starts, not torchrun's
    processes; test_pipeline.py runs the default, one a core). Its MLflow store starts as a
    copy of `store`, an empty one (test_pipeline.py's first repo creates its own)."""
    repo, env = new_repo(tmp_path, name)
    shutil.copy(store, repo / "mlflow.db")
    params = tiny_pipeline_params()
    params["train"]["nproc_per_node"] = 1
    params["phase2"] = {**PHASE2, **phase2}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return repo, env


def lock_outs(repo: Path) -> dict[str, str]:
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return {out["path"]: out["md5"] for stage in lock["stages"].values()
            for out in stage.get("outs", [])}


@pytest.fixture(scope="module")
def straight(tmp_path_factory, _empty_mlflow_store) -> tuple[Path, dict[str, str]]:
    repo, env = two_phase_repo(tmp_path_factory.mktemp("straight"), "straight",
                               _empty_mlflow_store)
    run([DVC, "repro", *TARGETS], repo, preloaded.dvc_env(env))
    return repo, lock_outs(repo)


def test_a_two_phase_repro_evaluates_at_both_lengths(straight):
    repo, outs = straight
    assert {"data/samples", "models/checkpoints", "models/pretrained", "models/hf",
            "metrics/eval.json"} <= set(outs)
    assert json.loads((repo / "data/samples/phase2/meta.json").read_text())[
        "max_seq_length"] == 64
    scores = json.loads((repo / "metrics" / "eval.json").read_text())["eval"]
    names = ("mlm_accuracy", "mlm_loss", "perplexity", "nsp_accuracy", "nsp_loss")
    assert set(scores["length_64"]) == {*names, *(f"{name}_ci95" for name in names)}
    # the MLM slots grow with the length: 5 at 32 tokens, 10 at 64 (30% of ~60 tokens: 18)
    details = json.loads((repo / "metrics" / "eval_details.json").read_text())["length_64"]
    assert details["mlm_predictions"] > 5 * details["sequences"]
    # the same slots in the periodic evaluation of phase 2: its last is the model's score
    last = (repo / "metrics" / "pretrain_eval.tsv").read_text().splitlines()[-1].split("\t")
    assert int(last[0]) == 12
    # (eval.json's to the precision its interval supports)
    loss = scores["length_64"]["mlm_loss"]
    assert round(float(last[1]), written_decimals(
        loss, *scores["length_64"]["mlm_loss_ci95"])) == pytest.approx(loss, abs=1e-12)
    assert json.loads((repo / "metrics" / "pretrain.json").read_text())["pretrain"]["steps"] == 12
    assert json.loads((repo / "models/hf/config.json").read_text())[
        "max_position_embeddings"] == 64


def test_a_repro_killed_in_phase_2_resumes_to_the_same_bytes(straight, tmp_path,
                                                            _empty_mlflow_store):
    repo, env = two_phase_repo(tmp_path, "killed", _empty_mlflow_store)
    # `bert pretrain` of this repro pauses when it has made phase 2's second checkpoint's RNG
    # states (step 12, the last, not yet written; step 9's is), and is killed there
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pause.py").write_text(_PAUSE_AT)
    (shim / "bert").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = pretrain ]; then exec "{sys.executable}" "{shim / "pause.py"}" '
        f'bertcore.training.loop.checkpointer capture_rng_state 4 {int(signal.SIGKILL)} "$@"; fi\n'
        f'exec "{VENV_BIN / "bert"}" "$@"\n')
    (shim / "bert").chmod(0o755)
    paused_env = {**env, "PATH": f"{shim}{os.pathsep}{env['PATH']}"}
    proc = subprocess.Popen([DVC, "repro", *TARGETS], cwd=repo, env=paused_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.strip() == "PAUSED":
            break
    else:
        proc.wait(timeout=60)
        raise AssertionError("the pretrain stage never paused:\n" + "".join(seen)[-3000:])
    paused = [p for p in psutil.Process(proc.pid).children(recursive=True)
              if "capture_rng_state" in " ".join(p.cmdline())]
    assert len(paused) == 1, [p.cmdline() for p in paused]
    paused[0].send_signal(signal.SIGKILL)
    output = "".join(seen) + proc.communicate(timeout=120)[0]
    assert proc.returncode != 0, output[-3000:]
    checkpoints = sorted(p.name for p in (repo / "models" / "checkpoints").iterdir())
    assert checkpoints == ["step-00000006", "step-00000009"], output[-3000:]

    resumed = run([DVC, "repro", *TARGETS], repo, preloaded.dvc_env(env))
    assert "resuming from models/checkpoints/step-00000009 (step 9 of 12, phase 2)" in (
        resumed.stdout + resumed.stderr)
    assert lock_outs(repo) == straight[1]


def test_phase_2_turned_on_after_phase_1_goes_on_from_its_end(straight, tmp_path,
                                                             _empty_mlflow_store):
    repo, env = two_phase_repo(tmp_path, "later", _empty_mlflow_store, enabled=False)
    env = preloaded.dvc_env(env)
    run([DVC, "repro", "pretrain"], repo, env)  # phase 1 to its end: what phase 2 goes on from
    phase1 = lock_outs(repo)
    assert not (repo / "data" / "samples" / "phase2").exists()
    assert json.loads((repo / "metrics" / "pretrain.json").read_text())["pretrain"]["steps"] == 6

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["phase2"]["enabled"] = True
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    proc = run([DVC, "repro", *TARGETS], repo, env)
    said = proc.stdout + proc.stderr
    assert "resuming from models/checkpoints/step-00000006 (step 6 of 6)" in said
    assert "phase 2: steps 7-12" in said and "starting fresh" not in said
    assert lock_outs(repo) == straight[1]
    assert phase1["models/pretrained"] != straight[1]["models/pretrained"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("e2e")
    first, second = client.search_runs([experiment.experiment_id],
                                       order_by=["attributes.start_time"])
    assert second.data.tags["extends_run"] == first.info.run_id
    assert second.data.params["phase2.enabled"] == "True"

    def steps(run, key):
        return sorted(m.step for m in client.get_metric_history(run.info.run_id, key))

    assert steps(first, "train/loss") == [2, 4, 6]
    assert steps(second, "train/loss") == [2, 4, 6, 8, 10, 12]  # one curve, both phases
    assert steps(second, "val/mlm_loss") == [3, 6, 9, 12]
    assert "eval_length_64_mlm_accuracy" in second.data.metrics
