"""Local attention init: heads start out looking at one neighbouring token each.

A freshly initialised BERT attends almost uniformly (the logits q.k are ~0.05 at
initializer_range 0.02). A small model on a small corpus then spends thousands of steps on a
plateau where it predicts masked tokens from word frequencies and the bag of words around
them, before its heads find the neighbouring tokens: a 2-layer model on 0.35 M characters of
news stayed at 0.14 val MLM accuracy from step 400 to step 1500 (attention entropy 4.4-4.7 of
a uniform 4.85), while counting left and right neighbours alone predicts 0.32. Starting the
heads on their neighbours skips that plateau. Val MLM accuracy after 600 steps of the default
params, BERT's init -> this one: news 0.138 -> 0.221, Python docs 0.132 -> 0.190, six licence
texts 0.118 -> 0.318, a novel 0.131 -> 0.214, Chinese 0.163 -> 0.303, Node.js docs 0.186 ->
0.367. The cost when every head starts local: NSP stays near chance in a short run ([CLS]
and every token see a few neighbours instead of the whole pair; news, 1500 steps, NSP 0.558
against 0.615 with BERT's init on 944 val pairs), and the encoder it gives fine-tunes no
better than one from scratch. So the recipe (params/recipes/tiny.yaml, docs/recipe.md) starts
only the first `local_heads` heads of the first `local_layers` layers local and leaves the others
on BERT's init, a global view: on BERT-tiny with 4 heads, 2 local in the first layer, MLM leaves
the plateau and NSP learns as with BERT's init. It was only ever measured on BERT-tiny
(MEASURED_ON).

How (only the initial weights change: the architecture is BERT's, training is free to move
them, and the exported model loads in transformers like any other):
- position embeddings are sinusoids (Vaswani et al. 2017) whose frequencies are spread over
  [0.3, 2.8] radians per position, so that moving by s positions is one fixed rotation of
  every (sin, cos) pair and positions a few steps apart look unalike;
- head k of every layer takes a share of those pairs and a shift s_k = +1, -1, +2, -2, ...;
  its query reads the pairs at position i, its key reads them at j rotated by s_k, so
  q_i . k_j peaks at j = i - s_k: head 1 looks at the previous token, head 2 at the next one.
  These weights are added to BERT's random init, which keeps the heads from being exact
  copies of each other and leaves their token features free to grow.
"""

from __future__ import annotations

import torch

from bertcore.model.bert import BertPretrainingModel

# Attention sharpness: q.k / sqrt(head_size) reaches ~20 at the neighbour, so a fresh head
# puts most of its weight there (news, 600 steps: 0.226 at 4, 0.221 at 2). Lower, the model
# falls back to the frequency plateau, the only regime where NSP learnt (news, 1500 steps,
# val MLM / NSP on 944 pairs: 0.5 -> 0.139 / 0.645; 0.7 -> 0.301 / 0.517; 1 -> 0.314 / 0.519).
SHARPNESS = 4.0
# Position embeddings' std, in units of initializer_range (token embeddings have 1): the
# positions must stand out of the token embeddings after LayerNorm (news, 600 steps, sharpness
# 2: 0.146 at scale 1, 0.221 at 2, 0.203 at 3; sinusoids at scale 2 alone, BERT's q/k: 0.135).
POSITION_SCALE = 2.0
FREQUENCIES = (0.3, 2.8)  # radians per position of the (sin, cos) pairs
SHIFTS = (1, -1, 2, -2)  # head k looks at position i - SHIFTS[k % 4]
MEASURED_ON = ("tiny",)  # the presets this init was measured on (docs/recipe.md)


def head_shift(layer: int, head: int, local_heads: int) -> int:
    """The shift local head `head` of `layer` starts on: SHIFTS[head] in every layer, except
    with one local head per layer, which alternates between the previous and the next token
    from layer to layer, so that the model still starts with both neighbours."""
    return SHIFTS[(layer * local_heads + head) % max(2, local_heads) % len(SHIFTS)]


@torch.no_grad()
def init_local_attention(model: BertPretrainingModel, local_heads: int | None = None,
                         local_layers: int | None = None) -> None:
    """Set `model`'s position embeddings and the query/key weights of the first `local_heads`
    heads (None: all) of the first `local_layers` layers (None: all) as described above (in
    place); the other heads keep BERT's init, and so attend to the whole sequence."""
    config = model.config
    positions = model.embeddings.positions.weight
    length, hidden = positions.shape
    pairs = hidden // 2
    freq = torch.linspace(*FREQUENCIES, pairs, dtype=torch.float64)
    angle = torch.arange(length, dtype=torch.float64)[:, None] * freq
    table = torch.zeros(length, hidden, dtype=torch.float64)
    table[:, 0 : 2 * pairs : 2] = torch.sin(angle)
    table[:, 1 : 2 * pairs : 2] = torch.cos(angle)
    # sin/cos have std 1/sqrt(2)
    positions.copy_(table * POSITION_SCALE * config.initializer_range * 2**0.5)

    for index, layer in enumerate(model.layers[:local_layers]):
        attention = layer.attention
        size, heads = attention.head_size, attention.num_heads
        local = heads if local_heads is None else min(local_heads, heads)
        width = heads * size
        weight = attention.qkv.weight  # rows: [q; k; v], head by head
        sin_rows, cos_rows = torch.arange(0, size - 1, 2), torch.arange(1, size, 2)
        for head in range(local):
            # this head's pairs: every heads-th one, so each head sees all frequency ranges
            own = (torch.arange(size // 2) * heads + head) % pairs
            turn = head_shift(index, head, local) * freq[own]
            # query: the pairs (sin a, cos a) at position i; key: the same pairs at j turned
            # on by the shift, (sin(a + turn), cos(a + turn))
            query = torch.zeros(size, hidden, dtype=torch.float64)
            key = torch.zeros(size, hidden, dtype=torch.float64)
            query[sin_rows, 2 * own] = 1
            query[cos_rows, 2 * own + 1] = 1
            key[sin_rows, 2 * own], key[sin_rows, 2 * own + 1] = torch.cos(turn), torch.sin(turn)
            key[cos_rows, 2 * own], key[cos_rows, 2 * own + 1] = -torch.sin(turn), torch.cos(turn)
            rows = slice(head * size, (head + 1) * size)
            weight[rows] += (SHARPNESS**0.5 * query).to(weight.dtype)
            weight[width:][rows] += (SHARPNESS**0.5 * key).to(weight.dtype)
