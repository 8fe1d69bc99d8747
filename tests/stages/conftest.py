"""Fixtures of the tests of the `bert` command."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from helpers.tiny_pretrain import build_data, tiny_config

from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import save_model


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The tiny corpus's data/ (corpus, vocabulary, samples), built once for a module."""
    return build_data(tmp_path_factory.mktemp("tiny"))


@pytest.fixture()
def workdir(data, tmp_path) -> Path:
    """A folder of its own for a test, holding `data` (a link) as data/."""
    (tmp_path / "data").symlink_to(data)
    return tmp_path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """data/ and an untrained tiny model in models/pretrained (fine-tuning and export read
    it), with params for a fine-tune of two steps and no tracking."""
    root = tmp_path_factory.mktemp("faults")
    data = build_data(root)
    torch.manual_seed(0)
    model = BertPretrainingModel(tiny_config(len(read_vocab(data / "vocab"))))
    save_model(model, root / "models" / "pretrained")
    params = {"finetune": {"max_steps": 2, "batch_size": 4, "max_seq_length": 8,
                           "test_fraction": 0.5, "device": "cpu"},
              "tracking": {"enabled": False}}
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root
