"""A pretraining run planned before a weight is touched: its phases, each with its batches,
identity (`bertcore.training.checkpoints.identity`) and planned end, and where the run
(re)starts (`bertcore.training.run.phases.plan_run`), with the warnings that go with it: a
`PretrainingPlan`, which `pretrain.PretrainingRun` trains.

The planned end of each phase (`Phase.end`) is made here, once: `train.max_steps` (or
`train.epochs` over its batches) after the steps before the phase; with `train.max_minutes`
and a checkpoint that recorded a timing, the end a time budget plans from that timing. Each
phase's Trainer trains to it, at the learning rate of its schedule ending there
(`Phase.learning_rate`). The one end planned later is a time budget's without a timing: the
Trainer times the first steps and plans it then (`bertcore.training.loop.budget`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import torch

from bertcore.common.devices import resolve_device
from bertcore.common.errors import ConfigError
from bertcore.data.samples.store import SampleStore
from bertcore.model.local_init import MEASURED_ON
from bertcore.training.checkpoints.checkpoint import Checkpoint, CheckpointDir
from bertcore.training.checkpoints.identity import in_phase1, phase1_identity, phase2_identity
from bertcore.training.checkpoints.lineage import left_notice
from bertcore.training.config import MaskingConfig, PretrainConfig, TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.data.masking import PretrainingCollator, VocabSpec
from bertcore.training.data.order import LengthBins
from bertcore.training.hardware.distributed import Distributed
from bertcore.training.loop.budget import TimeBudget, recorded_timing
from bertcore.training.loop.step import PhaseSteps
from bertcore.training.run.inputs import PretrainInputs, PretrainPaths
from bertcore.training.run.phases import Phase, RunPlan, first_epoch, plan_run, scaled_masking

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PretrainingPlan:
    """Everything decided before a weight is touched (`plan_pretraining`)."""

    config: PretrainConfig
    paths: PretrainPaths
    inputs: PretrainInputs
    dist: Distributed
    device: torch.device
    vocab: VocabSpec
    checkpoints: CheckpointDir
    phases: tuple[Phase, ...]  # phase 1, and BERT's second phase when it is on
    start: RunPlan  # where the run (re)starts


def plan_pretraining(config: PretrainConfig, paths: PretrainPaths, inputs: PretrainInputs,
                     dist: Distributed, checkpoints: CheckpointDir) -> PretrainingPlan:
    """The phases with their batches, lengths and identities, and where the run (re)starts,
    with the warnings that go with it."""
    device = resolve_device(config.train.device, dist.local_rank)
    vocab = VocabSpec.from_tokens(inputs.tokens)
    if inputs.init is not None and dist.is_main:
        log.info("model.init_from: starting from %s (%s); model.preset is not used",
                 inputs.init.path, inputs.init.describe())
    elif config.model.local_attention_init and config.model.preset not in MEASURED_ON and \
            dist.is_main:
        log.warning("model.local_attention_init: true was measured on BERT-tiny alone "
                    "(docs/recipe.md), not on the %s preset", config.model.preset)
    batches = _batches(inputs.train_store, inputs.max_seq_length, config.masking, config.train,
                       vocab, dist, device)
    phase1_latest = checkpoints.latest(where=in_phase1)  # its files hashed once per start
    first = _first_phase(config, paths, inputs, batches, dist, phase1_latest)
    phases = (first,)
    if config.phase2.enabled:
        phases += (_second_phase(config, paths, inputs, first, vocab, dist, device),)
    start = plan_run(checkpoints, phase1_latest, *phases)
    if first.timing is not None and start.resume.checkpoint is None:
        # planned from a checkpoint the run does not resume: it times its own first steps
        first = replace(first, timing=None, end=_configured_end(config.train, first.batches))
        phases = (first, *phases[1:])
    if dist.is_main:
        for warning in start.warnings:
            log.warning("%s", warning)
        if start.left:
            log.warning("%s", left_notice(start.left, first.end, paths.out))
    return PretrainingPlan(config=config, paths=paths, inputs=inputs, dist=dist,
                           device=device, vocab=vocab, checkpoints=checkpoints,
                           phases=phases, start=start)


def _batches(store: SampleStore, max_seq_length: int, masking: MaskingConfig,
             train: TrainConfig, vocab: VocabSpec, dist: Distributed, device: torch.device,
             section: str = "train") -> PretrainingBatches:
    """The batches of one phase; `section` (train, phase2) sets its batch and length bins,
    and mistakes name it."""
    try:
        return PretrainingBatches(
            store, PretrainingCollator(masking, vocab, seed=train.seed), train.batch_size,
            train.micro_batches, seed=train.seed, rank=dist.rank,
            world_size=dist.world_size, num_workers=train.num_workers,
            pin_memory=device.type == "cuda",
            bins=LengthBins(train.length_bin_width, max(1, max_seq_length)), section=section,
        )
    except ConfigError as exc:  # its batch does not split over the processes, ...
        raise exc.in_section(section) from None


def _configured_end(train: TrainConfig, batches: PretrainingBatches, start: int = 0) -> int:
    """The step `train` ends a phase at that begins after `start` steps: `max_steps`, or
    `epochs` over its batches, more."""
    return start + train.total_steps(batches.steps_per_epoch)


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
                 batches: PretrainingBatches, dist: Distributed,
                 latest: Checkpoint | None) -> Phase:
    """Phase 1: the `train` section on the samples. With a time budget, a run that resumes
    `latest` (phase 1's latest checkpoint) plans its end from the timing it recorded."""
    budget = _time_budget(config, inputs)
    end = configured = _configured_end(config.train, batches)
    timing = recorded_timing(latest) if budget is not None and latest else None
    if timing is not None:
        end = budget.planned_end(configured, timing)
    # The init model's content, hashed once (by rank 0) per start: a resume must not continue
    # a run begun from other weights.
    init = inputs.init
    init_hash = dist.broadcast_object(init.fingerprint() if init and dist.is_main else None)
    identity = phase1_identity(config, paths.vocab, paths.samples, configured, init_hash)
    return Phase(number=1, max_seq_length=inputs.max_seq_length, masking=config.masking,
                 steps=PhaseSteps(config.train, batches), val_store=inputs.val_store,
                 identity=identity, end=end, budget=budget, timing=timing)


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
    # from phase 1's last step, in the first epoch phase 1 did not reach
    start = first.end
    steps = PhaseSteps(train, batches, start, first_epoch(start, first.batches.steps_per_epoch))
    identity = phase2_identity(first.identity, settings, paths.phase2_samples)
    return Phase(number=2, max_seq_length=settings.max_seq_length, masking=masking, steps=steps,
                 val_store=inputs.phase2_val, identity=identity,
                 end=_configured_end(train, batches, start))
