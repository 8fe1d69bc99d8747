"""Checkpoints: atomic commits, keep_last, fingerprints, RNG states, weights_only loading."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from tiny_pretrain import tiny_config

from bertcore.checkpoint import (
    CheckpointDir,
    capture_rng_state,
    changed_fingerprints,
    fingerprint_files,
    fingerprint_params,
    restore_rng_state,
)
from bertcore.errors import BertError
from bertcore.hf import load_model
from bertcore.model import BertForPretraining

FPS = {"params": "a" * 64, "vocab": "b" * 64, "samples": "c" * 64}


def tiny_model(seed: int = 0) -> BertForPretraining:
    torch.manual_seed(seed)
    return BertForPretraining(tiny_config(vocab_size=40))


def state_of(model: BertForPretraining) -> dict:
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
    # checkpoints of other params are replaced by the new run's
    other = {**FPS, "params": "e" * 64}
    checkpoints.save(1, model, state_of(model), {"fingerprints": other})
    assert [c.step for c in checkpoints.all()] == [1]


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
    (tmp_path / "ckpt" / ".step-00000007.tmp-abc").mkdir()
    (tmp_path / "ckpt" / ".step-00000007.tmp-abc" / "model.safetensors").write_bytes(b"half")
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
    bigger = BertForPretraining(tiny_config(vocab_size=40, num_hidden_layers=2))
    with pytest.raises(BertError, match="does not fit the model"):
        checkpoints.latest().load_model(bigger)
    wider = BertForPretraining(tiny_config(vocab_size=40, hidden_size=64))
    with pytest.raises(BertError, match="does not fit the model"):
        checkpoints.latest().load_model(wider)
