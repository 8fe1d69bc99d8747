"""The built-in probes while pretraining (`eval.probe_sentences`): the figures of the probe
stage's own code on the same draw, in every periodic evaluation's row of
metrics/pretrain_eval.tsv and in the MLflow run's curves, and nothing when they are off, or
when the corpus is not the samples' (one warning, naming pretraining's own setting)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from helpers.bert import run_bert
from helpers.tiny_pretrain import build_data, tiny_config, write_corpus, write_params
from mlflow.tracking import MlflowClient

from bertcore.common.tracking import sqlite_uri
from bertcore.data.vocab.existing import read_tokenizer
from bertcore.downstream.probes.config import ProbeConfig
from bertcore.downstream.probes.during_pretraining import ProbeDraw
from bertcore.downstream.probes.masked_lm import MaskedLM
from bertcore.downstream.probes.probing import run_probes
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.tokenizer import BERT_DEFAULT_RULES
from bertcore.training.config import EvalConfig
from bertcore.training.loop.records import EVAL_COLUMNS
from bertstages.pretrain import probe_draw

PROBES = ("cloze_p_at_1", "cloze_p_at_10", "swapped_pairs", "replaced_pairs")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return build_data(tmp_path_factory.mktemp("probes"), val_docs=20)


def test_the_periodic_probes_are_the_probe_stages_figures_on_the_same_draw(data):
    """A model of peaked random predictions and dropout (so that scoring in train mode would
    show), probed as pretraining probes it and as the probe stage does, on the same sentences
    and seed: the same four figures (the pairs by PLL, which the periodic probes keep), and the
    model is left training."""
    tokenizer = read_tokenizer(data / "vocab", BERT_DEFAULT_RULES, "defaults", "vocab").tokenizer
    torch.manual_seed(0)
    model = BertPretrainingModel(tiny_config(tokenizer.get_vocab_size(), dropout=0.3,
                                             initializer_range=0.3))
    val, train = data / "corpus" / "val.txt", data / "corpus" / "train.txt"
    probes = ProbeDraw(tokenizer, val, train, sentences=60, seed=5).prepare(model, "cpu")
    assert model.training
    figures = probes(model)
    assert model.training

    report = run_probes(MaskedLM(model, tokenizer), ProbeConfig(builtin_sentences=60, seed=5),
                        val, train)
    stage, about = report.metrics["builtin"], report.details["builtin"]
    assert figures == {"cloze_p_at_1": stage["cloze"]["p_at_1"],
                       "cloze_p_at_10": stage["cloze"]["p_at_10"],
                       "swapped_pairs": stage["swapped_pairs"]["accuracy_pll"],
                       "replaced_pairs": stage["replaced_pairs"]["accuracy_pll"],
                       "cloze_frequency_p_at_1": about["cloze"]["frequency_baseline"]["p_at_1"],
                       "swapped_pairs_n": about["swapped_pairs"]["pairs"]}
    assert len(set(figures.values())) > 1 and 0 < figures["swapped_pairs"] < 1


def test_a_probe_of_no_pair_is_an_empty_cell_not_zero(data, tmp_path):
    """No val word among the train split's words: no replaced pair, a figure of none, which
    the eval log leaves empty (as it does a probe that is off), never 0."""
    from bertcore.training.loop.records import EVAL_COLUMNS, TsvLog

    tokenizer = read_tokenizer(data / "vocab", BERT_DEFAULT_RULES, "defaults", "vocab").tokenizer
    model = BertPretrainingModel(tiny_config(tokenizer.get_vocab_size()))
    train = tmp_path / "train.txt"
    train.write_text("aaaa bbbb aaaa .\n", encoding="utf-8")
    probes = ProbeDraw(tokenizer, data / "corpus" / "val.txt", train, sentences=30,
                       seed=5).prepare(model, "cpu")
    figures = probes(model)
    assert figures["replaced_pairs"] is None and 0 <= figures["swapped_pairs"] <= 1
    log = TsvLog(tmp_path / "eval.tsv", EVAL_COLUMNS, None)
    log.add({"step": 4, **figures})
    header, row = (tmp_path / "eval.tsv").read_text().splitlines()
    assert dict(zip(header.split("\t"), row.split("\t"), strict=True))["replaced_pairs"] == ""


def eval_rows(root: Path) -> list[dict[str, str]]:
    header, *rows = (root / "metrics" / "pretrain_eval.tsv").read_text().splitlines()
    return [dict(zip(header.split("\t"), row.split("\t"), strict=True)) for row in rows]


def test_each_evaluation_logs_the_probes_to_the_tsv_and_mlflow(data, tmp_path, mlflow_db):
    root = data.parent
    uri = sqlite_uri(mlflow_db(tmp_path))
    write_params(tmp_path / "params.yaml", eval={"batch_size": 16, "seed": 3,
                                                 "probe_sentences": 30},
                 tracking={"uri": uri, "experiment": "probes"})
    proc = run_bert("pretrain", "--params", str(tmp_path / "params.yaml"), cwd=root,
                    check=True)
    rows = eval_rows(root)
    assert [row["step"] for row in rows] == ["4", "8"]
    for row in rows:
        assert all(0.0 <= float(row[name]) <= 1.0 for name in PROBES), row
    assert list(rows[0]) == list(EVAL_COLUMNS)  # the judge's figures are not logged
    # 8 steps know no word order: the summary and the details say it is on the plateau
    notice = json.loads((root / "metrics" / "pretrain_details.json").read_text())["plateau"]
    assert notice.startswith("the model ends on the frequency plateau at step 8: ")
    assert f"swapped pairs {float(rows[-1]['swapped_pairs']):.3f}" in notice
    assert f"pretrain: warning: {notice}" in proc.stderr.splitlines()

    client = MlflowClient(tracking_uri=uri)
    run = client.search_runs([client.get_experiment_by_name("probes").experiment_id])[0]
    for name in PROBES:
        history = client.get_metric_history(run.info.run_id, f"val/{name}")
        assert [(m.step, m.value) for m in history] == [
            (int(row["step"]), pytest.approx(float(row[name]))) for row in rows]


def test_no_probes_leaves_their_columns_empty(data, tmp_path):
    root = data.parent
    write_params(tmp_path / "params.yaml", eval={"batch_size": 16, "seed": 3,
                                                 "probe_sentences": 0},
                 tracking={"enabled": False})
    run_bert("pretrain", "--params", str(tmp_path / "params.yaml"), "--checkpoints",
             str(tmp_path / "ckpt"), "--eval-log", str(tmp_path / "eval.tsv"), cwd=root,
             check=True)
    header, *rows = (tmp_path / "eval.tsv").read_text().splitlines()
    values = [dict(zip(header.split("\t"), row.split("\t"), strict=True)) for row in rows]
    assert len(values) == 2 and all(float(row["mlm_accuracy"]) > 0 for row in values)
    assert all(row[name] == "" for row in values for name in PROBES)
    details = json.loads((root / "metrics" / "pretrain_details.json").read_text())
    assert "plateau" not in details  # no probes, no verdict


def test_without_a_corpus_to_draw_from_pretraining_says_so_and_trains(data, tmp_path):
    """Samples built elsewhere, no corpus folder: one warning naming what to do, and the run
    trains and evaluates as without probes."""
    root = data.parent
    write_params(tmp_path / "params.yaml", eval={"batch_size": 16, "seed": 3,
                                                 "probe_sentences": 30},
                 tracking={"enabled": False})
    proc = run_bert("pretrain", "--params", str(tmp_path / "params.yaml"), "--corpus",
                    str(tmp_path / "no-corpus"), "--checkpoints", str(tmp_path / "ckpt"),
                    "--eval-log", str(tmp_path / "eval.tsv"), cwd=root, check=True)
    warnings = [line for line in proc.stderr.splitlines() if "no probes while pretraining" in line]
    assert len(warnings) == 1 and "eval.probe_sentences: 0" in warnings[0], proc.stderr
    header, *rows = (tmp_path / "eval.tsv").read_text().splitlines()
    values = [dict(zip(header.split("\t"), row.split("\t"), strict=True)) for row in rows]
    assert len(values) == 2 and all(row[name] == "" for row in values for name in PROBES)


def test_probes_from_another_corpus_than_the_samples_are_left_out_in_one_line(data, tmp_path,
                                                                              caplog):
    """`--samples S --vocab V` with `--corpus` left at a folder of another corpus: its val
    sentences are not the samples' (their count, against the samples' meta.json), so no
    probe is drawn from it, in one warning; the samples' own corpus is drawn from."""
    settings = EvalConfig(batch_size=16, seed=3, probe_sentences=30)
    samples, vocab = data / "samples", data / "vocab"
    with caplog.at_level(logging.WARNING, logger="bert.pretrain"):
        assert probe_draw(settings, vocab, data / "corpus", samples) is not None
        assert not caplog.records
        write_corpus(tmp_path / "other", val_docs=20, seed=4)  # as many documents
        assert probe_draw(settings, vocab, tmp_path / "other", samples) is None
    (warning,) = [r.getMessage() for r in caplog.records]
    sentences = len([line for line in (data / "corpus" / "val.txt").read_text().splitlines()
                     if line])
    assert warning.startswith("no probes while pretraining: ")
    assert (f"val.txt holds {other_corpus_count(tmp_path / 'other')} sentences, but the val "
            f"samples in {samples} were made from {sentences}: another corpus than the "
            "samples' (pass the --corpus they were made from, or set eval.probe_sentences: 0)"
            in warning)


def other_corpus_count(folder: Path) -> int:
    return len([line for line in (folder / "val.txt").read_text().splitlines() if line])


def test_a_val_split_with_nothing_to_probe_names_pretraining_s_setting(data, tmp_path, caplog):
    """Pretraining draws `eval.probe_sentences` sentences: the warning names that key, not the
    probe stage's probe.builtin_sentences."""
    tokenizer = read_tokenizer(data / "vocab", BERT_DEFAULT_RULES, "defaults", "vocab").tokenizer
    model = BertPretrainingModel(tiny_config(tokenizer.get_vocab_size()))
    (tmp_path / "val.txt").write_text("The Cat .\n", encoding="utf-8")
    draw = ProbeDraw(tokenizer, tmp_path / "val.txt", data / "corpus" / "train.txt",
                     sentences=30, seed=5)
    with caplog.at_level(logging.WARNING, logger="bert.pretrain"):
        assert draw.prepare(model, "cpu") is None
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.endswith("use a larger corpus, or set eval.probe_sentences to 0"), warning


def test_a_corpus_split_that_is_not_utf8_is_one_warning_naming_it(data, tmp_path, caplog):
    """(issue 62, case 16) val.txt or train.txt in Latin-1: one line naming the file and line,
    no probes, and training goes on."""
    import logging
    import shutil

    tokenizer = read_tokenizer(data / "vocab", BERT_DEFAULT_RULES, "defaults", "vocab").tokenizer
    model = BertPretrainingModel(tiny_config(tokenizer.get_vocab_size()))
    for split in ("val.txt", "train.txt"):
        corpus = tmp_path / split / "corpus"
        shutil.copytree(data / "corpus", corpus)
        lines = (corpus / split).read_bytes().split(b"\n")
        lines[3] = "Le récit de la révolution.".encode("latin-1")
        (corpus / split).write_bytes(b"\n".join(lines))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            probes = ProbeDraw(tokenizer, corpus / "val.txt", corpus / "train.txt",
                               sentences=20, seed=5).prepare(model, "cpu")
        assert probes is None
        assert caplog.messages == [
            f"no probes while pretraining: {corpus / split}:4 is not UTF-8 text; the corpus's "
            "files are UTF-8: rebuild it with `bert corpus`, or pass --corpus a corpus folder "
            "of UTF-8 text"]
