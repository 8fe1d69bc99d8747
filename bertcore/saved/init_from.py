"""Continued pretraining: the existing BERT a run starts from (`model.init_from`).

The folder (ours, an export, or `save_pretrained` of transformers' BertForPreTraining,
BertForMaskedLM or BertModel) fixes the architecture: its config.json replaces the preset, and
an explicit `model:` value that contradicts it is an error; only the dropout rates, which
shape training and not the weights, may differ. The vocabulary must be the model's, token for
token. Weights the folder lacks (pooler, MLM transform, NSP head) start as in a fresh model
drawn from the same seed. The content hash of config.json and the weights goes into the run's
fingerprints, so a resume never continues a run begun from other weights.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from tokenizers import Tokenizer

from bertcore.common.digests import fingerprint_files
from bertcore.common.errors import BertError, ConfigError, yaml_text
from bertcore.data.vocab.files import TOKENIZER_FILE, VOCAB_FILE, read_vocab
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.model.config import ModelConfig
from bertcore.saved.hf import CONFIG_NAME, load_model, read_config, weight_files

KEY = "model.init_from"
# What `model:` may set to another value than the folder's config.json.
TRAINING_ONLY = ("hidden_dropout_prob", "attention_probs_dropout_prob")


@dataclass(frozen=True)
class InitModel:
    """The folder, the config to build the model with (the folder's, with the section's
    dropout rates), and its token list when it holds a tokenizer (None: only the size is known)."""

    path: Path
    config: BertConfig
    tokens: list[str] | None

    @classmethod
    def open(cls, params: ModelConfig) -> InitModel:
        """Read and check `params.init_from` (fast: config.json, the tokenizer, not the
        weights); a one-line error for a folder that is not a BERT or a contradicting key."""
        path = Path(str(params.init_from)).expanduser()
        if not path.is_dir():
            raise BertError(f"{KEY} not found: {params.init_from} (null, or a folder holding a "
                            "BERT in Hugging Face format: config.json and model.safetensors)")
        folder = read_config(path)
        weight_files(path)  # none there: one line now, not after the slow part
        dropout = {}
        for key, value in params.overrides().items():
            if key in TRAINING_ONLY:
                dropout[key] = value
            elif value != getattr(folder, key):
                raise ConfigError(
                    f"model.{key}", f"{yaml_text(value)} contradicts {path / CONFIG_NAME} "
                    f"({key}: {yaml_text(getattr(folder, key))}); with {KEY} the architecture "
                    f"is the model's: remove model.{key} (only dropout rates may be set)")
        return cls(path, dataclasses.replace(folder, **dropout), _model_tokens(path))

    def describe(self) -> str:
        c = self.config
        return (f"{c.num_hidden_layers} layers, hidden size {c.hidden_size}, "
                f"{c.num_attention_heads} heads, {c.vocab_size} tokens")

    def check_vocab(self, tokens: list[str], vocab_dir: str | Path) -> None:
        """The vocabulary of the samples must be the model's: same size, same tokens."""
        size, ours = self.config.vocab_size, len(tokens)
        first = _first_difference(self.tokens, tokens) if self.tokens is not None else None
        if size == ours and first is None:
            return
        if first is None:
            where = ""
        else:
            i, theirs, mine = first
            where = (f"; the first token that differs is id {i}: {_shown(theirs)} in the "
                     f"model, {_shown(mine)} in {vocab_dir}")
        raise BertError(
            f"the vocabulary of {vocab_dir} ({ours} tokens) is not the one of {KEY} "
            f"{self.path} ({size} tokens){where}: set vocab.source to {self.path} and rerun "
            "the vocab and samples stages")

    def fingerprint(self) -> str:
        """sha256 over config.json and the weights files (streamed: they may be large)."""
        return fingerprint_files([self.path / CONFIG_NAME, *weight_files(self.path)])

    def load(self) -> BertPretrainingModel:
        """The model with the folder's weights. What the folder lacks keeps the init that
        `BertPretrainingModel(config)` draws from torch's global generator now (seed it as for a
        fresh model); `bertcore.saved.hf` says which groups, one line each."""
        return load_model(self.path, strict=False, config=self.config)


def _model_tokens(path: Path) -> list[str] | None:
    """The folder's tokens in id order: tokenizer.json first (as the vocab stage reads a
    folder), else vocab.txt; None when it has neither (e.g. models/pretrained)."""
    if (path / TOKENIZER_FILE).is_file():
        try:
            vocab = Tokenizer.from_file(str(path / TOKENIZER_FILE)).get_vocab()
        except Exception:  # tokenizers raises plain Exceptions; vocab.txt may still say
            vocab = None
        if vocab:
            return sorted(vocab, key=vocab.__getitem__)
    if (path / VOCAB_FILE).is_file():
        return read_vocab(path)
    return None


def _first_difference(a: list[str], b: list[str]) -> tuple[int, str | None, str | None] | None:
    """(id, token in a, token in b) at the first id where the lists differ (None: one has no
    token there); None when they are equal."""
    return next(((i, x, y) for i, (x, y) in enumerate(zip_longest(a, b)) if x != y), None)


def _shown(token: str | None) -> str:
    return "none" if token is None else repr(token)
