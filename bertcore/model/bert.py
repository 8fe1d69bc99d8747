"""BERT for pretraining (MLM + NSP): the same function as transformers' BertForPreTraining.

Read top to bottom: the embeddings, one post-LN encoder layer, the pooler and the two heads,
then the whole model with its losses (its config and presets: `bertcore/model/config.py`).
Parameter names are our own (short, one fused QKV projection per layer);
`bertcore/saved/hf_names.py` is the one place that maps them to Hugging Face's `modeling_bert`
names.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from bertcore.common.errors import BertError, require
from bertcore.model.config import BertConfig
from bertcore.model.packing import Packing

IGNORE_INDEX = -100  # label of a position that takes no part in a loss (as in HF and PyTorch)

# hidden_act (config.HIDDEN_ACTS, as Hugging Face writes them); BERT itself uses the exact GELU.
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_new": partial(F.gelu, approximate="tanh"),
    "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
}


# ------------------------------------------------------------------------------- the blocks
class Embeddings(nn.Module):
    """Token + position + segment embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        h = config.hidden_size
        # padding_idx as in HF: the [PAD] row gets no gradient from the input side.
        self.tokens = nn.Embedding(config.vocab_size, h, padding_idx=config.pad_token_id)
        self.positions = nn.Embedding(config.max_position_embeddings, h)
        self.segments = nn.Embedding(config.type_vocab_size, h)
        self.norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                packing: Packing | None = None) -> torch.Tensor:
        """[B, L, H]; with `packing`, the real tokens' rows alone [T, H]."""
        positions = self.positions.weight[: input_ids.shape[1]]
        if packing is not None:
            input_ids, positions = packing.unpad(input_ids), positions[packing.columns]
            if token_type_ids is not None:
                token_type_ids = packing.unpad(token_type_ids)
        if token_type_ids is None:
            segments = self.segments.weight[0]  # every token in segment A
        else:
            segments = self.segments(token_type_ids)
        x = self.tokens(input_ids) + segments + positions
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection and SDPA.

    A pruned layer has fewer heads (`num_heads`), each still `head_size` wide, so its
    projections are smaller. `head_gate`, when set, multiplies each head's output: shape
    [heads] or [batch, heads]; `bertcore.downstream.heads` sets it to ones and reads its gradient
    (Michel et al. 2019). None (the default) costs nothing. With a `packing`, `x` is the real
    tokens' rows [T, H]: the projections run on them alone, and the attention on them padded
    again to [B, L] (each sequence's rows side by side, padding masked)."""

    def __init__(self, config: BertConfig, num_heads: int | None = None):
        super().__init__()
        self.num_heads = num_heads or config.num_attention_heads
        self.head_size = config.head_size
        width = self.num_heads * self.head_size
        self.qkv = nn.Linear(config.hidden_size, 3 * width)  # rows: [q; k; v], head by head
        self.out = nn.Linear(width, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob
        self.head_gate: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None,
                packing: Packing | None = None) -> torch.Tensor:
        qkv = self.qkv(x)
        if packing is None:
            return self.out(self.attend(qkv, mask))
        return self.out(packing.unpad(self.attend(packing.pad(qkv), mask)))

    def attend(self, qkv: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The heads' outputs [B, L, heads * head_size] from the projections [B, L, 3 * that]."""
        batch, length, _ = qkv.shape
        qkv = qkv.view(batch, length, 3, self.num_heads, self.head_size)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, heads, L, head_size]
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0
        )
        if self.head_gate is not None:
            y = y * self.head_gate.reshape(-1, self.num_heads, 1, 1).to(y.dtype)
        return y.transpose(1, 2).reshape(batch, length, -1)

    @torch.no_grad()
    def keep_heads(self, positions: list[int]) -> None:
        """Keep only the heads at `positions` (of this layer's current heads): the rows of
        their query/key/value and the columns of the output projection."""
        require(len(positions) >= 1, "positions", positions, "at least one head")
        rows, cols = head_units(positions, self.head_size, self.num_heads * self.head_size)
        qkv, out = self.qkv, self.out
        self.qkv = nn.Linear(qkv.in_features, len(rows), device=qkv.weight.device,
                             dtype=qkv.weight.dtype)
        self.qkv.weight.copy_(qkv.weight[rows])
        self.qkv.bias.copy_(qkv.bias[rows])
        self.out = nn.Linear(len(cols), out.out_features, device=out.weight.device,
                             dtype=out.weight.dtype)
        self.out.weight.copy_(out.weight[:, cols])
        self.out.bias.copy_(out.bias)
        self.num_heads = len(positions)
        self.head_gate = None


def head_units(heads: list[int], size: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where `heads` (each `size` wide) lie in attention projections `width` wide: the rows of
    the fused [query; key; value] projection, and the columns of the output projection."""
    cols = torch.tensor([h * size + i for h in heads for i in range(size)])
    return torch.cat([part * width + cols for part in range(3)]), cols


class EncoderLayer(nn.Module):
    """One post-LN Transformer layer: x = LN(x + attention(x)); x = LN(x + FFN(x))."""

    def __init__(self, config: BertConfig, index: int = 0):
        super().__init__()
        self.attention = SelfAttention(config, len(config.kept_heads(index)))
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.ffn_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.act = ACTIVATIONS[config.hidden_act]
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None,
                packing: Packing | None = None) -> torch.Tensor:
        x = self.attention_norm(x + self.dropout(self.attention(x, mask, packing)))
        return self.ffn_norm(x + self.dropout(self.ffn_out(self.act(self.ffn_in(x)))))


class Pooler(nn.Module):
    """tanh(dense(hidden state of [CLS])): the sentence-pair representation NSP reads."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(sequence[:, 0]))


class MaskedLMHead(nn.Module):
    """dense, activation, LayerNorm, then the decoder: word embeddings (tied) plus a bias."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATIONS[config.hidden_act]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm(self.act(self.dense(hidden))), word_embeddings, self.bias)


# -------------------------------------------------------------------------------- the model
@dataclass
class PretrainingOutput:
    """Logits, and with labels the losses as SUMS with their counts, so that the caller can
    normalise over a global count (gradient accumulation, several processes)."""

    # [B, L, V] without MLM labels; [B, P, V] on the slots of `mlm_positions`; [N, V] on the
    # N labelled positions of `mlm_labels`
    mlm_logits: torch.Tensor
    nsp_logits: torch.Tensor  # [B, 2]; class 0 = "B follows A", 1 = "B is random" (as HF)
    mlm_loss_sum: torch.Tensor | None = None
    mlm_count: torch.Tensor | None = None
    mlm_correct: torch.Tensor | None = None
    nsp_loss_sum: torch.Tensor | None = None
    nsp_count: torch.Tensor | None = None
    nsp_correct: torch.Tensor | None = None
    loss: torch.Tensor | None = None  # this batch's mean MLM + mean NSP (HF's loss)


class BertPretrainingModel(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        layers = range(config.num_hidden_layers)
        self.layers = nn.ModuleList(EncoderLayer(config, i) for i in layers)
        self.pooler = Pooler(config)
        self.mlm_head = MaskedLMHead(config)
        self.nsp_head = nn.Linear(config.hidden_size, 2)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        # BERT's init: normal(0, initializer_range) weights, zero biases, LayerNorm (1, 0).
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                nn.init.zeros_(module.weight[module.padding_idx])  # as HF does
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def encode(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        unpad: bool = False,
    ) -> torch.Tensor:
        """The encoder's last hidden states [B, L, H]; attention_mask is 1 on real tokens, 0 on
        padding (padding is never attended to). `unpad`: compute on the real tokens alone
        (`bertcore.model.packing`): the same function on them to float round-off, zeros at the
        padding; it pays where batches pad much (docs/training.md)."""
        if input_ids.shape[1] > self.config.max_position_embeddings:
            raise BertError(
                f"a sequence of {input_ids.shape[1]} tokens is longer than the model's "
                f"max_position_embeddings={self.config.max_position_embeddings}: truncate it"
            )
        # [B, 1, 1, L] boolean (True = attend), broadcast by SDPA over heads and queries.
        mask = None if attention_mask is None else attention_mask[:, None, None, :].bool()
        packing = Packing.of(attention_mask) if unpad and attention_mask is not None else None
        x = self.embeddings(input_ids, token_type_ids, packing)
        for layer in self.layers:
            x = layer(x, mask, packing)
        return x if packing is None else packing.pad(x)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,
        nsp_labels: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
        mlm_targets: torch.Tensor | None = None,
        unpad: bool = False,
    ) -> PretrainingOutput:
        """MLM labels come in one of two forms. Training passes fixed-size slots, as Google's
        and NVIDIA's BERT do: `mlm_positions` [B, P] (the masked positions of each sequence,
        padded with 0) and `mlm_targets` [B, P] (their original ids, IGNORE_INDEX in unused
        slots); every shape is then known from the input shapes, so a step never waits on the
        device and compiles as one graph. `mlm_labels` [B, L] (IGNORE_INDEX where nothing is
        predicted) is Hugging Face's form, for callers that have it; its gather has a
        data-dependent shape. `unpad`: the encoder on the real tokens alone (`encode`)."""
        sequence = self.encode(input_ids, token_type_ids, attention_mask, unpad)
        nsp_logits = self.nsp_head(self.pooler(sequence))
        word_embeddings = self.embeddings.tokens.weight
        # The vocabulary projection, the costliest matmul of the model, runs only on the
        # positions that are predicted (~15% of the tokens) instead of all of them.
        if mlm_positions is not None:
            index = mlm_positions.unsqueeze(-1).expand(-1, -1, sequence.shape[-1])
            mlm_logits = self.mlm_head(sequence.gather(1, index), word_embeddings)
            targets = mlm_targets
        elif mlm_labels is not None:
            selected = mlm_labels != IGNORE_INDEX
            mlm_logits = self.mlm_head(sequence[selected], word_embeddings)
            targets = mlm_labels[selected]
        else:
            mlm_logits, targets = self.mlm_head(sequence, word_embeddings), None
        out = PretrainingOutput(mlm_logits, nsp_logits)
        if targets is not None:
            out.mlm_loss_sum, out.mlm_count, out.mlm_correct = _summed_cross_entropy(
                mlm_logits.flatten(0, -2), targets.flatten()
            )
        if nsp_labels is not None:
            out.nsp_loss_sum, out.nsp_count, out.nsp_correct = _summed_cross_entropy(
                nsp_logits, nsp_labels
            )
        if out.mlm_loss_sum is not None or out.nsp_loss_sum is not None:
            out.loss = pretraining_loss(out, out.mlm_count, out.nsp_count)
        return out

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW groups: decay on matrices (linear weights, embeddings), none on biases and
        LayerNorm (Google's BERT excludes exactly "bias" and "LayerNorm")."""
        decay, no_decay = [], []
        for param in self.parameters():
            if param.requires_grad:
                (decay if param.ndim >= 2 else no_decay).append(param)
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]

    def num_parameters(self) -> int:
        """Distinct parameters (the tied decoder counts once)."""
        return sum(p.numel() for p in self.parameters())


def _summed_cross_entropy(logits: torch.Tensor, targets: torch.Tensor):
    """(loss summed over rows, number of rows, number of rows whose argmax is the target),
    rows whose target is IGNORE_INDEX left out, without a data-dependent shape."""
    loss_sum = F.cross_entropy(
        logits.float(), targets, ignore_index=IGNORE_INDEX, reduction="sum"
    )
    labelled = targets != IGNORE_INDEX
    count = labelled.sum()
    correct = ((logits.detach().argmax(dim=-1) == targets) & labelled).sum()
    return loss_sum, count, correct


def pretraining_loss(
    out: PretrainingOutput,
    mlm_denominator,
    nsp_denominator,
    mlm_weight: float = 1.0,
    nsp_weight: float = 1.0,
) -> torch.Tensor:
    """mlm_weight * mlm_loss_sum / mlm_denominator + nsp_weight * nsp_loss_sum / nsp_denominator.

    Pass GLOBAL counts (all micro-batches and processes) as denominators, so that gradient
    accumulation and DDP optimise the same objective as one big batch. A term whose labels
    were not given counts as zero; so does a term with no labels at all (0 / 0 would be NaN)."""
    loss = torch.zeros((), device=out.nsp_logits.device)
    if out.mlm_loss_sum is not None:
        loss = loss + mlm_weight * out.mlm_loss_sum / _at_least_one(mlm_denominator)
    if out.nsp_loss_sum is not None:
        loss = loss + nsp_weight * out.nsp_loss_sum / _at_least_one(nsp_denominator)
    return loss


def _at_least_one(count):
    return count.clamp_min(1) if isinstance(count, torch.Tensor) else max(count, 1)
