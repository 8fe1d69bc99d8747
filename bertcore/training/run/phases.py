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
boundary, a finished checkpoint, is kept while phase 2 runs, so new phase-2 params restart
phase 2 there, not phase 1. With phase 2 turned off, the run is phase 1 alone, and phase 2's
checkpoints stay for when it is on again (`bertcore.training.checkpoints.lineage`).

This module sequences the phases: which phase a run starts in and from which checkpoint
(`plan_run`), phase 1's closing evaluation (`close_phase1`) and entering phase 2
(`enter_phase2`). What a phase's checkpoints share and record is its `RunIdentity`
(`bertcore.training.checkpoints.identity`); where it ends, its `end`, is planned with the run
(`bertcore.training.run.plan`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bertcore.common.errors import BertError
from bertcore.common.schedule import StepSchedule
from bertcore.data.samples.store import SampleStore
from bertcore.model.bert import BertPretrainingModel
from bertcore.training.checkpoints.checkpoint import Checkpoint, CheckpointDir
from bertcore.training.checkpoints.identity import RunIdentity, in_phase1, phase_of
from bertcore.training.checkpoints.lineage import RunLine
from bertcore.training.checkpoints.resume import ResumePlan, plan_resume
from bertcore.training.config import MaskingConfig, TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.loop.budget import StepTiming, TimeBudget
from bertcore.training.loop.records import TrainingRecord
from bertcore.training.loop.step import PhaseSteps, StepRunner


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


@dataclass(frozen=True)
class Phase:
    """One phase of the run as the loop runs it: phase 1 (`train`), and BERT's second phase
    when it is on. It trains steps start+1 .. `end`, planned once (`plan_pretraining`): its
    Trainer trains to `end` at `learning_rate(step)`, and its checkpoints record it."""

    number: int
    max_seq_length: int  # of its samples
    masking: MaskingConfig
    steps: PhaseSteps  # its config, batches, first step and first epoch
    val_store: SampleStore
    identity: RunIdentity  # what its checkpoints share and record
    end: int  # the step it is planned to end at (a time budget's plan: at most the configured)
    budget: TimeBudget | None = None  # train.max_minutes (phase 1 only)
    timing: StepTiming | None = None  # what the budget planned from, as a checkpoint recorded

    @property
    def start(self) -> int:
        """Optimizer steps done before the phase (phase 2: phase 1's end)."""
        return self.steps.start

    @property
    def learning_rate(self) -> StepSchedule:
        """The rate of each of its steps: its schedule, ending at `end`."""
        return self.train.rate_schedule(self.start, self.end)

    @property
    def train(self) -> TrainConfig:
        return self.steps.config

    @property
    def batches(self) -> PretrainingBatches:
        return self.steps.batches


# ------------------------------------------------------------------------ where a run starts
@dataclass(frozen=True)
class RunPlan:
    """Where a run (re)starts: `phase`, and the checkpoint of that phase to resume (or none).
    `phase1_done`: that checkpoint is phase 1's last, so phase 2 begins now from it (turned on
    since phase 1 ended, or its params changed); `notices` say why other checkpoints are not
    resumed. `line`: the checkpoints the run goes on with (`keep_last` rotates among them);
    `replaced`: those it replaces, set aside before it trains; `left`: phase 2's, with phase 2
    off, left for when it is on again (`bertcore.training.checkpoints.lineage`)."""

    phase: int
    resume: ResumePlan
    line: RunLine
    phase1_done: bool = False
    notices: tuple[str, ...] = ()
    replaced: tuple[Checkpoint, ...] = ()
    left: tuple[Checkpoint, ...] = ()

    def enters(self, phase: int) -> bool:
        """Whether the run goes through `phase`: the one it (re)starts in and those after."""
        return phase >= self.phase

    def trains(self, phase: int) -> bool:
        """Whether the run trains `phase` (not phase 1 when it is done)."""
        return self.enters(phase) and (phase > 1 or not self.phase1_done)

    @property
    def continues_earlier_run(self) -> bool:
        """Whether this is a new MLflow run that goes on with an earlier one's: an extended
        run, a phase 2 begun after a phase 1 that ended in an earlier run, or a phase 1
        alone after an earlier run that went on into phase 2."""
        return self.resume.extends or self.phase1_done or bool(self.left)

    @property
    def continued(self) -> int:
        """The phases whose line the run goes on from a checkpoint of (0: it starts fresh)."""
        return 2 if self.phase == 2 else int(self.resume.checkpoint is not None)

    def replays(self, phase: int) -> bool:
        """Whether the record is replayed into MLflow as `phase` begins: the first phase this
        run trains, when it continues an earlier run (so the new run shows the whole curve)."""
        first_trained = 1 if self.trains(1) else 2
        return self.continues_earlier_run and phase == first_trained

    @property
    def warnings(self) -> tuple[str, ...]:
        """What to warn of before training (an extension is told with its learning rates)."""
        resume = self.resume
        return self.notices + ((resume.notice,) if resume.notice and not resume.extends else ())


def plan_run(checkpoints: CheckpointDir, phase1_latest: Checkpoint | None, first: Phase,
             second: Phase | None = None) -> RunPlan:
    """The latest phase-2 checkpoint made after this very phase 1 is resumed (or extended,
    as `plan_resume` decides); failing that, phase 1 resumes from `phase1_latest` (the latest
    phase-1 checkpoint, looked up once by the caller) or starts as it would alone (a run whose
    phase 1 is done then goes straight on to phase 2, from its last checkpoint). Every other
    checkpoint in the folder is kept or replaced as `RunLine.keeps` says."""
    plan = _where_it_starts(checkpoints, phase1_latest, first, second)
    found = checkpoints.all()
    return dataclasses.replace(
        plan, replaced=tuple(c for c in found if not plan.line.keeps(c, plan.continued)),
        left=tuple(c for c in found if plan.line.left_for_phase2(c)))


def _where_it_starts(checkpoints: CheckpointDir, phase1_latest: Checkpoint | None,
                     first: Phase, second: Phase | None) -> RunPlan:
    line = RunLine(first.identity, second.identity if second is not None else None)
    notices = []
    if second is not None:
        latest = checkpoints.latest(where=lambda c: phase_of(c) == 2)
        plan = plan_resume(latest, second.identity, second.end)
        if plan.checkpoint is not None:
            return RunPlan(2, plan, line)
        if plan.notice:
            notices.append(plan.notice.replace("starting fresh",
                                               "phase 2 starts over from phase 1's end"))
    plan = plan_resume(phase1_latest, first.identity, first.end)
    done = second is not None and ends_phase1(plan.checkpoint, first)
    return RunPlan(1, plan, line, done, tuple(notices))


def ends_phase1(checkpoint: Checkpoint | None, first: Phase) -> bool:
    """Whether `checkpoint` is phase 1's last: at its end, made with its identity."""
    return (checkpoint is not None and in_phase1(checkpoint)
            and checkpoint.step == first.end and first.identity.made(checkpoint))


# --------------------------------------------------------------------------- entering phase 2
def close_phase1(plan: RunPlan, record: TrainingRecord,
                 evaluate: Callable[[BertPretrainingModel], Any] | None,
                 runner: StepRunner) -> None:
    """Phase 1's closing evaluation, in the record phase 2 goes on with, when phase 2 begins
    in this run. The checkpoint phase 2 starts from may lack it (written before it, at a
    checkpoint step); evaluated again on the same weights with the same fixed masks, it is the
    same row. MLflow has it already when phase 1 ended in this run."""
    if plan.phase != 1 or evaluate is None:
        return
    if record.eval.last_row().get("step") == runner.step:
        return
    record.log_eval(runner.step, evaluate(runner.raw_model), track=plan.phase1_done)


def enter_phase2(runner: StepRunner, checkpoints: CheckpointDir, plan: RunPlan, first: Phase,
                 second: Phase) -> Checkpoint:
    """Switch the runner to phase 2 and load the checkpoint it goes on from, which it
    returns: phase 2's own when resuming it, else phase 1's last, read back from disk even
    when phase 1 just ended here (so this run and one that turned phase 2 on later are the
    same bytes). Phase 1's last checkpoint stays while phase 2 runs: it is a finished one,
    which `keep_last` never takes."""
    found = checkpoints.latest(where=in_phase1)  # read now: phase 1 may have ended in this run
    edge = found if ends_phase1(found, first) else None
    start_from = plan.resume.checkpoint if plan.phase == 2 else edge
    if start_from is None:
        raise BertError(f"phase 1 left no checkpoint at its last step "
                        f"({first.end}) for phase 2 to start from (see the "
                        "warnings above): run again")
    runner.phase = second.steps  # the model, its wrappers and the optimizer stay
    runner.resume_from(start_from)
    return start_from
