"""A run's identity (bertcore.training.checkpoints.identity): what a checkpoint must share with
a run to be resumed."""

from __future__ import annotations

from bertcore.common.digests import fingerprint_params
from bertcore.common.tracking import TrackingConfig
from bertcore.model import config as model_config
from bertcore.model.config import ModelConfig
from bertcore.training.checkpoints.identity import optimisation_params, resumable_params
from bertcore.training.config import EvalConfig, MaskingConfig, PretrainConfig, TrainConfig


def pretrain_config(**model) -> PretrainConfig:
    return PretrainConfig(ModelConfig(**model), MaskingConfig(), TrainConfig(), EvalConfig(),
                          TrackingConfig())


def test_a_recipe_changed_in_the_code_changes_the_runs_fingerprint(monkeypatch):
    """The recipe lives in RECIPES, not in params.yaml: what it gives the run is recorded and
    fingerprinted, so that a checkpoint made under another recipe is not resumed."""
    recorded = optimisation_params(pretrain_config())["model"]["recipe_values"]
    assert recorded == model_config.RECIPES["tiny"]
    assert optimisation_params(pretrain_config(recipe=False))["model"]["recipe_values"] == {}
    before = fingerprint_params(resumable_params(pretrain_config()))
    monkeypatch.setitem(model_config.RECIPES, "tiny",
                        {**model_config.RECIPES["tiny"], "local_attention_layers": 2})
    assert fingerprint_params(resumable_params(pretrain_config())) != before
