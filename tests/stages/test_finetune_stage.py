"""The `finetune` and `prune` stages end to end, as processes, on a tiny model pretrained here:
their scores against the majority and the scratch control, the pruned model, MLflow read back,
the one-line errors (tests/unit/downstream/test_finetune.py: fine-tuning in the test's process)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import yaml
from helpers.bert import assert_one_line_error, run_bert
from helpers.classifiers import transformers_accuracy
from helpers.task_files import write_jsonl
from helpers.tiny_pretrain import (
    ADJECTIVES,
    TOPICS,
    VERBS,
    build_data,
    tiny_config,
)
from huggingface_hub import ModelCard

from bertcore.common.digests import file_sha256
from bertcore.common.intervals import difference
from bertcore.common.outcomes import read_items
from bertcore.common.tracking import Tracker, sqlite_uri
from bertcore.data.samples.store import SampleStore
from bertcore.data.vocab.files import read_vocab
from bertcore.downstream.builtin_tasks import builtin_task
from bertcore.downstream.tasks import (
    read_examples,
    split_examples,
)
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.card import interval_text
from bertcore.saved.hf import WEIGHTS_NAME, load_model, save_model
from bertcore.saved.model_run import MODEL_TAG
from bertcore.training.config import EvalConfig, TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.loop.step import StepRunner
from bertcore.training.loop.trainer import Trainer
from bertcore.training.run.heldout import heldout_splits

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A tiny model pretrained here (300 steps on the synthetic topic corpus) with its data,
    and the MLflow run it came from."""
    root = tmp_path_factory.mktemp("stages")
    data = build_data(root, train_docs=60, val_docs=60)
    tokens = read_vocab(data / "vocab")
    config = TrainConfig(max_steps=300, batch_size=16, learning_rate=3e-3, warmup_steps=20,
                         eval_every=0, checkpoint_every=0, device="cpu", seed=5)
    torch.manual_seed(5)
    model = BertPretrainingModel(tiny_config(len(tokens), 0.1, hidden_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=128))
    collator = PretrainingCollator(MaskingConfig(max_predictions_per_seq=5),
                                   VocabSpec.from_tokens(tokens), seed=5)
    batches = PretrainingBatches(SampleStore(data / "samples" / "train"), collator, 16, 1, seed=5)
    Trainer(StepRunner(model, config, batches, device="cpu"), progress=False).train()
    save_model(model, root / "models" / "pretrained")
    (root / "models" / "pretrained" / "training.json").write_text(json.dumps({"step": 300}))
    parent = Tracker.start(sqlite_uri(root / "mlflow.db"), "tiny-downstream", run_name="pretrain",
                           tags={MODEL_TAG: file_sha256(root / "models/pretrained" / WEIGHTS_NAME)})
    parent.finish()
    (root / "parent_run_id").write_text(parent.run_id)
    params = {
        "masking": {"max_predictions_per_seq": 5},
        "train": {"batch_size": 16, "learning_rate": 3e-3, "seed": 5},
        "eval": {"batch_size": 32},
        # word order: what this corpus teaches ("the ADJ NOUN VERB the NOUN ."), and a scratch
        # model cannot learn from 700 examples
        # one worker: the fine-tunes in the stage's process, with no pool to start (a pool
        # gives the same bytes: tests/unit/downstream/test_finetune_seeds.py)
        "finetune": {"data": "builtin:word-order", "learning_rate": 1e-3, "max_seq_length": 32,
                     "max_steps": None, "workers": 1},
        "prune": {"fraction": 0.5, "batches": 4, "batch_size": 16, "recovery_steps": 5,
                  "throughput_steps": 2},
        "tracking": {"experiment": "tiny-downstream"},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    return root


@pytest.mark.slow
def test_finetune_stage_beats_the_majority_and_the_scratch_control(workdir):
    run_bert("finetune", cwd=workdir, check=True)
    metrics = json.loads((workdir / "metrics" / "finetune.json").read_text())["finetune"]
    details = json.loads((workdir / "metrics" / "finetune_details.json").read_text())
    assert list(metrics) == ["task", "pretrained", "scratch", "gain"]
    assert metrics["task"] == "builtin:word-order" and "swapped" in details["data"]["description"]
    assert details["data"]["labels"] == ["original", "swapped"]
    assert details["majority_class"]["accuracy"] == pytest.approx(0.5)
    assert details["data"]["train_examples"] + details["data"]["test_examples"] > 800
    # measured: 0.79 pretrained, 0.50 from scratch (which learns nothing in 240 steps)
    assert metrics["pretrained"]["accuracy"] > 0.7
    assert details["training"]["seeds"] == [42, 43, 44]  # finetune.seeds' default
    for scores_of_seed in details["seeds"].values():
        assert scores_of_seed["gain"]["accuracy"] == pytest.approx(
            scores_of_seed["pretrained"]["accuracy"] - scores_of_seed["scratch"]["accuracy"])
    assert metrics["gain"]["accuracy"] > 0.15
    assert metrics["gain"]["accuracy_ci95"][0] > 0  # pretraining helps beyond the noise

    # transformers, given only models/finetuned, reproduces the median seed's test accuracy
    folder = workdir / "models" / "finetuned"
    _, test = builtin_task("builtin:word-order", workdir / "data" / "corpus" / "val.txt", 0.2,
                           seed=42)
    median = details["seeds"][str(details["median_seed"])]["pretrained"]["accuracy"]
    assert transformers_accuracy(folder, test) == pytest.approx(median)
    # 3 seeds: the middle one's, to the precision its interval supports
    assert metrics["pretrained"]["accuracy"] == pytest.approx(median, abs=0.005)

    # MLflow: a child of the pretraining run, the headline in the pretraining run itself
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(workdir / "mlflow.db"))
    parent_id = (workdir / "parent_run_id").read_text()
    children = client.search_runs(
        [client.get_run(parent_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_id}' and "
                      "attributes.run_name LIKE 'finetune-%'")
    assert len(children) == 1
    child = children[0]
    assert child.info.status == "FINISHED"
    assert child.data.params["finetune.learning_rate"] == "0.001"
    assert child.data.metrics["pretrained_accuracy"] == pytest.approx(
        metrics["pretrained"]["accuracy"])
    assert len(client.get_metric_history(child.info.run_id, "seed_43/scratch/train_loss")) > 5
    assert child.data.metrics["gain_accuracy_ci95_low"] == metrics["gain"]["accuracy_ci95"][0]
    # counts and the baseline are tags, not charts
    assert not any("examples" in key or "majority" in key for key in child.data.metrics)
    assert child.data.tags["data.train_examples"] == str(details["data"]["train_examples"])
    assert float(child.data.tags["majority_class.accuracy"]) == pytest.approx(0.5)
    items = json.loads((workdir / "metrics" / "finetune_items.json").read_text())
    assert _artifacts(client, child.info.run_id, workdir / "dl") == {
        "finetune.json": {"finetune": metrics}, "finetune_details.json": details,
        "finetune_items.json": items}
    parent = client.get_run(parent_id)
    assert parent.data.metrics["finetune_gain_accuracy"] == pytest.approx(
        metrics["gain"]["accuracy"])
    # the classifier: a model card beside it, and an MLflow Model of the child run
    card = ModelCard.load(workdir / "models" / "finetuned" / "README.md")
    assert card.data.pipeline_tag == "text-classification"
    assert {r.metric_name: r.metric_value for r in card.data.eval_results}[
        "test accuracy"] == pytest.approx(metrics["pretrained"]["accuracy"], abs=1e-6)
    (logged,) = client.search_logged_models(experiment_ids=[child.info.experiment_id],
                                            filter_string=f"source_run_id = '{child.info.run_id}'")
    assert logged.name == "model" and logged.tags["mlflow.source.type"] == "LOCAL"
    assert client.get_metric_history(parent_id, "finetune_pretrained_accuracy")[0].step == 300


def test_prune_stage_shrinks_the_model_and_exports_it(workdir):
    proc = run_bert("prune", cwd=workdir, check=True)
    metrics = json.loads((workdir / "metrics" / "prune.json").read_text())["prune"]
    assert list(metrics) == ["heads", "val", "parameters", "heads_per_layer"]  # no timing
    assert metrics["heads"] == {"before": 4, "after": 2, "removed": 2, "removed_fraction": 0.5}
    details = json.loads((workdir / "metrics" / "prune_details.json").read_text())
    assert list(details) == ["pruned_heads", "requested_heads", "importance", "settings",
                             "differences", "intervals"]
    assert sum(len(heads) for heads in details["pruned_heads"].values()) == 2
    assert metrics["heads_per_layer"] == {"before": [2, 2], "after": [1, 1]}
    assert metrics["parameters"]["before"] - metrics["parameters"]["after"] == 2 * (4 * 64 * 32
                                                                                    + 3 * 32)
    for key in ("mlm_accuracy", "mlm_loss", "nsp_accuracy"):
        assert set(metrics["val"][key]) == {"before", "pruned", "recovered", "before_ci95",
                                            "pruned_ci95", "recovered_ci95"}
    assert_prune_items(workdir, metrics, details, proc.stderr)

    folder = workdir / "models" / "pruned"
    ours = load_model(folder).eval()
    assert ours.config.heads_per_layer == [1, 1]
    assert ours.num_parameters() == metrics["parameters"]["after"]
    theirs = transformers.BertForPreTraining.from_pretrained(folder).eval()
    ids = torch.tensor([[2, 30, 31, 32, 3, 40, 41, 3]])
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids).prediction_logits, ours(ids).mlm_logits,
                                   rtol=0, atol=1e-4)
    # transformers 5 loads every head: the saving is ours alone, and the stage says so
    full_size = sum(p.numel() for p in theirs.parameters())
    assert full_size == metrics["parameters"]["before"]
    assert (f"transformers 5 ignores pruned_heads and loads this model at full size "
            f"({full_size:,} parameters, every head); the saving "
            f"({metrics['parameters']['after']:,}) needs bertcore.saved.hf.load_model"
            ) in proc.stderr
    card = ModelCard.load(folder / "README.md")
    assert card.data.pipeline_tag == "fill-mask" and "transformers 5 has no head" in card.text

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(workdir / "mlflow.db"))
    parent_id = (workdir / "parent_run_id").read_text()
    child = _latest_prune_run(client, parent_id)
    # the speed, a measurement of the machine: in MLflow (and the console), not the files
    for kind in ("forward_sequences_per_s", "train_step_sequences_per_s"):
        speed = {key: child.data.tags[f"throughput.{kind}.{key}"]
                 for key in ("before", "after", "speedup", "low", "high", "within_noise")}
        assert float(speed["before"]) > 0 and float(speed["speedup"]) == pytest.approx(
            float(speed["after"]) / float(speed["before"]), rel=1e-4)  # tags: 6 digits
        assert float(speed["low"]) <= float(speed["high"])
        assert speed["within_noise"] == str(float(speed["low"]) <= 1 <= float(speed["high"]))
    assert child.data.metrics["train_step_speedup"] == pytest.approx(
        float(child.data.tags["throughput.train_step_sequences_per_s.speedup"]), rel=1e-5)
    assert "recovery" in {key.split(".")[1] for key in child.data.tags if key.startswith("seconds")}
    assert not any("heads" in key or "parameters" in key for key in child.data.metrics)
    saved = _artifacts(client, child.info.run_id, workdir / "dl")
    assert saved["prune.json"] == {"prune": metrics} and metrics["heads"]["after"] == 2
    assert child.data.tags["settings.recovery_steps"] == "5"
    assert client.get_run(parent_id).data.metrics["prune_val_mlm_accuracy"] == pytest.approx(
        metrics["val"]["mlm_accuracy"]["recovered"])
    # the final val figures' intervals, in the child run and the pretraining run, and the
    # outcomes they are drawn from as an artifact
    for key in ("mlm_accuracy", "mlm_loss", "nsp_accuracy"):
        low, high = metrics["val"][key]["recovered_ci95"]
        for run, prefix in ((child, ""), (client.get_run(parent_id), "prune_")):
            assert run.data.metrics[f"{prefix}val_{key}_ci95_low"] == low
            assert run.data.metrics[f"{prefix}val_{key}_ci95_high"] == high
    assert saved["prune_items.json"] == json.loads(
        (workdir / "metrics" / "prune_items.json").read_text())
    assert child.data.tags["differences.mlm_accuracy.pruned.verdict"] == (
        details["differences"]["mlm_accuracy"]["pruned"]["verdict"])


def assert_prune_items(workdir: Path, metrics: dict, details: dict, said: str) -> None:
    """prune_items.json: each val figure of prune.json, on the val pairs of the evaluate
    stage's set, with the value and interval prune.json has; the differences pruned - before
    and recovered - before with their paired interval, in the details and the summary."""
    items = read_items(workdir / "metrics" / "prune_items.json")
    # the same val pairs with the same masks as `bert evaluate` scores (masking, eval.seed)
    (split, *_) = heldout_splits(workdir / "data" / "samples", workdir / "data" / "vocab",
                                 MaskingConfig(max_predictions_per_seq=5))
    assert items.sets == {"val": split.item_set(EvalConfig(batch_size=32))}
    assert items.sets["val"].items == len(SampleStore(workdir / "data" / "samples" / "val"))
    estimates = items.estimates()
    for key in ("mlm_accuracy", "mlm_loss", "nsp_accuracy"):
        scores = metrics["val"][key]
        for phase in ("before", "pruned", "recovered"):
            found = estimates[f"val.{key}.{phase}"]
            assert round(found.value, found.decimals) == pytest.approx(scores[phase], abs=1e-12)
            assert found.interval() == scores[f"{phase}_ci95"]
            assert found.low <= found.value <= found.high and found.low < found.high
        before = items.figures[f"val.{key}.before"].runs
        for phase in ("pruned", "recovered"):
            after = items.figures[f"val.{key}.{phase}"].runs
            paired = difference(before, after, same_items=True)
            written = details["differences"][key][phase]
            assert written["difference"] == paired.rounded().value
            assert written["ci95"] == paired.interval()
            assert paired.value == pytest.approx(estimates[f"val.{key}.{phase}"].value
                                                 - estimates[f"val.{key}.before"].value)
            # the same pairs before and after: far narrower than two independent samples
            unpaired = difference(before, after, same_items=False)
            assert paired.high - paired.low < 0.8 * (unpaired.high - unpaired.low), key
            verdict = ("within noise" if paired.low <= 0 <= paired.high else
                       "better" if (paired.low > 0) == (key != "mlm_loss") else "worse")
            assert written["verdict"] == verdict
    change = details["differences"]["mlm_accuracy"]["pruned"]
    assert (f"pruned - before {interval_text(change['difference'], *change['ci95'], signed=True)}, "
            f"{change['verdict']}") in said
    before = metrics["val"]["mlm_accuracy"]
    assert "val (before -> pruned -> recovered after 5 steps) MLM accuracy " in said
    assert f"MLM accuracy {interval_text(before['before'], *before['before_ci95'])} -> " in said
    # the card: each val figure with its interval, and what pruning changed
    card = (workdir / "models" / "pruned" / "README.md").read_text()
    final = metrics["val"]["nsp_accuracy"]
    assert (f"| val NSP accuracy | {interval_text(final['recovered'], *final['recovered_ci95'])}"
            f" |") in card
    assert "val MLM accuracy, pruned minus before: " in card


def _latest_prune_run(client, parent_id: str):
    runs = client.search_runs(
        [client.get_run(parent_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_id}' and "
                      "attributes.run_name LIKE 'prune-%'",
        order_by=["attributes.start_time DESC"])
    return runs[0]


@pytest.mark.slow
def test_prune_with_no_head_to_remove_writes_the_model_unchanged(workdir, tmp_path):
    """prune.fraction 0 (or too small for one head): no recovery steps, the pretrained
    weights written as they were, and a speed ratio of exactly 1 (one model, timed once)."""
    out, metrics_file = tmp_path / "pruned", tmp_path / "prune.json"
    proc = run_bert("prune", "--set", "prune.fraction=0", "--out", str(out), "--metrics",
                    str(metrics_file), cwd=workdir, check=True)
    assert "removes none: the model is written unchanged, with no recovery steps" in proc.stderr
    metrics = json.loads(metrics_file.read_text())["prune"]
    details = json.loads((tmp_path / "prune_details.json").read_text())
    assert metrics["heads"]["removed"] == 0 and details["pruned_heads"] == {}
    # nothing recovered; the pruned model is the model before: no change, not even noise
    assert set(metrics["val"]["mlm_accuracy"]) == {"before", "pruned", "before_ci95",
                                                   "pruned_ci95"}
    assert details["differences"]["mlm_accuracy"] == {
        "pruned": {"difference": 0.0, "ci95": [0.0, 0.0], "verdict": "within noise"}}
    assert details["settings"]["recovery_steps"] == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(workdir / "mlflow.db"))
    child = _latest_prune_run(client, (workdir / "parent_run_id").read_text())
    assert not any(key.startswith("seconds.recovery") for key in child.data.tags)
    for kind in ("forward_sequences_per_s", "train_step_sequences_per_s"):
        assert child.data.tags[f"throughput.{kind}.speedup"] == "1"
        assert child.data.tags[f"throughput.{kind}.within_noise"] == "True"
    pretrained = load_model(workdir / "models" / "pretrained").state_dict()
    written = load_model(out).state_dict()
    assert written.keys() == pretrained.keys()
    assert all(torch.equal(written[name], pretrained[name]) for name in pretrained)


def _artifacts(client, run_id: str, folder: Path) -> dict[str, dict]:
    """The JSON files a run has under `metrics/`, by name."""
    found = {}
    for artifact in client.list_artifacts(run_id, "metrics"):
        local = client.download_artifacts(run_id, artifact.path, str(folder))
        found[Path(local).name] = json.loads(Path(local).read_text())
    return found


def test_stages_answer_bad_input_in_one_line(workdir, tmp_path):
    (tmp_path / "empty.csv").write_text("")
    proc = run_bert("finetune", "--set", f"finetune.data={tmp_path / 'empty.csv'}",
                    cwd=workdir)
    assert_one_line_error(proc, "empty.csv is empty")
    rows = [{"sentence": "a", "label": 1}]
    write_jsonl(tmp_path / "d.jsonl", rows)
    proc = run_bert("finetune", "--set", f"finetune.data={tmp_path / 'd.jsonl'}",
                    cwd=workdir)
    assert_one_line_error(proc, "no text field 'text'", "finetune.text_field")
    proc = run_bert("prune", "--set", "prune.fraction=1", cwd=workdir)
    assert_one_line_error(proc, "prune.fraction", "[0, 1)", code=2)


def test_a_task_the_tokenizer_reads_as_unk_stops_before_training(workdir, tmp_path):
    """Greek for a vocabulary of Latin letters: every word [UNK], nothing to learn from."""
    rows = [{"text": f"ένα κείμενο {'καλό' if i % 2 else 'κακό'} .", "label": i % 2}
            for i in range(20)]
    data = write_jsonl(tmp_path / "greek.jsonl", rows)
    out = tmp_path / "finetuned"
    proc = run_bert("finetune", "--set", f"finetune.data={data}", "--out", str(out),
                    "--metrics", str(tmp_path / "finetune.json"), cwd=workdir)
    assert_one_line_error(proc, "the tokenizer in data/vocab reads 48 of the 64 tokens of the "
                          "training examples of greek.jsonl as [UNK] (75%)", "trained with")
    assert not out.exists() and not (tmp_path / "finetune.json").exists()


def scores_csv(path: Path, rows: int = 200) -> Path:
    """Sentences of the tiny corpus scored by their topic and adjective: 0.0 to 5.7, most
    not whole (a similarity score's kind of label), learnable from the words."""
    rng = random.Random(0)
    topics = sorted(TOPICS)
    lines = ["text,score"]
    for _ in range(rows):
        topic, adjective = rng.randrange(len(topics)), rng.randrange(len(ADJECTIVES))
        a, b = rng.sample(TOPICS[topics[topic]].split(), 2)
        lines.append(f"the {ADJECTIVES[adjective]} {a} {rng.choice(VERBS)} the {b} .,"
                     f"{topic + adjective / 10:.1f}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_file_of_scores_is_fine_tuned_as_a_regression_as_sts_b(workdir, tmp_path):
    """auto finds the scores, trains STS-B's head (one output, squared error) and reports
    Pearson and Spearman, which transformers reproduces from the exported model alone."""
    from scipy.stats import pearsonr

    data = scores_csv(tmp_path / "scores.csv")
    out, metrics_file = tmp_path / "finetuned", tmp_path / "finetune.json"
    proc = run_bert("finetune", "--set", f"finetune.data={data}", "--set",
                    "finetune.label_field=score", "--set", "finetune.epochs=30", "--set",
                    "finetune.seeds=1", "--set", "tracking.enabled=false", "--out",
                    str(out), "--metrics", str(metrics_file), cwd=workdir,
                    check=True)
    assert "finetune (1 seed): gain in Pearson " in proc.stderr, proc.stderr
    assert "; regression (auto: the labels are numbers, not all whole) -> " in proc.stderr
    metrics = json.loads(metrics_file.read_text())["finetune"]
    details = json.loads((tmp_path / "finetune_details.json").read_text())
    assert list(metrics) == ["task", "pretrained", "scratch", "gain"]
    assert list(metrics["pretrained"]) == list(metrics["gain"]) == [
        "pearson", "pearson_ci95", "spearman", "spearman_ci95"]
    seed = details["seeds"]["42"]
    assert seed["gain"]["pearson"] == pytest.approx(
        seed["pretrained"]["pearson"] - seed["scratch"]["pearson"])
    items = read_items(metrics_file.with_name("finetune_items.json"))
    assert items.figures["gain.pearson"].runs.statistic == "pearson_gain"
    assert metrics["gain"]["pearson_ci95"] == items.figures["gain.pearson"].estimate().interval()
    assert "majority_class" not in details  # a constant guess has no correlation
    assert details["data"]["problem"] == "regression"
    assert details["data"]["label_range"] == [0.0, 5.7]
    assert details["data"]["train_examples"] == 160 and details["data"]["test_examples"] == 40
    # the topic is in the words, and both models learn it (measured: Pearson 0.93 bag of
    # words, 0.85 pretrained, 0.95 from scratch; 0.17 and 0.28 after 50 steps)
    assert details["bag_of_words"]["pearson"] > 0.8
    assert metrics["pretrained"]["pearson"] > 0.7 and metrics["scratch"]["pearson"] > 0.7

    model = transformers.BertForSequenceClassification.from_pretrained(out).eval()
    assert model.config.problem_type == "regression" and model.config.num_labels == 1
    tokenizer = transformers.BertTokenizerFast.from_pretrained(out)
    _, test = split_examples(read_examples(data, "text", None, "score"), 0.2, 42,
                             stratified=False)
    inputs = tokenizer([e.text for e in test], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**inputs).logits[:, 0].numpy()
    assert pearsonr(predicted, [float(e.label) for e in test]).statistic == pytest.approx(
        seed["pretrained"]["pearson"], abs=1e-5)


# ------------------------------------------------------------------------- 4. corpus inputs
