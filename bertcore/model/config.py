"""The `model:` section of params.yaml: a preset of the BERT family plus overrides, turned
into the model's `BertConfig` once the vocabulary's size is known."""

from __future__ import annotations

import dataclasses

from pydantic import model_validator

from bertcore.common.validation import Bool, Float, Int, params_section, text
from bertcore.model.bert import BertConfig


@params_section
class ModelConfig:
    """The `model:` section of params.yaml: a preset plus optional overrides of BertConfig
    fields. `vocab_size` is not a parameter: it comes from the vocabulary at pretrain time.
    With `init_from` (a BERT folder to continue pretraining) the architecture is the folder's
    (see `bertcore.model.init_from`): the preset is not used and only dropout rates may
    differ. The overrides are checked by BertConfig, when the section is parsed."""

    preset: str = "tiny"
    # null: random init; or a BERT folder in Hugging Face format
    init_from: text(pattern=r"\S", allowed="null or the path of a BERT folder") | None = None
    # Random init only: heads start on their neighbours (bertcore.model.local_init). Off: BERT's
    # own init learns both tasks where the local init gave up NSP (docs/defaults.md)
    local_attention_init: Bool = False
    hidden_size: Int | None = None
    num_hidden_layers: Int | None = None
    num_attention_heads: Int | None = None
    intermediate_size: Int | None = None
    hidden_act: str | None = None
    # No dropout by default (BertConfig's 0.1 is for long runs): a short run over a small corpus
    # does not overfit. null: the preset's 0.1, or with init_from the folder's own rates.
    hidden_dropout_prob: Float | None = 0.0
    attention_probs_dropout_prob: Float | None = 0.0
    max_position_embeddings: Int | None = None
    type_vocab_size: Int | None = None
    initializer_range: Float | None = None
    layer_norm_eps: Float | None = None
    pad_token_id: Int | None = None

    @model_validator(mode="after")
    def _a_valid_architecture(self) -> ModelConfig:
        # Check every value now (any vocab large enough for pad_token_id will do here), so a
        # bad parameter fails when params.yaml is parsed, not minutes later.
        self.to_config(vocab_size=(self.pad_token_id or 0) + 1)
        return self

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
