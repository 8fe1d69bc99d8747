"""The local attention init (bertcore.model.local_init): fresh heads look at their neighbours, and
that is what makes a small model learn from neighbours quickly."""

from __future__ import annotations

import pytest
import torch

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
