"""Pretraining end to end, for one process or each process of a torchrun group. The story,
top to bottom:

  run_pretraining     open and check the inputs (`bertcore.training.inputs`)
  plan_pretraining    build each phase and its identity (`bertcore.training.identity`), and
                      plan where the run (re)starts (`bertcore.training.phases.plan_run`)
  PretrainingRun      .train: build the model (new, or from an existing BERT:
                      `bertcore.model.init_from`), open the MLflow run, train phase 1 and,
                      when it is on, phase 2 (`bertcore.training.loop`), then write the final
                      model and metrics

The caller (the pretrain stage) parses the params sections and says where things live and how
the MLflow run is labelled; nothing here reads params.yaml or knows the pipeline's layout.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from bertcore.common.atomic import atomic_dir, write_json
from bertcore.common.errors import ConfigError
from bertcore.common.tracking import Tracker
from bertcore.data.samples.store import SampleStore
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.hf import save_model
from bertcore.model.local_init import init_local_attention
from bertcore.training.batches import PretrainingBatches
from bertcore.training.budget import StepTiming, TimeBudget
from bertcore.training.checkpoint import Checkpoint, CheckpointDir
from bertcore.training.config import MaskingConfig, PretrainConfig, TrainConfig
from bertcore.training.cpu import cpu_record
from bertcore.training.devices import device_name, resolve_device
from bertcore.training.distributed import Distributed
from bertcore.training.evaluation import evaluate, val_batches
from bertcore.training.identity import in_phase1, phase1_identity, phase2_identity
from bertcore.training.inputs import PretrainInputs, PretrainPaths
from bertcore.training.lineage import left_notice, replacing_notice
from bertcore.training.loop import Trainer, TrainResult
from bertcore.training.masking import PretrainingCollator, VocabSpec
from bertcore.training.mlflow_run import (
    PHASE_TAG,
    checkpoint_written,
    default_run_name,
    finish_run,
    run_tags,
)
from bertcore.training.order import LengthBins
from bertcore.training.phases import (
    Phase,
    RunPlan,
    close_phase1,
    enter_phase2,
    phase2_start,
    plan_run,
    scaled_masking,
)
from bertcore.training.records import EVAL_LOG, TRAIN_LOG, TrainingRecord
from bertcore.training.report import PretrainReport, pretrain_report
from bertcore.training.step import PhaseStart, StepRunner
from bertcore.training.stopping import TrainingInterrupted

log = logging.getLogger(__name__)


# In the model folder: the step that made it and the run's fingerprints. Not the MLflow run:
# its id is random, and the folder is the same bytes for the same params and data. That run
# carries the weights' sha256 as the tag MODEL_TAG instead (`mlflow_run`), so a later stage
# finds it.
RUN_INFO = "training.json"


@dataclass(frozen=True)
class RunLabels:
    """How the MLflow run is found and labelled (the caller knows the surroundings)."""

    tracking_uri: str
    run_name: str | None = None  # None: named by what makes the run (`PretrainingRun.name`)
    params: dict[str, Any] = field(default_factory=dict)  # flattened params.yaml
    tags: dict[str, Any] = field(default_factory=dict)  # git commit, DVC experiment, ...


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
            return plan_pretraining(config, paths, inputs, dist).train(labels)
    finally:
        dist.close()


# ------------------------------------------------------------------------------------ plan
def plan_pretraining(config: PretrainConfig, paths: PretrainPaths, inputs: PretrainInputs,
                     dist: Distributed) -> PretrainingRun:
    """Everything decided before a weight is touched: the phases with their batches and
    identities, and where the run (re)starts, with the warnings that go with it."""
    device = resolve_device(config.train.device, dist)
    vocab = VocabSpec.from_tokens(inputs.tokens)
    if inputs.init is not None and dist.is_main:
        log.info("model.init_from: starting from %s (%s); model.preset is not used",
                 inputs.init.path, inputs.init.describe())
    batches = _batches(inputs.train_store, inputs.max_seq_length, config.masking, config.train,
                       vocab, dist, device)
    found = CheckpointDir(paths.checkpoints)
    phase1_latest = found.latest(where=in_phase1)  # its files hashed once per start
    budget = _time_budget(config, inputs)
    first = _first_phase(config, paths, inputs, batches, dist, budget, phase1_latest)
    second = _second_phase(config, paths, inputs, first, vocab, dist, device) if (
        config.phase2.enabled) else None
    plan = plan_run(found, phase1_latest, first.identity, second.identity if second else None)
    if dist.is_main:
        for warning in plan.warnings:
            log.warning("%s", warning)
        if plan.left:
            log.warning("%s", left_notice(plan.left, first.identity, paths.out))
    # keep_last rotates among the checkpoints of the run's line only
    checkpoints = CheckpointDir(paths.checkpoints, config.train.keep_last, line=plan.line)
    return PretrainingRun(config, paths, inputs, dist, device, vocab, checkpoints, first,
                          second, plan, budget)


def _batches(store: SampleStore, max_seq_length: int, masking: MaskingConfig,
             train: TrainConfig, vocab: VocabSpec, dist: Distributed, device: torch.device,
             section: str = "train") -> PretrainingBatches:
    """The batches of one phase; `section` (train, phase2) sets its batch and length bins,
    and mistakes name it."""
    try:
        return PretrainingBatches(
            store, PretrainingCollator(masking, vocab, seed=train.seed), train.batch_size,
            train.gradient_accumulation_steps, seed=train.seed, rank=dist.rank,
            world_size=dist.world_size, num_workers=train.num_workers,
            pin_memory=device.type == "cuda",
            bins=LengthBins(train.length_bin_width, max(1, max_seq_length)), section=section,
        )
    except ConfigError as exc:  # its batch does not split over the processes, ...
        raise exc.in_section(section) from None


def _time_budget(config: PretrainConfig, inputs: PretrainInputs) -> TimeBudget | None:
    """train.max_minutes (never with phase 2: PretrainConfig refuses it), over phase 1."""
    train = config.train
    if train.max_minutes is None:
        return None
    val_sequences = len(inputs.val_store)
    if config.eval.max_batches is not None:
        val_sequences = min(val_sequences, config.eval.max_batches * config.eval.batch_size)
    return TimeBudget(train.max_minutes, train.warmup_steps, train.batch_size, train.eval_every,
                      val_sequences)


def _first_phase(config: PretrainConfig, paths: PretrainPaths, inputs: PretrainInputs,
                 batches: PretrainingBatches, dist: Distributed, budget: TimeBudget | None,
                 latest: Checkpoint | None) -> Phase:
    """Phase 1: the `train` section on the samples. With a time budget, a run resumed from
    `latest` (phase 1's latest checkpoint) re-plans its end from the timing it recorded."""
    configured = config.train.total_steps(batches.steps_per_epoch)
    timing = (StepTiming.from_dict(latest.meta.get("step_timing"))
              if budget is not None and latest else None)
    end = budget.total(configured, timing) if timing else configured
    # The init model's content, hashed once (by rank 0) per start: a resume must not continue
    # a run begun from other weights.
    init = inputs.init
    init_hash = dist.broadcast_object(init.fingerprint() if init and dist.is_main else None)
    identity = phase1_identity(config, paths.vocab, paths.samples, configured, end, init_hash)
    return Phase(1, inputs.max_seq_length, config.train, config.masking, batches,
                 inputs.val_store, PhaseStart(), identity)


def _second_phase(config: PretrainConfig, paths: PretrainPaths, inputs: PretrainInputs,
                  first: Phase, vocab: VocabSpec, dist: Distributed,
                  device: torch.device) -> Phase:
    """BERT's second phase: its own batch and schedule on the longer samples, its steps and
    epochs numbered on from phase 1's."""
    settings = config.phase2
    train = settings.train_config(config.train)
    masking = scaled_masking(config.masking, inputs.max_seq_length, settings.max_seq_length)
    batches = _batches(inputs.phase2_train, settings.max_seq_length, masking, train, vocab,
                       dist, device, section="phase2")
    identity = phase2_identity(first.identity, settings, paths.phase2_samples)
    return Phase(2, settings.max_seq_length, train, masking, batches, inputs.phase2_val,
                 phase2_start(first), identity)


# ------------------------------------------------------------------------------------- run
@dataclass(frozen=True)
class PretrainingRun:
    """One pretraining run as planned (`plan_pretraining`); `train` carries it out."""

    config: PretrainConfig
    paths: PretrainPaths
    inputs: PretrainInputs
    dist: Distributed
    device: torch.device
    vocab: VocabSpec
    checkpoints: CheckpointDir
    first: Phase
    second: Phase | None  # BERT's second phase, when it is on
    plan: RunPlan
    budget: TimeBudget | None  # train.max_minutes, over phase 1

    def train(self, labels: RunLabels | None) -> PretrainReport | None:
        """Build the model, train each phase from where the plan says, and write the model
        and metrics; returns the report (on rank 0; None elsewhere)."""
        model = self.build_model()
        # MLflow before any training: an unreachable store fails now, in one line.
        tracker = self.open_tracker(labels)
        self.replace_checkpoints()
        runner = StepRunner(model, self.config.train, self.first.batches, device=self.device,
                             dist=self.dist)
        try:
            result = self.train_phases(runner, tracker)
        except BaseException as exc:
            if tracker:
                interrupted = isinstance(exc, KeyboardInterrupt | TrainingInterrupted)
                tracker.finish("KILLED" if interrupted else "FAILED")
            raise
        if not self.dist.is_main:
            return None
        report = self.write_outputs(runner, result)
        if tracker:
            finish_run(tracker, self.config.tracking, self.paths, runner, result)
        return report

    def build_model(self) -> BertPretrainingModel:
        """The same initial weights on every process (DDP also broadcasts rank 0's), then a
        different dropout stream per process. From model.init_from (read by rank 0 alone: DDP
        hands its weights to the others), what the folder lacks starts as in a fresh model of
        this seed; a resumed run takes its weights from the checkpoint instead."""
        train, init = self.config.train, self.inputs.init
        torch.manual_seed(train.seed)
        if init is not None and self.plan.resume.checkpoint is None and self.dist.is_main:
            model = init.load()
        else:
            model = BertPretrainingModel(self.inputs.model_config)
            if init is None and self.config.model.local_attention_init:
                init_local_attention(model)
        # Every generator a checkpoint captures (to resume exactly) starts from the seed too,
        # so that the same params give the same checkpoint bytes; nothing here draws from
        # Python's or numpy's global ones, but the libraries underneath may.
        seed = train.seed + 1 + self.dist.rank
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)
        return model

    def replace_checkpoints(self) -> None:
        """Set aside (or, with train.keep_replaced: false, delete) the checkpoints this run
        replaces, saying so first; rank 0 does it once every process has planned from the
        folder as it was."""
        replaced = self.plan.replaced
        if not replaced:
            return
        self.dist.barrier()
        if self.dist.is_main:
            keep = self.config.train.keep_replaced
            log.warning("%s", replacing_notice(replaced, self.paths.checkpoints, keep,
                                               self.checkpoints.set_aside_before()))
            if keep:
                self.checkpoints.set_aside(replaced)
            else:
                self.checkpoints.delete(replaced)
        self.dist.barrier()

    def train_phases(self, runner: StepRunner, tracker: Tracker | None) -> TrainResult:
        """Phase 1 from where the plan says (unless it is done), then phase 2 (when it is on)
        from the checkpoint it goes on from (`enter_phase2`)."""
        plan = self.plan
        if plan.phase == 1 and plan.resume.checkpoint is not None:
            runner.resume_from(plan.resume.checkpoint)
            self.say_resumed(runner)
        if plan.trains_phase1:
            result = self.train_phase(self.first, runner, tracker, plan.resume.checkpoint)
        if self.second is not None:
            start_from = enter_phase2(runner, self.checkpoints, plan, self.first, self.second)
            self.say_phase2(runner, start_from)
            result = self.train_phase(self.second, runner, tracker, start_from)
        return result

    def train_phase(self, phase: Phase, runner: StepRunner, tracker: Tracker | None,
                    start_from: Checkpoint | None) -> TrainResult:
        """Train `phase` to its end, its record going on from `start_from`'s."""
        record = self.open_record(tracker, start_from)
        if tracker is not None and self.plan.replays(phase.number):
            record.replay()  # a new run that continues an earlier one shows the whole curve
        if phase.number == 2:
            close_phase1(self.plan, record, self.evaluator(self.first, runner), runner)
        if tracker is not None and self.second is not None:
            tracker.set_tags({PHASE_TAG: phase.number})
        on_checkpoint = None if tracker is None else partial(
            checkpoint_written, self.checkpoints, tracker,
            self.config.tracking.log_checkpoints == "all")
        return Trainer(runner, record=record, checkpoints=self.checkpoints,
                       meta=phase.identity.meta(self.dist.world_size),
                       evaluate=self.evaluator(phase, runner), on_checkpoint=on_checkpoint,
                       budget=self.budget if phase.number == 1 else None).train()

    def open_record(self, tracker: Tracker | None, start_from: Checkpoint | None
                    ) -> TrainingRecord:
        """The training logs, going on from those of `start_from` (rank 0 writes the files)."""
        previous = ({name: start_from.read_text(name) for name in (TRAIN_LOG, EVAL_LOG)}
                    if start_from else None)
        main = self.dist.is_main
        return TrainingRecord(self.paths.log if main else None,
                              self.paths.eval_log if main else None, tracker, previous)

    def evaluator(self, phase: Phase, runner: StepRunner
                  ) -> Callable[[BertPretrainingModel], Any] | None:
        """The periodic evaluation of `phase`: its val samples with fixed masks (None when
        it has none)."""
        if not len(phase.val_store):
            return None
        settings, dist = self.config.eval, self.dist
        val = val_batches(phase.val_store, phase.masking, self.vocab, settings, rank=dist.rank,
                          world_size=dist.world_size)
        return lambda m: evaluate(m, val, self.device, runner.autocast_dtype, dist,
                                  settings.max_batches)

    def say_resumed(self, runner: StepRunner) -> None:
        if not self.dist.is_main:
            return
        resume, phase = self.plan.resume, self.second if self.plan.phase == 2 else self.first
        log.info("resuming from %s (step %d of %d%s)", resume.checkpoint.path, runner.step,
                 phase.identity.total_steps, ", phase 2" if phase.number == 2 else "")
        if resume.extends:
            before = runner.learning_rate(runner.step, resume.previous_total)
            log.warning("%s; the learning rate goes from %.3g to %.3g", resume.notice, before,
                        runner.learning_rate(runner.step))

    def say_phase2(self, runner: StepRunner, start_from: Checkpoint) -> None:
        if self.plan.phase == 2:
            self.say_resumed(runner)
        elif self.dist.is_main:
            second = self.second
            log.info("phase 2: steps %d-%d on samples of up to %d tokens (batch %d, learning "
                     "rate %g), from %s", second.start.step + 1, second.identity.total_steps,
                     second.max_seq_length, second.train.batch_size,
                     second.train.learning_rate, start_from.path)

    # ----------------------------------------------------------------------------- MLflow
    def open_tracker(self, labels: RunLabels | None) -> Tracker | None:
        """The MLflow run (rank 0, with tracking on): the checkpoint's own when resuming; a
        new one otherwise. An extended run is a new run too (MLflow params cannot change
        inside a run, and the old run keeps the model it ended with), tagged with the run it
        continues; so is a run whose phase 2 begins after a phase 1 that ended in an earlier
        run."""
        if not (self.dist.is_main and self.config.tracking.enabled and labels is not None):
            return None
        resume = self.plan.resume.checkpoint
        previous_run = self.checkpoints.run_id(resume) if resume else None
        return Tracker.start(
            labels.tracking_uri,
            self.config.tracking.experiment,
            run_id=None if self.plan.continues_earlier_run else previous_run,
            run_name=labels.run_name or default_run_name(
                self.config.model, self.config.train.max_minutes,
                [phase for phase in (self.first, self.second) if phase is not None]),
            params=labels.params,
            tags={**labels.tags, **run_tags(self.plan, self.first, self.second, previous_run)},
        )

    # ----------------------------------------------------------------------------- finish
    def write_outputs(self, runner: StepRunner, result: TrainResult) -> PretrainReport:
        """The final model (with the last phase's fingerprints) and the metrics."""
        paths, last = self.paths, self.second or self.first
        with atomic_dir(paths.out) as staging:
            save_model(runner.raw_model, staging)
            write_json(staging / RUN_INFO, {"step": runner.step,
                                            "fingerprints": last.identity.fingerprints})
        computed_with = {"device": device_name(self.device), **cpu_record()}
        report = pretrain_report(result, runner.raw_model, last.max_seq_length, computed_with,
                                 self.second)
        write_json(paths.metrics, report.metrics, sort_keys=False)
        write_json(paths.details, report.details, sort_keys=False)
        return report
