"""When the training loop writes a checkpoint, and what it last wrote (torchtitan's
`CheckpointManager` in small): a checkpoint every `train.checkpoint_every` steps, at the end
and when the run stops; never two of one step, never of a state whose last steps were not
finite (a sick state must not replace a good checkpoint). The folder's format and rotation are
`bertcore.training.checkpoints.checkpoint`'s; the state is the StepRunner's, the planned end
the Trainer's (it hands it to each save)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bertcore.training.checkpoints.checkpoint import Checkpoint, CheckpointDir, capture_rng_state
from bertcore.training.loop.budget import StepTiming
from bertcore.training.loop.records import TrainingRecord
from bertcore.training.loop.step import StepRunner

log = logging.getLogger(__name__)


class Checkpointer:
    """The checkpoints of one `Trainer.train()`: into `folder` (None: none are written), each
    recording `meta` (the run's identity: `RunIdentity.meta`); `on_written(path)` is called on
    rank 0 after each; `line`: the checkpoints `keep_last` rotates among (None: those of
    `meta`'s fingerprints; see `CheckpointDir.prune`)."""

    def __init__(self, folder: CheckpointDir | None, every: int = 0,
                 meta: Mapping[str, Any] | None = None,
                 on_written: Callable[[Path], None] | None = None,
                 line: Callable[[Checkpoint], bool] | None = None):
        self.folder, self.line = folder, line
        self.every = every  # train.checkpoint_every (0: only at the end and on a stop)
        self.meta = dict(meta or {})
        self.on_written = on_written
        self.saved_step: int | None = None  # the step of the last checkpoint written
        self.saved_path: Path | None = None  # its folder (rank 0)

    def due(self, step: int) -> bool:
        """Whether `step` is a periodic checkpoint step."""
        return bool(self.every) and step % self.every == 0

    def save(self, runner: StepRunner, counters: Mapping[str, float], record: TrainingRecord,
             planned_end: int, timing: StepTiming | None) -> None:
        """A checkpoint of the runner's step, unless one exists or the last steps were not
        finite (`counters`, as read); `timing`: what a time budget planned from (a budget run
        resumes its plan from it)."""
        step = runner.step
        if counters["nonfinite_in_a_row"]:
            log.warning("no checkpoint at step %d: the last steps were not finite", step)
            return
        if self.folder is None or self.saved_step == step:
            return
        meta = self.meta if timing is None else {**self.meta, "step_timing": timing.to_dict()}
        # Every process hands its RNG state to rank 0, which commits the checkpoint once all
        # processes have finished the step. The planned end goes into trainer.pt and meta.json
        # both (`total_steps`): the format checkpoints have shipped with, which resuming reads
        # from meta.json.
        dist = runner.dist
        rng = dist.all_gather_objects(capture_rng_state())
        dist.barrier()
        if dist.is_main:
            state = {**runner.state_dict(planned_end), "rng": rng}
            epoch, step_in_epoch = runner.phase.position(step)
            position = {"step": step, "epoch": epoch, "total_steps": planned_end,
                        "step_in_epoch": step_in_epoch}
            self.saved_path = self.folder.save(step, runner.raw_model, state,
                                               {**meta, **position}, record.texts(), self.line)
        dist.barrier()
        self.saved_step = step
        if dist.is_main and self.on_written is not None:
            self.on_written(self.saved_path)

    def saved(self, step: int) -> str:
        """What a run stopping after `step` leaves to resume from, in words."""
        if self.saved_step == step and self.saved_path is not None:
            return f"checkpoint written in {self.saved_path}; run again to resume"
        return "no checkpoint written for this step"
