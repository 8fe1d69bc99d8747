"""The model folder our pretraining writes (models/pretrained): the model in our format beside
`RUN_INFO`, and the model loaded with the vocabulary it must have been trained with."""

from __future__ import annotations

from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import load_model

# In a model folder our pretraining wrote: the step that made it and the run's fingerprints.
# Not the MLflow run: its id is random, and the folder is the same bytes for the same params
# and data. That run carries the weights' sha256 as the tag MODEL_TAG instead
# (`bertcore.saved.model_run`), so a later stage finds it.
RUN_INFO = "training.json"
# In a checkpoint folder (`bertcore.training.checkpoints.checkpoint`): its step, files and the
# run's fingerprints, which say, as RUN_INFO does, which vocabulary the model was trained with.
META_FILE = "meta.json"


def load_pretrained(model_dir: str | Path, vocab_dir: str | Path
                    ) -> tuple[BertPretrainingModel, list[str]]:
    """The model `bert pretrain` wrote and the vocabulary it must have been trained with."""
    model = load_model(model_dir)
    tokens = read_vocab(vocab_dir)
    if model.config.vocab_size != len(tokens):
        raise BertError(f"the model in {model_dir} has {model.config.vocab_size} tokens, the "
                        f"vocabulary in {vocab_dir} {len(tokens)}: rerun `bert pretrain`")
    return model, tokens
