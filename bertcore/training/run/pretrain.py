"""Pretraining end to end, for one process or each process of a torchrun group. The story,
top to bottom:

  run_pretraining     open and check the inputs (`bertcore.training.run.inputs`)
  plan_pretraining    build each phase, its planned end and identity
                      (`bertcore.training.checkpoints.identity`), and plan where the run (re)starts
                      (`bertcore.training.run.phases.plan_run`): a PretrainingPlan
                      (`bertcore.training.run.plan`)
  PretrainingRun      .start: build the model (new, or from an existing BERT:
                      `bertcore.saved.init_from`), open the MLflow run (its recorder,
                      `bertcore.training.run.mlflow_run`; one that logs nothing, and says why,
                      when nothing is tracked) and the StepRunner; .train: train each phase in
                      turn from where the plan says (`bertcore.training.loop.trainer`), then
                      write the final model and metrics

The caller (the pretrain stage) parses the params sections and says where things live and
where the MLflow run goes (a `TrackingTarget`, as every stage's); nothing here reads
params.yaml or knows the pipeline's layout.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from bertcore.common.atomic import atomic_dir, write_json
from bertcore.common.cpu import cpu_record
from bertcore.common.devices import device_name, resolve_device
from bertcore.common.digests import file_sha256
from bertcore.common.report import write_metrics
from bertcore.common.tracking import TrackingTarget
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.local_init import init_local_attention
from bertcore.saved.hf import WEIGHTS_NAME, save_model
from bertcore.saved.pretrained import RUN_INFO
from bertcore.training.checkpoints.checkpoint import Checkpoint, CheckpointDir
from bertcore.training.checkpoints.lineage import replacing_notice
from bertcore.training.config import PretrainConfig
from bertcore.training.evaluation.metrics import Probes, ProbeSource, evaluate, val_batches
from bertcore.training.hardware.distributed import Distributed
from bertcore.training.loop.checkpointer import Checkpointer
from bertcore.training.loop.records import EVAL_LOG, TRAIN_LOG, TrainingRecord
from bertcore.training.loop.step import StepRunner
from bertcore.training.loop.trainer import Trainer, TrainResult
from bertcore.training.run.charts import write_pretrain_charts
from bertcore.training.run.inputs import PretrainInputs, PretrainPaths
from bertcore.training.run.mlflow_run import NullRecorder, PretrainRecorder
from bertcore.training.run.phases import (
    Phase,
    close_phase1,
    enter_phase2,
)
from bertcore.training.run.plan import PretrainingPlan, plan_pretraining
from bertcore.training.run.report import PretrainReport, pretrain_report

log = logging.getLogger(__name__)


def run_pretraining(config: PretrainConfig, paths: PretrainPaths,
                    target: TrackingTarget | None = None, probes: ProbeSource | None = None
                    ) -> PretrainReport | None:
    """Pretrain; returns what was reported (on rank 0; None elsewhere).
    `target`: where the MLflow run goes (None: nowhere, as with tracking.enabled false).
    `probes`: the zero-shot probes scored at each periodic evaluation, by rank 0 (None: none)."""
    inputs = PretrainInputs.open(config, paths)  # checked before anything slow
    device = resolve_device(config.train.device)
    dist = Distributed.from_env(device.type)
    checkpoints = CheckpointDir(paths.checkpoints, config.train.keep_last)
    try:
        # One run at a time in a checkpoint folder (rank 0 holds the lock for its run).
        with checkpoints.lock(enabled=dist.is_main):
            plan = plan_pretraining(config, paths, inputs, dist, checkpoints)
            return PretrainingRun.start(plan, target, probes).train()
    finally:
        dist.close()


# ------------------------------------------------------------------------------------- run
class PretrainingRun:
    """A planned run with what it trains with: the StepRunner (model, optimizer, counters)
    and the MLflow run's recorder (a NullRecorder when nothing is tracked)."""

    def __init__(self, plan: PretrainingPlan, runner: StepRunner,
                 recorder: PretrainRecorder | NullRecorder, probes: Probes | None = None):
        self.plan, self.runner, self.recorder, self.probes = plan, runner, recorder, probes

    @classmethod
    def start(cls, plan: PretrainingPlan, target: TrackingTarget | None,
              source: ProbeSource | None = None) -> PretrainingRun:
        """Build the model, open the MLflow run (before any training: an unreachable store
        fails now, in one line), set aside the checkpoints the run replaces, put the model
        on its StepRunner for phase 1, and draw the probes (rank 0)."""
        model = build_model(plan)
        recorder = PretrainRecorder.start(plan, target)
        replace_checkpoints(plan)
        first = plan.phases[0]
        runner = StepRunner(model, first.train, first.batches, device=plan.device,
                            dist=plan.dist)
        probes = source.prepare(runner.raw_model, plan.device) if (
            source is not None and plan.dist.is_main) else None
        return cls(plan, runner, recorder, probes)

    def train(self) -> PretrainReport | None:
        """Train each phase from where the plan says, and write the model and metrics;
        returns the report (on rank 0; None elsewhere)."""
        try:
            result = self.train_phases()
        except BaseException as exc:
            self.recorder.fail(exc)
            raise
        if not self.plan.dist.is_main:
            return None
        report = self.write_outputs(result)
        self.recorder.finish(result, self.runner.raw_model, self.runner.step)
        return report

    def train_phases(self) -> TrainResult:
        """Each phase from the one the run (re)starts in: entered from its checkpoint, then
        trained to its end (phase 1 not, when it is done)."""
        start, result, previous = self.plan.start, None, None
        for phase in self.plan.phases:
            if start.enters(phase.number):
                start_from = self.enter(phase, previous)
                if start.trains(phase.number):
                    result = self.train_phase(phase, start_from, previous)
            previous = phase
        return result

    def enter(self, phase: Phase, previous: Phase | None) -> Checkpoint | None:
        """Load the checkpoint `phase` goes on from, which it returns (None: phase 1 starts
        fresh): the plan's for the first phase; for the next, its own or the previous
        phase's last (`enter_phase2`)."""
        plan, runner = self.plan, self.runner
        if previous is None:
            start_from = plan.start.resume.checkpoint
            if start_from is not None:
                runner.resume_from(start_from)
                self.say_resumed(phase)
            return start_from
        start_from = enter_phase2(runner, plan.checkpoints, plan.start, previous, phase)
        self.say_entered(phase, start_from)
        return start_from

    def train_phase(self, phase: Phase, start_from: Checkpoint | None,
                    previous: Phase | None) -> TrainResult:
        """Train `phase` to its end, its record going on from `start_from`'s."""
        plan, recorder, main = self.plan, self.recorder, self.plan.dist.is_main
        # the training logs, going on from those of `start_from` (rank 0 writes the files)
        logs = ({name: start_from.read_text(name) for name in (TRAIN_LOG, EVAL_LOG)}
                if start_from else None)
        record = TrainingRecord(plan.paths.log if main else None,
                                plan.paths.eval_log if main else None, recorder, logs)
        if plan.start.replays(phase.number):
            record.replay()  # a new run that continues an earlier one shows the whole curve
        if previous is not None:
            close_phase1(plan.start, record, self.evaluator(previous), self.runner)
        recorder.on_phase(phase.number)
        checkpointer = Checkpointer(
            plan.checkpoints, phase.train.checkpoint_every,
            meta=phase.identity.meta(plan.dist.world_size),
            on_written=recorder.on_checkpoint,
            line=plan.start.line)
        return Trainer(self.runner, end=phase.end, learning_rate=phase.learning_rate,
                       timing=phase.timing, record=record, checkpointer=checkpointer,
                       evaluate=self.evaluator(phase), budget=phase.budget).train()

    def evaluator(self, phase: Phase) -> Callable[[BertPretrainingModel], Any] | None:
        """The periodic evaluation of `phase`: its val samples with fixed masks (None when
        it has none)."""
        if not len(phase.val_store):
            return None
        plan, runner = self.plan, self.runner
        settings, dist = plan.config.eval, plan.dist
        val = val_batches(phase.val_store, phase.masking, plan.vocab, settings, rank=dist.rank,
                          world_size=dist.world_size)
        return partial(evaluate, batches=val, device=plan.device,
                       autocast_dtype=runner.autocast_dtype, dist=dist,
                       max_batches=settings.max_batches, probes=self.probes)

    def say_resumed(self, phase: Phase) -> None:
        if not self.plan.dist.is_main:
            return
        runner, resume = self.runner, self.plan.start.resume
        log.info("resuming from %s (step %d of %d%s)", resume.checkpoint.path, runner.step,
                 phase.end, ", phase 2" if phase.number == 2 else "")
        if resume.extends:
            rate = phase.learning_rate
            before = rate.ending_at(resume.previous_total)
            log.warning("%s; the learning rate goes from %.3g to %.3g", resume.notice,
                        before(runner.step), rate(runner.step))

    def say_entered(self, phase: Phase, start_from: Checkpoint) -> None:
        """What a phase after the first goes on from: its own checkpoint (resumed), or the
        previous phase's last."""
        if self.plan.start.phase == phase.number:
            self.say_resumed(phase)
        elif self.plan.dist.is_main:
            log.info("phase %d: steps %d-%d on samples of up to %d tokens (batch %d, learning "
                     "rate %g), from %s", phase.number, phase.start + 1, phase.end,
                     phase.max_seq_length, phase.train.batch_size, phase.train.learning_rate,
                     start_from.path)

    # ----------------------------------------------------------------------------- finish
    def write_outputs(self, result: TrainResult) -> PretrainReport:
        """The final model (with the last phase's fingerprints) and the metrics."""
        paths, last, model = self.plan.paths, self.plan.phases[-1], self.runner.raw_model
        with atomic_dir(paths.out) as staging:
            save_model(model, staging)
            write_json(staging / RUN_INFO, {"step": self.runner.step,
                                            "fingerprints": last.identity.fingerprints})
        computed_with = {"device": device_name(self.plan.device), **cpu_record()}
        second = last if len(self.plan.phases) > 1 else None
        report = pretrain_report(result, model, last.max_seq_length, computed_with,
                                 file_sha256(paths.out / WEIGHTS_NAME), second)
        write_metrics(paths.metrics, "pretrain", report.metrics)
        write_json(paths.details, report.details, sort_keys=False)
        write_pretrain_charts(paths.log, paths.eval_log)
        return report


def build_model(plan: PretrainingPlan) -> BertPretrainingModel:
    """The same initial weights on every process (the StepRunner also broadcasts rank 0's;
    dropout is seeded per micro-batch). From model.init_from (read by rank 0 alone: the StepRunner
    hands its weights to the others), what the folder lacks starts as in a fresh model of
    this seed; a resumed run takes its weights from the checkpoint instead."""
    config, init, dist = plan.config, plan.inputs.init, plan.dist
    torch.manual_seed(config.train.seed)
    if init is not None and plan.start.resume.checkpoint is None and dist.is_main:
        model = init.load()
    else:
        model = BertPretrainingModel(plan.inputs.model_config)
        local = config.model.local_heads(model.config.num_attention_heads)
        if init is None and local:
            init_local_attention(model, local,
                                 config.model.local_layers(model.config.num_hidden_layers))
    # Every generator a checkpoint captures (to resume exactly) starts from the seed too,
    # so that the same params give the same checkpoint bytes; nothing here draws from
    # Python's or numpy's global ones, but the libraries underneath may.
    seed = config.train.seed + 1 + dist.rank
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    return model


def replace_checkpoints(plan: PretrainingPlan) -> None:
    """Set aside (or, with train.keep_replaced: false, delete) the checkpoints this run
    replaces, saying so first; rank 0 does it once every process has planned from the
    folder as it was."""
    replaced, dist, checkpoints = plan.start.replaced, plan.dist, plan.checkpoints
    if not replaced:
        return
    dist.barrier()
    if dist.is_main:
        keep = plan.config.train.keep_replaced
        log.warning("%s", replacing_notice(replaced, plan.paths.checkpoints, keep,
                                           checkpoints.set_aside_before()))
        if keep:
            checkpoints.set_aside(replaced)
        else:
            checkpoints.delete(replaced)
    dist.barrier()

