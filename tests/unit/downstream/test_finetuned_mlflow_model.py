"""The fine-tuned classifier as MLflow serves it: a sentence-pair task's model (the default,
builtin:same-document) logged so that `mlflow.pyfunc` and `mlflow models serve` (its scoring
server's request handling) score the pair, as transformers' pipeline does on the folder, not
its first text alone; and a pair longer than the model's positions cut to them, not a
tensor-size error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import pytest
import torch
from helpers.tiny_pretrain import build_data, tiny_config
from mlflow.tracking import MlflowClient

from bertcore.common.tracking import TrackingTarget, sqlite_uri
from bertcore.data.vocab.files import read_vocab
from bertcore.downstream.config import FinetuneConfig
from bertcore.downstream.finetune import FinetunePaths, run_finetune
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.hf import save_model

A = "the red fox runs to the old farm ."
B = "a big city sleeps under the tall tower ."


@pytest.fixture(scope="module")
def logged(tmp_path_factory, _empty_mlflow_store):
    """builtin:same-document fine-tuned for a few steps from a tiny untrained model, one
    seed, logged to a fresh MLflow store; the folder and the logged model as pyfunc loads it."""
    root = tmp_path_factory.mktemp("pairs")
    build_data(root)
    torch.manual_seed(0)
    save_model(BertPretrainingModel(tiny_config(len(read_vocab(root / "data" / "vocab")))),
               root / "models" / "pretrained")
    uri = sqlite_uri(shutil.copy(_empty_mlflow_store, root / "mlflow.db"))
    config = FinetuneConfig(data="builtin:same-document", seeds=1, batch_size=8, max_steps=6,
                            max_seq_length=32, learning_rate=3e-3, device="cpu")
    paths = FinetunePaths(root / "models" / "pretrained", root / "data" / "vocab",
                          root / "data" / "corpus" / "val.txt", root / "finetuned",
                          root / "finetune.json")
    run_finetune(config, paths, TrackingTarget(uri, "pairs"))
    client = MlflowClient(uri)
    (model,) = client.search_logged_models(
        [client.get_experiment_by_name("pairs").experiment_id])
    mlflow.set_tracking_uri(uri)
    try:
        yield root / "finetuned", mlflow.pyfunc.load_model(model.model_uri)
    finally:
        mlflow.set_tracking_uri(None)


def _pipeline(folder: Path):
    import transformers

    return transformers.pipeline("text-classification", model=str(folder))


def test_a_pair_model_scores_both_texts_as_transformers_does(logged):
    folder, model = logged
    pipe = _pipeline(folder)
    pairs = [{"text": A, "text_pair": B}, {"text": B, "text_pair": A}]
    expected = pipe(pairs)
    got = model.predict(pairs)
    assert list(got["label"]) == [e["label"] for e in expected]
    assert list(got["score"]) == pytest.approx([e["score"] for e in expected], abs=1e-6)
    # the second text counts: A alone scores otherwise than A with B, by far more than the
    # tolerance above (measured: 5e-5 after these few steps)
    alone = pipe(A)[0]["score"]
    assert abs(alone - expected[0]["score"]) > 1e-5, (alone, expected)
    assert list(model.metadata.get_input_schema().input_names()) == ["text", "text_pair"]


def test_serving_takes_the_pair_as_pyfunc_does(logged):
    """What `mlflow models serve` does with a request: its scoring server's `invocations`."""
    from mlflow.pyfunc.scoring_server import invocations

    folder, model = logged
    body = json.dumps({"dataframe_records": [{"text": A, "text_pair": B}]})
    answer = invocations(body, "application/json", model, model.metadata.get_input_schema())
    assert answer.status == 200, answer.response
    (prediction,) = json.loads(answer.response)["predictions"]
    expected = _pipeline(folder)({"text": A, "text_pair": B})
    assert prediction["label"] == expected["label"]
    assert prediction["score"] == pytest.approx(expected["score"], abs=1e-6)


def test_a_pair_longer_than_the_model_is_cut_to_its_positions(logged):
    folder, model = logged
    long = {"text": A * 30, "text_pair": B * 30}  # ~600 tokens, for 64 positions
    (got,) = model.predict([long])["score"]
    expected = _pipeline(folder)(long, truncation=True)
    assert got == pytest.approx(expected["score"], abs=1e-6)
