"""The model's params: the `model:` section of params.yaml (a preset of the BERT family plus
overrides, turned into the model's `BertConfig` once the vocabulary's size is known) and BERT's
hyper-parameters themselves (`BertConfig`, with its presets). Nothing here imports torch (the
stages read their params before they import what computes), as transformers'
configuration_bert.py beside modeling_bert.py."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from pydantic import model_validator

from bertcore.common.errors import ConfigError, require
from bertcore.common.validation import (
    Bool,
    Float,
    Int,
    checked,
    integer,
    number,
    params_section,
    text,
)

# The activations `hidden_act` may name, as Hugging Face writes them (bert.py's ACTIVATIONS)
HIDDEN_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
Size = integer(gt=0)  # a count or a width: a positive integer
Probability = number(ge=0, lt=1, allowed="a probability in [0, 1)")


@params_section
class BertConfig:
    """BERT's hyper-parameters, with Hugging Face's field names (config.json round-trips)."""

    vocab_size: Size = 30522
    hidden_size: Size = 768
    num_hidden_layers: Size = 12
    num_attention_heads: Size = 12
    intermediate_size: Size = 3072
    hidden_act: checked(str, lambda act: act in HIDDEN_ACTS, f"one of {list(HIDDEN_ACTS)}") = "gelu"
    hidden_dropout_prob: Probability = 0.1
    attention_probs_dropout_prob: Probability = 0.1
    max_position_embeddings: Size = 512
    type_vocab_size: Size = 2
    initializer_range: number(gt=0) = 0.02
    layer_norm_eps: number(gt=0) = 1e-12
    pad_token_id: Int = 0
    # Heads removed by pruning: layer -> original head indices, as transformers 4.x wrote it
    # in config.json ({"0": [1, 3]}); layer i then has num_attention_heads - len(...) heads.
    pruned_heads: Any = field(default_factory=dict)  # checked against the layers and heads

    @model_validator(mode="after")
    def _consistent(self) -> BertConfig:
        require(
            self.hidden_size % self.num_attention_heads == 0,
            "hidden_size",
            self.hidden_size,
            f"a multiple of num_attention_heads ({self.num_attention_heads})",
        )
        require(
            0 <= self.pad_token_id < self.vocab_size,
            "pad_token_id",
            self.pad_token_id,
            f"an id in [0, vocab_size={self.vocab_size})",
        )
        self.pruned_heads = self._checked_pruned_heads(self.pruned_heads)
        return self

    def _checked_pruned_heads(self, pruned) -> dict[int, list[int]]:
        """{layer: sorted original head indices}, int keys (JSON gives strings), empty layers
        dropped; every layer keeps at least one head."""
        require(isinstance(pruned, dict), "pruned_heads", pruned, "a mapping layer -> heads")
        layers, heads = self.num_hidden_layers, self.num_attention_heads
        checked: dict[int, list[int]] = {}
        for key, values in pruned.items():
            layer = int(key) if isinstance(key, int | str) and str(key).isdigit() else -1
            require(0 <= layer < layers, "pruned_heads", pruned, f"layers in [0, {layers})")
            require(
                isinstance(values, list | tuple)
                and all(isinstance(h, int) and 0 <= h < heads for h in values),
                "pruned_heads",
                pruned,
                f"lists of head indices in [0, {heads})",
            )
            if values:
                checked[layer] = sorted(set(values))
            require(
                len(checked.get(layer, ())) < heads,
                "pruned_heads",
                pruned,
                "at least one head left in every layer",
            )
        return dict(sorted(checked.items()))

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def kept_heads(self, layer: int) -> list[int]:
        """Original indices of the heads layer `layer` still has, in weight order."""
        removed = set(self.pruned_heads.get(layer, ()))
        return [h for h in range(self.num_attention_heads) if h not in removed]

    @property
    def heads_per_layer(self) -> list[int]:
        return [len(self.kept_heads(i)) for i in range(self.num_hidden_layers)]

    @classmethod
    def from_preset(cls, name: str, **overrides) -> BertConfig:
        """A preset (see PRESETS), any field overridden (an unknown one refused as the section
        refuses any unknown key); intermediate_size defaults to 4×hidden."""
        if name not in PRESETS:
            raise ConfigError("preset", f"{name!r} is unknown; expected one of {list(PRESETS)}")
        values = {**PRESETS[name], **overrides}
        values.setdefault("intermediate_size", 4 * values["hidden_size"])
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> BertConfig:
        """Build from a config.json (ours or Hugging Face's); keys BERT does not use are ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known and v is not None})


# Sizes of the BERT family (Turc et al. 2019 for tiny..medium; Devlin et al. 2018 for base, large).
PRESETS: dict[str, dict] = {
    "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2),
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4),
    "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8),
    "medium": dict(num_hidden_layers=8, hidden_size=512, num_attention_heads=8),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12),
    "large": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16),
}


# what a count of local heads or layers may be; none at all is the local init turned off
_LOCAL_COUNT = ("null (all) or an integer >= 1; for no local head at all, set "
                "model.local_attention_init: false")
LOCAL_COUNTS = ("local_attention_heads", "local_attention_layers")


@params_section
class ModelConfig:
    """The `model:` section of params.yaml: a preset plus optional overrides of BertConfig
    fields. `vocab_size` is not a parameter: it comes from the vocabulary at pretrain time.
    With `init_from` (a BERT folder to continue pretraining) the architecture is the folder's
    (see `bertcore.saved.init_from`): the preset is not used and only dropout rates may
    differ. The overrides are checked by BertConfig, when the section is parsed."""

    preset: str = "tiny"
    # null: random init; or a BERT folder in Hugging Face format
    init_from: text(pattern=r"\S", allowed="null or the path of a BERT folder") | None = None
    # The recipe merged under this section and `train` by the edge (bertstages/params.py:
    # params/recipes/NAME.yaml, docs/recipe.md); here its name, recorded with the run. none:
    # no recipe
    recipe: text(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                 allowed="none or the name of a recipe file (params/recipes/NAME.yaml)") = "none"
    # Random init only: heads start on their neighbours (bertcore.model.local_init), the first
    # `local_attention_heads` of each of the first `local_attention_layers` layers (null: all);
    # the others keep BERT's init, a global view, with which NSP still learns
    local_attention_init: Bool = False
    local_attention_heads: integer(ge=1, allowed=_LOCAL_COUNT) | None = None
    local_attention_layers: integer(ge=1, allowed=_LOCAL_COUNT) | None = None
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
        config = self.to_config(vocab_size=(self.pad_token_id or 0) + 1)
        require(self.local_heads(config.num_attention_heads) <= config.num_attention_heads,
                "local_attention_heads", self.local_attention_heads,
                f"at most num_attention_heads ({config.num_attention_heads})")
        require((self.local_attention_layers or 0) <= config.num_hidden_layers,
                "local_attention_layers", self.local_attention_layers,
                f"at most num_hidden_layers ({config.num_hidden_layers})")
        return self

    def local_heads(self, num_attention_heads: int) -> int:
        """How many heads of each layer start on a neighbour (the local attention init); 0:
        BERT's init on every head."""
        if not self.local_attention_init or self.init_from:
            return 0
        return self.local_attention_heads or num_attention_heads

    def unused_local_counts(self) -> list[str]:
        """Which of `LOCAL_COUNTS` are set and change nothing: with the local init off (or
        a model from `init_from`) the weights are byte for byte those without them."""
        if self.local_attention_init and not self.init_from:
            return []
        return [name for name in LOCAL_COUNTS if getattr(self, name) is not None]

    def local_layers(self, num_hidden_layers: int) -> int:
        """How many of the first layers have local heads (when `local_heads` is not 0)."""
        return self.local_attention_layers or num_hidden_layers

    def overrides(self) -> dict:
        """The BertConfig fields set explicitly in the section."""
        config_fields = {f.name for f in dataclasses.fields(BertConfig)}
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name in config_fields and getattr(self, f.name) is not None
        }

    def to_config(self, vocab_size: int) -> BertConfig:
        """The preset with the overrides."""
        return BertConfig.from_preset(self.preset, vocab_size=vocab_size, **self.overrides())
