"""A BERT folder in Hugging Face format (ours, a checkpoint, or another project's) loaded with
the tokenizer that fits it: the vocabulary our pretraining recorded beside the model decides
which tokenizer files may go with it."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from bertcore.common.errors import BertError
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.tokenizer import model_tokenizer
from bertcore.saved import hf
from bertcore.saved.pretrained import META_FILE, RUN_INFO


def load_model_and_tokenizer(model_dir: str, vocab_dir: str | None, head: str
                             ) -> tuple[BertPretrainingModel, Tokenizer]:
    """The model in eval mode and its tokenizer, checked to fit it, or a one-line error saying
    what is missing or what does not fit."""
    directory = Path(model_dir)
    if not directory.is_dir():
        raise BertError(f"model directory not found: {model_dir}")
    hf.weights_path(directory)  # fails early, before the tokenizer, with its own message
    config = hf.read_config(directory)
    tokenizer = model_tokenizer(directory, Path(vocab_dir) if vocab_dir else None, config,
                                trained_with(directory))
    model = hf.load_model(directory, strict=False, config=config).eval()
    needed = ("mlm_head.",) if head == "mlm" else ("pooler.", "nsp_head.")
    if any(name.startswith(needed) for name in model.missing_weights):
        raise BertError(f"{model_dir} has no {head.upper()} head weights: use a pretraining model")
    return model, tokenizer


def trained_with(directory: Path) -> str | None:
    """The fingerprint of the vocabulary our pretraining recorded beside a model: in
    training.json (models/pretrained) or meta.json (a checkpoint); None for other folders."""
    for name in (RUN_INFO, META_FILE):
        try:
            record = json.loads((directory / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        fingerprints = record.get("fingerprints") if isinstance(record, dict) else None
        if isinstance(fingerprints, dict) and isinstance(fingerprints.get("vocab"), str):
            return fingerprints["vocab"]
    return None
