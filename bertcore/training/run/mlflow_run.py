"""The pretraining run's recorder: everything `bert pretrain` puts into its MLflow run is
decided here (what evaluate and probe add to it, and the reports it carries, is
`bertcore.saved.run_reports`'s), as transformers' `MLflowCallback` keeps it in one class.

`PretrainRecorder.start` opens the run (rank 0, tracking on; else a `NullRecorder` that says
why not, so no caller asks): its name, params (the resolved config, flattened, beside the
other sections of params.yaml), tags and description (`run_note`; its experiment's,
`EXPERIMENT_NOTE`) and the corpus as its training dataset (`log_corpus`). While it trains:
each row of the train and eval logs under its MLflow name, with the speed the files leave out
(`log_train`, `log_eval`: the `RecordMirror` of the run's `TrainingRecord`), the phase
running, and after each checkpoint which run wrote it (`on_checkpoint`). At the end
(`finish`): the weights' sha256 (`MODEL_TAG`, by which a later stage finds the run), the run's
length, the charts, the last checkpoint, the exported model as an MLflow Model (fill-mask
with its scores, the Hugging Face folder with its model card in it:
`common/mlflow_models.py`) and the reports already made from these weights
(`run_reports.carry_reports`), their results the model's metrics too."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bertcore.common.digests import file_sha256, fingerprint_files
from bertcore.common.dotted import flatten
from bertcore.common.tracking import NOTE_TAG, Tracker, TrackingTarget
from bertcore.data.corpus.splits import SPLITS, split_file
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.config import BertConfig, ModelConfig
from bertcore.saved.card import CARD_NAME, card_text
from bertcore.saved.hf import WEIGHTS_NAME, export_hf
from bertcore.saved.model_run import MODEL_TAG
from bertcore.saved.run_reports import carry_reports
from bertcore.training.checkpoints.identity import run_name
from bertcore.training.config import PretrainConfig
from bertcore.training.loop.records import EVAL_COLUMNS, RecordMirror
from bertcore.training.loop.stopping import TrainingInterrupted
from bertcore.training.loop.trainer import TrainResult
from bertcore.training.run.card import pretrained_facts, read_report
from bertcore.training.run.charts import chart_paths
from bertcore.training.run.inputs import PretrainPaths
from bertcore.training.run.phases import Phase, RunPlan
from bertcore.training.run.plan import PretrainingPlan

MODEL_NAME = "hf_model"  # the logged MLflow Model: runs:/<run id>/hf_model
COMMIT_TAG = "mlflow.source.git.commit"
EXPERIMENT_NOTE = (
    "BERT pretrained by `bert pretrain` (the DVC pipeline's stages): one run per pretraining, "
    "its model logged as `hf_model`, with the evaluate and probe results of that model; "
    "finetune, prune and glue as its child runs. Runs are found by the tag model.sha256, the "
    "sha256 of the weights they wrote.")
DIGEST_LENGTH = 32  # of a dataset's digest: MLflow 3.17 takes 36 characters at most
PHASE_TAG = "phase"  # with BERT's second phase: the MLflow tag of the phase running (1, 2)


class NullRecorder(RecordMirror):
    """The recorder of a run that is not tracked: it logs nothing, and says why (`reason`)."""

    def __init__(self, reason: str):
        self.reason = reason

    def on_phase(self, number: int) -> None:
        """Nothing: no run to tag."""

    def on_checkpoint(self, path: Path) -> None:
        """Nothing: no run wrote it."""

    def finish(self, result: TrainResult, model: BertPretrainingModel, step: int) -> None:
        """Nothing: no run to end."""

    def fail(self, error: BaseException) -> None:
        """Nothing: no run to end."""


class PretrainRecorder(RecordMirror):
    """One pretraining's MLflow run (`tracker`), from its opening to its end."""

    def __init__(self, tracker: Tracker, plan: PretrainingPlan):
        self.tracker, self.plan = tracker, plan

    @classmethod
    def start(cls, plan: PretrainingPlan, target: TrackingTarget | None
              ) -> PretrainRecorder | NullRecorder:
        """The run's recorder: the checkpoint's run when resuming, else a new run (an
        extended run is a new one: MLflow params cannot change inside a run, and the old run
        keeps the model it ended with; tagged with the run it continues, as is a run whose
        phase 2 begins after a phase 1 that ended in an earlier run). Opened before any
        training: a store that fails is a BertError now, in one line. A `NullRecorder` with
        its reason on the other processes and with tracking off."""
        reason = untracked_reason(plan, target)
        if reason is not None:
            return NullRecorder(reason)
        config, resume = plan.config, plan.start.resume.checkpoint
        previous_run = plan.checkpoints.run_id(resume) if resume else None
        tracker = Tracker.start(
            target.uri,
            config.tracking.experiment,
            run_id=None if plan.start.continues_earlier_run else previous_run,
            run_name=target.dvc_experiment or default_run_name(
                config.model, config.train.max_minutes, list(plan.phases)),
            params=run_params(config, target.params, len(plan.inputs.tokens)),
            tags={**target.source, "DVC_EXP_NAME": target.dvc_experiment,
                  "DVC_STAGE": target.dvc_stage,
                  **run_tags(plan.start, plan.phases, previous_run),
                  NOTE_TAG: run_note(config.model, plan.phases)},
            experiment_note=EXPERIMENT_NOTE,
        )
        log_corpus(tracker, plan.paths.corpus)
        return cls(tracker, plan)

    def log_train(self, row: Mapping[str, Any], tokens_per_s: float | None = None) -> None:
        """A train row as `train/<column>` (the learning rate as `lr`) and `epoch`, with the
        speed: `train/tokens_per_s` and `tokens_per_s_per_process`."""
        speed = {} if tokens_per_s is None else {
            "train/tokens_per_s": tokens_per_s,
            "tokens_per_s_per_process": tokens_per_s / self.plan.dist.world_size}
        metrics = {("lr" if key == "learning_rate" else f"train/{key}"): value
                   for key, value in row.items() if key not in ("step", "epoch")}
        self.tracker.log_metrics({**metrics, **speed, "epoch": row.get("epoch")},
                                 step=int(row["step"]))

    def log_eval(self, step: int, values: Mapping[str, Any]) -> None:
        """An eval row as `val/<column>`, the columns without a value (probes that did not
        run) left out."""
        self.tracker.log_metrics({f"val/{key}": values[key] for key in EVAL_COLUMNS[1:]
                                  if values.get(key) is not None}, step=step)

    def on_phase(self, number: int) -> None:
        """The phase now training, with BERT's second phase on (the tag `phase`)."""
        if len(self.plan.phases) > 1:
            self.tracker.set_tags({PHASE_TAG: number})

    def on_checkpoint(self, path: Path) -> None:
        """After each checkpoint: note in it which MLflow run wrote it, and log it with
        tracking.log_checkpoints: all."""
        self.plan.checkpoints.record_run(path, self.tracker.run_id)
        if self.plan.config.tracking.log_checkpoints == "all":
            self.tracker.log_artifacts(path, f"checkpoints/{path.name}")

    def fail(self, error: BaseException) -> None:
        """End the run KILLED (interrupted) or FAILED, as `error` stopped it."""
        interrupted = isinstance(error, KeyboardInterrupt | TrainingInterrupted)
        self.tracker.finish("KILLED" if interrupted else "FAILED")

    def finish(self, result: TrainResult, model: BertPretrainingModel, step: int) -> None:
        """Tag the run with the weights' sha256 (see `model.pretrained.RUN_INFO`) and its
        length, log its charts, the reports already made from these weights, the last
        checkpoint and the exported model (`model`, moved to the CPU), and end it."""
        config, paths, tracker = self.plan.config, self.plan.paths, self.tracker
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
            model = model.cpu()
            export_hf(model, tmp, paths.vocab)
            (Path(tmp) / CARD_NAME).write_text(model_card(
                model.config, config, paths, weights, tracker.tags().get(COMMIT_TAG)),
                encoding="utf-8")
            tracker.log_transformers_model(tmp, "fill-mask", MODEL_NAME)
        # after the model: their results are its metrics too (its page in MLflow 3)
        carry_reports(tracker, step, weights, paths.reports)
        tracker.finish()


def untracked_reason(plan: PretrainingPlan, target: TrackingTarget | None) -> str | None:
    """Why the run is not tracked (None: it is): rank 0 alone records it, and only with
    tracking on and a store to record it in."""
    if not plan.dist.is_main:
        return f"process {plan.dist.rank} of {plan.dist.world_size}: rank 0 records the run"
    if not plan.config.tracking.enabled:
        return "tracking.enabled is false"
    if target is None:
        return "no MLflow store was given to record it in"
    return None


def run_params(config: PretrainConfig, beside: Mapping[str, Any], vocab_size: int
               ) -> dict[str, Any]:
    """The run's params, under their dotted names: each section of `config` as it resolved
    (the user's values, the recipe's, the defaults), the sections `beside` it (the rest of
    params.yaml) as given, and the size of the vocabulary (`vocab.vocab_size_actual`: what
    vocab_size auto chose)."""
    resolved = {field.name: dataclasses.asdict(getattr(config, field.name))
                for field in dataclasses.fields(config)}
    return {**flatten({**beside, **resolved}), "vocab.vocab_size_actual": vocab_size}


def default_run_name(model: ModelConfig, max_minutes: float | None,
                     phases: Sequence[Phase]) -> str:
    """The MLflow run's name when the caller gives none: MLflow's own random names come
    from Python's global generator, which the run seeds, so every run with the same
    train.seed would be called alike; this one says what differs (`identity.run_name`)."""
    init = model.init_from
    name = (Path(init).resolve().name or init) if init else model.preset
    return run_name(name, [phase.identity for phase in phases],
                    [phase.end - phase.start for phase in phases], max_minutes)


def run_tags(plan: RunPlan, phases: Sequence[Phase], previous_run: str | None
             ) -> dict[str, Any]:
    """The MLflow run's tags: the phases' fingerprints, and the run it continues."""
    first, *later = phases
    tags = {f"fingerprint.{k}": v for k, v in first.identity.fingerprints.items()}
    for phase in later:
        prefix = f"phase{phase.number}"
        tags.update({f"fingerprint.{prefix}.{k}": v
                     for k, v in phase.identity.fingerprints.items()})
        tags[f"{prefix}.first_step"] = phase.start + 1
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
    steps = " then ".join(f"{phase.end - phase.start} steps at length "
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
    if not files or not all(path.is_file() for path in files):
        return
    sha256 = fingerprint_files(files)
    tracker.log_dataset(corpus.name or "corpus", sha256[:DIGEST_LENGTH], str(corpus.resolve()),
                        "training", {"sha256": sha256,
                                     **{name.name: name.stat().st_size for name in files}})


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
