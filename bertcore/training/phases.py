"""BERT's second phase (params.yaml `phase2`): after phase 1 (the `train` section, on samples
of `samples.max_seq_length`) the run goes on at a longer length, from phase 1's last weights,
with its own batch and learning-rate schedule: Devlin et al. trained 90% of the steps on 128
tokens and the last 10% on 512, and NVIDIA's BERT does the same.

One run, one numbering: phase 2's steps continue phase 1's (1501, 1502, ...), and so do its
epochs: phase 2 starts at the first epoch phase 1 did not reach, so its data order and masks are
never a replay of phase 1's. AdamW's moments carry over, as in NVIDIA's phase 2; the schedule
is phase 2's own: a linear warmup to `phase2.learning_rate`, then linear decay to zero at its
last step. Masks get more slots at the longer length (`scaled_masking`).

Phase 2 always starts from phase 1's last checkpoint (the boundary), loaded from disk, whether
phase 1 ended a moment ago in this process or long before: a straight two-phase run and one
whose phase 2 was turned on after phase 1 finished give the same bytes. A phase-2 checkpoint
records phase 1's fingerprints (hashed), so it is resumed only after that same phase 1; the
boundary is kept while phase 2 runs, so new phase-2 params restart phase 2 there, not phase 1.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import model_validator

from bertcore.common.digests import fingerprint_params
from bertcore.common.validation import params_section
from bertcore.data.samples.config import Phase2Samples
from bertcore.training.checkpoint import Checkpoint, CheckpointDir
from bertcore.training.config import (
    AccumulationSteps,
    BatchSize,
    LearningRate,
    Steps,
    TrainConfig,
    WarmupSteps,
    require_whole_micro_batches,
)
from bertcore.training.masking import MaskingConfig
from bertcore.training.resume import (
    LENGTH,
    PHASE1,
    ResumePlan,
    plan_resume,
    samples_fingerprint,
)

PHASE_KEY = "phase"  # in a phase-2 checkpoint's meta.json: 2 (phase 1's have no such key)


@params_section(frozen=True)
class Phase2Config(Phase2Samples):
    """The `phase2:` section of params.yaml (`enabled` and `max_seq_length` are also the
    samples stage's, see `Phase2Samples`)."""

    max_steps: Steps = 150  # optimizer steps of phase 2, numbered on from phase 1's
    batch_size: BatchSize = 8  # its global batch (32 x 128 tokens = 8 x 512)
    gradient_accumulation_steps: AccumulationSteps = 1
    learning_rate: LearningRate = 0.001  # its peak, after its own warmup
    warmup_steps: WarmupSteps = 15

    @model_validator(mode="after")
    def _whole_micro_batches(self) -> Phase2Config:
        require_whole_micro_batches(self.batch_size, self.gradient_accumulation_steps, "phase2.")
        return self

    def train_config(self, train: TrainConfig) -> TrainConfig:
        """Phase 2's training config: `train`'s, with this phase's length, batch and schedule."""
        return dataclasses.replace(
            train, max_steps=self.max_steps, epochs=None, max_minutes=None,
            batch_size=self.batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            learning_rate=self.learning_rate, warmup_steps=self.warmup_steps)

    def optimisation_params(self) -> dict[str, Any]:
        """What defines phase 2 (recorded in its checkpoints, beside phase 1's params)."""
        values = dataclasses.asdict(self)
        del values["enabled"]
        return values

    def resumable_params(self) -> dict[str, Any]:
        """The values a phase-2 checkpoint must share to be resumed: without the phase's
        length, since phase 2 can be extended as a run can."""
        return {k: v for k, v in self.optimisation_params().items() if k != "max_steps"}


def scaled_masking(masking: MaskingConfig, base_length: int, length: int) -> MaskingConfig:
    """The masking of samples up to `length` tokens: `masking.max_predictions_per_seq` is
    meant for `base_length` (samples.max_seq_length), and the MLM slots grow with the length,
    as Google's 20 slots at 128 tokens became 80 at 512."""
    if length == base_length:
        return masking
    slots = max(1, math.ceil(masking.max_predictions_per_seq * length / base_length))
    return dataclasses.replace(masking, max_predictions_per_seq=slots)


def first_epoch(phase1_steps: int, phase1_steps_per_epoch: int) -> int:
    """The epoch phase 2 begins with: the first one phase 1 did not reach."""
    return math.ceil(phase1_steps / phase1_steps_per_epoch)


def phase2_fingerprints(phase1: Mapping[str, str], config: Phase2Config,
                        samples_dir: str | Path) -> dict[str, str]:
    """What a phase-2 checkpoint records: the phase 1 it continues (all of phase 1's
    fingerprints, length included, hashed), the vocabulary (read by `bert fill-mask`),
    phase 2's own params and samples, and its length."""
    return {
        PHASE1: fingerprint_params(dict(phase1)),
        "vocab": phase1["vocab"],
        "params": fingerprint_params(config.resumable_params()),
        "samples": samples_fingerprint(samples_dir),
        LENGTH: str(config.max_steps),
    }


def phase_of(checkpoint: Checkpoint) -> int:
    return int(checkpoint.meta.get(PHASE_KEY, 1))


def in_phase1(checkpoint: Checkpoint) -> bool:
    return phase_of(checkpoint) == 1


@dataclass(frozen=True)
class PhaseKey:
    """What identifies a phase's checkpoints and where the phase ends."""

    fingerprints: dict[str, str]
    params: dict[str, Any]  # the optimisation params, to name what changed
    total_steps: int  # the step the phase ends at (phase 2: numbered on from phase 1's)


@dataclass(frozen=True)
class RunPlan:
    """Where a run (re)starts: `phase` and the checkpoint of that phase to resume (or none);
    `notices` say why other checkpoints are not resumed."""

    phase: int
    resume: ResumePlan
    notices: tuple[str, ...] = ()


def plan_run(checkpoints: CheckpointDir, phase1_latest: Checkpoint | None, phase1: PhaseKey,
             phase2: PhaseKey | None = None) -> RunPlan:
    """The latest phase-2 checkpoint made after this very phase 1 is resumed (or extended,
    as `plan_resume` decides); failing that, phase 1 resumes from `phase1_latest` (the latest
    phase-1 checkpoint, looked up once by the caller) or starts as it would alone (a run whose
    phase 1 is done then goes straight on to phase 2, from its last checkpoint)."""
    notices = []
    if phase2 is not None:
        latest = checkpoints.latest(where=lambda c: phase_of(c) == 2)
        plan = plan_resume(latest, phase2.fingerprints, phase2.params, phase2.total_steps)
        if plan.checkpoint is not None:
            return RunPlan(2, plan)
        if plan.notice:
            notices.append(plan.notice.replace("starting fresh",
                                               "phase 2 starts over from phase 1's end"))
    plan = plan_resume(phase1_latest, phase1.fingerprints, phase1.params, phase1.total_steps)
    return RunPlan(1, plan, tuple(notices))


def ends_phase1(checkpoint: Checkpoint | None, phase1: PhaseKey) -> bool:
    """Whether `checkpoint` is phase 1's last: at its last step, made with its fingerprints."""
    return (checkpoint is not None and in_phase1(checkpoint)
            and checkpoint.step == phase1.total_steps
            and checkpoint.fingerprints == phase1.fingerprints)


def boundary(checkpoints: CheckpointDir, phase1: PhaseKey) -> Checkpoint | None:
    """Phase 1's last checkpoint, which phase 2 starts from, read from the folder now (phase 1
    may have ended in this very run); None when there is none."""
    found = checkpoints.latest(where=in_phase1)
    return found if ends_phase1(found, phase1) else None
