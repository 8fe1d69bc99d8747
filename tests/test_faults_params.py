"""Faults a probe found (issue 37, sections 3 and 4), each as the user meets it: values that
are not finite, params files that are not UTF-8, messages in YAML's words rather than
Python's; corpus inputs that are binary or damaged, JSON Lines with `format: lines`, worker
counts above the cores, a built-in task from too few documents, and the inference commands
finding the pipeline's own export."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from helpers.bert import ONE_THREAD, assert_one_line_error, run_bert
from helpers.tiny_pretrain import build_data, tiny_config, write_params

from bertcore.common.errors import BertError, ConfigError
from bertcore.common.pool import available_cores
from bertcore.data.corpus.build import build_corpus
from bertcore.data.corpus.config import CorpusConfig
from bertcore.data.vocab.config import VocabConfig
from bertcore.downstream.builtin_tasks import builtin_task
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.hf import export_hf, save_model
from bertcore.training.config import TrainConfig
from bertcore.training.hardware.cpu import CpuConfig
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
                                       "['avx2', 'portable', 'native']"),
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


# ------------------------------------------------------------------------- 4. corpus inputs
SENTENCES = "Document {i} opens here. It goes on with a second sentence. A third one ends it."


def _mkdir(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    return folder


def build(tmp_path, source, **config):
    config = {"workers": 1, **config}
    return build_corpus(CorpusConfig(source=str(source), **config),
                        _mkdir(tmp_path / "out"), progress=False)


def test_invalid_utf8_in_json_lines_warns_as_in_a_text_file(tmp_path, caplog):
    lines = [json.dumps({"text": SENTENCES.format(i=i)}).encode() for i in range(30)]
    lines[5] = lines[5].replace(b"opens", b"op\xffns")
    lines[9] = lines[9].replace(b"third", b"th\xc3rd")
    (tmp_path / "d.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    stats = build(tmp_path, tmp_path / "d.jsonl")
    assert stats.cleaning["invalid_utf8_sequences"] == 2
    assert (f"{tmp_path / 'd.jsonl'}: 2 invalid UTF-8 sequences replaced by U+FFFD (first on "
            "line 6)") in caplog.messages


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_format_lines_leaves_records_documents_of_prose(tmp_path, suffix):
    texts = [SENTENCES.format(i=i) for i in range(30)]
    if suffix == "jsonl":
        (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    else:
        pq.write_table(pa.table({"text": texts}), tmp_path / "d.parquet")
    stats = build(tmp_path, tmp_path / f"d.{suffix}", format="lines")
    assert stats.input["records"] == 30
    assert stats.sentences == 90  # three a record, as with format auto or prose


def binary_files(folder: Path) -> list[Path]:
    rng = random.Random(0)
    noise = bytes(rng.randrange(256) for _ in range(20000))
    files = {"photo.png": b"\x89PNG\r\n\x1a\n" + noise[:5000],
             "paper.pdf": b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n" + noise[:5000], "blob.bin": noise}
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return [folder / name for name in files]


def test_binary_files_in_a_folder_are_skipped_with_one_warning_each(tmp_path, caplog):
    binary = binary_files(tmp_path / "texts")
    (tmp_path / "texts" / "notes.txt").write_text(
        "\n\n".join(SENTENCES.format(i=i) for i in range(20)) + "\n")
    stats = build(tmp_path, tmp_path / "texts", format="lines")
    assert stats.dropped["binary_files"] == 3 and stats.documents == 20
    skipped = [m for m in caplog.messages if m.startswith("skipping")]
    assert skipped == [f"skipping {path}: binary, not text ({kind})" for path, kind in (
        (binary[2], "2118 control bytes in its first 20000, where text holds next to none"),
        (binary[1], "a PDF document: extract its text first, e.g. with pdftotext"),
        (binary[0], "a PNG image"))]


def test_a_folder_of_only_binary_files_or_one_binary_file_is_an_error(tmp_path):
    binary = binary_files(tmp_path / "texts")
    with pytest.raises(BertError, match="holds only binary files \\(3\\); give it text"):
        build(tmp_path, tmp_path / "texts")
    for path in binary:
        with pytest.raises(BertError) as info:
            build(tmp_path, path)
        assert str(info.value).startswith(f"cannot use {path} as corpus.source: it is binary")


def test_latin1_text_still_stops_with_the_advice_to_convert_it(tmp_path):
    text = "\n\n".join(f"Le {i}e café était très animé. Déjà vu à Noël." for i in range(50))
    (tmp_path / "old.txt").write_bytes(text.encode("latin-1"))
    with pytest.raises(BertError, match=r"old.txt is not UTF-8.*iconv -f WINDOWS-1252"):
        build(tmp_path, tmp_path / "old.txt")


def test_more_corpus_workers_than_cores_is_warned_of_once(tmp_path, caplog):
    cores = available_cores()
    (tmp_path / "notes.txt").write_text("\n\n".join(SENTENCES.format(i=i) for i in range(20)))
    build(tmp_path, tmp_path / "notes.txt", workers=cores)
    assert not [m for m in caplog.messages if "corpus.workers" in m]
    stats = build(tmp_path, tmp_path / "notes.txt", workers=cores + 1)  # one task: no pool
    assert stats.sentences == 60
    warned = [m for m in caplog.messages if "corpus.workers" in m]
    assert warned == [f"corpus.workers: {cores + 1} workers on the {cores} cores this stage may "
                      f"use take turns on them, each with its own memory, and run slower than "
                      f"{cores}: set corpus.workers: 0 (one per core)"]


# ------------------------------------------------------------ 4. a built-in task, inference
def test_same_document_on_too_few_documents_says_so(tmp_path):
    documents = ["\n".join(SENTENCES.format(i=i).replace(". ", ".\n").splitlines() * 8)
                 for i in range(3)]  # 24 sentences each: many examples, but 3 documents
    (tmp_path / "val.txt").write_text("\n\n".join(documents) + "\n")
    with pytest.raises(BertError) as info:
        builtin_task("builtin:same-document", tmp_path / "val.txt", 0.2, seed=0)
    assert str(info.value) == (
        f"{tmp_path / 'val.txt'} has too few documents to split by document for "
        "builtin:same-document: 3 (3 of two sentences or more), where its test and its train "
        "part each need two of two sentences or more; use a corpus of more documents, or set "
        "finetune.data to a labelled file")
