"""params.yaml parsing: overrides, types, ranges and unknown keys are one-line errors; the
shipped params.yaml equals the code defaults."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest
from helpers.bert import REPO, assert_one_line_error, run_bert

from bertcore.common.dotted import flatten
from bertcore.common.errors import ConfigError
from bertcore.common.tracking import TrackingConfig
from bertcore.common.validation import Bool, Int, integer, number, params_section
from bertcore.data.corpus.config import CorpusConfig
from bertcore.data.samples.config import SamplesConfig
from bertcore.data.vocab.config import VocabConfig
from bertcore.downstream.config import FinetuneConfig, GlueConfig, PruneConfig
from bertcore.downstream.probes.config import ProbeConfig
from bertcore.model.config import ModelConfig
from bertcore.training.config import (
    CpuConfig,
    EvalConfig,
    MaskingConfig,
    Phase2Config,
    TrainConfig,
)
from bertstages.params import load_params, parse_section


@params_section(frozen=True)
class Example:
    size: integer(gt=0) = 8
    rate: number(gt=0, lt=1) = 0.1
    name: str = "x"
    flag: Bool = False
    mode: Literal["a", "b"] = "a"
    limit: Int | None = None
    compile: Bool | Literal["fullgraph"] = False


def write(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_section_types_and_overrides(tmp_path):
    path = write(tmp_path, "train:\n  size: 4\n  rate: 1e-2\n")
    params = load_params(path, ["train.flag=true", "train.mode=b", "train.limit=7",
                                "train.compile=fullgraph"])
    cfg = parse_section(params, "train", Example)
    assert cfg == Example(size=4, rate=0.01, flag=True, mode="b", limit=7, compile="fullgraph")
    for text, expected in (("true", True), ("false", False), ("fullgraph", "fullgraph")):
        params = load_params(path, [f"train.compile={text}"])
        assert parse_section(params, "train", Example).compile == expected
    assert flatten(params)["train.rate"] == "1e-2"  # YAML 1.1 keeps 1e-2 a string; parsing fixes it


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("train.sise=3", "train.sise: unknown key; allowed keys are size"),
        ("train.size=abc", "train.size: expected an integer"),
        ("train.size=-1", "train.size: -1 is not allowed; expected a positive integer"),
        ("train.rate=2", "train.rate: 2.0 is not allowed"),
        ("train.mode=c", "train.mode: 'c' is not allowed; expected one of ['a', 'b']"),
        ("train.flag=maybe", "train.flag: expected true or false"),
        ("train.compile=FULLGRAPH",
         "train.compile: 'FULLGRAPH' is not allowed; expected true or false or fullgraph"),
        ("train.limit=x", "train.limit: expected an integer, got 'x'"),
    ],
)
def test_bad_values_name_the_key(tmp_path, override, fragment):
    params = load_params(write(tmp_path, "train: {}\n"), [override])
    with pytest.raises(ConfigError) as info:
        parse_section(params, "train", Example)
    assert fragment in str(info.value)
    assert info.value.exit_code == 2


def test_unknown_section_and_malformed_override(tmp_path):
    path = write(tmp_path, "train: {}\n")
    with pytest.raises(ConfigError, match="trian: unknown section"):
        load_params(path, ["trian.size=3"])
    with pytest.raises(ConfigError, match=r"section\.key=value"):
        load_params(path, ["size=3"])


def test_an_override_below_a_plain_value_is_one_line(tmp_path):
    write(tmp_path, "train:\n  batch_size: 32\ncorpus: builtin:python-docs\n")
    proc = run_bert("pretrain", "--set", "train.batch_size.x=1", cwd=tmp_path)
    assert_one_line_error(proc, "train.batch_size.x: train.batch_size is 32, not a mapping",
                          "write --set train.batch_size=VALUE", code=2)
    proc = run_bert("corpus", "--set", "corpus.seed=1", cwd=tmp_path)
    assert_one_line_error(proc, "corpus: must be a mapping of keys, got 'builtin:python-docs'",
                          "corpus.seed", code=2)


# The config class of every section of params.yaml (export takes no keys yet).
SECTION_CONFIGS = {
    "corpus": CorpusConfig,
    "vocab": VocabConfig,
    "samples": SamplesConfig,
    "model": ModelConfig,
    "masking": MaskingConfig,
    "train": TrainConfig,
    "phase2": Phase2Config,
    "eval": EvalConfig,
    "finetune": FinetuneConfig,
    "glue": GlueConfig,
    "prune": PruneConfig,
    "probe": ProbeConfig,
    "cpu": CpuConfig,
    "tracking": TrackingConfig,
}
SECTIONS_WITHOUT_KEYS = {"export"}


def test_the_shipped_params_are_the_code_defaults():
    """One source of truth: a params file of `{}` runs the stages as the shipped one does."""
    shipped = load_params(REPO / "params.yaml")
    assert set(shipped) == set(SECTION_CONFIGS) | SECTIONS_WITHOUT_KEYS, "a section's class?"
    assert all(not shipped[name] for name in SECTIONS_WITHOUT_KEYS)
    differ = {}
    for section, cls in SECTION_CONFIGS.items():
        from_file = dataclasses.asdict(parse_section(shipped, section, cls))
        default = dataclasses.asdict(cls())
        differ.update({f"{section}.{key}": (value, default[key])
                       for key, value in from_file.items() if default[key] != value})
    assert not differ, differ


def test_a_key_written_twice_is_one_line_naming_it_and_both_lines(tmp_path):
    """YAML loaders keep the last of two values; the user meant one of them: stop, before
    anything is run or replaced."""
    (tmp_path / "other.yaml").write_text(
        "train:\n  batch_size: 32\n  max_steps: 5\n  batch_size: 8\n", encoding="utf-8")
    proc = run_bert("pretrain", "--params", "other.yaml", cwd=tmp_path)
    assert_one_line_error(proc, "train.batch_size", "written twice", "other.yaml",
                          "lines 2 and 4", code=2)
    assert not (tmp_path / "models").exists()

    write(tmp_path, "corpus:\n  source: a.txt\nvocab: {}\ncorpus:\n  source: b.txt\n")
    proc = run_bert("corpus", cwd=tmp_path)
    assert_one_line_error(proc, "corpus: written twice", "params.yaml", "lines 1 and 4",
                          code=2)
    # the same key in two sections is no repetition
    write(tmp_path, "train:\n  seed: 1\neval:\n  seed: 2\n")
    assert load_params(tmp_path / "params.yaml")["eval"] == {"seed": 2}


def test_an_empty_params_file_is_refused(tmp_path):
    """An empty file (or one of comments only) is most likely the wrong file: running every
    stage with the built-in defaults (the 1.25 M-character built-in corpus) would surprise."""
    (tmp_path / "empty.yaml").write_text("# nothing here yet\n\n", encoding="utf-8")
    proc = run_bert("corpus", "--params", "empty.yaml", cwd=tmp_path)
    assert_one_line_error(proc, "empty.yaml holds no settings", "{}", code=1)
    assert not (tmp_path / "data").exists()
    write(tmp_path, "")
    assert_one_line_error(run_bert("corpus", cwd=tmp_path), "params.yaml holds no settings")
    write(tmp_path, "{}\n")  # said on purpose: every default
    assert load_params(tmp_path / "params.yaml") == {}
