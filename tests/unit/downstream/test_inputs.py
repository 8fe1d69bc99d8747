"""What the downstream stages read from the paths their params name: `~` is the home folder,
a model folder without its tokenizer is named by its param, a BLiMP file with a byte-order mark
is read, a table separated otherwise than its name says is told so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.glue_files import write_glue_folder

from bertcore.common.errors import BertError
from bertcore.downstream.glue.config import GlueConfig
from bertcore.downstream.glue.inputs import glue_model
from bertcore.downstream.glue.tasks import tasks_in
from bertcore.downstream.probes.config import ProbeConfig
from bertcore.downstream.probes.minimal_pairs import read_minimal_pairs
from bertcore.downstream.probes.probing import ProbePaths, probe_model
from bertcore.downstream.tasks import read_examples

PAIR = {"sentence_good": "The cats sleep.", "sentence_bad": "The cats sleeps.",
        "UID": "agreement"}


def model_folder_without_tokenizer(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 30}))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize("key", ["glue.model", "probe.model"])
def test_a_model_folder_a_param_names_without_its_tokenizer_names_the_param(tmp_path, key):
    """--vocab goes with the pipeline's model only: it is no advice for glue.model or
    probe.model."""
    folder = model_folder_without_tokenizer(tmp_path / "bert")
    with pytest.raises(BertError) as raised:
        if key == "glue.model":
            glue_model(GlueConfig(model=str(folder)), "models/pretrained", "data/vocab")
        else:
            probe_model(ProbeConfig(model=str(folder)), ProbePaths(
                "models/pretrained", "data/vocab", tmp_path / "val.txt", tmp_path / "train.txt",
                tmp_path / "probe.json", tmp_path / "items"), "cpu", None)
    assert str(raised.value) == (
        f"{key}: {folder} has no tokenizer (tokenizer.json or vocab.txt): give a BERT folder "
        f"with its own (`bert export` writes one), or set {key} to null for the pipeline's "
        "model and its vocabulary")
    assert "--vocab" not in str(raised.value)


def test_tilde_is_the_home_folder_in_every_path_param(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "task.csv").write_text("text,label\nhello there,a\ngood bye,b\n")
    assert [e.label for e in read_examples("~/task.csv", "text", None, "label")] == ["a", "b"]
    (tmp_path / "blimp.jsonl").write_text(json.dumps(PAIR) + "\n")
    assert len(read_minimal_pairs("~/blimp.jsonl")) == 1
    write_glue_folder(tmp_path / "glue", tasks=["rte"])
    assert [task.key for task in tasks_in("~/glue", None)] == ["rte"]
    model_folder_without_tokenizer(tmp_path / "bert")
    for key in ("glue.model", "probe.model"):  # found: the next check speaks
        with pytest.raises(BertError, match=f"^{key}: {tmp_path / 'bert'} has no tokenizer"):
            if key == "glue.model":
                glue_model(GlueConfig(model="~/bert"), "models/pretrained", "data/vocab")
            else:
                probe_model(ProbeConfig(model="~/bert"), ProbePaths(
                    "m", "v", tmp_path / "val.txt", tmp_path / "train.txt",
                    tmp_path / "probe.json", tmp_path / "items"), "cpu", None)


def test_a_blimp_file_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "blimp.jsonl"
    path.write_text("\ufeff" + json.dumps(PAIR) + "\n" + json.dumps(PAIR) + "\n",
                    encoding="utf-8")
    pairs = read_minimal_pairs(path)
    assert [(p.good, p.bad) for p in pairs] == [("The cats sleep.", "The cats sleeps.")] * 2


@pytest.mark.parametrize("name, text, said", [
    ("semi.csv", "text;label\nhello there;a\n",
     "('text;label') separated by semicolons, not commas as in a .csv file: save it with "
     "commas"),
    ("tabs.csv", "text\tlabel\nhello there\ta\n",
     "separated by tabs, not commas as in a .csv file: save it with commas, or name it .tsv"),
    ("commas.tsv", "text,label\nhello there,a\n",
     "separated by commas, not tabs as in a .tsv file: save it with tabs, or name it .csv"),
])
def test_a_table_separated_otherwise_than_its_name_says_is_told_so(tmp_path, name, text, said):
    (tmp_path / name).write_text(text)
    with pytest.raises(BertError) as raised:
        read_examples(tmp_path / name, "text", None, "label")
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / name}: its header is one column") and \
        message.endswith(said), message
    assert "label_field" not in str(raised.value)
