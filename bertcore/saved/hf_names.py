"""Hugging Face's names for BERT's weights and its config.json: `hf_name_pairs` is the ONE
place that knows `modeling_bert`'s parameter names and how they map to ours (the fused QKV
projection is their query, key and value concatenated), `to_hf_state_dict` and
`from_hf_state_dict` rename a state dict either way (the latter reading the variants found in
the wild), `hf_config_dict` is config.json for `BertForPreTraining`. What `hf` writes and
reads with them."""

from __future__ import annotations

import torch

from bertcore.model.bert import BertConfig

# HF ties these to other tensors and leaves them out of its files.
HF_TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
# Buffers older HF checkpoints stored; not weights.
HF_BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")


def hf_name_pairs(num_layers: int) -> list[tuple[str, tuple[str, ...]]]:
    """(our name, HF names) for every parameter. Several HF names mean that our tensor is
    theirs concatenated along dim 0 (the fused QKV projection = [query; key; value])."""
    pairs = [
        ("embeddings.tokens.weight", ("bert.embeddings.word_embeddings.weight",)),
        ("embeddings.positions.weight", ("bert.embeddings.position_embeddings.weight",)),
        ("embeddings.segments.weight", ("bert.embeddings.token_type_embeddings.weight",)),
    ]
    for kind in ("weight", "bias"):
        pairs.append((f"embeddings.norm.{kind}", (f"bert.embeddings.LayerNorm.{kind}",)))
    for i in range(num_layers):
        ours, hf = f"layers.{i}.", f"bert.encoder.layer.{i}."
        for kind in ("weight", "bias"):
            qkv = tuple(f"{hf}attention.self.{n}.{kind}" for n in ("query", "key", "value"))
            pairs += [
                (f"{ours}attention.qkv.{kind}", qkv),
                (f"{ours}attention.out.{kind}", (f"{hf}attention.output.dense.{kind}",)),
                (f"{ours}attention_norm.{kind}", (f"{hf}attention.output.LayerNorm.{kind}",)),
                (f"{ours}ffn_in.{kind}", (f"{hf}intermediate.dense.{kind}",)),
                (f"{ours}ffn_out.{kind}", (f"{hf}output.dense.{kind}",)),
                (f"{ours}ffn_norm.{kind}", (f"{hf}output.LayerNorm.{kind}",)),
            ]
    for kind in ("weight", "bias"):
        pairs += [
            (f"pooler.dense.{kind}", (f"bert.pooler.dense.{kind}",)),
            (f"mlm_head.dense.{kind}", (f"cls.predictions.transform.dense.{kind}",)),
            (f"mlm_head.norm.{kind}", (f"cls.predictions.transform.LayerNorm.{kind}",)),
            (f"nsp_head.{kind}", (f"cls.seq_relationship.{kind}",)),
        ]
    pairs.append(("mlm_head.bias", ("cls.predictions.bias",)))
    return pairs


def to_hf_state_dict(tensors: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Our names -> HF names (also usable on a dict of gradients). Missing names are skipped."""
    out = {}
    for ours, hf_names in hf_name_pairs(num_layers):
        if ours not in tensors:
            continue
        tensor = tensors[ours]
        if len(hf_names) == 1:
            out[hf_names[0]] = tensor
        else:
            for name, part in zip(hf_names, tensor.chunk(len(hf_names), dim=0), strict=True):
                out[name] = part.contiguous()
    return out


def from_hf_state_dict(
    tensors: dict[str, torch.Tensor], num_layers: int
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """HF names -> ours. Returns (state dict, HF names not used); what is not found is not in
    the state dict (`load_state_dict` names it).

    Accepts the variants found in the wild: BertModel files without the `bert.` prefix,
    TF-era LayerNorm `gamma`/`beta`, the tied decoder keys, the position_ids buffer."""
    tensors = {_normalise_hf_name(name): t for name, t in tensors.items()}
    if "cls.predictions.bias" not in tensors and "cls.predictions.decoder.bias" in tensors:
        tensors["cls.predictions.bias"] = tensors["cls.predictions.decoder.bias"]
    used = set(HF_TIED_KEYS) | set(HF_BUFFERS)
    out = {}
    for ours, hf_names in hf_name_pairs(num_layers):
        if not all(name in tensors for name in hf_names):
            continue
        used.update(hf_names)
        parts = [tensors[name] for name in hf_names]
        out[ours] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    return out, sorted(set(tensors) - used)


def _normalise_hf_name(name: str) -> str:
    if name.startswith(("embeddings.", "encoder.", "pooler.")):
        name = f"bert.{name}"
    name = name.replace(".LayerNorm.gamma", ".LayerNorm.weight")  # TF-era names
    return name.replace(".LayerNorm.beta", ".LayerNorm.bias")


def hf_config_dict(config: BertConfig, dtype: torch.dtype = torch.float32) -> dict:
    """config.json for transformers' BertForPreTraining."""
    return {
        "architectures": ["BertForPreTraining"],
        "model_type": "bert",
        **config.to_dict(),
        "dtype": str(dtype).removeprefix("torch."),
        "tie_word_embeddings": True,
        "classifier_dropout": None,
        "is_decoder": False,
        "add_cross_attention": False,
        "use_cache": True,
    }
