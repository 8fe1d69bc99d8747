"""One fine-tune of a GLUE suite: as a worker process runs it (`fine_tune_job`: the
fine-tune, its dev predictions and scores, its record saved), and as the suite's process takes
its result, in the suite's order (`log_fine_tune`: its MLflow run).

`fine_tune_job` is a pure function of its `GlueJob`: the encoder's weights, the task's
encoded examples, the recipe with its seed, the length, the device and the thread count. It
touches nothing of the suite but the record it writes, a folder of its own name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertcore.common.errors import BertError
from bertcore.common.shared import Shared
from bertcore.downstream.config import Recipe
from bertcore.downstream.finetune import build_classifier, predict, train_classifier
from bertcore.downstream.glue.metrics import task_metrics, task_score
from bertcore.downstream.glue.records import FinishedRuns, SeedRun, fine_tune_name
from bertcore.downstream.glue.tasks import GlueTask
from bertcore.downstream.workers import computing_with, sendable_errors
from bertcore.saved import hf

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GlueJob:
    """A fine-tune of `task` with `recipe`, to be saved as `name` in `runs_dir`."""

    task: GlueTask
    recipe: Recipe
    name: str
    encoder: Shared | None  # the pretrained encoder (BertPretrainingModel)
    inputs: Shared | None  # the task's examples (suite.TaskInputs: `encoded`)
    runs_dir: Path
    tokenizer_dir: Path  # its files go beside each saved model
    device: str
    pad_id: int
    threads: int
    in_worker: bool  # no progress bar

    @property
    def run_name(self) -> str:
        return fine_tune_name(self.task.key, self.recipe)


@dataclass
class FineTuned:
    """What a fine-tune gives back: its run, saved (None when it diverged: `diverged` names
    the first weight not finite), and its training curve [(step, loss)]."""

    run: SeedRun | None
    curve: list[tuple[int, float]] = field(default_factory=list)
    diverged: str | None = None


def fine_tune_job(job: GlueJob) -> FineTuned:
    """Fine-tune the encoder on the task with the job's recipe, score it on every dev
    evaluation, and save it (its model, dev predictions and scores) as `job.name`; the model
    then leaves memory."""
    with sendable_errors(job.in_worker):
        return _fine_tune(job)


def _fine_tune(job: GlueJob) -> FineTuned:
    computing_with(job.threads)
    encoder, encoded = job.encoder.get(), job.inputs.get().encoded
    device, task, recipe = torch.device(job.device), job.task, job.recipe
    classifier = build_classifier(encoder.config, list(task.labels), encoder, recipe.seed)
    curve: list[tuple[int, float]] = []
    steps, _ = train_classifier(classifier, encoded.train, recipe, device, job.pad_id,
                                name=job.run_name, bar=not job.in_worker,
                                on_log=lambda step, loss: curve.append((step, loss)))
    if (bad := hf.first_nonfinite(classifier.state_dict())) is not None:
        return FineTuned(None, curve, bad)
    dev_predictions = {name: predict(classifier, rows, device, job.pad_id)
                       for name, rows in encoded.dev.items()}
    metrics = {name: task_metrics(task, dev_predictions[name], encoded.dev[name].labels)
               for name in encoded.dev}
    truncated = encoded.train.truncated + sum(rows.truncated for rows in encoded.dev.values())
    done = SeedRun(recipe, metrics, task_score(task, metrics), steps, truncated,
                   dev_predictions)
    saved = FinishedRuns(job.runs_dir).save(job.name, done, lambda folder: (
        hf.export_hf_classifier(classifier.cpu(), folder, job.tokenizer_dir)))
    return FineTuned(saved, curve)


def log_fine_tune(job: GlueJob, done: FineTuned, start_run: Any, finished: Path) -> SeedRun:
    """The fine-tune's MLflow run (`start_run(name, params)`: its params, training curve and
    dev scores), logged as the suite takes it; a fine-tune that diverged stops the suite (its
    run FAILED), the fine-tunes finished so far staying in `finished`."""
    recipe = job.recipe
    run = start_run(job.run_name, {"task": job.task.key, "learning_rate": recipe.learning_rate,
                                   "batch_size": recipe.batch_size, "epochs": recipe.epochs,
                                   "seed": recipe.seed})
    try:
        for step, loss in done.curve:
            run.log_metrics({"train_loss": loss}, step=step)
        if done.run is None:
            raise BertError(f"glue: {job.task.key} diverged with seed {recipe.seed} at learning "
                            f"rate {recipe.learning_rate:g} (NaN or infinite weights: "
                            f"{done.diverged}); lower glue.learning_rate. No output was "
                            f"written; the fine-tunes finished so far are in {finished}, and "
                            "the next run reuses them")
        run.log_results({"score": done.run.score, **{
            f"{name}_{metric}": value for name, values in done.run.metrics.items()
            for metric, value in values.items()}}, step=done.run.steps)
    except BaseException:
        run.finish("FAILED")
        raise
    run.finish("FINISHED")
    return done.run
