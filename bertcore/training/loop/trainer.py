"""The training loop: `Trainer.train()` runs a StepRunner's steps to the planned end, with
logging, periodic evaluation, checkpoints and stopping.

The data position, (epoch, step within it), follows from the step number
(`PhaseSteps.position`; each epoch's order: `bertcore.training.data.order`), so a checkpoint
plus the RNG states is all that resuming needs: the resumed run draws the same batches, masks
and dropout as an uninterrupted one.

The Trainer trains to `end`, the step the run's plan (`bertcore.training.run.plan`) ends the
phase at, and steps at `learning_rate(step)`, the phase's schedule built once from the same plan
(`bertcore.common.schedule.StepSchedule`, nanoGPT's `get_lr(it)`); a time budget without a
timing moves both once, after its first steps (`bertcore.training.loop.budget`). Each
checkpoint records the end. The StepRunner steps, the Checkpointer saves.
What the loop changes is small and owned elsewhere: the step and the run's
counters (`TrainingState`), the logging window (`LoggingWindow`, both on the StepRunner) and
the last checkpoint written (`Checkpointer`, which also decides when one is due).

The host reads the device only on "sync steps": steps that log (every `log_every`, and the
run's last), evaluate (`eval_every`), checkpoint (`checkpoint_every`) or reach `stop_after`,
and, with one process, the step after which a stop was requested. `Trainer.sync` does what
such a step does, in order: read the counters, check health, log, evaluate, checkpoint, stop.
Everything that needs the device's numbers waits for them:
- a non-finite step is skipped on the device at once (see `bertcore.training.loop.step`), but it is
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from bertcore.common.errors import BertError
from bertcore.common.schedule import StepSchedule
from bertcore.model.bert import BertPretrainingModel
from bertcore.training.data.batches import DataWorkerDied
from bertcore.training.evaluation.metrics import EvalMetrics
from bertcore.training.loop.budget import BudgetPlanner, StepTiming, TimeBudget
from bertcore.training.loop.checkpointer import Checkpointer
from bertcore.training.loop.records import TrainingRecord
from bertcore.training.loop.step import StepResult, StepRunner
from bertcore.training.loop.stopping import StopRequest, TrainingInterrupted

log = logging.getLogger(__name__)


class NonFiniteLossError(BertError):
    """Too many non-finite steps in a row."""


@dataclass
class TrainResult:
    steps: int
    tokens_seen: int
    skipped_steps: int
    planned_steps: int  # where the run was planned to end (train.max_minutes may lower it)
    step_timing: StepTiming | None  # what a time budget planned from
    last_train: dict[str, float]
    last_eval: EvalMetrics | None
    checkpoint: Path | None


class Trainer:
    """Trains a StepRunner from its step to the planned end of its phase (one `train()` per
    Trainer)."""

    def __init__(
        self,
        runner: StepRunner,
        *,
        end: int | None = None,
        learning_rate: StepSchedule | None = None,
        timing: StepTiming | None = None,
        record: TrainingRecord | None = None,
        checkpointer: Checkpointer | None = None,
        evaluate: Callable[[BertPretrainingModel], EvalMetrics] | None = None,
        on_step: Callable[[StepResult], None] | None = None,
        stop_after: int | None = None,
        progress: bool | None = None,
        budget: TimeBudget | None = None,
    ):
        """`end`: the step the plan ends the phase at, and `learning_rate`: the rate of each
        step, on a schedule ending there (None: as the runner's params set them). `budget`: a
        time budget; without `timing` (what the plan was made from, as the checkpoint the
        runner resumed from recorded) the first steps are timed and the end is planned once,
        at the budget's plan step (see `bertcore.training.loop.budget`). `checkpointer`:
        where and when checkpoints are written (None: never). `evaluate(model)` scores the
        model every `eval_every` steps and at the end. `on_step(result)` is called after
        every step (reading a number of `result` waits for the device). `stop_after`: stop
        (with a checkpoint) after this step, as an interruption would. `progress`: a
        progress bar (None: on a terminal, on rank 0)."""
        self.runner, self.dist = runner, runner.dist
        self.record = record or TrainingRecord()
        self.checkpointer = checkpointer or Checkpointer(None)
        self.evaluate = evaluate
        self.on_step = on_step
        self.stop_after = stop_after
        self.progress = progress
        self.end = runner.phase.configured_end() if end is None else end  # as planned so far
        self.learning_rate = learning_rate or runner.config.rate_schedule(runner.phase.start,
                                                                          self.end)
        if self.learning_rate.end != self.end:
            raise ValueError(f"a schedule ending at step {self.learning_rate.end} for a run "
                             f"ending at step {self.end}")
        self.timing = timing  # what a time budget planned from
        self.planner = None if budget is None or timing is not None else BudgetPlanner(
            budget, self.end, runner.step, synchronize=runner.synchronize,
            broadcast=self.dist.broadcast_object)
        # What the loop has done so far, set up by train().
        self.last_train: dict[str, float] = {}
        self.last_eval: EvalMetrics | None = None
        self.skipped_reported = 0  # skipped steps reported so far
        self.stopped = False  # stop_after reached

    # ---------------------------------------------------------------------- the loop
    def train(self) -> TrainResult:
        """Train to the planned end, evaluate and checkpoint there; or to `stop_after`.
        Raises TrainingInterrupted after a SIGTERM/Ctrl-C (checkpoint written) and
        NonFiniteLossError when the loss stays non-finite."""
        self.begin()
        with StopRequest() as stop, self.progress_bar() as bar:
            try:
                while self.runner.step < self.end and not self.stopped:
                    self.train_epoch(stop, bar)
            except DataWorkerDied as died:
                raise self.lost_worker(died) from None
            if not self.stopped:
                self.run_eval()
                self.save_checkpoint(self.runner.read_counters())
        return self.result()

    def begin(self) -> None:
        """The counters and the logging window's clock at the start of the run."""
        counters = self.runner.read_counters()
        self.skipped_reported = counters["skipped_steps"]
        self.runner.window.restart_clock(counters)
        self.last_train = self.record.train.last_row()  # resumed at the end: not empty

    def train_epoch(self, stop: StopRequest, bar: tqdm) -> None:
        """The steps from the data position to the end of its epoch, or of the run."""
        runner = self.runner
        epoch, start = runner.phase.position(runner.step)
        for micro_batches in runner.batches.iterate(epoch, start):
            result = runner.train_step(micro_batches, stop=stop.requested,
                                       learning_rate=self.learning_rate(runner.step))
            bar.update(1)
            if self.on_step:
                self.on_step(result)
            self.plan(runner.step, bar)
            self.sync(result, stop, bar)
            if self.stopped or runner.step >= self.end:
                return

    def sync(self, result: StepResult, stop_request: StopRequest, bar: tqdm) -> None:
        """After a step: on a sync step, read the device's counters (once), check health, then
        log, evaluate, checkpoint and stop as due; a step with nothing due never waits on the
        device."""
        step, cfg, end = self.runner.step, self.runner.config, self.end
        log_due = step % cfg.log_every == 0 or step == end
        evaluate = bool(cfg.eval_every) and step % cfg.eval_every == 0 and step != end
        # The last step's checkpoint comes after the final evaluation (`train`): it then holds
        # the row that rerunning the finished run evaluates again, and keeps its bytes.
        checkpoint = self.checkpointer.due(step) and step != end
        stop_after = self.stop_after is not None and step >= self.stop_after  # then end the run
        # One process knows of its own stop request at once; several agree on it at the sync
        # steps they all share.
        stop = stop_request.requested and not self.dist.enabled
        if not (log_due or evaluate or checkpoint or stop_after or stop):
            return
        counters = self.runner.read_counters()
        self.check_health(counters)
        stop = stop or (self.dist.enabled and counters["stop_votes"] > 0)
        if log_due:
            self.log_train(counters, result, bar)
        if evaluate:
            self.run_eval()
        if checkpoint:
            self.save_checkpoint(counters)
        if stop or stop_after:
            self.save_checkpoint(counters)
        if stop:
            raise self.interrupted(stop_request)
        self.stopped = stop_after

    # ---------------------------------------------------------------- what a step does
    def plan(self, step: int, bar: tqdm) -> None:
        """Let a time budget plan the end after `step` (once, at its plan step): the
        schedule ends there too (the steps so far ran in its warmup, where the end does not
        matter)."""
        end = self.planner.after_step(step) if self.planner is not None else None
        if end is None:
            return
        self.end, self.timing = end, self.planner.timing
        self.learning_rate = self.learning_rate.ending_at(end)
        bar.total = end
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
            folder = self.checkpointer.folder
            last = folder.latest() if folder is not None else None
            kept = f"checkpoint {last.path} is kept" if last else "no checkpoint exists"
            raise NonFiniteLossError(
                f"loss or gradient not finite for {worst} steps in a row (up to step "
                f"{step}): lower train.learning_rate or use train.precision "
                f"fp32/bf16; {kept}"
            )

    def log_train(self, counters: Mapping[str, float], result: StepResult, bar: tqdm) -> None:
        """A row of the train log: the means over the window since the last row."""
        runner = self.runner
        window = runner.window.close(counters, runner.config)
        tokens_per_s = window.pop("tokens_per_s")
        self.last_train = {
            "step": runner.step,
            "epoch": round(runner.phase.epochs_done(runner.step), 4),
            **window,  # loss, mlm_loss, mlm_accuracy, nsp_loss, nsp_accuracy, grad_norm
            "learning_rate": result.learning_rate,
            "skipped_steps": int(counters["skipped_steps"]),
        }
        if self.dist.is_main:  # speed: a measurement of the machine, so MLflow's, not the TSV's
            self.record.log_train(self.last_train, tokens_per_s)
        bar.set_postfix(loss=f"{window['loss']:.3f}", lr=f"{result.learning_rate:.2e}",
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
                     step, self.end, train, e.mlm_loss, e.mlm_accuracy, e.nsp_accuracy)

    def save_checkpoint(self, counters: Mapping[str, float]) -> None:
        self.checkpointer.save(self.runner, counters, self.record, self.end, self.timing)

    # ---------------------------------------------------------------------- the end
    def progress_bar(self) -> tqdm:
        # tqdm's disable=None shows the bar only on a terminal
        progress = self.progress
        disable = (None if self.dist.is_main else True) if progress is None else not progress
        return tqdm(total=self.end, initial=self.runner.step, desc="pretrain",
                    unit="step", dynamic_ncols=True, disable=disable, leave=False)

    def interrupted(self, stop: StopRequest) -> TrainingInterrupted:
        step, signum = self.runner.step, stop.signum or signal.SIGTERM
        return TrainingInterrupted(f"interrupted by {signal.Signals(signum).name} after step "
                                   f"{step}: {self.checkpointer.saved(step)}", signum)

    def lost_worker(self, died: DataWorkerDied) -> BertError:
        """A DataLoader worker died between two steps: the last one is whole, so it is
        checkpointed as on SIGTERM (one process: with several, the others would wait for
        this one in the checkpoint's collectives)."""
        if not self.dist.enabled:
            self.save_checkpoint(self.runner.read_counters())
        step = self.runner.step
        return BertError(f"{died} after step {step}: {self.checkpointer.saved(step)}")

    def result(self) -> TrainResult:
        runner, totals = self.runner, self.runner.state.totals()
        return TrainResult(
            steps=runner.step,
            tokens_seen=totals["tokens_seen"],
            skipped_steps=totals["skipped_steps"],
            planned_steps=self.end,
            step_timing=self.timing,
            last_train=self.last_train,
            last_eval=self.last_eval,
            checkpoint=self.checkpointer.saved_path,
        )
