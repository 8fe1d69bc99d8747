"""The `model:` section of params.yaml: a preset of the BERT family plus overrides, turned
into the model's `BertConfig` once the vocabulary's size is known."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bertcore.common.errors import require
from bertcore.model.bert import BertConfig


@dataclass
class ModelParams:
    """The `model:` section of params.yaml: a preset plus optional overrides of BertConfig
    fields. `vocab_size` is not a parameter: it comes from the vocabulary at pretrain time.
    With `init_from` (a BERT folder to continue pretraining) the architecture is the folder's
    (see `bertcore.model.init_from`): the preset is not used and only dropout rates may
    differ."""

    preset: str = "tiny"
    init_from: str | None = None  # null: random init; or a BERT folder in Hugging Face format
    # Random init only: heads start on their neighbours (bertcore.model.local_init). Off: BERT's
    # own init learns both tasks where the local init gave up NSP (docs/defaults.md)
    local_attention_init: bool = False
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    intermediate_size: int | None = None
    hidden_act: str | None = None
    # No dropout by default (BertConfig's 0.1 is for long runs): a short run over a small corpus
    # does not overfit. null: the preset's 0.1, or with init_from the folder's own rates.
    hidden_dropout_prob: float | None = 0.0
    attention_probs_dropout_prob: float | None = 0.0
    max_position_embeddings: int | None = None
    type_vocab_size: int | None = None
    initializer_range: float | None = None
    layer_norm_eps: float | None = None
    pad_token_id: int | None = None

    def __post_init__(self):
        require(self.init_from is None or bool(str(self.init_from).strip()), "init_from",
                self.init_from, "null or the path of a BERT folder")
        # Check every value now (any vocab large enough for pad_token_id will do here), so a
        # bad parameter fails when params.yaml is parsed, not minutes later.
        self.to_config(vocab_size=(self.pad_token_id or 0) + 1)

    def overrides(self) -> dict:
        """The BertConfig fields set explicitly in the section."""
        config_fields = {f.name for f in dataclasses.fields(BertConfig)}
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name in config_fields and getattr(self, f.name) is not None
        }

    def to_config(self, vocab_size: int) -> BertConfig:
        return BertConfig.from_preset(self.preset, vocab_size=vocab_size, **self.overrides())

