"""A run's identity (bertcore.training.checkpoints.identity): what a checkpoint must share with
a run to be resumed."""

from __future__ import annotations

import dataclasses

from bertcore.common.digests import fingerprint_params
from bertcore.common.tracking import TrackingConfig
from bertcore.model.config import ModelConfig
from bertcore.training.checkpoints.checkpoint import Checkpoint
from bertcore.training.checkpoints.identity import (
    RunIdentity,
    optimisation_params,
    resumable_params,
)
from bertcore.training.checkpoints.resume import plan_resume
from bertcore.training.config import EvalConfig, MaskingConfig, PretrainConfig, TrainConfig


def pretrain_config(**model) -> PretrainConfig:
    """The resolved config of a run whose model section resolved to `model`; with the recipe's
    name, its betas too (as params/recipes/tiny.yaml gives them)."""
    betas = [0.9, 0.98] if model.get("recipe") == "tiny" else [0.9, 0.999]
    return PretrainConfig(ModelConfig(**model), MaskingConfig(), TrainConfig(adam_betas=betas),
                          EvalConfig(), TrackingConfig())


def test_the_fingerprint_is_the_resolved_params_with_no_recipe_of_its_own():
    """What a recipe gives reaches the fingerprint as the values it resolved to, like any
    param's; the name of the recipe is recorded beside them."""
    tiny = pretrain_config(**TINY_RECIPE)
    recorded = optimisation_params(tiny)
    assert recorded["model"] == {k: v for k, v in dataclasses.asdict(tiny.model).items()
                                 if k != "init_from"}
    assert recorded["model"]["recipe"] == "tiny" and recorded["train"]["adam_betas"] == [0.9, 0.98]
    before = fingerprint_params(resumable_params(tiny))
    for changed in ({"local_attention_layers": 2}, {"recipe": "none"}):
        other = pretrain_config(**{**TINY_RECIPE, **changed})
        assert fingerprint_params(resumable_params(other)) != before, changed


def test_a_checkpoint_of_the_recipe_in_code_starts_fresh_naming_what_changed(tmp_path):
    """A checkpoint that recorded the recipe as code did (`model.recipe: true`, nulls for "the
    recipe's", `recipe_values`) is of other params: the run starts fresh (and sets it aside,
    train.keep_replaced), saying how the params now read."""
    tiny = pretrain_config(**TINY_RECIPE)
    params = optimisation_params(tiny)
    fingerprints = {"length": "1500", "params": OLD_DEFAULT_FINGERPRINT, "vocab": "v",
                    "samples": "s"}
    old = Checkpoint(tmp_path / "step-00001500", 1500,
                     {"fingerprints": fingerprints, "total_steps": 1500,
                      "params": {**params, "model": OLD_DEFAULT_MODEL}})
    identity = RunIdentity(1, {**fingerprints, "params": fingerprint_params(
        resumable_params(tiny))}, params)
    plan = plan_resume(old, identity, 1500)
    assert plan.checkpoint is None
    assert plan.notice == (
        f"checkpoint {old.path} was made with other params (model.local_attention_heads null "
        "-> 2, model.local_attention_init null -> true, model.local_attention_layers null -> 1, "
        "model.num_attention_heads null -> 4, model.recipe true -> 'tiny', ...): starting fresh")


# The default run's as params/recipes/tiny.yaml gives it
TINY_RECIPE = {"recipe": "tiny", "num_attention_heads": 4, "local_attention_init": True,
               "local_attention_heads": 2, "local_attention_layers": 1}
# What a checkpoint of the default params recorded before recipe files (meta.json)
OLD_DEFAULT_FINGERPRINT = "c1b05b45a1e73b4f782863aa075fb2011ed55b79a365d566a47804161648a09a"
OLD_DEFAULT_MODEL = {
    "attention_probs_dropout_prob": 0.0, "hidden_act": None, "hidden_dropout_prob": 0.0,
    "hidden_size": None, "initializer_range": None, "intermediate_size": None,
    "layer_norm_eps": None, "local_attention_heads": None, "local_attention_init": None,
    "local_attention_layers": None, "max_position_embeddings": None,
    "num_attention_heads": None, "num_hidden_layers": None, "pad_token_id": None,
    "preset": "tiny", "recipe": True, "recipe_values": {
        "adam_betas": [0.9, 0.98], "local_attention_heads": 2, "local_attention_layers": 1,
        "num_attention_heads": 4}, "type_vocab_size": None}


def test_a_linear_run_is_recorded_as_before_the_schedule_keys_so_it_resumes():
    """BERT's linear schedule leaves `schedule` and `decay_fraction` out of what is recorded
    and fingerprinted (a checkpoint made before they existed still resumes); wsd records both,
    and a change of either starts fresh."""
    linear = pretrain_config(**TINY_RECIPE)
    assert not {"schedule", "decay_fraction"} & set(optimisation_params(linear)["train"])
    wsd = dataclasses.replace(linear, train=TrainConfig(adam_betas=[0.9, 0.98], schedule="wsd"))
    assert optimisation_params(wsd)["train"] | {"schedule": "x"} == {
        **optimisation_params(linear)["train"], "schedule": "x", "decay_fraction": 0.2}
    fingerprints = {fingerprint_params(resumable_params(config)) for config in (
        linear, wsd, dataclasses.replace(wsd, train=dataclasses.replace(wsd.train,
                                                                        decay_fraction=0.1)))}
    assert len(fingerprints) == 3


def test_the_micro_batches_make_the_run_the_process_count_does_not():
    """Any number of processes gives the same bytes, so it is the same run (resumed with
    another count); the micro-batches are the order of the gradient's sum: another run."""
    def fingerprint(**train) -> str:
        config = PretrainConfig(ModelConfig(), MaskingConfig(), TrainConfig(**train),
                                EvalConfig(), TrackingConfig())
        return fingerprint_params(resumable_params(config))

    default = fingerprint()
    assert fingerprint(nproc_per_node=4) == fingerprint(nproc_per_node=1) == default
    assert fingerprint(micro_batches=8) != default
    assert fingerprint(micro_batches=4) == default
