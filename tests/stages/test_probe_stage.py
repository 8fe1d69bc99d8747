"""`bert probe` as DVC runs it, on a tiny model saved as `bert pretrain` saves one: its four
outputs, its results in the MLflow run that trained the model, a bad probe file's one line."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from helpers.bert import assert_one_line_error, run_bert
from helpers.tiny_pretrain import tiny_config, write_corpus

from bertcore.common.digests import file_sha256
from bertcore.common.outcomes import read_items
from bertcore.common.tracking import Tracker, sqlite_uri
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import save_vocab
from bertcore.data.vocab.training import LineBatches, train_tokenizer
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import WEIGHTS_NAME, save_model
from bertcore.saved.model_run import MODEL_TAG


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """data/corpus, data/vocab, models/pretrained and its MLflow run, as the pipeline leaves
    them."""
    root = tmp_path_factory.mktemp("probe_stage")
    write_corpus(root / "data" / "corpus", train_docs=20, val_docs=8)
    vocab_config = VocabConfig(vocab_size=120, min_frequency=1)
    tokenizer = train_tokenizer(LineBatches(root / "data/corpus/train.txt"), vocab_config)
    (root / "data" / "vocab").mkdir()
    save_vocab(tokenizer, root / "data" / "vocab")
    torch.manual_seed(0)
    save_model(BertPretrainingModel(tiny_config(tokenizer.get_vocab_size(), dropout=0.0)),
               root / "models" / "pretrained")
    (root / "models/pretrained/training.json").write_text(json.dumps({"step": 8}))
    run = Tracker.start(sqlite_uri(root / "mlflow.db"), "tiny-probe", run_name="pretrain",
                        tags={MODEL_TAG: file_sha256(root / "models/pretrained" / WEIGHTS_NAME)})
    run.finish()
    (root / "run_id").write_text(run.run_id)
    params = {"probe": {"builtin_sentences": 40, "seed": 1},
              "tracking": {"experiment": "tiny-probe"}}
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    return root


def test_the_stage_writes_its_outputs_and_logs_into_the_pretraining_run(repo):
    proc = run_bert("probe", cwd=repo, check=True)
    metrics = json.loads((repo / "metrics/probe.json").read_text())["probe"]
    details = json.loads((repo / "metrics/probe_details.json").read_text())
    assert set(metrics["builtin"]) == {"cloze", "swapped_pairs", "replaced_pairs"}
    assert details["builtin"]["drawn_sentences"] == 40 and details["model"] == "models/pretrained"
    items = sorted(p.name for p in (repo / "metrics/probe").iterdir())
    assert items == ["builtin_cloze.jsonl", "builtin_pairs.jsonl"]
    rows = (repo / "metrics/probe/builtin_pairs.jsonl").read_text().splitlines()
    assert len(rows) == (details["builtin"]["swapped_pairs"]["pairs"]
                         + details["builtin"]["replaced_pairs"]["pairs"])
    assert "held-out word cloze" in proc.stderr and "unigram" in proc.stderr
    outcomes = read_items(repo / "metrics/probe_items.json")
    assert set(outcomes.figures) == {"builtin.cloze.p_at_1", "builtin.cloze.p_at_10", *(
        f"builtin.{pairs}.{accuracy}" for pairs in ("swapped_pairs", "replaced_pairs")
        for accuracy in ("accuracy", "accuracy_pll", "accuracy_pll_word_l2r"))}
    swapped = outcomes.figures["builtin.swapped_pairs.accuracy"].estimate()
    assert swapped.interval() == metrics["builtin"]["swapped_pairs"]["accuracy_ci95"]
    assert f"words swapped {swapped.text()} (unigram" in proc.stderr

    from mlflow.tracking import MlflowClient

    run = MlflowClient(sqlite_uri(repo / "mlflow.db")).get_run((repo / "run_id").read_text())
    assert run.data.metrics["probe_builtin_cloze_p_at_1"] == metrics["builtin"]["cloze"]["p_at_1"]
    assert "probe.builtin.drawn_sentences" not in run.data.tags  # in probe_details.json
    low, high = metrics["builtin"]["cloze"]["p_at_10_ci95"]
    assert (run.data.metrics["probe_builtin_cloze_p_at_10_ci95_low"],
            run.data.metrics["probe_builtin_cloze_p_at_10_ci95_high"]) == (low, high)
    artifacts = MlflowClient(sqlite_uri(repo / "mlflow.db")).list_artifacts(run.info.run_id,
                                                                            "metrics")
    assert "metrics/probe_items.json" in {a.path for a in artifacts}


def test_a_bad_probe_file_is_one_line_and_leaves_the_outputs(repo):
    before = (repo / "metrics/probe.json").read_bytes() if (
        repo / "metrics/probe.json").exists() else None
    (repo / "lama.jsonl").write_text('{"masked_sentences": ["the [MASK] sat ."], '
                                     '"obj_label": "cow"}\n{"obj_label": "x"}\n')
    proc = run_bert("probe", "--set", "probe.cloze=lama.jsonl", "--set",
                    "tracking.enabled=false", cwd=repo)
    assert_one_line_error(proc, "lama.jsonl line 2", "masked_sentences")
    after = (repo / "metrics/probe.json").read_bytes() if (
        repo / "metrics/probe.json").exists() else None
    assert after == before


bert = run_bert


def test_bert_probe_device_gpu_is_one_line(tmp_path):
    (tmp_path / "params.yaml").write_text("{}\n")
    proc = bert("probe", "--device", "gpu", cwd=tmp_path)
    assert_one_line_error(proc, "Invalid value for '--device': 'gpu' is no device; use auto, "
                                "cpu, cuda, cuda:N or mps", code=2)


def test_items_into_a_users_folder_are_refused_and_keep_it(repo, tmp_path):
    """(issue 62, case 3) --items at a folder of the user's data: one line, nothing lost."""
    (tmp_path / "my_data").mkdir()
    (tmp_path / "my_data" / "reviews.csv").write_text("text,label\ngood,1\n")
    (tmp_path / "my_data" / "blimp.jsonl").write_text('{"sentence_good": "a b c d e"}\n')
    before = {p.name: p.read_bytes() for p in (tmp_path / "my_data").iterdir()}
    proc = run_bert("probe", "--items", str(tmp_path / "my_data"), "--out",
                    str(tmp_path / "probe.json"), "--set", "tracking.enabled=false",
                    "--set", "probe.builtin_sentences=10", cwd=repo)
    assert_one_line_error(proc, "my_data holds 'blimp.jsonl' and 1 more, which this stage",
                          "point --items elsewhere")
    assert {p.name: p.read_bytes() for p in (tmp_path / "my_data").iterdir()} == before


def test_a_val_split_that_is_not_utf8_is_one_line_naming_it(repo, tmp_path):
    """(issue 62, case 16)"""
    import shutil

    work = tmp_path / "work"
    shutil.copytree(repo, work, ignore=shutil.ignore_patterns("metrics", "mlflow.db"))
    val = work / "data" / "corpus" / "val.txt"
    lines = val.read_bytes().split(b"\n")
    lines[2] = "Le récit de la révolution.".encode("latin-1")
    val.write_bytes(b"\n".join(lines))
    proc = run_bert("probe", "--set", "tracking.enabled=false", cwd=work)
    assert_one_line_error(proc, "data/corpus/val.txt:3 is not UTF-8 text; the corpus's files "
                          "are UTF-8: rebuild it with `bert corpus`")
