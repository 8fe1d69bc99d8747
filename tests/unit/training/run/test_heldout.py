"""The evaluate stage's per-item outcomes, on tiny data with phase 2's samples: each val pair's
outcomes in metrics/eval_items.json, which `read_items` reads back to the figures and
intervals of eval.json; the intervals in the details, on the console and in the MLflow run
that wrote the model; the item set named by the val pairs and their masks, whatever the batch
size."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from helpers.tiny_pretrain import build_data, tiny_config
from mlflow.tracking import MlflowClient

from bertcore.common.digests import file_sha256
from bertcore.common.outcomes import read_items
from bertcore.common.tracking import Tracker, TrackingTarget, sqlite_uri
from bertcore.data.samples.store import PHASE2_DIR, SampleStore
from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.card import interval_text, written_decimals
from bertcore.saved.hf import WEIGHTS_NAME, save_model
from bertcore.saved.model_run import MODEL_TAG
from bertcore.training.config import EvalConfig, MaskingConfig
from bertcore.training.evaluation.metrics import SCORES
from bertcore.training.run.heldout import HeldOutPaths, evaluate_pretrained, heldout_splits

MASKING = MaskingConfig(max_predictions_per_seq=5)
EVAL = EvalConfig(batch_size=16, seed=3)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return build_data(tmp_path_factory.mktemp("heldout"), phase2_length=64)


@pytest.fixture(scope="module")
def pretrained(data, tmp_path_factory) -> Path:
    """A tiny model (random weights, seeded) as `bert pretrain` writes it, at step 12."""
    folder = tmp_path_factory.mktemp("model") / "pretrained"
    torch.manual_seed(0)
    save_model(BertPretrainingModel(tiny_config(len(read_vocab(data / "vocab")),
                                                max_position_embeddings=64)), folder)
    (folder / "training.json").write_text(json.dumps({"step": 12}))
    return folder


def test_the_evaluate_stage_writes_each_val_pair_s_outcomes_and_logs_the_intervals(
        data, pretrained, tmp_path, mlflow_db):
    uri = sqlite_uri(mlflow_db(tmp_path))
    run = Tracker.start(uri, "heldout", run_name="pretrain",
                        tags={MODEL_TAG: file_sha256(pretrained / WEIGHTS_NAME)})
    run.finish()
    out = tmp_path / "metrics" / "eval.json"
    outcome = evaluate_pretrained(MASKING, EVAL, HeldOutPaths(pretrained, data / "samples",
                                                              data / "vocab", out),
                                  "cpu", TrackingTarget(uri, "heldout"))
    scores = json.loads(out.read_text())["eval"]
    details = json.loads((tmp_path / "metrics" / "eval_details.json").read_text())
    items = read_items(tmp_path / "metrics" / "eval_items.json")

    # phase 1's val pairs and phase 2's, each a set of its own, every pair of the split
    assert items.stage == "eval" and list(items.sets) == ["val", "val_length_64"]
    assert [s.items for s in items.sets.values()] == [
        len(SampleStore(data / "samples" / "val")),
        len(SampleStore(data / "samples" / PHASE2_DIR / "val"))]
    assert items.sets["val"].digest != items.sets["val_length_64"].digest
    assert {s.unit for s in items.sets.values()} == {"val pair"}
    assert list(items.figures) == [*SCORES, *(f"length_64.{key}" for key in SCORES)]
    assert list(scores) == [key for name in SCORES for key in (name, f"{name}_ci95")] + [
        "length_64"]

    sums = {"": outcome.scores[0].metrics, "length_64.": outcome.scores[1].metrics}
    for name, figure in items.figures.items():
        prefix, _, key = name.rpartition(".")
        written = scores[prefix] if prefix else scores
        found = figure.estimate()
        # the file's figure is eval.json's: the same value (to the precision its interval
        # supports) and the same interval; the sums' value, unrounded, lies inside it
        assert round(found.value, found.decimals) == written[key], name
        assert found.interval() == written[f"{key}_ci95"], name
        aggregate = getattr(sums[f"{prefix}." if prefix else ""], key)
        assert found.value == pytest.approx(aggregate, rel=1e-6), name
        assert found.low <= aggregate <= found.high and found.low < found.high, name
        assert (figure.higher_is_better, figure.runs.statistic) == {
            "mlm_accuracy": (True, "ratio"), "mlm_loss": (False, "ratio"),
            "perplexity": (False, "exp_ratio"), "nsp_accuracy": (True, "mean"),
            "nsp_loss": (False, "mean")}[key]
    assert details["intervals"]["confidence"] == 0.95
    mlm = interval_text(scores["mlm_accuracy"], *scores["mlm_accuracy_ci95"])
    assert details["intervals"]["mlm_accuracy"] == (
        f"{mlm} over {items.sets['val'].items} val pairs")

    # the console: each score with its interval, the baselines to the same precision
    first, second = outcome.summary(out)
    number = r"-?\d+(?:\.\d+)?"
    interval = rf"{number} \[{number}, {number}\]"
    assert re.fullmatch(
        rf"evaluate \(length 32\): MLM accuracy {interval} \(most frequent token \d\.\d{{3,4}}\),"
        rf" perplexity {interval}, NSP accuracy {interval} \(majority {number}, bag of words "
        rf"{number}\) -> {re.escape(str(out))}", first), first
    assert f"MLM accuracy {mlm} (most frequent token " in first
    baseline = details["mlm_baseline_accuracy"]
    decimals = written_decimals(scores["mlm_accuracy"], *scores["mlm_accuracy_ci95"])
    assert f"(most frequent token {baseline:.{decimals}f})" in first
    longer = scores["length_64"]
    assert second == (
        f"evaluate (length 64): MLM accuracy "
        f"{interval_text(longer['mlm_accuracy'], *longer['mlm_accuracy_ci95'])}, NSP accuracy "
        f"{interval_text(longer['nsp_accuracy'], *longer['nsp_accuracy_ci95'])}")

    # MLflow: the pretraining run holds each interval's ends and the outcomes file
    client = MlflowClient(uri)
    results = client.get_run(run.run_id).data.metrics
    for prefix, written in (("eval_", scores), ("eval_length_64_", scores["length_64"])):
        for key in SCORES:
            assert results[f"{prefix}{key}"] == written[key]
            assert [results[f"{prefix}{key}_ci95_low"], results[f"{prefix}{key}_ci95_high"]
                    ] == written[f"{key}_ci95"]
            assert [m.step for m in client.get_metric_history(
                run.run_id, f"{prefix}{key}_ci95_low")] == [12]
    assert {a.path for a in client.list_artifacts(run.run_id, "metrics")} == {
        "metrics/eval.json", "metrics/eval_details.json", "metrics/eval_items.json"}
    local = client.download_artifacts(run.run_id, "metrics/eval_items.json",
                                      str(tmp_path / "dl"))
    assert Path(local).read_bytes() == (tmp_path / "metrics" / "eval_items.json").read_bytes()


def test_the_val_item_set_names_the_pairs_and_their_masks_not_the_batch_size(data, tmp_path):
    """The same digest for the same val pairs with the same masks (whatever the batch size);
    another for other masks (eval.seed, the masking) or other val pairs."""
    first, longer = heldout_splits(data / "samples", data / "vocab", MASKING)
    digest = first.item_set(EVAL).digest
    assert first.item_set(EvalConfig(batch_size=64, seed=3)).digest == digest
    assert first.item_set(EvalConfig(batch_size=16, seed=4)).digest != digest
    masking = heldout_splits(data / "samples", data / "vocab",
                             MaskingConfig(max_predictions_per_seq=5, mlm_probability=0.2))[0]
    assert masking.item_set(EVAL).digest != digest
    assert longer.item_set(EVAL).digest != digest
    # the same pairs built again: the same set; other val documents: another
    again = heldout_splits(build_data(tmp_path / "again", phase2_length=64) / "samples",
                           tmp_path / "again" / "data" / "vocab", MASKING)[0]
    assert again.item_set(EVAL) == first.item_set(EVAL)
    other = build_data(tmp_path / "other", val_docs=13)
    changed = heldout_splits(other / "samples", other / "vocab", MASKING)[0]
    assert changed.item_set(EVAL).digest != digest
