"""Pretraining end to end, for one process or each process of a torchrun group: open and check
the inputs (`bertcore.training.inputs`), plan where the run (re)starts (`bertcore.training.resume`,
and across BERT's two phases `bertcore.training.phases`), open the MLflow run, build the model
(new, or from an existing BERT: `bertcore.model.init_from`), batches and trainer, train
(`bertcore.training.loop`) phase 1 and, when it is on, phase 2, then write the final model and
metrics.

The caller (the pretrain stage) parses the params sections and says where things live and how
the MLflow run is labelled; nothing here reads params.yaml or knows the pipeline's layout.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import model_validator

from bertcore.common.atomic import atomic_dir, write_json
from bertcore.common.digests import file_sha256
from bertcore.common.errors import BertError, ConfigError
from bertcore.common.tracking import Tracker, TrackingConfig
from bertcore.common.validation import params_section
from bertcore.data.samples.store import SampleStore
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.config import ModelConfig
from bertcore.model.hf import WEIGHTS_NAME, export_hf, save_model
from bertcore.model.local_init import init_local_attention
from bertcore.training.batches import PretrainingBatches, eval_batches
from bertcore.training.budget import StepTiming, TimeBudget
from bertcore.training.checkpoint import Checkpoint, CheckpointDir
from bertcore.training.config import TrainConfig
from bertcore.training.devices import resolve_device
from bertcore.training.distributed import Distributed
from bertcore.training.evaluation import EvalConfig, evaluate
from bertcore.training.inputs import PretrainInputs, PretrainPaths
from bertcore.training.loop import FitResult, fit
from bertcore.training.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.phases import (
    PHASE_KEY,
    Phase2Config,
    PhaseKey,
    RunPlan,
    boundary,
    ends_phase1,
    first_epoch,
    in_phase1,
    phase2_fingerprints,
    plan_run,
    scaled_masking,
)
from bertcore.training.records import EVAL_LOG, TRAIN_LOG, TrainingRecord
from bertcore.training.resume import run_fingerprints
from bertcore.training.step import PhaseStart, StepRunner
from bertcore.training.stopping import TrainingInterrupted

log = logging.getLogger(__name__)

@params_section(frozen=True)
class PretrainConfig:
    """The params sections pretraining reads, parsed and validated (each on its own, and here
    against each other)."""

    model: ModelConfig
    masking: MaskingConfig
    train: TrainConfig
    eval: EvalConfig
    tracking: TrackingConfig
    phase2: Phase2Config = field(default_factory=Phase2Config)

    @model_validator(mode="after")
    def _phase2_after_a_fixed_phase1(self) -> PretrainConfig:
        if self.phase2.enabled and self.train.max_minutes is not None:
            raise ConfigError("phase2.enabled", "true needs a fixed phase 1: set "
                                                "train.max_minutes: null (a time budget would "
                                                "make the step phase 2 starts at depend on the "
                                                "machine)")
        return self

    def optimisation(self) -> dict[str, Any]:
        """Everything that defines the optimisation of phase 1 (recorded in checkpoints)."""
        model = dataclasses.asdict(self.model)
        if model["init_from"] is None:  # as before init_from existed: older checkpoints resume
            del model["init_from"]
        return {"model": model,
                "masking": dataclasses.asdict(self.masking),
                "train": self.train.optimisation_params()}

    def resumable(self) -> dict[str, Any]:
        """Phase 1's optimisation without the run's length (fingerprinted)."""
        return {**self.optimisation(), "train": self.train.resumable_params()}


# In the model folder: the step that made it and the run's fingerprints. Not the MLflow run:
# its id is random, and the folder is the same bytes for the same params and data. That run
# carries the weights' sha256 as the tag MODEL_TAG instead, so a later stage finds it.
RUN_INFO = "training.json"
MODEL_TAG = "model.sha256"
PHASE_TAG = "phase"  # with BERT's second phase: the MLflow tag of the phase running (1, 2)


@dataclass(frozen=True)
class RunLabels:
    """How the MLflow run is found and labelled (the caller knows the surroundings)."""

    tracking_uri: str
    run_name: str | None = None
    params: dict[str, Any] = field(default_factory=dict)  # flattened params.yaml
    tags: dict[str, Any] = field(default_factory=dict)  # git commit, DVC experiment, ...


@dataclass(frozen=True)
class PretrainReport:
    """What a finished pretraining reports."""

    metrics: dict[str, Any]  # written to paths.metrics
    details: dict[str, Any]  # written to paths.details
    val: dict[str, float]  # the last periodic evaluation (`bert evaluate` scores the model)


# Of the last logged train row: the numbers compared across runs. The rest of the row
# (learning rate, gradient norm) is in the log and its curves.
TRAIN_REPORTED = ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy")


def pretrain_report(result: FitResult, model: BertPretrainingModel,
                    second: Phase | None = None) -> PretrainReport:
    """The pretrain stage's metrics and details: the one place both are built. The val
    numbers are not in them: they are `bert evaluate`'s (metrics/eval.json), shown once.
    `second`: BERT's second phase, when it ran (the result is then the end of it)."""
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
    if second is not None:  # only then: with phase 2 off the file is what it always was
        details["phase2"] = {"first_step": second.start.step + 1,
                             "steps": second.key.total_steps - second.start.step,
                             "max_seq_length": second.max_seq_length,
                             "batch_size": second.train.batch_size}
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


@dataclass(frozen=True)
class Phase:
    """One phase of the run as the loop runs it: phase 1 (`train`), and BERT's second phase
    when it is on (`bertcore.training.phases`)."""

    number: int
    max_seq_length: int  # of its samples
    train: TrainConfig
    masking: MaskingConfig
    batches: PretrainingBatches
    val_store: SampleStore
    start: PhaseStart
    key: PhaseKey  # its checkpoints' fingerprints and params, and its last step
    meta: dict[str, Any]  # what its checkpoints record besides their position


def _batches(store: SampleStore, masking: MaskingConfig, train: TrainConfig, vocab: VocabSpec,
             dist: Distributed, device: torch.device) -> PretrainingBatches:
    return PretrainingBatches(
        store, PretrainingCollator(masking, vocab, seed=train.seed), train.batch_size,
        train.gradient_accumulation_steps, seed=train.seed, rank=dist.rank,
        world_size=dist.world_size, num_workers=train.num_workers,
        pin_memory=device.type == "cuda",
    )


def _second_phase(config: PretrainConfig, inputs: PretrainInputs, paths: PretrainPaths,
                  first: Phase, vocab: VocabSpec, dist: Distributed,
                  device: torch.device) -> Phase:
    """Phase 2 of the run, its steps and epochs numbered on from phase 1's."""
    settings = config.phase2
    train = settings.train_config(config.train)
    masking = scaled_masking(config.masking, inputs.max_seq_length, settings.max_seq_length)
    try:
        batches = _batches(inputs.phase2_train, masking, train, vocab, dist, device)
    except ConfigError as exc:  # its batch does not split over the processes
        raise exc.in_section("phase2") from None
    steps = first.key.total_steps
    start = PhaseStart(steps, first_epoch(steps, first.batches.steps_per_epoch))
    fingerprints = phase2_fingerprints(first.key.fingerprints, settings, paths.phase2_samples)
    params = {**first.key.params, "phase2": settings.optimisation_params()}
    meta = {"fingerprints": fingerprints, "params": params, "world_size": dist.world_size,
            PHASE_KEY: 2}
    return Phase(2, settings.max_seq_length, train, masking, batches, inputs.phase2_val, start,
                 PhaseKey(fingerprints, params, start.step + settings.max_steps), meta)


def _pretrain(config: PretrainConfig, paths: PretrainPaths, inputs: PretrainInputs,
              labels: RunLabels | None, dist: Distributed) -> PretrainReport | None:
    train = config.train
    device = resolve_device(train.device, dist)
    vocab = VocabSpec.from_tokens(inputs.tokens)
    init = inputs.init
    if init is not None and dist.is_main:
        log.info("model.init_from: starting from %s (%s); model.preset is not used",
                 init.path, init.describe())
    batches = _batches(inputs.train_store, config.masking, train, vocab, dist, device)
    configured_steps = train.total_steps(batches.steps_per_epoch)
    # The init model's content, hashed once (by rank 0) per start: a resume must not continue
    # a run begun from other weights.
    init_hash = dist.broadcast_object(init.fingerprint() if init and dist.is_main else None)
    fingerprints = run_fingerprints(config.resumable(), paths.vocab, paths.samples,
                                    configured_steps, init_model=init_hash,
                                    max_minutes=train.max_minutes)
    checkpoints = CheckpointDir(paths.checkpoints, keep_last=train.keep_last)
    phase1_latest = checkpoints.latest(where=in_phase1)  # its files hashed once per start
    budget = None
    total_steps = configured_steps
    if train.max_minutes is not None:  # (never with phase 2: PretrainConfig refuses it)
        val_sequences = len(inputs.val_store)
        if config.eval.max_batches is not None:
            val_sequences = min(val_sequences, config.eval.max_batches * config.eval.batch_size)
        budget = TimeBudget(train.max_minutes, train.warmup_steps, train.batch_size,
                            train.eval_every, val_sequences)
        # A budget run resumed from a checkpoint re-plans its end from the timing it recorded.
        timing = (StepTiming.from_dict(phase1_latest.meta.get("step_timing"))
                  if phase1_latest else None)
        total_steps = budget.total(configured_steps, timing) if timing else configured_steps
    first = Phase(1, inputs.max_seq_length, train, config.masking, batches, inputs.val_store,
                  PhaseStart(), PhaseKey(fingerprints, config.optimisation(), total_steps),
                  {"fingerprints": fingerprints, "params": config.optimisation(),
                   "world_size": dist.world_size})
    second = _second_phase(config, inputs, paths, first, vocab, dist, device) if (
        config.phase2.enabled) else None
    plan = plan_run(checkpoints, phase1_latest, first.key, second.key if second else None)
    if dist.is_main:
        for notice in plan.notices:
            log.warning("%s", notice)
        if plan.resume.notice and not plan.resume.extends:
            log.warning("%s", plan.resume.notice)
    resume = plan.resume.checkpoint
    # Phase 1 ended in an earlier run and phase 2 begins now (turned on since, or its params
    # changed): this run goes straight to phase 2, from phase 1's last checkpoint.
    starts_phase2 = second is not None and plan.phase == 1 and ends_phase1(resume, first.key)

    # The model: the same initial weights on every process (DDP also broadcasts rank 0's),
    # then a different dropout stream per process. From model.init_from (read by rank 0 alone:
    # DDP hands its weights to the others), what the folder lacks starts as in a fresh model
    # of this seed; a resumed run takes its weights from the checkpoint instead.
    torch.manual_seed(train.seed)
    if init is not None and resume is None and dist.is_main:
        model = init.load()
    else:
        model = BertPretrainingModel(inputs.model_config)
        if init is None and config.model.local_attention_init:
            init_local_attention(model)
    # Every generator a checkpoint captures (to resume exactly) starts from the seed too, so
    # that the same params give the same checkpoint bytes; nothing here draws from Python's or
    # numpy's global ones, but the libraries underneath may.
    torch.manual_seed(train.seed + 1 + dist.rank)
    random.seed(train.seed + 1 + dist.rank)
    np.random.seed(train.seed + 1 + dist.rank)

    # MLflow before any training: an unreachable store fails now, in one line.
    tracker = _open_tracker(config.tracking, labels, plan, checkpoints, first, second,
                            starts_phase2) if (
        dist.is_main and config.tracking.enabled and labels is not None) else None
    trainer = StepRunner(model, train, batches, device=device, dist=dist)

    def evaluator(phase: Phase) -> Callable[[BertPretrainingModel], Any] | None:
        if not len(phase.val_store):
            return None
        collator = PretrainingCollator(phase.masking, vocab, seed=config.eval.seed)
        val = eval_batches(phase.val_store, collator, config.eval.batch_size, rank=dist.rank,
                           world_size=dist.world_size)
        return lambda m: evaluate(m, val, device, trainer.autocast_dtype, dist,
                                  config.eval.max_batches)

    on_checkpoint = None
    if tracker:

        def on_checkpoint(path: Path) -> None:
            checkpoints.record_run(path, tracker.run_id)
            if config.tracking.log_checkpoints == "all":
                tracker.log_artifacts(path, f"checkpoints/{path.name}")

    replay = tracker is not None and (plan.resume.extends or starts_phase2)
    first_eval = evaluator(first)

    def run(phase: Phase, start_from: Checkpoint | None) -> FitResult:
        nonlocal replay
        previous = ({name: start_from.read_text(name) for name in (TRAIN_LOG, EVAL_LOG)}
                    if start_from else None)
        record = TrainingRecord(paths.log if dist.is_main else None,
                                paths.eval_log if dist.is_main else None, tracker, previous)
        if replay:
            record.replay()  # a new run that continues an earlier one shows the whole curve
            replay = False
        if phase is second and plan.phase == 1 and first_eval is not None:
            _close_phase1(record, first_eval, trainer, tracked=not starts_phase2)
        if tracker and second is not None:
            tracker.set_tags({PHASE_TAG: phase.number})
        return fit(trainer, record=record, checkpoints=checkpoints, meta=phase.meta,
                   evaluate=first_eval if phase is first else evaluator(phase),
                   on_checkpoint=on_checkpoint,
                   budget=budget if phase.number == 1 else None)

    try:
        if plan.phase == 1 and resume is not None:
            trainer.resume_from(resume)
            _say_resumed(trainer, plan, first.key.total_steps, dist)
        if not starts_phase2 and plan.phase == 1:
            result = run(first, resume)
        if second is not None:
            result = run(second, _enter_phase2(trainer, plan, first, second, checkpoints, dist))
    except BaseException as exc:
        if tracker:
            interrupted = isinstance(exc, KeyboardInterrupt | TrainingInterrupted)
            tracker.finish("KILLED" if interrupted else "FAILED")
        raise
    if not dist.is_main:
        return None

    last = second or first
    with atomic_dir(paths.out) as staging:
        save_model(trainer.raw_model, staging)
        write_json(staging / RUN_INFO, {"step": trainer.step,
                                        "fingerprints": last.key.fingerprints})
    report = pretrain_report(result, trainer.raw_model, second)
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


def _close_phase1(record: TrainingRecord, evaluate_fn: Callable[[BertPretrainingModel], Any],
                  trainer: StepRunner, tracked: bool) -> None:
    """Phase 1's closing evaluation in the record phase 2 goes on with. The checkpoint phase
    2 starts from may lack it (written before it, at a checkpoint step); evaluated again on
    the same weights with the same fixed masks, it is the same row. `tracked`: MLflow has it
    already (phase 1 ended in this run)."""
    rows = record.eval.rows()
    if rows and int(rows[-1]["step"]) == trainer.step:
        return
    record.log_eval(trainer.step, evaluate_fn(trainer.raw_model), track=not tracked)


def _say_resumed(trainer: StepRunner, plan: RunPlan, total_steps: int, dist: Distributed) -> None:
    if not dist.is_main:
        return
    resume = plan.resume
    phase = ", phase 2" if plan.phase == 2 else ""
    log.info("resuming from %s (step %d of %d%s)", resume.checkpoint.path, trainer.step,
             total_steps, phase)
    if resume.extends:
        before = trainer.learning_rate(trainer.step, resume.previous_total)
        log.warning("%s; the learning rate goes from %.3g to %.3g", resume.notice, before,
                    trainer.learning_rate(trainer.step))


def _enter_phase2(trainer: StepRunner, plan: RunPlan, first: Phase, second: Phase,
                  checkpoints: CheckpointDir, dist: Distributed) -> Checkpoint:
    """Switch the trainer to phase 2 and load the checkpoint it goes on from: phase 2's own
    when resuming it, else phase 1's last, read back from disk even when phase 1 just ended
    here (so this run and one that turned phase 2 on later are the same bytes). Phase 1's
    last checkpoint is kept while phase 2 runs."""
    edge = boundary(checkpoints, first.key)
    if edge is not None:
        checkpoints.pin(edge)
    start_from = plan.resume.checkpoint if plan.phase == 2 else edge
    if start_from is None:
        raise BertError(f"phase 1 left no checkpoint at its last step ({first.key.total_steps}) "
                        "for phase 2 to start from (see the warnings above): run again")
    trainer.begin_phase(second.train, second.batches, second.start)
    trainer.resume_from(start_from)
    if plan.phase == 2:
        _say_resumed(trainer, plan, second.key.total_steps, dist)
    elif dist.is_main:
        log.info("phase 2: steps %d-%d on samples of up to %d tokens (batch %d, learning rate "
                 "%g), from %s", second.start.step + 1, second.key.total_steps,
                 second.max_seq_length, second.train.batch_size, second.train.learning_rate,
                 start_from.path)
    return start_from


def _open_tracker(tracking: TrackingConfig, labels: RunLabels, plan: RunPlan,
                  checkpoints: CheckpointDir, first: Phase, second: Phase | None,
                  starts_phase2: bool) -> Tracker:
    """The MLflow run: the checkpoint's own when resuming; a new one otherwise. An extended
    run is a new run too (MLflow params cannot change inside a run, and the old run keeps the
    model it ended with), tagged with the run it continues; so is a run whose phase 2 begins
    after a phase 1 that ended in an earlier run."""
    resume = plan.resume.checkpoint
    previous_run = checkpoints.run_id(resume) if resume else None
    tags = {**labels.tags, **{f"fingerprint.{k}": v for k, v in first.key.fingerprints.items()}}
    if second is not None:
        tags.update({f"fingerprint.phase2.{k}": v for k, v in second.key.fingerprints.items()})
        tags["phase2.first_step"] = second.start.step + 1
    if plan.resume.extends:
        tags.update({"extends_run": previous_run, "extended_at_step": resume.step,
                     "extended_from_steps": plan.resume.previous_total})
    elif starts_phase2:
        tags.update({"extends_run": previous_run, "extended_at_step": resume.step})
    return Tracker.start(
        labels.tracking_uri,
        tracking.experiment,
        run_id=None if plan.resume.extends or starts_phase2 else previous_run,
        run_name=labels.run_name,
        params=labels.params,
        tags=tags,
    )
