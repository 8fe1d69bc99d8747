"""Pretraining end to end, for one process or each process of a torchrun group: open and check
the inputs, resume or start fresh (`bertcore.training.resume`), open the MLflow run, build the model
(new, or from an existing BERT: `bertcore.model.init_from`), batches and trainer, train
(`bertcore.training.loop`), then write the final model and metrics.

The caller (the pretrain stage) parses the params sections and says where things live and how
the MLflow run is labelled; nothing here reads params.yaml or knows the pipeline's layout.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertcore.common.atomic import atomic_dir, write_json
from bertcore.common.digests import file_sha256
from bertcore.common.errors import BertError
from bertcore.common.tracking import Tracker, TrackingConfig
from bertcore.data.samples.store import SampleStore, check_vocab, read_meta
from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertConfig, BertForPretraining
from bertcore.model.config import ModelParams
from bertcore.model.hf import WEIGHTS_NAME, export_hf, save_model
from bertcore.model.init_from import InitModel
from bertcore.model.local_init import init_local_attention
from bertcore.training.batches import PretrainingBatches, eval_batches
from bertcore.training.budget import StepTiming, TimeBudget
from bertcore.training.checkpoint import CheckpointDir
from bertcore.training.config import TrainConfig
from bertcore.training.devices import resolve_device
from bertcore.training.distributed import Distributed
from bertcore.training.evaluation import EvalConfig, evaluate
from bertcore.training.loop import FitResult, fit
from bertcore.training.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.records import EVAL_LOG, TRAIN_LOG, TrainingRecord
from bertcore.training.resume import ResumePlan, plan_resume, run_fingerprints
from bertcore.training.schedule import learning_rate
from bertcore.training.step import Trainer
from bertcore.training.stopping import TrainingInterrupted

log = logging.getLogger(__name__)

# In the model folder: the step that made it and the run's fingerprints. Not the MLflow run:
# its id is random, and the folder is the same bytes for the same params and data. That run
# carries the weights' sha256 as the tag MODEL_TAG instead, so a later stage finds it.
RUN_INFO = "training.json"
MODEL_TAG = "model.sha256"


@dataclass(frozen=True)
class PretrainPaths:
    """What pretraining reads (samples, vocab, checkpoints) and writes."""

    samples: Path
    vocab: Path
    checkpoints: Path
    out: Path
    metrics: Path  # what training reached, compared across runs (dvc exp show)
    details: Path  # counts beside it (not compared)
    log: Path
    eval_log: Path


@dataclass(frozen=True)
class PretrainConfig:
    """The params sections pretraining reads, parsed and validated."""

    model: ModelParams
    masking: MaskingConfig
    train: TrainConfig
    eval: EvalConfig
    tracking: TrackingConfig

    def optimisation(self) -> dict[str, Any]:
        """Everything that defines the optimisation (recorded in checkpoints)."""
        model = dataclasses.asdict(self.model)
        if model["init_from"] is None:  # as before init_from existed: older checkpoints resume
            del model["init_from"]
        return {"model": model,
                "masking": dataclasses.asdict(self.masking),
                "train": self.train.optimisation_params()}

    def resumable(self) -> dict[str, Any]:
        """The optimisation without the run's length (fingerprinted)."""
        return {**self.optimisation(), "train": self.train.resumable_params()}


@dataclass(frozen=True)
class RunLabels:
    """How the MLflow run is found and labelled (the caller knows the surroundings)."""

    tracking_uri: str
    run_name: str | None = None
    params: dict[str, Any] = field(default_factory=dict)  # flattened params.yaml
    tags: dict[str, Any] = field(default_factory=dict)  # git commit, DVC experiment, ...


@dataclass(frozen=True)
class PretrainInputs:
    """The opened inputs, all checked before anything slow."""

    train_store: SampleStore
    val_store: SampleStore
    tokens: list[str]
    model_config: BertConfig
    init: InitModel | None = None  # the BERT to start from (model.init_from)

    @classmethod
    def open(cls, config: PretrainConfig, paths: PretrainPaths) -> PretrainInputs:
        meta = read_meta(paths.samples)
        check_vocab(paths.samples, paths.vocab)
        tokens = read_vocab(paths.vocab)
        init = InitModel.open(config.model) if config.model.init_from else None
        if init is not None:
            init.check_vocab(tokens, paths.vocab)
            model_config = init.config
        else:
            model_config = config.model.to_config(vocab_size=len(tokens))
        if meta.get("max_seq_length", 0) > model_config.max_position_embeddings:
            fix = (" (from model.init_from): lower" if init else
                   ": raise model.max_position_embeddings or lower")
            raise BertError(
                f"samples are up to {meta['max_seq_length']} tokens but the model has "
                f"max_position_embeddings={model_config.max_position_embeddings}{fix} "
                "samples.max_seq_length"
            )
        return cls(SampleStore(paths.samples / "train"), SampleStore(paths.samples / "val"),
                   tokens, model_config, init)


@dataclass(frozen=True)
class PretrainReport:
    """What a finished pretraining reports."""

    metrics: dict[str, Any]  # written to paths.metrics
    details: dict[str, Any]  # written to paths.details
    val: dict[str, float]  # the last periodic evaluation (`bert evaluate` scores the model)


# Of the last logged train row: the numbers compared across runs. The rest of the row
# (learning rate, gradient norm) is in the log and its curves.
TRAIN_REPORTED = ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy")


def pretrain_report(result: FitResult, model: BertForPretraining) -> PretrainReport:
    """The pretrain stage's metrics and details: the one place both are built. The val
    numbers are not in them: they are `bert evaluate`'s (metrics/eval.json), shown once."""
    metrics = {
        "steps": result.steps,
        "train": {k: result.last_train[k] for k in TRAIN_REPORTED if k in result.last_train},
    }
    timing = result.step_timing
    details = {
        "tokens_seen": result.tokens_seen,
        "skipped_steps": result.skipped_steps,
        "parameters": model.num_parameters(),
        # train.max_minutes: where the run was planned to end, from which timing
        "planned_steps": result.planned_steps,
        "seconds_per_step": round(timing.step_s, 6) if timing else None,
        "timed_steps": f"{timing.timed_from}-{timing.plan_step}" if timing else None,
    }
    val = result.last_eval.to_dict() if result.last_eval else {}
    return PretrainReport(metrics, details, val)


def run_pretraining(config: PretrainConfig, paths: PretrainPaths,
                    labels: RunLabels | None = None) -> PretrainReport | None:
    """Pretrain; returns what was reported (on rank 0; None elsewhere).
    `labels`: where and how to record the MLflow run (with tracking.enabled)."""
    inputs = PretrainInputs.open(config, paths)  # checked before anything slow
    device = resolve_device(config.train.device)
    dist = Distributed.from_env(device.type)
    try:
        # One run at a time in a checkpoint folder (rank 0 holds the lock for its run).
        with CheckpointDir(paths.checkpoints).lock(enabled=dist.is_main):
            return _pretrain(config, paths, inputs, labels, dist)
    finally:
        dist.close()


def _pretrain(config: PretrainConfig, paths: PretrainPaths, inputs: PretrainInputs,
              labels: RunLabels | None, dist: Distributed) -> PretrainReport | None:
    train = config.train
    device = resolve_device(train.device, dist)
    vocab = VocabSpec.from_tokens(inputs.tokens)
    init = inputs.init
    if init is not None and dist.is_main:
        log.info("model.init_from: starting from %s (%s); model.preset is not used",
                 init.path, init.describe())
    batches = PretrainingBatches(
        inputs.train_store, PretrainingCollator(config.masking, vocab, seed=train.seed),
        train.batch_size, train.gradient_accumulation_steps, seed=train.seed, rank=dist.rank,
        world_size=dist.world_size, num_workers=train.num_workers,
        pin_memory=device.type == "cuda",
    )
    configured_steps = train.total_steps(batches.steps_per_epoch)
    # The init model's content, hashed once (by rank 0) per start: a resume must not continue
    # a run begun from other weights.
    init_hash = dist.broadcast_object(init.fingerprint() if init and dist.is_main else None)
    fingerprints = run_fingerprints(config.resumable(), paths.vocab, paths.samples,
                                    configured_steps, init_model=init_hash,
                                    max_minutes=train.max_minutes)
    checkpoints = CheckpointDir(paths.checkpoints, keep_last=train.keep_last)
    budget = None
    if train.max_minutes is not None:
        val_sequences = len(inputs.val_store)
        if config.eval.max_batches is not None:
            val_sequences = min(val_sequences, config.eval.max_batches * config.eval.batch_size)
        budget = TimeBudget(train.max_minutes, train.warmup_steps, train.batch_size,
                            train.eval_every, val_sequences)
    # A budget run resumed from a checkpoint re-plans its end from the timing it recorded.
    latest = checkpoints.latest()
    timing = StepTiming.from_dict(latest.meta.get("step_timing")) if latest else None
    total_steps = budget.total(configured_steps, timing) if budget and timing else configured_steps
    plan = plan_resume(latest, fingerprints, config.optimisation(), total_steps)
    if plan.notice and dist.is_main and not plan.extends:
        log.warning("%s", plan.notice)

    # The model: the same initial weights on every process (DDP also broadcasts rank 0's),
    # then a different dropout stream per process. From model.init_from (read by rank 0 alone:
    # DDP hands its weights to the others), what the folder lacks starts as in a fresh model
    # of this seed; a resumed run takes its weights from the checkpoint instead.
    torch.manual_seed(train.seed)
    if init is not None and plan.checkpoint is None and dist.is_main:
        model = init.load()
    else:
        model = BertForPretraining(inputs.model_config)
        if init is None and config.model.local_attention_init:
            init_local_attention(model)
    # Every generator a checkpoint captures (to resume exactly) starts from the seed too, so
    # that the same params give the same checkpoint bytes; nothing here draws from Python's or
    # numpy's global ones, but the libraries underneath may.
    torch.manual_seed(train.seed + 1 + dist.rank)
    random.seed(train.seed + 1 + dist.rank)
    np.random.seed(train.seed + 1 + dist.rank)

    # MLflow before any training: an unreachable store fails now, in one line.
    tracker = _open_tracker(config.tracking, labels, plan, fingerprints, checkpoints) if (
        dist.is_main and config.tracking.enabled and labels is not None) else None

    trainer = Trainer(model, train, batches, device=device, dist=dist)
    resume = plan.checkpoint
    if resume is not None:
        trainer.resume_from(resume)
        if dist.is_main:
            log.info("resuming from %s (step %d of %d)", resume.path, trainer.step, total_steps)
            if plan.extends:
                before = learning_rate(train.learning_rate, trainer.step, train.warmup_steps,
                                       plan.previous_total)
                log.warning("%s; the learning rate goes from %.3g to %.3g", plan.notice,
                            before, trainer.learning_rate(trainer.step))

    evaluate_fn = None
    if len(inputs.val_store):
        collator = PretrainingCollator(config.masking, vocab, seed=config.eval.seed)
        val = eval_batches(inputs.val_store, collator, config.eval.batch_size, rank=dist.rank,
                           world_size=dist.world_size)

        def evaluate_fn(m):
            return evaluate(m, val, device, trainer.autocast_dtype, dist,
                            config.eval.max_batches)

    previous = {name: resume.read_text(name) for name in (TRAIN_LOG, EVAL_LOG)} if resume else None
    record = TrainingRecord(paths.log if dist.is_main else None,
                            paths.eval_log if dist.is_main else None, tracker, previous)
    if tracker and plan.extends:
        record.replay()  # the new run shows the whole curve
    meta = {"fingerprints": fingerprints, "params": config.optimisation(),
            "world_size": dist.world_size}
    on_checkpoint = None
    if tracker:

        def on_checkpoint(path: Path) -> None:
            checkpoints.record_run(path, tracker.run_id)
            if config.tracking.log_checkpoints == "all":
                tracker.log_artifacts(path, f"checkpoints/{path.name}")

    try:
        result = fit(trainer, record=record, checkpoints=checkpoints, meta=meta,
                     evaluate=evaluate_fn, on_checkpoint=on_checkpoint, budget=budget)
    except BaseException as exc:
        if tracker:
            interrupted = isinstance(exc, KeyboardInterrupt | TrainingInterrupted)
            tracker.finish("KILLED" if interrupted else "FAILED")
        raise
    if not dist.is_main:
        return None

    with atomic_dir(paths.out) as staging:
        save_model(trainer.raw_model, staging)
        write_json(staging / RUN_INFO, {"step": trainer.step, "fingerprints": fingerprints})
    report = pretrain_report(result, trainer.raw_model)
    write_json(paths.metrics, report.metrics, sort_keys=False)
    write_json(paths.details, report.details, sort_keys=False)
    if tracker:
        # the length of the run: what ran, and where a time budget planned it to end
        tracker.set_tags({MODEL_TAG: file_sha256(paths.out / WEIGHTS_NAME),  # see RUN_INFO
                          "train.steps_run": result.steps,
                          "train.planned_steps": result.planned_steps,
                          **({"train.seconds_per_step": result.step_timing.step_s}
                             if result.step_timing else {})})
        final = checkpoints.latest()
        if config.tracking.log_checkpoints == "last" and final is not None:
            tracker.log_artifacts(final.path, f"checkpoints/{final.path.name}")
        with tempfile.TemporaryDirectory() as tmp:
            export_hf(trainer.raw_model.cpu(), tmp, paths.vocab)
            tracker.log_artifacts(tmp, "hf_model")
        tracker.finish()
    return report


def _open_tracker(tracking: TrackingConfig, labels: RunLabels, plan: ResumePlan,
                  fingerprints: dict[str, str], checkpoints: CheckpointDir) -> Tracker:
    """The MLflow run: the checkpoint's own when resuming; a new one otherwise. An extended
    run is a new run too (MLflow params cannot change inside a run, and the old run keeps the
    model it ended with), tagged with the run it continues."""
    resume = plan.checkpoint
    previous_run = checkpoints.run_id(resume) if resume else None
    tags = {**labels.tags, **{f"fingerprint.{k}": v for k, v in fingerprints.items()}}
    if plan.extends:
        tags.update({"extends_run": previous_run, "extended_at_step": resume.step,
                     "extended_from_steps": plan.previous_total})
    return Tracker.start(
        labels.tracking_uri,
        tracking.experiment,
        run_id=None if plan.extends else previous_run,
        run_name=labels.run_name,
        params=labels.params,
        tags=tags,
    )
