"""`bert pretrain` (and the commands that read its weights) against damage and contention:
damaged checkpoints, two runs in one checkpoint folder, a run killed while holding the
folder, truncated weights."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.bert import ONE_THREAD, REPO, assert_one_line_error, run_bert, wait_for_lines
from helpers.tiny_pretrain import build_data, tiny_config, write_params

from bertcore.common.lock import lock_path
from bertcore.common.tracking import sqlite_uri
from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import save_model
from bertcore.training.checkpoints.checkpoint import CheckpointDir

bert = run_bert


def start_bert(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), **ONE_THREAD}
    return subprocess.Popen([sys.executable, "-m", "bertstages", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_rows(log: Path, rows: int, proc: subprocess.Popen) -> None:
    wait_for_lines(log, rows, proc)


def damage(kind: str, checkpoint: Path) -> None:
    weights = checkpoint / "model.safetensors"
    if kind == "truncated weights":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif kind == "readable but corrupt weights":  # 4 KB of 0xFF: NaN floats, a valid file
        with open(weights, "r+b") as handle:
            handle.seek(weights.stat().st_size - 8192)
            handle.write(b"\xff" * 4096)
    elif kind == "missing optimizer state":
        (checkpoint / "trainer.pt").unlink()


@pytest.mark.slow
def test_a_damaged_checkpoint_is_set_aside_and_the_result_is_bitwise_uninterrupted(workdir):
    write_params(workdir / "params.yaml", train={"max_steps": 8, "checkpoint_every": 4,
                                                  "eval_every": 0},
                 tracking={"enabled": False})
    bert("pretrain", cwd=workdir, check=True)  # uninterrupted: the reference
    final = workdir / "models" / "pretrained" / "model.safetensors"
    reference = final.read_bytes()
    root = workdir / "models" / "checkpoints"

    for n, kind in enumerate(["truncated weights", "readable but corrupt weights"], start=1):
        damage(kind, root / "step-00000008")
        shutil.rmtree(workdir / "models" / "pretrained")
        proc = bert("pretrain", cwd=workdir)
        assert proc.returncode == 0, (kind, proc.stderr)
        warnings = [line for line in proc.stderr.splitlines() if "damaged" in line]
        assert len(warnings) == 1, (kind, proc.stderr)
        aside = "step-00000008.damaged" + (f"-{n}" if n > 1 else "")
        assert f"set aside as {aside}; falling back to step-00000004" in warnings[0]
        assert "resuming from" in proc.stderr and "step 4 of 8" in proc.stderr, kind
        assert "learning_rate" not in proc.stderr  # no NaN steps, no advice about them
        assert json.loads((workdir / "metrics" / "pretrain_details.json").read_text())[
            "skipped_steps"] == 0
        assert final.read_bytes() == reference, kind  # bitwise the uninterrupted result
        assert (root / aside / "model.safetensors").exists()  # kept for inspection

    # nothing intact left: a fresh start, which ends at the same weights
    damage("truncated weights", root / "step-00000004")
    damage("missing optimizer state", root / "step-00000008")
    shutil.rmtree(workdir / "models" / "pretrained")
    proc = bert("pretrain", cwd=workdir, check=True)
    assert proc.stderr.count("no intact one is left") == 2
    assert "resuming from" not in proc.stderr
    assert final.read_bytes() == reference
    assert [c.step for c in CheckpointDir(root).all()] == [4, 8]
    assert sorted(p.name for p in root.iterdir() if "damaged" in p.name) == [
        "step-00000004.damaged", "step-00000008.damaged", "step-00000008.damaged-2",
        "step-00000008.damaged-3"]  # never pruned


def _endless_run_params(workdir, checkpoint_every: int) -> None:
    """A run that goes on until it is stopped, logging every step, without evaluations."""
    write_params(workdir / "params.yaml",
                 train={"max_steps": 100000, "checkpoint_every": checkpoint_every,
                        "eval_every": 0, "log_every": 1},
                 tracking={"enabled": False})


@pytest.mark.slow
def test_a_second_pretrain_in_the_same_checkpoint_folder_fails_at_once(workdir):
    _endless_run_params(workdir, checkpoint_every=5)
    first = start_bert("pretrain", cwd=workdir)
    try:
        wait_for_rows(workdir / "metrics" / "pretrain_log.tsv", 12, first)  # past 2 saves
        second = bert("pretrain", "--set", "train.learning_rate=0.001", "--set",
                      "train.max_steps=30", "--log", "other.tsv", cwd=workdir)
        assert_one_line_error(second, "models/checkpoints is in use by pid "
                              f"{first.pid} on ", "--checkpoints")
        assert first.poll() is None  # the first run goes on
    finally:
        first.send_signal(signal.SIGTERM)
        _, stderr = first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGTERM, stderr  # stopped by us, not crashed
    assert "Traceback" not in stderr
    assert CheckpointDir(workdir / "models" / "checkpoints").latest().step >= 10
    assert not lock_path(workdir / "models" / "checkpoints").exists()


@pytest.mark.slow
def test_a_lock_left_by_a_killed_run_is_taken_over(workdir):
    _endless_run_params(workdir, checkpoint_every=3)
    killed = start_bert("pretrain", cwd=workdir)
    wait_for_rows(workdir / "metrics" / "pretrain_log.tsv", 4, killed)
    killed.kill()  # SIGKILL, as the OOM killer does
    killed.communicate(timeout=60)
    lock = lock_path(workdir / "models" / "checkpoints")
    assert json.loads(lock.read_text())["pid"] == killed.pid  # stale: its owner is gone
    resumed = bert("pretrain", "--set", "train.max_steps=12", "--set", "train.log_every=1",
                   cwd=workdir)
    # max_steps changed: a fresh start in the folder the killed run held
    assert resumed.returncode == 0, resumed.stderr
    assert "taking over the lock" in resumed.stderr and str(killed.pid) in resumed.stderr
    assert not lock.exists()


@pytest.mark.parametrize("command", ["fill-mask", "evaluate", "export"])
def test_truncated_weights_are_one_line_naming_the_file(workdir, command):
    write_params(workdir / "params.yaml", tracking={"enabled": False})
    model = BertPretrainingModel(tiny_config(len(read_vocab(workdir / "data" / "vocab"))))
    save_model(model, workdir / "models" / "pretrained")  # what `bert pretrain` leaves
    weights = workdir / "models" / "pretrained" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    args = {
        "fill-mask": ["fill-mask", "--model", "models/pretrained", "--vocab", "data/vocab",
                      "the [MASK] sees the cow ."],
        "evaluate": ["evaluate"],
        "export": ["export"],
    }[command]
    proc = bert(*args, cwd=workdir)
    assert_one_line_error(proc, "models/pretrained/model.safetensors is damaged or truncated",
                          "again")
    assert not (workdir / "models" / "hf").exists()


def test_readable_weights_holding_nan_are_one_line_naming_the_file(workdir):
    write_params(workdir / "params.yaml", tracking={"enabled": False})
    model = BertPretrainingModel(tiny_config(len(read_vocab(workdir / "data" / "vocab"))))
    save_model(model, workdir / "models" / "pretrained")
    weights = workdir / "models" / "pretrained" / "model.safetensors"
    damage("readable but corrupt weights", weights.parent)
    proc = bert("export", cwd=workdir)
    assert_one_line_error(proc, "models/pretrained/model.safetensors is damaged",
                          "holds NaN or infinite values")
    assert not (workdir / "models" / "hf").exists()


def test_evaluate_with_no_run_to_log_into_says_nothing_was_logged(workdir):
    """A model saved by hand (no MLflow run wrote its weights), or a tracking server that does
    not answer: the scores are written, and the user learns that MLflow got nothing, and why."""
    model = BertPretrainingModel(tiny_config(len(read_vocab(workdir / "data" / "vocab"))))
    save_model(model, workdir / "models" / "pretrained")
    for tracking, why in (({"uri": sqlite_uri(workdir / "mlflow.db")}, "wrote the weights"),
                          ({"uri": "http://127.0.0.1:9"}, "unreachable")):
        write_params(workdir / "params.yaml", tracking=tracking)
        proc = bert("evaluate", cwd=workdir)
        assert proc.returncode == 0, proc.stderr
        scores = json.loads((workdir / "metrics" / "eval.json").read_text())["eval"]
        assert scores["mlm_accuracy"] >= 0
        notice = [line for line in proc.stderr.splitlines() if "logged to MLflow" in line]
        assert len(notice) == 1, proc.stderr
        assert "nothing will be logged" in notice[0] and why in notice[0], notice
        assert "metrics/eval.json" in notice[0]


@pytest.mark.slow
def test_fill_mask_on_a_checkpoint_takes_only_the_vocabulary_it_was_trained_with(workdir):
    """A checkpoint and models/pretrained have no tokenizer but record the fingerprint of
    their vocabulary: another one, even of the same size with [PAD] in place, is one line."""
    write_params(workdir / "params.yaml", train={"max_steps": 4, "checkpoint_every": 2,
                                                  "eval_every": 0},
                 tracking={"enabled": False})
    bert("pretrain", cwd=workdir, check=True)
    tokens = read_vocab(workdir / "data" / "vocab")
    tokens[10], tokens[11] = tokens[11], tokens[10]  # two ordinary tokens trade ids
    (workdir / "swapped").mkdir()
    (workdir / "swapped" / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    text = "the [MASK] sees the cow ."
    for model in ("models/checkpoints/step-00000004", "models/pretrained"):
        proc = bert("fill-mask", "--model", model, "--vocab", "swapped", text, cwd=workdir)
        assert_one_line_error(proc, f"the model in {model} was trained with another "
                                    "vocabulary than the one in swapped")
        proc = bert("fill-mask", "--model", model, "--vocab", "data/vocab", text, cwd=workdir)
        assert proc.returncode == 0 and "[MASK] 1 of 1:" in proc.stdout, proc.stderr


@pytest.mark.slow
def test_kill_9_of_a_dataloader_worker_stops_after_a_whole_step_with_a_checkpoint(workdir):
    """The training process is intact when one of its DataLoader workers is killed: it stops
    as on SIGTERM, a checkpoint of its last step written, with one line naming the worker;
    a rerun resumes there."""
    import psutil

    write_params(workdir / "params.yaml",
                 train={"max_steps": 100000, "checkpoint_every": 1000, "eval_every": 0,
                        "log_every": 1, "num_workers": 2, "batch_size": 2,
                        "micro_batches": 1},
                 tracking={"enabled": False})
    proc = start_bert("pretrain", cwd=workdir)
    wait_for_rows(workdir / "metrics" / "pretrain_log.tsv", 3, proc)
    worker = psutil.Process(proc.pid).children()[0]
    worker.kill()
    stdout, stderr = proc.communicate(timeout=120)
    stopped = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_one_line_error(stopped, f"DataLoader worker process {worker.pid} (killed by "
                                   "SIGKILL) died after step ", "; run again to resume", code=1)
    step = int(stderr.split(" died after step ")[1].split(":")[0])
    assert f"checkpoint written in models/checkpoints/step-{step:08d}" in stderr, stderr
    assert CheckpointDir(workdir / "models" / "checkpoints").latest().step == step
    resumed = bert("pretrain", "--set", f"train.max_steps={step + 2}", cwd=workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from step {step}" in resumed.stderr, resumed.stderr


DIE_SENDING = ("import sys, helpers.dying_worker as dying_worker\n"
               "dying_worker.die_sending_a_batch(int(sys.argv[1]), sys.argv[2] == 'sigterm')\n"
               "from bertstages.cli import cli\n"
               "cli(sys.argv[3:], prog_name='bert')\n")


@pytest.mark.slow
@pytest.mark.parametrize("sigterm", [False, True], ids=["killed", "killed-after-sigterm"])
def test_a_dataloader_worker_killed_while_sending_a_batch_never_hangs_pretraining(
        workdir, sigterm):
    """A worker killed while it sends a batch leaves the start of a message in the pipe: the
    training process, reading the rest, would wait for ever, SIGTERM or not. It stops within
    seconds with one line naming the worker and a checkpoint of its last step; a rerun
    resumes there."""
    write_params(workdir / "params.yaml",
                 train={"max_steps": 100000, "checkpoint_every": 1000, "eval_every": 0,
                        "log_every": 1, "num_workers": 2, "batch_size": 2,
                        "micro_batches": 1},
                 tracking={"enabled": False})
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    proc = subprocess.run(
        [sys.executable, "-c", DIE_SENDING, "4", "sigterm" if sigterm else "-", "pretrain"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    pid = proc.stderr.split("dying worker ")[1].split()[0]
    assert_one_line_error(proc, f"DataLoader worker process {pid} (killed by SIGKILL) died "
                                "after step ", "; run again to resume", code=1)
    assert ("SIGTERM received: stopping after this step" in proc.stderr) == sigterm
    step = int(proc.stderr.split(" died after step ")[1].split(":")[0])
    assert step >= 1 and f"checkpoint written in models/checkpoints/step-{step:08d}" \
        in proc.stderr, proc.stderr
    assert CheckpointDir(workdir / "models" / "checkpoints").latest().step == step
    resumed = bert("pretrain", "--set", f"train.max_steps={step + 2}", cwd=workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from step {step}" in resumed.stderr, resumed.stderr


@pytest.mark.slow
def test_a_run_that_diverges_to_infinite_weights_stops_without_a_model(tmp_path):
    """3e38 (finite, as every accepted value is) overflows float32 in the first update."""
    build_data(tmp_path)
    write_params(tmp_path / "params.yaml", train={"learning_rate": 3e38, "max_steps": 3,
                                                  "eval_every": 0, "checkpoint_every": 0},
                 tracking={"enabled": False})
    proc = run_bert("pretrain", cwd=tmp_path)
    assert_one_line_error(proc, "NaN or infinite values", "no model was written")
    assert not (tmp_path / "models" / "pretrained").exists()
