"""The training loop: steps, logging, periodic evaluation, checkpoints and stopping.

The data position is the step number itself (see `bertcore.training.batches`), so a checkpoint plus
the RNG states is all that resuming needs: the resumed run draws the same batches, masks and
dropout as an uninterrupted one.

The host reads the device only on "sync steps": steps that log (`log_every`), evaluate,
checkpoint, or end the run. Everything that needs the device's numbers waits for them:
- a non-finite step is skipped on the device at once (see `bertcore.training.step`), but it is
  reported, and `max_nonfinite_steps` of them in a row stop the run, at the next sync step
  (the worst run since the last read counts, so no run of bad steps goes unseen); no
  checkpoint is written while the last steps were not finite, so the last good one stays the
  latest;
- with one process, SIGTERM or Ctrl-C stops the run after the current step; with several,
  the processes agree on stopping at the next sync step (the vote travels with each step's
  counts), so they all stop at the same step, up to `log_every - 1` steps later.
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
from bertcore.training.budget import StepTiming, Stopwatch, TimeBudget
from bertcore.training.checkpoint import CheckpointDir
from bertcore.training.evaluation import EvalMetrics
from bertcore.training.records import TrainingRecord
from bertcore.training.step import StepResult, StepRunner
from bertcore.training.stopping import StopRequest, TrainingInterrupted, signal_name

log = logging.getLogger(__name__)


class NonFiniteLossError(BertError):
    """Too many non-finite steps in a row."""


@dataclass
class FitResult:
    steps: int
    tokens_seen: int
    skipped_steps: int
    seconds: float
    planned_steps: int  # where the run was planned to end (train.max_minutes may lower it)
    step_timing: StepTiming | None  # what a time budget planned from
    last_train: dict[str, float]
    last_eval: EvalMetrics | None
    checkpoint: Path | None


def fit(
    trainer: StepRunner,
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
) -> FitResult:
    """Train from `trainer.step` to the total number of steps, with logging, periodic
    evaluation and checkpoints.

    `meta` goes into every checkpoint's meta.json (the run's identity: `RunIdentity.meta`).
    `on_step(result)` is called after every step (reading a number of `result` waits for
    the device). `on_checkpoint(path)` is called on rank 0 after each committed checkpoint.
    `stop_after`: stop (with a checkpoint) after this step, as an interruption would.
    `budget`: a time budget; unless the trainer already has its timing (a resumed run), the
    first steps are timed and the total is planned once, at the budget's plan step (see
    `bertcore.training.budget`); all processes take rank 0's timing.
    Raises TrainingInterrupted after a SIGTERM/Ctrl-C (checkpoint written) and
    NonFiniteLossError when the loss stays non-finite."""
    cfg, dist = trainer.config, trainer.dist
    record = record or TrainingRecord()
    meta = dict(meta or {})
    total = trainer.total_steps
    spe = trainer.batches.steps_per_epoch
    started = time.perf_counter()
    counters = trainer.read_counters()
    skipped_reported = counters["skipped_steps"]
    window_start, window_tokens_base = started, counters["tokens"]
    configured = trainer.start.step + trainer.config.total_steps(spe)
    if budget is not None and trainer.step_timing is not None:  # resumed: re-plan, not re-time
        total = trainer.total_steps = budget.total(configured, trainer.step_timing)
    stopwatch = None
    if budget is not None and trainer.step_timing is None and trainer.step < total:
        stopwatch = Stopwatch(budget, trainer.step)
        if stopwatch.plan_step >= total:
            stopwatch = None  # the run ends before any plan could shorten it
    last_train: dict[str, float] = record.train.last_row()  # resumed at the end: not empty
    last_eval: EvalMetrics | None = None
    saved_at: int | None = None
    saved_path: Path | None = None

    def check_health(counters: Mapping[str, float]) -> None:
        nonlocal skipped_reported
        skipped = counters["skipped_steps"]
        if skipped > skipped_reported:
            log.warning("%d step(s) skipped up to step %d: loss or gradient not finite "
                        "(%d skipped in all)", skipped - skipped_reported, trainer.step, skipped)
            skipped_reported = skipped
        worst = int(counters["worst_nonfinite_run"])
        if worst >= cfg.max_nonfinite_steps:
            last = checkpoints.latest() if checkpoints else None
            kept = f"checkpoint {last.path} is kept" if last else "no checkpoint exists"
            raise NonFiniteLossError(
                f"loss or gradient not finite for {worst} steps in a row (up to step "
                f"{trainer.step}): lower train.learning_rate or use train.precision "
                f"fp32/bf16; {kept}"
            )

    def checkpoint(counters: Mapping[str, float]) -> None:
        nonlocal saved_at, saved_path
        if counters["nonfinite_in_a_row"]:  # never let a sick state replace a good checkpoint
            log.warning("no checkpoint at step %d: the last steps were not finite", trainer.step)
            return
        if checkpoints is not None and saved_at != trainer.step:
            saved_path = trainer.save_checkpoint(checkpoints, meta, record.texts())
            saved_at = trainer.step
            if saved_path is not None and on_checkpoint is not None:
                on_checkpoint(saved_path)

    def run_eval() -> None:
        nonlocal last_eval
        if evaluate is None:
            return
        last_eval = evaluate(trainer.raw_model)
        if dist.is_main:
            record.log_eval(trainer.step, last_eval)
            e = last_eval
            # before the first logged row there is no train loss to show: say nothing of it
            train = f"train loss {last_train['loss']:.4f}; " if "loss" in last_train else ""
            log.info(
                "step %d/%d: %sval MLM loss %.4f accuracy %.4f, NSP accuracy %.4f",
                trainer.step, total, train, e.mlm_loss, e.mlm_accuracy, e.nsp_accuracy,
            )

    def log_train(counters: Mapping[str, float], result: StepResult) -> None:
        nonlocal window_start, window_tokens_base, last_train
        now = time.perf_counter()
        window = trainer.take_window(counters)
        tokens_per_s = (window["tokens"] - window_tokens_base) / max(now - window_start, 1e-9)
        window_start, window_tokens_base = now, 0.0
        step = trainer.step
        last_train = {
            "step": step,
            "epoch": round(trainer.epochs_done(), 4),
            **{k: window[k] for k in ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss",
                                      "nsp_accuracy", "grad_norm")},
            "learning_rate": result.learning_rate,
            "skipped_steps": int(counters["skipped_steps"]),
        }
        if dist.is_main:  # speed: a measurement of the machine, so MLflow's, not the TSV's
            record.log_train(last_train, extra={
                "train/tokens_per_s": tokens_per_s,
                "tokens_per_s_per_process": tokens_per_s / dist.world_size})
        bar.set_postfix(loss=f"{window['loss']:.3f}", lr=f"{result.learning_rate:.2e}",
                        tok_s=f"{tokens_per_s:,.0f}", refresh=False)

    # tqdm's disable=None shows the bar only on a terminal
    disable = (None if dist.is_main else True) if progress is None else not progress
    bar = tqdm(total=total, initial=trainer.step, desc="pretrain", unit="step",
               dynamic_ncols=True, disable=disable, leave=False)
    with StopRequest() as stop, bar:
        while trainer.step < total:
            epoch, start = trainer.data_position()
            for micro_batches in trainer.batches.iterate(epoch, start):
                result = trainer.train_step(micro_batches, stop=stop.requested)
                bar.update(1)
                if on_step:
                    on_step(result)
                step = trainer.step
                if stopwatch is not None and stopwatch.wants_clock(step):
                    trainer.synchronize()
                    timing = stopwatch.read(step)
                    if timing is not None:  # the plan step: fix the end, once
                        timing = StepTiming.from_dict(dist.broadcast_object(timing.to_dict()))
                        stopwatch = None
                        trainer.step_timing = timing
                        total = trainer.total_steps = budget.total(configured, timing)
                        bar.total = total
                        if dist.is_main:
                            describe = budget.describe(configured, timing)
                            if total == step < configured:
                                log.warning("%s", describe)
                            else:
                                log.info("%s", describe)
                log_now = step % cfg.log_every == 0 or step == total
                eval_now = bool(cfg.eval_every) and step % cfg.eval_every == 0 and step != total
                save_now = bool(cfg.checkpoint_every) and step % cfg.checkpoint_every == 0
                stop_after_now = stop_after is not None and step >= stop_after
                # One process knows of its own stop request at once; several agree on it at
                # the sync steps they all share.
                stop_now = stop.requested and not dist.enabled
                if not (log_now or eval_now or save_now or stop_after_now or stop_now):
                    continue  # the host never waited on the device in this step
                counters = trainer.read_counters()
                check_health(counters)
                if dist.enabled and counters["stop_votes"] > 0:
                    stop_now = True
                if log_now:
                    log_train(counters, result)
                if eval_now:
                    run_eval()
                if save_now:
                    checkpoint(counters)
                if stop_now or stop_after_now:
                    checkpoint(counters)
                    if stop_now:
                        signum = stop.signum or signal.SIGTERM
                        if saved_at == step and saved_path is not None:
                            saved = f"checkpoint written in {saved_path}; run again to resume"
                        else:
                            saved = "no checkpoint written for this step"
                        raise TrainingInterrupted(
                            f"interrupted by {signal_name(signum)} after step {step}: {saved}",
                            signum,
                        )
                    return _result(trainer, started, last_train, last_eval, saved_path)
                if step >= total:
                    break
        run_eval()
        checkpoint(trainer.read_counters())
    return _result(trainer, started, last_train, last_eval, saved_path)


def _result(trainer, started, last_train, last_eval, saved_path) -> FitResult:
    return FitResult(
        steps=trainer.step,
        tokens_seen=trainer.tokens_seen,
        skipped_steps=trainer.skipped_steps,
        seconds=time.perf_counter() - started,
        planned_steps=trainer.total_steps,
        step_timing=trainer.step_timing,
        last_train=last_train,
        last_eval=last_eval,
        checkpoint=saved_path,
    )
