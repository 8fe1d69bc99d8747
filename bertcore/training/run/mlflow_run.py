"""What a pretraining's MLflow run carries besides its curves: its name, tags and description
(`run_note`; its experiment's, `EXPERIMENT_NOTE`) and the corpus as its training dataset
(`log_corpus`) when it opens; after each checkpoint, which run wrote it; at the end the
weights' sha256 (`MODEL_TAG`, by which a later stage finds the run), the run's length, the
last checkpoint, the exported model as an MLflow Model (fill-mask with its scores, the
Hugging Face folder with its model card in it: `common/mlflow_models.py`) and the reports
already made from these weights (`run_reports.carry_reports`), their results the model's
metrics too."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertcore.common.digests import file_sha256, fingerprint_files
from bertcore.common.tracking import Tracker
from bertcore.data.corpus.splits import SPLITS, split_file
from bertcore.model.config import BertConfig, ModelConfig
from bertcore.saved.card import CARD_NAME, card_text
from bertcore.saved.hf import WEIGHTS_NAME, export_hf
from bertcore.saved.model_run import MODEL_TAG
from bertcore.saved.run_reports import carry_reports
from bertcore.training.checkpoints.checkpoint import CheckpointDir
from bertcore.training.checkpoints.identity import run_name
from bertcore.training.config import PretrainConfig
from bertcore.training.loop.step import StepRunner
from bertcore.training.loop.trainer import TrainResult
from bertcore.training.run.card import pretrained_facts, read_report
from bertcore.training.run.charts import chart_paths
from bertcore.training.run.inputs import PretrainPaths
from bertcore.training.run.phases import Phase, RunPlan

MODEL_NAME = "hf_model"  # the logged MLflow Model: runs:/<run id>/hf_model
COMMIT_TAG = "mlflow.source.git.commit"
EXPERIMENT_NOTE = (
    "BERT pretrained by `bert pretrain` (the DVC pipeline's stages): one run per pretraining, "
    "its model logged as `hf_model`, with the evaluate and probe results of that model; "
    "finetune, prune and glue as its child runs. Runs are found by the tag model.sha256, the "
    "sha256 of the weights they wrote.")
DIGEST_LENGTH = 32  # of a dataset's digest: MLflow 3.17 takes 36 characters at most
PHASE_TAG = "phase"  # with BERT's second phase: the MLflow tag of the phase running (1, 2)


def default_run_name(model: ModelConfig, max_minutes: float | None,
                     phases: Sequence[Phase]) -> str:
    """The MLflow run's name when the caller gives none: MLflow's own random names come
    from Python's global generator, which the run seeds, so every run with the same
    train.seed would be called alike; this one says what differs (`identity.run_name`)."""
    init = model.init_from
    name = (Path(init).resolve().name or init) if init else model.preset
    return run_name(name, [phase.identity for phase in phases], max_minutes)


def run_tags(plan: RunPlan, phases: Sequence[Phase], previous_run: str | None
             ) -> dict[str, Any]:
    """The MLflow run's tags: the phases' fingerprints, and the run it continues."""
    first, *later = phases
    tags = {f"fingerprint.{k}": v for k, v in first.identity.fingerprints.items()}
    for phase in later:
        prefix = f"phase{phase.number}"
        tags.update({f"fingerprint.{prefix}.{k}": v
                     for k, v in phase.identity.fingerprints.items()})
        tags[f"{prefix}.first_step"] = phase.length.start + 1
    if plan.continues_earlier_run:
        tags.update({"extends_run": previous_run,
                     "extended_at_step": plan.resume.checkpoint.step})
    if plan.resume.extends:
        tags["extended_from_steps"] = plan.resume.previous_total
    return tags


def run_note(model: ModelConfig, phases: Sequence[Phase]) -> str:
    """The run's description (MLflow's `mlflow.note.content`): what it trained, where its
    model and results are."""
    init = f"from {model.init_from}" if model.init_from else "from scratch"
    steps = " then ".join(f"{phase.length.planned - phase.length.start} steps at length "
                          f"{phase.max_seq_length}" for phase in phases)
    return (f"BERT ({model.preset}) pretrained {init} with MLM and NSP: {steps}.\n\n"
            f"The model is the MLflow Model `{MODEL_NAME}` (fill-mask; its page holds the "
            "held-out and probe results). Curves: train/ and val/ metrics; each stage's "
            "report, its baselines and counts: the JSON files under metrics/ (artifacts).")


def log_corpus(tracker: Tracker, corpus: Path | None) -> None:
    """The corpus the samples were made of as the run's training dataset: its digest the
    sha256 of its train and val files (`digests.fingerprint_files`) cut to MLflow's longest
    digest (`DIGEST_LENGTH`), whole in its profile with the files' sizes; nothing without it."""
    files = [split_file(corpus, split) for split in SPLITS] if corpus else []
    if tracker.run_id is None or not files or not all(path.is_file() for path in files):
        return
    sha256 = fingerprint_files(files)
    tracker.log_dataset(corpus.name or "corpus", sha256[:DIGEST_LENGTH], str(corpus.resolve()),
                        "training", {"sha256": sha256,
                                     **{name.name: name.stat().st_size for name in files}})


def checkpoint_written(checkpoints: CheckpointDir, tracker: Tracker, log_all: bool,
                       path: Path) -> None:
    """After each checkpoint: note which MLflow run wrote it (and log it, with
    tracking.log_checkpoints: all); nothing when nothing is tracked."""
    if tracker.run_id is None:
        return
    checkpoints.record_run(path, tracker.run_id)
    if log_all:
        tracker.log_artifacts(path, f"checkpoints/{path.name}")


def finish_run(tracker: Tracker, config: PretrainConfig, paths: PretrainPaths,
               runner: StepRunner, result: TrainResult) -> None:
    """Tag the MLflow run with the weights' sha256 (see `model.pretrained.RUN_INFO`) and the
    run's length, log the reports already made from these weights, the last checkpoint and
    the exported model, and close it; nothing when nothing is tracked."""
    if tracker.run_id is None:
        return
    weights = file_sha256(paths.out / WEIGHTS_NAME)
    # the length of the run: what ran, and where a time budget planned it to end
    tracker.set_tags({MODEL_TAG: weights,
                      "train.steps_run": result.steps,
                      "train.planned_steps": result.planned_steps,
                      **({"train.seconds_per_step": result.step_timing.step_s}
                         if result.step_timing else {})})
    for chart in chart_paths(paths.log).values():
        if chart.is_file():
            tracker.log_artifact(chart, "plots")
    final = result.checkpoint  # this run's last (not phase 2's, left with it off)
    if config.tracking.log_checkpoints == "last" and final is not None:
        tracker.log_artifacts(final, f"checkpoints/{final.name}")
    with tempfile.TemporaryDirectory() as tmp:  # the folder is logged whole: no path of it
        model = runner.raw_model.cpu()
        export_hf(model, tmp, paths.vocab)
        (Path(tmp) / CARD_NAME).write_text(model_card(
            model.config, config, paths, weights, tracker.tags().get(COMMIT_TAG)),
            encoding="utf-8")
        tracker.log_transformers_model(tmp, "fill-mask", MODEL_NAME)
    # after the model: their results are its metrics too (its page in MLflow 3)
    carry_reports(tracker, runner.step, weights, paths.reports)
    tracker.finish()


def model_card(model: BertConfig, config: PretrainConfig, paths: PretrainPaths, weights: str,
               commit: str | None) -> str:
    """The logged model's card: the exported folder's (`run/card.py`) with the reports made
    from these weights so far, the pretraining params and the git commit."""
    reports = {"pretrain": (paths.metrics, "pretrain", weights),
               **{group: (path, group, weights) for group, path in paths.reports.items()}}
    found = {group: report for group, args in reports.items()
             if (report := read_report(*args)) is not None}
    reproduce = {name: dataclasses.asdict(getattr(config, name))
                 for name in ("model", "masking", "train", "phase2")}
    return card_text(pretrained_facts(model, "models/hf", found, reproduce), commit)
