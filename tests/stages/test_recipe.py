"""A recipe is a params file (params/recipes/NAME.yaml, chosen by `model.recipe`): the edge merges
it under params.yaml and `--set` before validation, so the config classes hold what trains."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

import pytest
import yaml
from helpers.bert import REPO, assert_one_line_error, run_bert

from bertcore.common.errors import BertError, ConfigError
from bertcore.model.bert import BertConfig
from bertcore.training.config import PretrainConfig
from bertstages.params import load_params, read_params
from bertstages.pretrain import PARAMS, say_unused_local_counts

# A recipe of the test's own, with values no default has
RECIPE = {"model": {"preset": "tiny", "num_attention_heads": 8, "local_attention_init": True,
                    "local_attention_heads": 3, "local_attention_layers": 1},
          "train": {"adam_betas": [0.8, 0.95], "weight_decay": 0.05}}


def write_yaml(path: Path, values) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    return path


def resolved(tmp_path: Path, params: dict, *overrides: str,
             recipe: dict | None = RECIPE) -> PretrainConfig:
    """The pretrain stage's config from `params` (params.yaml), `overrides` (--set) and the
    recipe `mine` beside them (params/recipes/mine.yaml)."""
    if recipe is not None:
        write_yaml(tmp_path / "params" / "recipes" / "mine.yaml", recipe)
    sections = read_params(load_params(write_yaml(tmp_path / "params.yaml", params), overrides),
                           PARAMS)
    return PretrainConfig(**{name: value for name, value in sections.items() if name != "cpu"})


def test_the_recipe_files_values_reach_the_config(tmp_path):
    config = resolved(tmp_path, {"model": {"recipe": "mine"}})
    assert config.model.recipe == "mine"
    assert config.model.to_config(vocab_size=100).num_attention_heads == 8
    assert (config.model.local_heads(8), config.model.local_layers(2)) == (3, 1)
    assert config.train.adam_betas == [0.8, 0.95] and config.train.weight_decay == 0.05


def test_the_users_values_win_over_the_recipes_and_set_over_both(tmp_path):
    config = resolved(tmp_path, {"model": {"recipe": "mine", "local_attention_heads": 2},
                                 "train": {"adam_betas": [0.85, 0.9]}},
                      "train.adam_betas=[0.7, 0.9]", "model.local_attention_layers=2")
    assert (config.model.local_heads(8), config.model.local_layers(2)) == (2, 2)
    assert config.model.to_config(vocab_size=100).num_attention_heads == 8  # the recipe's
    assert config.train.adam_betas == [0.7, 0.9]
    assert config.train.weight_decay == 0.05


def test_recipe_none_is_berts_and_without_a_recipe_nothing_is_read(tmp_path):
    """none (also by --set over a recipe) trains the preset as published: its 2 heads, BERT's
    init, BERT's betas. Without a recipe no file is read: none is needed."""
    for params, overrides in (({"model": {"recipe": "none"}}, ()), ({}, ()),
                              ({"model": {"recipe": "mine"}}, ("model.recipe=none",))):
        config = resolved(tmp_path, params, *overrides, recipe=None)
        assert config.model.to_config(vocab_size=100) == BertConfig.from_preset(
            "tiny", vocab_size=100, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        assert config.model.local_heads(2) == 0
        assert config.train.adam_betas == [0.9, 0.999] and config.train.schedule == "linear"
        assert not (tmp_path / "params").exists()


def test_the_shipped_recipe_is_the_one_measured_for_tiny():
    """params.yaml names params/recipes/tiny.yaml: 4 heads, 2 of the first layer local, AdamW's
    beta2 0.98, the peak rate held until the last 20% of the steps (docs/recipe.md);
    `model.recipe: none` is what `model.recipe: false` gave: BERT-tiny as published, every
    other value the same."""
    def config(*overrides: str) -> PretrainConfig:
        sections = read_params(load_params(REPO / "params.yaml", overrides), PARAMS)
        return PretrainConfig(**{k: v for k, v in sections.items() if k != "cpu"})

    tiny, none = config(), config("model.recipe=none")
    assert tiny.model.to_config(100).num_attention_heads == 4
    assert (tiny.model.local_heads(4), tiny.model.local_layers(2)) == (2, 1)
    assert tiny.train.adam_betas == [0.9, 0.98]
    assert (tiny.train.schedule, tiny.train.decay_fraction) == ("wsd", 0.2)
    assert none.model.to_config(100).num_attention_heads == 2
    assert none.train.schedule == "linear"
    assert none.model.local_heads(2) == 0 and none.train.adam_betas == [0.9, 0.999]
    recipe_keys = {"recipe", "num_attention_heads", "local_attention_init",
                   "local_attention_heads", "local_attention_layers"}
    for name in ("model", "train", "masking", "eval", "phase2"):
        a, b = dataclasses.asdict(getattr(tiny, name)), dataclasses.asdict(getattr(none, name))
        assert {k for k in a if a[k] != b[k]} == {"model": recipe_keys,
                                                   "train": {"adam_betas", "schedule"}
                                                   }.get(name, set())


@pytest.mark.parametrize(("params", "recipe", "message"), [
    ({"recipe": "other"}, RECIPE, "model.recipe: 'other' is no recipe in params/recipes (one of: "
                                  "mine, none)"),
    ({"recipe": "../mine"}, RECIPE, "model.recipe: '../mine' is no recipe"),
    ({"recipe": True}, RECIPE, "model.recipe: true is the old spelling: name the recipe (mine: "
                               "params/recipes/NAME.yaml); none is what false gave"),
    ({"recipe": False}, RECIPE, "model.recipe: false is the old spelling"),
    ({"recipe": "mine", "preset": "mini"}, RECIPE,
     "model.recipe: mine (params/recipes/mine.yaml) was measured for model.preset tiny, not mini: "
     "set model.recipe: none, or a recipe for that preset"),
    ({"recipe": "mine", "init_from": "bert"}, RECIPE,
     "model.recipe: mine (params/recipes/mine.yaml) trains a tiny from random init; with "
     "model.init_from the model is the folder's: set model.recipe: none"),
    ({"recipe": "mine", "local_attention_heads": None}, RECIPE,
     "model.local_attention_heads: null would replace the recipe's 3 (params/recipes/mine.yaml)"),
])
def test_a_recipe_that_cannot_be_had_is_a_config_error(tmp_path, monkeypatch, params, recipe,
                                                       message):
    monkeypatch.chdir(tmp_path)  # the paths in the messages as the stage, run here, says them
    with pytest.raises(ConfigError) as info:
        resolved(Path("."), {"model": params}, recipe=recipe)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize(("recipe", "message"), [
    ({"train": {"adam_betas": [0.8, 0.95]}}, "a recipe names the preset it was measured for"),
    ({**RECIPE, "masking": {"mlm_probability": 0.2}}, "a recipe is a mapping of sections of "
                                                      "model, train"),
    ([1, 2], "a recipe is a mapping of sections"),
])
def test_a_recipe_file_out_of_shape_is_an_error_naming_it(tmp_path, recipe, message):
    with pytest.raises(BertError, match=message) as info:
        resolved(tmp_path, {"model": {"recipe": "mine"}}, recipe=recipe)
    assert str(info.value).startswith(str(tmp_path / "params" / "recipes" / "mine.yaml"))


def test_the_stage_says_a_recipe_for_another_preset_in_one_line(tmp_path):
    shutil.copytree(REPO / "params", tmp_path / "params")
    write_yaml(tmp_path / "params.yaml", {"model": {"recipe": "tiny", "preset": "mini"}})
    assert_one_line_error(run_bert("pretrain", cwd=tmp_path),
                          "model.recipe: tiny (params/recipes/tiny.yaml) was measured for "
                          "model.preset tiny, not mini", code=2)


def said_of_unused_counts(tmp_path: Path, params: dict, *overrides: str,
                          caplog) -> list[tuple[str, str]]:
    """What the pretrain stage says of `local_attention_heads` and `_layers` for these params
    (with the recipe `mine`): (level, message) of each line."""
    config = resolved(tmp_path, params, *overrides)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bert.pretrain"):
        say_unused_local_counts(config.model, load_params(tmp_path / "params.yaml", overrides,
                                                          reads=()))
    return [(record.levelname, record.getMessage()) for record in caplog.records]


def test_local_counts_the_local_init_does_not_use_are_said_in_one_line(tmp_path, caplog):
    """With the local init off, `local_attention_heads` and `_layers` change nothing (the
    weights are those without them), yet the run records them: the user who wrote them is
    told to leave them out; the user who turned off the recipe's local init, and wrote no
    count, reads a note of the recipe's counts, no warning."""
    assert said_of_unused_counts(tmp_path, {"model": {"recipe": "mine"}}, caplog=caplog) == []
    assert said_of_unused_counts(
        tmp_path, {"model": {"recipe": "mine"}}, "model.local_attention_init=false",
        caplog=caplog) == [
        ("INFO", "the recipe's model.local_attention_heads (3) and model.local_attention_layers "
                 "(1) change nothing with model.local_attention_init: false (every head starts "
                 "with BERT's init)")]
    assert said_of_unused_counts(
        tmp_path, {"model": {"recipe": "mine", "local_attention_init": False,
                             "local_attention_heads": 2}}, caplog=caplog) == [
        ("WARNING", "model.local_attention_heads (2) changes nothing with "
                    "model.local_attention_init: false (every head starts with BERT's init): "
                    "leave it out")]
    assert said_of_unused_counts(
        tmp_path, {"model": {"recipe": "none"}}, "model.local_attention_heads=1",
        "model.local_attention_layers=1", caplog=caplog) == [
        ("WARNING", "model.local_attention_heads (1) and model.local_attention_layers (1) "
                    "change nothing with model.local_attention_init: false (every head starts "
                    "with BERT's init): leave them out")]


def test_no_local_layer_is_refused_naming_the_switch_that_turns_them_off(tmp_path):
    for key in ("local_attention_layers", "local_attention_heads"):
        with pytest.raises(ConfigError) as info:
            resolved(tmp_path, {"model": {"recipe": "mine"}}, f"model.{key}=0")
        assert str(info.value) == (f"model.{key}: 0 is not allowed; expected null (all) or an "
                                   "integer >= 1; for no local head at all, set "
                                   "model.local_attention_init: false")


def test_a_value_written_as_the_recipe_gives_it_resumes_the_same_run(tmp_path):
    """(issue 62, case 12) `model.local_attention_layers=1` or `train.schedule=wsd` over a
    recipe that gives them already resolve to the same params: the same fingerprint, so a run
    resumes instead of starting fresh; another value is another run."""
    from bertcore.common.digests import fingerprint_params
    from bertcore.training.checkpoints.identity import resumable_params

    recipe = {**RECIPE, "train": {**RECIPE["train"], "schedule": "wsd"}}
    params = {"model": {"recipe": "mine"}}

    def fingerprint(*overrides: str) -> str:
        return fingerprint_params(resumable_params(resolved(tmp_path, params, *overrides,
                                                            recipe=recipe)))

    same = fingerprint()
    assert fingerprint("model.local_attention_layers=1") == same
    assert fingerprint("train.schedule=wsd", "train.decay_fraction=0.2") == same
    assert fingerprint("model.local_attention_layers=2") != same
    assert fingerprint("train.schedule=linear") != same
