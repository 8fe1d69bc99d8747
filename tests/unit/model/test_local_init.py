"""The local attention init (bertcore.model.local_init): fresh heads look at their neighbours, and
that is what makes a small model learn from neighbours quickly."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml
from helpers.bert import ONE_THREAD, REPO, run_bert
from helpers.tiny_pretrain import build_data, tiny_params, write_params
from safetensors.torch import load_file

from bertcore.common.errors import ConfigError
from bertcore.model.bert import IGNORE_INDEX, BertConfig, BertPretrainingModel
from bertcore.model.config import ModelConfig
from bertcore.model.local_init import SHIFTS, head_shift, init_local_attention

VOCAB = 60


def tiny(heads: int = 2, hidden: int = 64, layers: int = 2) -> BertPretrainingModel:
    config = BertConfig.from_preset("tiny", vocab_size=VOCAB, hidden_size=hidden,
                                    num_attention_heads=heads, num_hidden_layers=layers,
                                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                    max_position_embeddings=64)
    return BertPretrainingModel(config)


def attention_by_offset(model: BertPretrainingModel, input_ids: torch.Tensor) -> torch.Tensor:
    """[layers, heads, offsets -2..2]: the mean attention weight from position i to i + offset."""
    probs = []

    def record(module, inputs, output):
        x = inputs[0]
        batch, length, _ = x.shape
        qkv = module.qkv(x).view(batch, length, 3, module.num_heads, module.head_size)
        q, k, _ = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        probs.append(torch.softmax(q @ k.transpose(-1, -2) / module.head_size**0.5, -1))

    hooks = [layer.attention.register_forward_hook(record) for layer in model.layers]
    with torch.no_grad():
        model.eval().encode(input_ids, torch.zeros_like(input_ids))
    for hook in hooks:
        hook.remove()
    length = input_ids.shape[1]
    rows = torch.arange(2, length - 2)
    return torch.stack([
        torch.stack([p[:, :, rows, rows + offset].mean(dim=(0, 2)) for offset in range(-2, 3)], -1)
        for p in probs
    ])


@pytest.mark.parametrize("heads,hidden", [(2, 64), (4, 64), (4, 128)])
def test_every_head_starts_on_its_own_neighbour(heads, hidden):
    torch.manual_seed(0)
    input_ids = torch.randint(5, VOCAB, (8, 40))
    plain = tiny(heads, hidden)
    weights = attention_by_offset(plain, input_ids)
    assert weights.max() < 0.1  # BERT's init: close to uniform (1/40)
    local = tiny(heads, hidden)
    init_local_attention(local)
    weights = attention_by_offset(local, input_ids)
    for layer in range(2):
        for head in range(heads):
            offset = -SHIFTS[head % len(SHIFTS)]  # head k looks at i - SHIFTS[k]
            assert weights[layer, head, offset + 2] > 0.5, (layer, head, weights[layer, head])
    # only the initial weights change: the same parameters, the same shapes
    assert [n for n, _ in local.named_parameters()] == [n for n, _ in plain.named_parameters()]


@pytest.mark.parametrize("heads,local,layers", [(4, 2, None), (4, 1, None), (2, 1, None),
                                                (4, 2, 1), (2, 1, 2)])
def test_only_the_first_local_heads_of_the_first_layers_start_on_a_neighbour(heads, local,
                                                                              layers):
    """`local_heads` of each of the first `local_layers` layers start on a neighbour, the others
    keep BERT's near-uniform attention (a global view); one local head per layer alternates
    between the previous and the next token from layer to layer."""
    torch.manual_seed(0)
    input_ids = torch.randint(5, VOCAB, (8, 40))
    model = tiny(heads, 64, layers=3)
    init_local_attention(model, local, layers)
    weights = attention_by_offset(model, input_ids)
    for layer in range(3):
        for head in range(heads):
            if head < local and layer < (layers or 3):
                offset = -head_shift(layer, head, local)
                assert weights[layer, head, offset + 2] > 0.5, (layer, head, weights[layer])
            else:
                assert weights[layer, head].max() < 0.1, (layer, head, weights[layer])
    shifts = [[head_shift(layer, head, local) for head in range(local)] for layer in range(3)]
    assert shifts == ([[1, -1]] * 3 if local == 2 else [[1], [-1], [1]])


def neighbour_language(sequences: int, length: int, seed: int = 7) -> torch.Tensor:
    """Token i+1 is follow[token i] nine times in ten, else random: the masked token is told by
    its neighbours and by nothing else (every token is about equally frequent)."""
    gen = torch.Generator().manual_seed(seed)
    follow = torch.randperm(VOCAB - 5, generator=gen) + 5
    ids = torch.empty(sequences, length, dtype=torch.long)
    ids[:, 0] = torch.randint(5, VOCAB, (sequences,), generator=gen)
    for i in range(1, length):
        keep = torch.rand(sequences, generator=gen) < 0.9
        other = torch.randint(5, VOCAB, (sequences,), generator=gen)
        ids[:, i] = torch.where(keep, follow[ids[:, i - 1] - 5], other)
    return ids


def mlm_accuracy_after(local: bool, steps: int) -> float:
    torch.manual_seed(0)
    model = tiny()
    if local:
        init_local_attention(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    data = neighbour_language(2048 + 512, 24)
    train, held_out = data[:2048], data[2048:]
    gen = torch.Generator().manual_seed(0)

    def masked(ids):
        selected = torch.rand(ids.shape, generator=gen) < 0.15
        labels = torch.where(selected, ids, IGNORE_INDEX)
        return ids.masked_fill(selected, 4), labels  # 4: [MASK]

    model.train()
    for _ in range(steps):
        inputs, labels = masked(train[torch.randint(0, len(train), (32,), generator=gen)])
        out = model(inputs, torch.zeros_like(inputs), mlm_labels=labels)
        (out.mlm_loss_sum / out.mlm_count).backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    inputs, labels = masked(held_out)
    with torch.no_grad():
        out = model(inputs, torch.zeros_like(inputs), mlm_labels=labels)
    return float(out.mlm_correct) / float(out.mlm_count)


def test_local_init_learns_from_neighbours_where_bert_init_is_still_guessing():
    """80 steps on a language where only the neighbours tell the masked token: BERT's init is
    still near chance (1/55), the local init has learnt most of it (measured 0.06 vs 0.73)."""
    plain, local = mlm_accuracy_after(False, 80), mlm_accuracy_after(True, 80)
    assert plain < 0.2, plain
    assert local > 0.5, local


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
    proc = run_bert("pretrain", cwd=tmp_path, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    sinusoidal, local_rows = saved_local_init(tmp_path / "models" / "pretrained")
    assert sinusoidal == local
    assert [len(layer) for layer in local_rows] == [2, 2]
    for layer, heads_local in enumerate(local_rows):
        on = local and layer < (layers or 2)
        assert heads_local == [on and head < (heads or 2) for head in range(2)], layer


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
    proc = run_bert("pretrain", cwd=tmp_path, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    sinusoidal, local_rows = saved_local_init(tmp_path / "models" / "pretrained")
    if recipe == "tiny":
        assert sinusoidal and local_rows == [[True, True, False, False], [False] * 4]
    else:
        assert not sinusoidal and local_rows == [[False, False], [False, False]]
    (checkpoint,) = (tmp_path / "models" / "checkpoints").glob("step-*")
    state = torch.load(checkpoint / "trainer.pt", weights_only=True)
    assert {tuple(group["betas"]) for group in state["optimizer"]["param_groups"]} == {expected}


def test_the_local_init_takes_the_heads_and_layers_it_is_given():
    """`model.local_attention_init` (off by default: BERT's init) on the first
    `local_attention_heads` heads of the first `local_attention_layers` layers, all when null;
    never with init_from, whose weights are the folder's."""
    def heads_and_local(**params) -> tuple[int, int, int]:
        model = ModelConfig(**params)
        config = model.to_config(vocab_size=100)
        heads, layers = config.num_attention_heads, config.num_hidden_layers
        return heads, model.local_heads(heads), model.local_layers(layers)

    assert heads_and_local() == (2, 0, 2)
    assert heads_and_local(local_attention_init=True) == (2, 2, 2)
    assert heads_and_local(local_attention_init=True, num_attention_heads=4,
                           local_attention_heads=2, local_attention_layers=1) == (4, 2, 1)
    assert heads_and_local(preset="mini", local_attention_init=True,
                           local_attention_heads=2, local_attention_layers=3) == (4, 2, 3)
    assert heads_and_local(local_attention_heads=1)[:2] == (2, 0)
    assert ModelConfig(init_from="some/bert", local_attention_init=True).local_heads(4) == 0
    with pytest.raises(ConfigError, match=r"local_attention_heads: 5 .* at most"):
        ModelConfig(local_attention_init=True, local_attention_heads=5)
    with pytest.raises(ConfigError, match=r"local_attention_layers: 3 .* at most"):
        ModelConfig(local_attention_layers=3)
