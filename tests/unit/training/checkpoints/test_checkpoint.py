"""Checkpoints: atomic commits, keep_last, fingerprints, RNG states, weights_only loading,
checksums (damaged checkpoints set aside), the folder lock, staging folders of dead processes."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers.bert import REPO
from helpers.tiny_pretrain import tiny_config

from bertcore.common.atomic import _host
from bertcore.common.digests import changed_fingerprints, fingerprint_files, fingerprint_params
from bertcore.common.errors import BertError
from bertcore.common.lock import FolderInUseError, lock_path
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import load_model
from bertcore.training.checkpoints.checkpoint import (
    CheckpointDir,
    capture_rng_state,
    restore_rng_state,
)

FPS = {"params": "a" * 64, "vocab": "b" * 64, "samples": "c" * 64}


def tiny_model(seed: int = 0) -> BertPretrainingModel:
    torch.manual_seed(seed)
    return BertPretrainingModel(tiny_config(vocab_size=40))


def state_of(model: BertPretrainingModel) -> dict:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(5, 40, (2, 8))).nsp_logits.sum().backward()
    optimizer.step()
    return {"optimizer": optimizer.state_dict(), "rng": [capture_rng_state()], "step": 3}


def test_fingerprints(tmp_path):
    assert fingerprint_params({"a": 1, "b": [1, 2]}) == fingerprint_params({"b": [1, 2], "a": 1})
    assert fingerprint_params({"a": 1}) != fingerprint_params({"a": 2})
    (tmp_path / "x").write_bytes(b"hello")
    first = fingerprint_files([tmp_path / "x"])
    (tmp_path / "x").write_bytes(b"hellO")
    assert fingerprint_files([tmp_path / "x"]) != first
    assert changed_fingerprints(FPS, {**FPS, "vocab": "d"}) == ["vocab"]
    assert changed_fingerprints(FPS, {"params": FPS["params"]}) == ["samples", "vocab"]


def test_rng_state_round_trips_through_a_weights_only_file(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)  # leaves a cached gaussian in python's state
    state = capture_rng_state()
    expected = (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(),
                np.random.randn(), torch.rand(3).tolist())
    torch.save({"rng": state}, tmp_path / "rng.pt")
    loaded = torch.load(tmp_path / "rng.pt", weights_only=True)["rng"]
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    restore_rng_state(loaded)
    again = (random.random(), random.gauss(0, 1), np.random.rand(3).tolist(),
             np.random.randn(), torch.rand(3).tolist())
    assert again == expected


def test_save_load_keep_last_and_latest(tmp_path):
    checkpoints = CheckpointDir(tmp_path / "ckpt", keep_last=2)
    assert checkpoints.latest() is None
    model = tiny_model()
    for step in (2, 4, 6):
        checkpoints.save(step, model, state_of(model), {"fingerprints": FPS},
                         texts={"train_log.tsv": f"step\n{step}\n"})
    assert [c.step for c in checkpoints.all()] == [4, 6]
    latest = checkpoints.latest()
    assert latest.step == 6 and latest.fingerprints == FPS
    assert latest.read_text("train_log.tsv") == "step\n6\n"
    state = latest.load_state()  # weights_only=True inside
    assert state["step"] == 3 and "state" in state["optimizer"]
    restored = tiny_model(seed=1)
    latest.load_model(restored)
    for a, b in zip(model.state_dict().values(), restored.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    # a checkpoint folder is also a model folder
    assert torch.equal(load_model(latest.path).embeddings.tokens.weight,
                       model.embeddings.tokens.weight)
    # keep_last rotates among the checkpoints of the run writing here: those of other params
    # are left alone (the run that replaces them sets them aside before it trains)
    other = {**FPS, "params": "e" * 64}
    for step in (1, 3, 5):
        checkpoints.save(step, model, state_of(model), {"fingerprints": other})
    assert [c.step for c in checkpoints.all()] == [3, 4, 5, 6]


def test_keep_last_never_rotates_away_a_finished_checkpoint(tmp_path):
    """A run of 4 steps, extended to 10 and to 12: keep_last 2 rotates the line's checkpoints
    on the way, never the last of a run that reached its end."""

    def line(ckpt) -> bool:  # the run's line: its params, any length
        return ckpt.fingerprints["params"] == FPS["params"]

    checkpoints = CheckpointDir(tmp_path / "ckpt", keep_last=2)
    model = tiny_model()
    for total, steps in ((4, (2, 4)), (10, (6, 8, 10)), (12, (11,))):
        for step in steps:
            meta = {"fingerprints": {**FPS, "length": str(total)}, "total_steps": total}
            checkpoints.save(step, model, state_of(model), meta, line=line)
    other = {"fingerprints": {**FPS, "params": "e" * 64}, "total_steps": 3}
    CheckpointDir(tmp_path / "ckpt").save(3, model, state_of(model), other)  # another line
    checkpoints.save(12, model, state_of(model),
                     {"fingerprints": {**FPS, "length": "12"}, "total_steps": 12}, line=line)
    assert [(c.step, c.finished) for c in checkpoints.all()] == [
        (3, True), (4, True), (10, True), (11, False), (12, True)]


def test_a_crash_while_writing_leaves_the_previous_checkpoint_latest(tmp_path):
    checkpoints = CheckpointDir(tmp_path / "ckpt", keep_last=3)
    model = tiny_model()
    checkpoints.save(5, model, state_of(model), {"fingerprints": FPS})
    # an exception in the middle of writing (here: something torch.save cannot pickle)
    with pytest.raises(Exception, match=r"pickle|lambda|attribute"):
        checkpoints.save(6, model, {"bad": lambda: None}, {"fingerprints": FPS})
    assert [c.step for c in checkpoints.all()] == [5]
    assert not list((tmp_path / "ckpt").glob(".step-*"))
    # a process killed mid-write leaves a staging folder, maybe a folder without meta.json
    # (its owner: this host, a pid above any pid_max, so never alive)
    staging = tmp_path / "ckpt" / f".step-00000007.tmp-{_host()}-4194304-abc"
    staging.mkdir()
    (staging / "model.safetensors").write_bytes(b"half")
    (tmp_path / "ckpt" / "step-00000008").mkdir()
    assert checkpoints.latest().step == 5
    checkpoints.save(9, model, state_of(model), {"fingerprints": FPS})
    assert [c.step for c in checkpoints.all()] == [5, 9]
    assert not list((tmp_path / "ckpt").glob(".step-*"))


def test_non_finite_weights_are_never_checkpointed(tmp_path):
    checkpoints = CheckpointDir(tmp_path / "ckpt")
    model = tiny_model()
    checkpoints.save(1, model, state_of(model), {"fingerprints": FPS})
    with torch.no_grad():
        model.nsp_head.bias[0] = float("nan")
    with pytest.raises(BertError, match="non-finite"):
        checkpoints.save(2, model, state_of(model), {"fingerprints": FPS})
    assert checkpoints.latest().step == 1


def test_a_checkpoint_of_another_architecture_is_a_clear_error(tmp_path):
    checkpoints = CheckpointDir(tmp_path / "ckpt")
    model = tiny_model()
    checkpoints.save(1, model, state_of(model), {"fingerprints": FPS})
    torch.manual_seed(0)
    bigger = BertPretrainingModel(tiny_config(vocab_size=40, num_hidden_layers=2))
    with pytest.raises(BertError, match="does not fit the model"):
        checkpoints.latest().load_model(bigger)
    wider = BertPretrainingModel(tiny_config(vocab_size=40, hidden_size=64))
    with pytest.raises(BertError, match="does not fit the model"):
        checkpoints.latest().load_model(wider)


# ------------------------------------------------------------------ damage, locks, staging
def saved(root, steps, keep_last=5) -> CheckpointDir:
    checkpoints = CheckpointDir(root, keep_last=keep_last)
    model = tiny_model()
    for step in steps:
        checkpoints.save(step, model, state_of(model), {"fingerprints": FPS},
                         texts={"train_log.tsv": f"step\n{step}\n"})
    return checkpoints


def overwrite(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def test_damaged_checkpoints_are_set_aside_never_deleted(tmp_path, caplog):
    root = tmp_path / "ckpt"
    checkpoints = saved(root, [2, 4, 6])
    assert set(checkpoints.latest().meta["files"]) == {
        "config.json", "model.safetensors", "trainer.pt", "train_log.tsv"}
    # truncated weights
    weights = root / "step-00000006" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with caplog.at_level("WARNING", logger="bertcore.training.checkpoints.checkpoint"):
        assert checkpoints.latest().step == 4
    (line,) = [r.getMessage() for r in caplog.records]
    assert "step-00000006 is damaged (model.safetensors does not match its checksum)" in line
    assert "set aside as step-00000006.damaged; falling back to step-00000004" in line
    assert (root / "step-00000006.damaged" / "model.safetensors").stat().st_size == 1000
    assert [c.step for c in checkpoints.all()] == [2, 4]
    # readable but altered optimizer state (4 KB of 0xFF), then a missing file
    overwrite(root / "step-00000004" / "trainer.pt", 2048, b"\xff" * 4096)
    (root / "step-00000002" / "train_log.tsv").unlink()
    caplog.clear()
    with caplog.at_level("WARNING", logger="bertcore.training.checkpoints.checkpoint"):
        assert checkpoints.latest() is None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all("no intact one is left" in m for m in messages)
    assert "trainer.pt does not match its checksum" in messages[0]
    assert "train_log.tsv is missing" in messages[1]
    # a new run prunes its own checkpoints, never what was set aside
    saved(root, [8, 10], keep_last=2)
    weights = root / "step-00000010" / "model.safetensors"
    overwrite(weights, weights.stat().st_size - 100, b"\x00" * 8)
    assert checkpoints.latest().step == 8
    names = sorted(p.name for p in root.iterdir())
    assert names == ["step-00000002.damaged", "step-00000004.damaged", "step-00000006.damaged",
                     "step-00000008", "step-00000010.damaged"]
    # the same step damaged twice: both kept
    saved(root, [10], keep_last=2)
    (root / "step-00000010" / "trainer.pt").unlink()
    assert checkpoints.latest().step == 8
    assert (root / "step-00000010.damaged-2").is_dir()


def test_a_checkpoint_whose_meta_lists_no_files_is_set_aside(tmp_path, caplog):
    """Every checkpoint records its files' checksums: one without them was not written
    whole by a run, so it is not resumed."""
    checkpoints = saved(tmp_path / "ckpt", [3, 5])
    meta_path = tmp_path / "ckpt" / "step-00000005" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["files"]
    meta_path.write_text(json.dumps(meta))
    with caplog.at_level("WARNING", logger="bertcore.training.checkpoints.checkpoint"):
        assert checkpoints.latest().step == 3
    (line,) = [r.getMessage() for r in caplog.records]
    assert "step-00000005 is damaged (meta.json lists no files)" in line
    assert (tmp_path / "ckpt" / "step-00000005.damaged").is_dir()


HOLD = """
import os, sys, time
from bertcore.common.atomic import atomic_dir
from bertcore.training.checkpoints.checkpoint import CheckpointDir
what, path, then = sys.argv[1:4]
context = CheckpointDir(path).lock() if what == "lock" else atomic_dir(path)
context.__enter__()
print("ready", flush=True)
if then == "die":
    os.kill(os.getpid(), 9)
time.sleep(120)
"""


def hold(what: str, path, then: str) -> subprocess.Popen:
    """A process that holds the lock of checkpoint folder `path` (what="lock") or writes
    output `path` (what="write"), then dies by SIGKILL (then="die") or lives on ("live")."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, what, str(path), then],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "ready\n"
    if then == "die":
        assert proc.wait(timeout=60) == -signal.SIGKILL
    return proc


def test_prune_removes_staging_folders_of_dead_processes_only(tmp_path):
    root = tmp_path / "ckpt"
    checkpoints = saved(root, [1])
    hold("write", root / "step-00000002", "die")
    live = hold("write", root / "step-00000003", "live")
    try:
        stale, writing = (sorted(root.glob(f".step-0000000{n}.tmp-*")) for n in (2, 3))
        assert len(stale) == 1 and len(writing) == 1
        assert f"-{live.pid}-" in writing[0].name  # the owner is in the name
        checkpoints.save(4, tiny_model(), state_of(tiny_model()), {"fingerprints": FPS})
        assert not stale[0].exists()
        assert writing[0].is_dir()  # another live process is writing it: untouched
    finally:
        live.kill()
        live.wait()


def test_the_lock_keeps_a_second_run_out_and_is_taken_over_from_a_dead_one(tmp_path, caplog):
    root = tmp_path / "models" / "checkpoints"
    holder = hold("lock", root, "live")
    try:
        with pytest.raises(FolderInUseError) as error, CheckpointDir(root).lock():
            pass
        message = str(error.value)
        assert f"in use by pid {holder.pid} on {socket.gethostname()} since 20" in message
        assert "--checkpoints" in message
    finally:
        holder.kill()
        holder.wait()
    # SIGKILL leaves the lock file behind; the OS released the lock itself
    hold("lock", root, "die")
    assert lock_path(root).is_file()
    with caplog.at_level("INFO", logger="bertcore.common.lock"), CheckpointDir(root).lock():
        assert json.loads(lock_path(root).read_text())["pid"] == os.getpid()
    assert "taking over" in caplog.text
    assert not lock_path(root).exists()
    with CheckpointDir(root).lock(enabled=False):  # other ranks of a distributed run
        assert not lock_path(root).exists()


def test_set_aside_takes_the_earlier_sets_place_and_keeps_what_a_killed_one_left(tmp_path):
    root = tmp_path / "ckpt"
    checkpoints = saved(root, [2, 4])
    checkpoints.set_aside(checkpoints.all())
    assert checkpoints.latest() is None  # never resumed from replaced/
    assert [c.step for c in CheckpointDir(root / "replaced").all()] == [2, 4]
    saved(root, [6, 8])
    # a set-aside killed half-way: step 6 is in the folder being filled, step 8 not yet
    (root / ".replaced.incoming").mkdir()
    os.rename(root / "step-00000006", root / ".replaced.incoming" / "step-00000006")
    assert checkpoints.set_aside_before() == ["step-00000002", "step-00000004"]
    checkpoints.set_aside(checkpoints.all())
    assert [c.step for c in CheckpointDir(root / "replaced").all()] == [6, 8]
    assert sorted(p.name for p in root.iterdir()) == ["replaced"]
