"""A GLUE suite's fine-tunes in worker processes (`glue.workers`): the same bytes as one
after another, whichever finishes first, the test files predicted with the median's model as
saved. Tiny fine-tunes of two steps, two tasks of two seeds."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from helpers import first_last
from helpers.glue_files import write_glue_folder, write_glue_vocab
from helpers.tiny_pretrain import tiny_config

from bertcore.data.vocab.files import read_vocab
from bertcore.downstream.glue import suite
from bertcore.downstream.glue.config import GlueConfig
from bertcore.downstream.glue.report import GluePaths, score_glue
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import save_model

TASKS = ["rte", "stsb"]  # classes and a regression, each with a test file


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A GLUE folder of two tasks, its vocabulary, a tiny model, and the suite run in this
    process (one worker) under one/."""
    root = tmp_path_factory.mktemp("glue_workers")
    write_glue_folder(root / "glue_data", tasks=TASKS, rows=8)
    write_glue_vocab(root, vocab_size=150)
    torch.manual_seed(3)
    save_model(BertPretrainingModel(tiny_config(len(read_vocab(root / "data" / "vocab")))),
               root / "models" / "pretrained")
    score(root, root / "one", workers=1)
    return root


def score(root: Path, out: Path, workers: int) -> None:
    config = GlueConfig(data=str(root / "glue_data"), tasks=TASKS, seeds=2, batch_size=4,
                        max_steps=2, learning_rate=3e-3, max_seq_length=32, workers=workers)
    score_glue(config, GluePaths(str(root / "models" / "pretrained"),
                                 str(root / "data" / "vocab"), str(out / "glue.json"),
                                 str(out / "seeds.tsv"), str(out / "predictions"),
                                 str(out / "models"), str(out / "runs")), None)


def outputs(out: Path) -> dict[str, str]:
    """sha256 of every output file under `out` (a card's with `out` as OUT), not the records."""
    return {str(path.relative_to(out)): hashlib.sha256(
        path.read_text().replace(str(out), "OUT").encode() if path.name == "README.md"
        else path.read_bytes()).hexdigest()
        for path in sorted(out.rglob("*"))
        if path.is_file() and "runs" not in path.relative_to(out).parts}


def test_two_workers_give_the_bytes_of_one_whichever_fine_tune_finishes_first(
        workdir, tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "fine_tune_job", first_last.glue_job)
    monkeypatch.setenv(first_last.MARKER, str(tmp_path / "a later one finished"))
    monkeypatch.setenv("FIRST_LAST_TASK", "rte")
    monkeypatch.setenv("FIRST_LAST_SEED", "42")
    score(workdir, tmp_path / "two", workers=2)
    # rte's seed 42 finished after another
    assert (tmp_path / "a later one finished.first after").exists()
    two, one = outputs(tmp_path / "two"), outputs(workdir / "one")
    assert "predictions/submission/RTE.tsv" in one and "models/STS-B/model.safetensors" in one
    assert two == one


def test_only_the_median_seeds_test_rows_are_predicted(workdir, tmp_path, monkeypatch):
    """The other seeds' test predictions are never written: none is made."""
    predicted = []
    original = suite.predict

    def predict(model, data, *args, **kwargs):
        predicted.append(len(data))
        return original(model, data, *args, **kwargs)

    monkeypatch.setattr(suite, "predict", predict)
    score(workdir, tmp_path / "again", workers=1)
    assert predicted == [8, 8]  # one test file per task, of 8 rows, once
    assert outputs(tmp_path / "again") == outputs(workdir / "one")
