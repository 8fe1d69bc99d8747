"""The training loop: `Trainer.train()` runs a StepRunner's steps to the planned end, with
logging, periodic evaluation, checkpoints and stopping.

The data position, (epoch, step within it), follows from the step number
(`StepRunner.data_position`; each epoch's order: `bertcore.training.order`), so a checkpoint
plus the RNG states is all that resuming needs: the resumed run draws the same batches, masks
and dropout as an uninterrupted one.

The Trainer owns the run's planned end (`total_steps`): the configured total, or what a time
budget plans (`bertcore.training.budget`), which it hands to each step (the schedule) and to
each checkpoint (its meta).

The host reads the device only on "sync steps" (`Trainer.due`): steps that log (every
`log_every`, and the run's last), evaluate (`eval_every`), checkpoint (`checkpoint_every`) or
reach `stop_after`, and, with one process, the step after which a stop was requested.
`Trainer.sync` does what such a step does, in order: read the counters, check health, log,
evaluate, checkpoint, stop. Everything that needs the device's
numbers waits for them:
- a non-finite step is skipped on the device at once (see `bertcore.training.step`), but it is
  reported, and `max_nonfinite_steps` of them in a row stop the run, at the next sync step
  (the worst run since the last read counts, so no run of bad steps goes unseen); no
  checkpoint is written while the last steps were not finite, so the last good one stays the
  latest;
- with one process, SIGTERM or Ctrl-C stops the run after the current step, with a
  checkpoint; with several, the processes agree on stopping at the next sync step they all
  share (a sticky vote travels with each step's all-reduced counts), so they all stop after
  the same step, up to `log_every - 1` steps later.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from bertcore.common.errors import BertError
from bertcore.model.bert import BertPretrainingModel
from bertcore.training.batches import DataWorkerDied
from bertcore.training.budget import BudgetPlanner, StepTiming, TimeBudget
from bertcore.training.checkpoint import CheckpointDir
from bertcore.training.evaluation import EvalMetrics
from bertcore.training.records import TrainingRecord
from bertcore.training.step import StepResult, StepRunner
from bertcore.training.stopping import StopRequest, TrainingInterrupted, signal_name

log = logging.getLogger(__name__)


class NonFiniteLossError(BertError):
    """Too many non-finite steps in a row."""


@dataclass
class TrainResult:
    steps: int
    tokens_seen: int
    skipped_steps: int
    seconds: float
    planned_steps: int  # where the run was planned to end (train.max_minutes may lower it)
    step_timing: StepTiming | None  # what a time budget planned from
    last_train: dict[str, float]
    last_eval: EvalMetrics | None
    checkpoint: Path | None


@dataclass(frozen=True)
class SyncDue:
    """What is due after a step; a step with nothing due never waits on the device."""

    log: bool
    evaluate: bool
    checkpoint: bool
    stop_after: bool  # `stop_after` reached: checkpoint and end the run
    stop: bool  # this process's own stop request (one process only; several vote)

    def __bool__(self) -> bool:
        return self.log or self.evaluate or self.checkpoint or self.stop_after or self.stop


class Trainer:
    """Trains a StepRunner from its step to the planned end of its phase (one `train()` per
    Trainer)."""

    def __init__(
        self,
        runner: StepRunner,
        *,
        record: TrainingRecord | None = None,
        checkpoints: CheckpointDir | None = None,
        meta: Mapping[str, Any] | None = None,
        evaluate: Callable[[BertPretrainingModel], EvalMetrics] | None = None,
        on_step: Callable[[StepResult], None] | None = None,
        on_checkpoint: Callable[[Path], None] | None = None,
        stop_after: int | None = None,
        progress: bool | None = None,
        budget: TimeBudget | None = None,
    ):
        """`meta` goes into every checkpoint's meta.json (the run's identity: `RunIdentity.meta`).
        `evaluate(model)` scores the model every `eval_every` steps and at the end.
        `on_step(result)` is called after every step (reading a number of `result` waits for
        the device). `on_checkpoint(path)` is called on rank 0 after each committed checkpoint.
        `stop_after`: stop (with a checkpoint) after this step, as an interruption would.
        `progress`: a progress bar (None: on a terminal, on rank 0). `budget`: a time budget;
        unless the runner resumed with its timing, the first steps are timed and the total is
        planned once, at the budget's plan step (see `bertcore.training.budget`)."""
        self.runner, self.dist = runner, runner.dist
        self.record = record or TrainingRecord()
        self.checkpoints = checkpoints
        self.meta = dict(meta or {})
        self.evaluate = evaluate
        self.on_step = on_step
        self.on_checkpoint = on_checkpoint
        self.stop_after = stop_after
        self.progress = progress
        self.budget = budget
        # What the loop changes, set up by train(): the plan, and what it has done so far.
        self.total_steps = 0  # where the run is planned to end
        self.step_timing: StepTiming | None = None  # what a time budget planned from
        self.planner: BudgetPlanner | None = None
        self.stop_request: StopRequest | None = None
        self.bar: tqdm | None = None
        self.started = 0.0
        self.last_train: dict[str, float] = {}
        self.last_eval: EvalMetrics | None = None
        self.saved_at: int | None = None  # the step of the last checkpoint saved
        self.saved_path: Path | None = None  # its folder (rank 0)
        self.skipped_reported = 0  # skipped steps reported so far
        self.window_start, self.window_tokens_base = 0.0, 0.0  # the logging window's start
        self.stopped = False  # stop_after reached

    # ---------------------------------------------------------------------- the loop
    def train(self) -> TrainResult:
        """Train to the planned end, evaluate and checkpoint there; or to `stop_after`.
        Raises TrainingInterrupted after a SIGTERM/Ctrl-C (checkpoint written) and
        NonFiniteLossError when the loss stays non-finite."""
        self.begin()
        with StopRequest() as self.stop_request, self.progress_bar() as self.bar:
            try:
                while self.runner.step < self.total_steps and not self.stopped:
                    self.train_epoch()
            except DataWorkerDied as died:
                raise self.lost_worker(died) from None
            if not self.stopped:
                self.run_eval()
                self.save_checkpoint(self.runner.read_counters())
        return self.result()

    def begin(self) -> None:
        """The clock, the counters and the plan at the start of the run."""
        runner = self.runner
        self.started = time.perf_counter()
        counters = runner.read_counters()
        self.skipped_reported = counters["skipped_steps"]
        self.window_start, self.window_tokens_base = self.started, counters["tokens"]
        self.last_train = self.record.train.last_row()  # resumed at the end: not empty
        self.total_steps, self.step_timing = runner.configured_steps, runner.recorded_timing
        if self.budget is not None:
            self.planner = BudgetPlanner(
                self.budget, runner.configured_steps, runner.step, runner.recorded_timing,
                synchronize=runner.synchronize, broadcast=self.dist.broadcast_object)
            self.total_steps = self.planner.total  # a resumed run: re-planned, not re-timed

    def train_epoch(self) -> None:
        """The steps from the data position to the end of its epoch, or of the run."""
        epoch, start = self.runner.data_position()
        for micro_batches in self.runner.batches.iterate(epoch, start):
            result = self.runner.train_step(micro_batches, stop=self.stop_request.requested,
                                            total_steps=self.total_steps)
            self.bar.update(1)
            if self.on_step:
                self.on_step(result)
            self.plan(self.runner.step)
            due = self.due(self.runner.step)
            if due:
                self.sync(due, result)
            if self.stopped or self.runner.step >= self.total_steps:
                return

    def due(self, step: int) -> SyncDue:
        cfg, total = self.runner.config, self.total_steps
        return SyncDue(
            log=step % cfg.log_every == 0 or step == total,
            evaluate=bool(cfg.eval_every) and step % cfg.eval_every == 0 and step != total,
            checkpoint=bool(cfg.checkpoint_every) and step % cfg.checkpoint_every == 0,
            stop_after=self.stop_after is not None and step >= self.stop_after,
            # One process knows of its own stop request at once; several agree on it at the
            # sync steps they all share.
            stop=self.stop_request.requested and not self.dist.enabled,
        )

    def sync(self, due: SyncDue, result: StepResult) -> None:
        """A sync step: read the device's counters (once), check health, then log, evaluate,
        checkpoint and stop as due."""
        counters = self.runner.read_counters()
        self.check_health(counters)
        stop = due.stop or (self.dist.enabled and counters["stop_votes"] > 0)
        if due.log:
            self.log_train(counters, result)
        if due.evaluate:
            self.run_eval()
        if due.checkpoint:
            self.save_checkpoint(counters)
        if stop or due.stop_after:
            self.save_checkpoint(counters)
        if stop:
            raise self.interrupted()
        self.stopped = due.stop_after

    # ---------------------------------------------------------------- what a step does
    def plan(self, step: int) -> None:
        """Let a time budget plan the end after `step` (once, at its plan step)."""
        total = self.planner.after_step(step) if self.planner is not None else None
        if total is None:
            return
        self.total_steps, self.step_timing = total, self.planner.timing
        self.bar.total = total
        if self.dist.is_main:
            level, line = self.planner.announcement()
            log.log(level, "%s", line)

    def check_health(self, counters: Mapping[str, float]) -> None:
        """Report newly skipped steps; stop a run whose loss stays non-finite."""
        step, skipped = self.runner.step, counters["skipped_steps"]
        if skipped > self.skipped_reported:
            log.warning("%d step(s) skipped up to step %d: loss or gradient not finite "
                        "(%d skipped in all)", skipped - self.skipped_reported, step, skipped)
            self.skipped_reported = skipped
        worst = int(counters["worst_nonfinite_run"])
        if worst >= self.runner.config.max_nonfinite_steps:
            last = self.checkpoints.latest() if self.checkpoints else None
            kept = f"checkpoint {last.path} is kept" if last else "no checkpoint exists"
            raise NonFiniteLossError(
                f"loss or gradient not finite for {worst} steps in a row (up to step "
                f"{step}): lower train.learning_rate or use train.precision "
                f"fp32/bf16; {kept}"
            )

    def log_train(self, counters: Mapping[str, float], result: StepResult) -> None:
        """A row of the train log: the means over the window since the last row."""
        runner, now = self.runner, time.perf_counter()
        window = runner.take_window(counters)
        tokens = window["tokens"] - self.window_tokens_base
        tokens_per_s = tokens / max(now - self.window_start, 1e-9)
        self.window_start, self.window_tokens_base = now, 0.0
        self.last_train = {
            "step": runner.step,
            "epoch": round(runner.epochs_done(), 4),
            **{k: window[k] for k in ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss",
                                      "nsp_accuracy", "grad_norm")},
            "learning_rate": result.learning_rate,
            "skipped_steps": int(counters["skipped_steps"]),
        }
        if self.dist.is_main:  # speed: a measurement of the machine, so MLflow's, not the TSV's
            self.record.log_train(self.last_train, extra={
                "train/tokens_per_s": tokens_per_s,
                "tokens_per_s_per_process": tokens_per_s / self.dist.world_size})
        self.bar.set_postfix(loss=f"{window['loss']:.3f}", lr=f"{result.learning_rate:.2e}",
                             tok_s=f"{tokens_per_s:,.0f}", refresh=False)

    def run_eval(self) -> None:
        if self.evaluate is None:
            return
        step, e = self.runner.step, self.evaluate(self.runner.raw_model)
        self.last_eval = e
        if self.dist.is_main:
            self.record.log_eval(step, e)
            # before the first logged row there is no train loss to show: say nothing of it
            last = self.last_train
            train = f"train loss {last['loss']:.4f}; " if "loss" in last else ""
            log.info("step %d/%d: %sval MLM loss %.4f accuracy %.4f, NSP accuracy %.4f",
                     step, self.total_steps, train, e.mlm_loss, e.mlm_accuracy, e.nsp_accuracy)

    def save_checkpoint(self, counters: Mapping[str, float]) -> None:
        """A checkpoint of this step, unless one exists or the last steps were not finite."""
        step = self.runner.step
        if counters["nonfinite_in_a_row"]:  # never let a sick state replace a good checkpoint
            log.warning("no checkpoint at step %d: the last steps were not finite", step)
            return
        if self.checkpoints is None or self.saved_at == step:
            return
        self.saved_path = self.runner.save_checkpoint(
            self.checkpoints, self.meta, self.record.texts(), self.total_steps, self.step_timing)
        self.saved_at = step
        if self.saved_path is not None and self.on_checkpoint is not None:
            self.on_checkpoint(self.saved_path)

    # ---------------------------------------------------------------------- the end
    def progress_bar(self) -> tqdm:
        # tqdm's disable=None shows the bar only on a terminal
        progress = self.progress
        disable = (None if self.dist.is_main else True) if progress is None else not progress
        return tqdm(total=self.total_steps, initial=self.runner.step, desc="pretrain",
                    unit="step", dynamic_ncols=True, disable=disable, leave=False)

    def interrupted(self) -> TrainingInterrupted:
        step, signum = self.runner.step, self.stop_request.signum or signal.SIGTERM
        return TrainingInterrupted(
            f"interrupted by {signal_name(signum)} after step {step}: {self.saved()}", signum)

    def lost_worker(self, died: DataWorkerDied) -> BertError:
        """A DataLoader worker died between two steps: the last one is whole, so it is
        checkpointed as on SIGTERM (one process: with several, the others would wait for
        this one in the checkpoint's collectives)."""
        if not self.dist.enabled:
            self.save_checkpoint(self.runner.read_counters())
        return BertError(f"{died} after step {self.runner.step}: {self.saved()}")

    def saved(self) -> str:
        """What a run stopping now leaves to resume from, in words."""
        if self.saved_at == self.runner.step and self.saved_path is not None:
            return f"checkpoint written in {self.saved_path}; run again to resume"
        return "no checkpoint written for this step"

    def result(self) -> TrainResult:
        runner = self.runner
        return TrainResult(
            steps=runner.step,
            tokens_seen=runner.tokens_seen,
            skipped_steps=runner.skipped_steps,
            seconds=time.perf_counter() - self.started,
            planned_steps=self.total_steps,
            step_timing=self.step_timing,
            last_train=self.last_train,
            last_eval=self.last_eval,
            checkpoint=self.saved_path,
        )
