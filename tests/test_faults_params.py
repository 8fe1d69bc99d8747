"""Faults a probe found (issue 37, sections 3 and 4), each as the user meets it: values that
are not finite, params files that are not UTF-8, messages in YAML's words rather than
Python's; corpus inputs that are binary or damaged, JSON Lines with `format: lines`, worker
counts above the cores, a built-in task from too few documents, and the inference commands
finding the pipeline's own export."""

from __future__ import annotations

import pytest
import torch
from conftest import ONE_THREAD, assert_one_line_error, run_bert
from tiny_pretrain import build_data, tiny_config, write_params

from bertcore.common.errors import BertError, ConfigError
from bertcore.data.vocab.config import VocabConfig
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.hf import export_hf, save_model
from bertcore.training.config import TrainConfig
from bertcore.training.cpu import CpuConfig
from bertstages.params import load_params, parse_section


def parse(tmp_path, section: str, cls: type, *overrides: str):
    """`cls` from a params.yaml of `{}` and `overrides` (section.key=value, as --set)."""
    path = tmp_path / "params.yaml"
    path.write_text("{}\n")
    return parse_section(load_params(path, overrides), section, cls)


def refused(tmp_path, section: str, cls: type, override: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(tmp_path, section, cls, override)
    return str(info.value)


# ------------------------------------------------------------- 3. values that are not finite
@pytest.mark.parametrize(("override", "message"), [
    ("train.learning_rate=.inf", "train.learning_rate: .inf is not allowed; expected a number "
                                 "> 0, finite (not .inf or .nan)"),
    ("train.weight_decay=.inf", "train.weight_decay: .inf is not allowed"),
    ("train.max_minutes=-.inf", "train.max_minutes: -.inf is not allowed"),
    ("train.learning_rate=.nan", "train.learning_rate: .nan is not allowed"),
    ("train.adam_betas=[0.9, .nan]", "train.adam_betas: .nan is not allowed"),
    ("train.epochs=inf", "train.epochs: .inf is not allowed"),  # a string, as --set may give
])
def test_a_value_that_is_not_finite_is_refused_naming_its_key(tmp_path, override, message):
    assert message in refused(tmp_path, "train", TrainConfig, override)


def nonfinite_model() -> BertPretrainingModel:
    torch.manual_seed(0)
    model = BertPretrainingModel(tiny_config(64))
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("inf")
    return model


@pytest.mark.parametrize("write", [save_model, export_hf], ids=["save_model", "export_hf"])
def test_weights_that_are_not_finite_are_never_written(tmp_path, write):
    with pytest.raises(BertError, match=r"NaN or infinite values .*no model was written"):
        write(nonfinite_model(), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_run_that_diverges_to_infinite_weights_stops_without_a_model(tmp_path):
    """3e38 (finite, as every accepted value is) overflows float32 in the first update."""
    build_data(tmp_path)
    write_params(tmp_path / "params.yaml", train={"learning_rate": 3e38, "max_steps": 3,
                                                  "eval_every": 0, "checkpoint_every": 0},
                 tracking={"enabled": False})
    proc = run_bert("pretrain", cwd=tmp_path, env=ONE_THREAD)
    assert_one_line_error(proc, "NaN or infinite values", "no model was written")
    assert not (tmp_path / "models" / "pretrained").exists()


# --------------------------------------------------------------- 3. a params file not UTF-8
def test_a_params_file_that_is_not_utf8_is_one_line_naming_its_line(tmp_path):
    (tmp_path / "params.yaml").write_bytes(b"train:\n  max_steps: 3\n  # caf\xe9\n")
    with pytest.raises(BertError) as info:
        load_params(tmp_path / "params.yaml")
    assert str(info.value) == (f"{tmp_path / 'params.yaml'}:3 is not UTF-8 (byte 0xe9): save "
                               "the file as UTF-8")


# ----------------------------------------------------------------- 3. messages in YAML's words
@pytest.mark.parametrize(("section", "cls", "override", "message"), [
    ("cpu", CpuConfig, "cpu.isa=null", "cpu.isa: null is not allowed; expected one of "
                                       "['avx2', 'native']"),
    ("train", TrainConfig, "train.batch_size=true", "train.batch_size: expected an integer, "
                                                    "got true"),
    ("train", TrainConfig, "train.max_steps=false", "got false"),
    ("train", TrainConfig, "train.max_steps=[1, null]", "got [1, null]"),
    ("train", TrainConfig, "train.max_steps={a: 1}", "got {'a': 1}"),
    ("train", TrainConfig, "train.compile=null", "train.compile: null is not allowed"),
    ("vocab", VocabConfig, "vocab.sample_bytes=0", "vocab.sample_bytes: 0 is not allowed; "
     "expected an integer >= 1 (bytes), or null to train on the whole split"),
])
def test_messages_show_values_as_yaml_writes_them(tmp_path, section, cls, override, message):
    assert message in refused(tmp_path, section, cls, override)
