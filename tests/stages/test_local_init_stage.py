"""The pretrain stage with the local attention init: it starts from it unless told not to, and
trains the tiny recipe (tests/unit/model/test_local_init.py: the init itself)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml
from helpers.bert import REPO, run_bert
from helpers.tiny_pretrain import build_data, tiny_params, write_params
from safetensors.torch import load_file

from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.model.local_init import init_local_attention


def saved_local_init(folder) -> tuple[bool, list[list[bool]]]:
    """Whether a saved model's position embeddings are the local init's sinusoids, and for
    each layer which heads' query and key rows read them (~sqrt(SHARPNESS) where BERT's noise
    is ~0.02), after a step at a negligible learning rate."""
    saved = load_file(folder / "model.safetensors")
    config = BertConfig.from_dict(json.loads((folder / "config.json").read_text()))
    fresh = BertPretrainingModel(config)
    init_local_attention(fresh)
    sinusoidal = torch.allclose(saved["embeddings.positions.weight"],
                                fresh.embeddings.positions.weight, atol=1e-5)
    size, count = config.head_size, config.num_attention_heads
    width = size * count
    local_rows = []
    for layer in range(config.num_hidden_layers):
        qkv = saved[f"layers.{layer}.attention.qkv.weight"]
        rows = [[bool(qkv[part * width + head * size: part * width + (head + 1) * size]
                      .abs().max() > 0.5) for part in (0, 1)] for head in range(count)]
        assert all(query == key for query, key in rows), (layer, rows)
        local_rows.append([query for query, _ in rows])
    return sinusoidal, local_rows


@pytest.mark.parametrize("local,heads,layers", [(True, None, None), (True, 1, 1),
                                                (False, None, None)])
def test_the_pretrain_stage_starts_from_the_local_init_unless_told_not_to(tmp_path, local,
                                                                          heads, layers):
    """`model.local_attention_init`, `local_attention_heads` and `local_attention_layers`
    reach the stage: after one step at a negligible learning rate the saved position
    embeddings are the sinusoids of the local init, or BERT's noise; the query and key rows
    of the first `heads` heads of the first `layers` layers are the local init's, the other
    heads' BERT's noise alone."""
    build_data(tmp_path)
    write_params(tmp_path / "params.yaml",
                 model={"local_attention_init": local, "local_attention_heads": heads,
                        "local_attention_layers": layers, "num_hidden_layers": 2},
                 train={"max_steps": 1, "learning_rate": 1e-7, "warmup_steps": 0,
                        "eval_every": 0, "checkpoint_every": 0},
                 tracking={"enabled": False})
    proc = run_bert("pretrain", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    sinusoidal, local_rows = saved_local_init(tmp_path / "models" / "pretrained")
    assert sinusoidal == local
    assert [len(layer) for layer in local_rows] == [2, 2]
    for layer, heads_local in enumerate(local_rows):
        on = local and layer < (layers or 2)
        assert heads_local == [on and head < (heads or 2) for head in range(2)], layer


@pytest.mark.parametrize("recipe,betas,expected", [
    ("tiny", None, (0.9, 0.98)), ("none", None, (0.9, 0.999)),
    ("tiny", [0.8, 0.95], (0.8, 0.95))])
def test_the_pretrain_stage_trains_tinys_recipe(tmp_path, recipe, betas, expected):
    """The shipped recipe (params/recipes/tiny.yaml) on BERT-tiny trains 4 heads, the first 2 of
    the first layer local and every other head BERT's, AdamW's beta2 0.98; recipe: none is
    BERT-tiny as published, beta2 0.999; the user's betas win."""
    build_data(tmp_path)
    shutil.copytree(REPO / "params", tmp_path / "params")
    params = tiny_params(model={"recipe": recipe, "num_hidden_layers": 2},
                         train={"max_steps": 1, "learning_rate": 1e-7, "warmup_steps": 0,
                                "eval_every": 0, "checkpoint_every": 0},
                         tracking={"enabled": False})
    del params["model"]["num_attention_heads"]  # the recipe's, or the preset's
    if betas:
        params["train"]["adam_betas"] = betas
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    proc = run_bert("pretrain", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    sinusoidal, local_rows = saved_local_init(tmp_path / "models" / "pretrained")
    if recipe == "tiny":
        assert sinusoidal and local_rows == [[True, True, False, False], [False] * 4]
    else:
        assert not sinusoidal and local_rows == [[False, False], [False, False]]
    (checkpoint,) = (tmp_path / "models" / "checkpoints").glob("step-*")
    state = torch.load(checkpoint / "trainer.pt", weights_only=True)
    assert {tuple(group["betas"]) for group in state["optimizer"]["param_groups"]} == {expected}
