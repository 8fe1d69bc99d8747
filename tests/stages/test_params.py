"""params.yaml parsing: overrides, types, ranges and unknown keys are one-line errors; the
shipped params.yaml equals the code defaults."""

from __future__ import annotations

import dataclasses
import shutil
from typing import Literal

import pytest
from helpers.bert import REPO, assert_one_line_error, run_bert
from helpers.tiny_pretrain import build_data, write_params

from bertcore.common.config import CpuConfig
from bertcore.common.dotted import flatten
from bertcore.common.errors import BertError, ConfigError
from bertcore.common.tracking import TrackingConfig
from bertcore.common.validation import Bool, Int, integer, number, params_section
from bertcore.data.corpus.config import CorpusConfig
from bertcore.data.samples.config import SamplesConfig
from bertcore.data.vocab.config import VocabConfig
from bertcore.downstream.config import (
    FinetuneConfig,
    FinetuneKeys,
    PruneConfig,
    RecipeSection,
)
from bertcore.downstream.glue.config import GlueConfig, GlueKeys
from bertcore.downstream.probes.config import ProbeConfig
from bertcore.model.config import ModelConfig
from bertcore.saved.config import CardConfig, ExportConfig
from bertcore.training.config import (
    EvalConfig,
    MaskingConfig,
    Phase2Config,
    TrainConfig,
)
from bertstages.params import load_params, parse_section, with_recipe


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
        ("train.size=abc", "train.size: 'abc' is not allowed; expected a valid integer"),
        ("train.size=-1", "train.size: -1 is not allowed; expected greater than 0"),
        ("train.rate=2", "train.rate: 2 is not allowed; expected less than 1"),
        ("train.mode=c", "train.mode: 'c' is not allowed; expected 'a' or 'b'"),
        ("train.flag=maybe", "train.flag: 'maybe' is not allowed; expected a valid boolean"),
        ("train.compile=FULLGRAPH",
         "train.compile: 'FULLGRAPH' is not allowed; expected a valid boolean or 'fullgraph'"),
        ("train.limit=x", "train.limit: 'x' is not allowed; expected a valid integer"),
    ],
)
def test_bad_values_name_the_key(tmp_path, override, fragment):
    params = load_params(write(tmp_path, "train: {}\n"), [override])
    with pytest.raises(ConfigError) as info:
        parse_section(params, "train", Example)
    assert fragment in str(info.value)
    assert info.value.exit_code == 2


@pytest.mark.parametrize(("processes", "said"), [
    ("3", "run 1, 2 or 4 processes (a power of two that divides it)"),
    ("8", "or raise train.micro_batches to 8"),
])
def test_a_process_count_that_does_not_split_the_micro_batches_is_one_line(tmp_path,
                                                                           processes, said):
    # said before any data is read or any process started
    write(tmp_path, "train: {}\n")
    proc = run_bert("pretrain", "--set", f"train.nproc_per_node={processes}", cwd=tmp_path)
    assert_one_line_error(proc, f"{processes} processes cannot share train.micro_batches (4)",
                          said)


@pytest.mark.parametrize("section", ["train", "phase2"])
def test_a_params_file_with_gradient_accumulation_steps_is_told_its_new_name(tmp_path,
                                                                             section):
    write(tmp_path, f"{section}:\n  gradient_accumulation_steps: 4\n")
    proc = run_bert("pretrain", cwd=tmp_path)
    assert_one_line_error(proc, f"{section}.gradient_accumulation_steps: renamed micro_batches",
                          "a power of two", "docs/training.md", code=2)
    assert "unknown key" not in proc.stderr


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


# The config class of every section of params.yaml.
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
    "export": ExportConfig,
    "card": CardConfig,
}


def test_a_fine_tuning_sections_own_keys_come_before_the_recipes():
    """A model card's reproduce block lists its section's keys in the class's order (no
    sorting): the section's own keys, then those every fine-tuning section shares, finetune's
    in the order its cards have always had."""
    shared = [field.name for field in dataclasses.fields(RecipeSection)]
    for cls, own in ((FinetuneConfig, FinetuneKeys), (GlueConfig, GlueKeys)):
        assert [field.name for field in dataclasses.fields(cls)] == [
            field.name for field in dataclasses.fields(own)] + shared
    assert shared[:3] == ["max_seq_length", "learning_rate", "batch_size"]


def test_glues_grid_holds_the_weight_decay_to_the_grids_largest_rate():
    """glue.grid fine-tunes at every rate of Turc et al.'s grid, up to 3e-4, whatever
    glue.learning_rate is: the weight decay must keep AdamW's shrink factor above 0 at each."""
    assert GlueConfig(learning_rate=1e-5, weight_decay=4000.0).weight_decay == 4000.0
    with pytest.raises(ConfigError, match=r"4000\.0 is not allowed with a learning rate of "
                                          r"0\.0003"):
        GlueConfig(grid=True, learning_rate=1e-5, weight_decay=4000.0)


def test_the_shipped_params_are_the_code_defaults():
    """One source of truth: a params file of `{}` with the shipped recipe (`model.recipe`:
    the code holds none) runs the stages as the shipped one does."""
    shipped = load_params(REPO / "params.yaml")
    assert set(shipped) == set(SECTION_CONFIGS), "a section's class?"
    defaults = with_recipe({"model": {"recipe": shipped["model"]["recipe"]}}, REPO)
    differ = {}
    for section, cls in SECTION_CONFIGS.items():
        from_file = dataclasses.asdict(parse_section(shipped, section, cls))
        default = dataclasses.asdict(parse_section(defaults, section, cls))
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


# -------------------------------------------------------- a tracking URI without a scheme (13)
def test_a_tracking_uri_without_a_scheme_is_explained_with_mlflows_advice_whole(tmp_path):
    build_data(tmp_path)
    write_params(tmp_path / "params.yaml")
    proc = run_bert("pretrain", "--set", "tracking.uri=garbage-uri", cwd=tmp_path)
    assert_one_line_error(proc, "'garbage-uri' has no scheme", "sqlite:///",
                          "MLFLOW_ALLOW_FILE_STORE=true", "fix tracking.uri")
    proc = run_bert("pretrain", "--set", f"tracking.uri={(tmp_path / 'mlruns').as_uri()}",
                    cwd=tmp_path)
    assert_one_line_error(proc, "MLFLOW_ALLOW_FILE_STORE=true")
    assert "has no scheme" not in proc.stderr
    assert not (tmp_path / "models").exists()  # before any training


bert = run_bert


@pytest.mark.parametrize("section, value", [
    ("glue", "1e300"), ("finetune", "1e300"), ("finetune", "5000")])
def test_a_weight_decay_that_blows_up_the_weights_is_refused_naming_it(tmp_path, section,
                                                                      value):
    (tmp_path / "params.yaml").write_text("{}\n")
    proc = bert(section, "--set", f"{section}.weight_decay={value}", cwd=tmp_path)
    assert_one_line_error(proc, f"{section}.weight_decay: ", "AdamW multiplies every weight "
                          "by 1 - learning_rate x weight_decay", "lower weight_decay below "
                          "3333.33", code=2)
    assert "lower the learning rate" not in proc.stderr


@pytest.mark.parametrize("key", ["glue.seed", "finetune.seed"])
@pytest.mark.parametrize("seed, bound", [("-1", "greater than or equal to 0"),
                                         (str(2**64), "less than or equal to 9223372036854775807")])
def test_a_seed_out_of_range_is_one_line(tmp_path, key, seed, bound):
    (tmp_path / "params.yaml").write_text("{}\n")
    proc = bert(key.split(".")[0], "--set", f"{key}={seed}", cwd=tmp_path)
    assert_one_line_error(proc, f"{key}: {seed} is not allowed; expected {bound}", code=2)


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
    ("train.learning_rate=.inf", "train.learning_rate: .inf is not allowed; expected a finite "
                                 "number"),
    ("train.weight_decay=.inf", "train.weight_decay: .inf is not allowed"),
    ("train.max_minutes=-.inf", "train.max_minutes: -.inf is not allowed"),
    ("train.learning_rate=.nan", "train.learning_rate: .nan is not allowed"),
    ("train.adam_betas=[0.9, .nan]", "train.adam_betas: .nan is not allowed"),
    # a string, as --set may give
    ("train.epochs=inf", "train.epochs: 'inf' is not allowed; expected a finite number"),
])
def test_a_value_that_is_not_finite_is_refused_naming_its_key(tmp_path, override, message):
    assert message in refused(tmp_path, "train", TrainConfig, override)


# --------------------------------------------------------------- 3. a params file not UTF-8
def test_a_params_file_that_is_not_utf8_is_one_line_naming_its_line(tmp_path):
    (tmp_path / "params.yaml").write_bytes(b"train:\n  max_steps: 3\n  # caf\xe9\n")
    with pytest.raises(BertError) as info:
        load_params(tmp_path / "params.yaml")
    assert str(info.value) == (f"{tmp_path / 'params.yaml'}:3 is not UTF-8 (byte 0xe9): save "
                               "the file as UTF-8")


# ----------------------------------------------------------------- 3. messages in YAML's words
@pytest.mark.parametrize(("section", "cls", "override", "message"), [
    ("cpu", CpuConfig, "cpu.isa=null", "cpu.isa: null is not allowed; expected 'avx2', "
                                       "'portable' or 'native'"),
    ("train", TrainConfig, "train.batch_size=true", "train.batch_size: true is not allowed; "
                                                    "expected a valid integer"),
    ("train", TrainConfig, "train.max_steps=false", "false is not allowed"),
    ("train", TrainConfig, "train.max_steps=[1, null]", "[1, null] is not allowed"),
    ("train", TrainConfig, "train.max_steps={a: 1}", "{'a': 1} is not allowed"),
    ("train", TrainConfig, "train.compile=null", "train.compile: null is not allowed"),
    ("vocab", VocabConfig, "vocab.sample_bytes=0", "vocab.sample_bytes: 0 is not allowed; "
     "expected an integer >= 1 (bytes), or null to train on the whole split"),
])
def test_messages_show_values_as_yaml_writes_them(tmp_path, section, cls, override, message):
    assert message in refused(tmp_path, section, cls, override)


def test_a_scoring_that_does_not_exist_is_one_line(tmp_path):
    (tmp_path / "params.yaml").write_text("{}\n")
    proc = run_bert("probe", "--set", "probe.scoring=word_l2r", cwd=tmp_path)
    assert_one_line_error(proc, "probe.scoring: 'word_l2r' is not allowed; expected "
                                "'pll_word_l2r' or 'pll'", code=2)


@pytest.mark.parametrize(("value", "said"), [("0", "0 is not allowed; expected greater than or "
                                                     "equal to 1"),
                                             ("-1", "-1 is not allowed"),
                                             ("x", "'x' is not allowed; expected a valid integer")])
def test_a_bad_count_of_seeds_is_one_line(tmp_path, value, said):
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    proc = run_bert("finetune", "--set", f"finetune.seeds={value}", cwd=tmp_path)
    assert_one_line_error(proc, f"finetune.seeds: {said}", code=2)
