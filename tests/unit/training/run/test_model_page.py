"""What MLflow 3's pages show of a pretraining run, read back through `MlflowClient` from a real
SQLite store: the logged model holds evaluate's and probe's results as its metrics, on the
corpus it was trained on, which is the run's training dataset with the digest of its files;
the experiment and the run have a description; the run's tags are those people search by,
the reports' baselines and counts in their JSON artifacts, not tags."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mlflow.tracking import MlflowClient

from bertcore.common.digests import fingerprint_files
from bertcore.common.report import write_report
from bertcore.common.tracking import NOTE_TAG, Tracker, TrackingTarget, sqlite_uri
from bertcore.saved.model_run import MODEL_TAG
from bertcore.saved.run_reports import MODEL_KEY, carry_reports, log_report_into, report_run
from bertcore.training.run.mlflow_run import EXPERIMENT_NOTE, MODEL_NAME, log_corpus

EVAL = {"mlm_accuracy": 0.25, "mlm_accuracy_ci95": [0.2, 0.3], "perplexity": 80.0}
EVAL_DETAILS = {"mlm_baseline_accuracy": 0.05, "pairs": 40, "intervals": {"confidence": 0.95}}
PROBE = {"builtin": {"cloze": {"p_at_1": 0.5}}}
PROBE_DETAILS = {"builtin": {"drawn_sentences": 40, "sentences": 12}}


def _pretraining_run(tmp_path: Path, mlflow_db) -> tuple[str, Tracker, Path]:
    """What `bert pretrain` leaves in the store: a run with its description, the corpus as
    its dataset, its weights' sha256 and its logged model (made here without transformers)."""
    uri = sqlite_uri(mlflow_db(tmp_path))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.txt").write_text("the cat sat on the mat.\n\nthe dog slept.\n")
    (corpus / "val.txt").write_text("a bird sang.\n")
    model = tmp_path / "pretrained"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"the weights")
    (model / "training.json").write_text(json.dumps({"step": 12}))
    run = Tracker.start(uri, "bert-pretrain", run_name="tiny",
                        tags={NOTE_TAG: "BERT (tiny) pretrained from scratch",
                              MODEL_TAG: _sha256(model)},
                        experiment_note=EXPERIMENT_NOTE)
    log_corpus(run, corpus)
    experiment = MlflowClient(uri).get_run(run.run_id).info.experiment_id
    MlflowClient(uri).create_logged_model(experiment, name=MODEL_NAME, source_run_id=run.run_id)
    return uri, run, model


def _sha256(model: Path) -> str:
    from bertcore.common.digests import file_sha256

    return file_sha256(model / "model.safetensors")


def test_the_logged_model_holds_the_results_on_its_dataset_and_the_run_few_tags(tmp_path,
                                                                                mlflow_db):
    uri, run, model = _pretraining_run(tmp_path, mlflow_db)
    weights = _sha256(model)
    metrics = tmp_path / "metrics"
    # probe's report made before the run ended (carried in), evaluate's after (its stage)
    probe_files = write_report(metrics / "probe.json", "probe", PROBE,
                               {**PROBE_DETAILS, MODEL_KEY: weights})
    assert carry_reports(run, 12, weights, {"probe": metrics / "probe.json"}) == ["probe"]
    run.finish()
    eval_files = write_report(metrics / "eval.json", "eval", EVAL,
                              {**EVAL_DETAILS, MODEL_KEY: weights})
    tracker, step = report_run(TrackingTarget(uri, "bert-pretrain"), model,
                               metrics / "eval.json", logging.getLogger("bert.evaluate"))
    assert log_report_into(tracker, step, eval_files, EVAL, "eval")

    client = MlflowClient(uri)
    finished = client.get_run(run.run_id)
    (logged,) = client.search_logged_models([finished.info.experiment_id])
    model_page = client.get_logged_model(logged.model_id)
    # the model's metrics: every result of both reports, at the run's last step
    on_model = {m.key: m for m in model_page.metrics}
    assert {key: m.value for key, m in on_model.items()} == {
        "eval_mlm_accuracy": 0.25, "eval_mlm_accuracy_ci95_low": 0.2,
        "eval_mlm_accuracy_ci95_high": 0.3, "eval_perplexity": 80.0,
        "probe_builtin_cloze_p_at_1": 0.5}
    assert {m.step for m in on_model.values()} == {12}
    assert finished.data.metrics == {key: m.value for key, m in on_model.items()}

    # the dataset: the corpus, its digest that of its files, the model's metrics on it
    (dataset_input,) = finished.inputs.dataset_inputs
    corpus = tmp_path / "corpus"
    sha256 = fingerprint_files([corpus / "train.txt", corpus / "val.txt"])
    digest = sha256[:32]  # MLflow takes 36 characters at most; the whole in the profile
    assert (dataset_input.dataset.name, dataset_input.dataset.digest) == ("corpus", digest)
    assert json.loads(dataset_input.dataset.profile)["sha256"] == sha256
    assert {(t.key, t.value) for t in dataset_input.tags} == {("mlflow.data.context",
                                                                "training")}
    assert {(m.dataset_name, m.dataset_digest) for m in on_model.values()} == {
        ("corpus", digest)}

    # descriptions, and tags people search by: the baselines and counts stay in the files
    experiment = client.get_experiment(finished.info.experiment_id)
    assert experiment.tags[NOTE_TAG] == EXPERIMENT_NOTE
    assert finished.data.tags[NOTE_TAG].startswith("BERT (tiny)")
    assert not [tag for tag in finished.data.tags
                if tag.startswith(("eval.", "probe.")) and not tag.endswith(".report.sha256")]
    assert {a.path for a in client.list_artifacts(run.run_id, "metrics")} >= {
        "metrics/eval_details.json", "metrics/probe_details.json"}
    assert [f.name for f in eval_files + probe_files] == [
        "eval.json", "eval_details.json", "probe.json", "probe_details.json"]


def test_a_user_s_experiment_description_is_kept(tmp_path, mlflow_db):
    uri = sqlite_uri(mlflow_db(tmp_path))
    client = MlflowClient(uri)
    experiment = client.create_experiment("bert-pretrain")
    client.set_experiment_tag(experiment, NOTE_TAG, "my own words")
    Tracker.start(uri, "bert-pretrain", experiment_note=EXPERIMENT_NOTE).finish()
    assert client.get_experiment(experiment).tags[NOTE_TAG] == "my own words"
