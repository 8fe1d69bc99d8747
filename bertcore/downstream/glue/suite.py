"""GLUE in one call: each task of a GLUE folder fine-tuned `glue.seeds` times (for each recipe
of Turc et al.'s grid too, the best on dev), scored on dev with the task's official metrics.

The fine-tuning is the `finetune` stage's loop (`bertcore.downstream.finetune`). A task whose
files are unusable is a `TaskFailure` with its one-line reason, found before any training, and
the other tasks run: a task that fails never loses the scores of those that ran. Each
fine-tune is saved as it finishes (`records`), its model on disk and out of memory, and one
that an earlier run of the same model, data and recipe finished is reused.

The fine-tunes of every task run `glue.workers` at once, each in a worker process
(`fine_tunes.fine_tune_job`, a pure function of its job), and are taken in the suite's order
(task, recipe, seed), whatever finishes first: the outputs do not depend on the workers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import torch

from bertcore.common.digests import source_digest
from bertcore.common.errors import BertError
from bertcore.common.shared import Shared
from bertcore.downstream.config import Recipe
from bertcore.downstream.finetune import predict
from bertcore.downstream.glue.config import GLUE_JOB_MODULE, GlueConfig
from bertcore.downstream.glue.fine_tunes import GlueJob, fine_tune_job, log_fine_tune
from bertcore.downstream.glue.inputs import (
    GlueModel,
    TaskData,
    TaskInputs,
    read_task,
    require_readable_task,
)
from bertcore.downstream.glue.metrics import Spread, spread
from bertcore.downstream.glue.records import FinishedRuns, SeedRun
from bertcore.downstream.glue.tasks import GlueTask
from bertcore.downstream.workers import fine_tune_pool, shared_encoder
from bertcore.saved import hf

log = logging.getLogger(__name__)


@dataclass
class TaskResult:
    """A task's seeds under the recipe chosen (the only one, or the grid's best median), and
    every recipe tried with its median score."""

    data: TaskData
    runs: list[SeedRun]
    tried: list[tuple[Recipe, float]]

    @property
    def task(self) -> GlueTask:
        return self.data.task

    def spread(self, eval_name: str | None = None, metric: str | None = None) -> Spread:
        """Over seeds: the task's score, or one metric of one evaluation."""
        if metric is None:
            return spread([run.score for run in self.runs])
        return spread([run.metrics[eval_name][metric] for run in self.runs])

    def median_run(self) -> SeedRun:
        """The seed whose score is the median (the lower middle one for an even count): its
        predictions and model are the ones written."""
        ranked = sorted(self.runs, key=lambda run: (run.score, run.recipe.seed))
        return ranked[(len(ranked) - 1) // 2]


@dataclass
class TaskFailure:
    task: GlueTask
    reason: str


@dataclass
class Suite:
    """What every fine-tune of a suite shares: the model, the params, the device, the MLflow
    runs and the finished fine-tunes on disk."""

    model: GlueModel
    config: GlueConfig
    device: torch.device
    # opens the run a fine-tune is logged in (`name`, `params`): an MLflow run nested under
    # the suite's, or one that logs nothing; it has log_metrics, log_results and finish (Tracker's)
    start_run: Callable[[str, dict], Any]
    finished: FinishedRuns
    code: str = field(default_factory=lambda: fine_tuning_code())  # what computes a result
    workers: int = 1  # fine-tunes at once, each in a process of its own

    def job(self, task: GlueTask, recipe: Recipe, name: str, encoder: Shared | None,
            inputs: Shared | None, in_worker: bool = False) -> GlueJob:
        """A fine-tune of `task` with `recipe`, saved as `name` (`encoder`, `inputs`: what it
        fine-tunes on; None for a job only logged, run already)."""
        return GlueJob(task, recipe, name, encoder, inputs, self.finished.folder,
                       self.model.tokenizer_dir, str(self.device), self.model.pad_id,
                       torch.get_num_threads(), in_worker)

    def identity(self, data: TaskData) -> dict[str, Any]:
        """What a fine-tune's result depends on besides its recipe (seed included): the
        model's weights and tokenizer, the task's examples, the length, the device's kind and
        the code. Each is part of its record's name: a change to any fine-tunes anew."""
        return {**self.model.identity(), "data": data.digest(),
                "max_seq_length": self.config.max_seq_length, "device": self.device.type,
                "code": self.code}


# the packages whose code fine-tunes and scores (those glue's stage depends on in dvc.yaml)
FINE_TUNING_CODE = ("bertcore.common", "bertcore.data.corpus", "bertcore.data.vocab",
                    "bertcore.model", "bertcore.saved", "bertcore.downstream")


def fine_tuning_code() -> str:
    """The code a fine-tune's result depends on: the source of FINE_TUNING_CODE, and torch."""
    return f"{source_digest(FINE_TUNING_CODE)} torch {torch.__version__}"


@dataclass
class TaskPlan:
    """A task's fine-tunes: every recipe with every seed, each found among the records of an
    earlier run or to be run (`jobs`), in the order the suite takes them."""

    data: TaskData
    inputs: TaskInputs
    recipes: list[Recipe]
    seeded: list[list[Recipe]]  # per recipe, its seeds
    names: dict[Recipe, str]  # each seeded recipe's record name
    runs: dict[Recipe, SeedRun]  # those found or finished so far
    reused: int = 0

    def jobs(self, suite: Suite, encoder: Callable[[], Shared], folder: Path | None
             ) -> Iterator[GlueJob]:
        """The fine-tunes not found, for the suite's pool (`folder`: where it shares the
        encoder, `encoder()`, and the task's examples with its workers; None: in this
        process). Nothing is encoded or shared for a task all found."""
        missing = [recipe for seeded in self.seeded for recipe in seeded
                   if recipe not in self.runs]
        if missing:
            inputs = Shared(self.inputs, folder)
            yield from (suite.job(self.data.task, recipe, self.names[recipe], encoder(),
                                  inputs, in_worker=folder is not None) for recipe in missing)


def plan_task(data: TaskData, suite: Suite) -> TaskPlan:
    """Every recipe with every seed of a task, each found where an earlier run finished it."""
    identity, rows = suite.identity(data), data.rows()
    recipes = suite.config.recipes(suite.model.encoder.config.hidden_size)
    seeded = [[replace(recipe, seed=suite.config.seed + i) for i in range(suite.config.seeds)]
              for recipe in recipes]
    names = {recipe: suite.finished.name(data.task.key, recipe, identity)
             for runs in seeded for recipe in runs}
    reused_before = suite.finished.reused
    runs = {recipe: found for recipe, name in names.items()
            if (found := suite.finished.find(name, rows)) is not None}
    return TaskPlan(data, TaskInputs(data, suite.model, suite.config.max_seq_length), recipes,
                    seeded, names, runs, suite.finished.reused - reused_before)


def run_tasks(readable: list[TaskData], suite: Suite) -> Iterator[TaskResult]:
    """Every task's fine-tunes, `suite.workers` at once, in one stream over the tasks (a
    worker free at a task's end starts the next task's); each task's result once its last
    fine-tune is in, made while the workers go on with the next."""
    plans = [plan_task(data, suite) for data in readable]
    with fine_tune_pool(suite.workers, GLUE_JOB_MODULE) as (run, folder):
        # the encoder shared once a fine-tune needs it (a suite all reused writes nothing)
        encoder = cache(lambda: shared_encoder(suite.model.encoder, folder))
        jobs = (job for plan in plans for job in plan.jobs(suite, encoder, folder))
        done = run(fine_tune_job, jobs)
        for plan in plans:
            for recipe in [r for seeded in plan.seeded for r in seeded if r not in plan.runs]:
                job = suite.job(plan.data.task, recipe, plan.names[recipe], None, None)
                plan.runs[recipe] = log_fine_tune(job, next(done), suite.start_run,
                                                  suite.finished.folder)
            yield finish_task(plan, suite)


def run_task(data: TaskData, suite: Suite) -> TaskResult:
    """One task's fine-tunes (`run_tasks`)."""
    [result] = run_tasks([data], suite)  # to its end: its pool shut down, not left open
    return result


def finish_task(plan: TaskPlan, suite: Suite) -> TaskResult:
    """The recipe of the best median score is the task's, and only its median seed keeps its
    model, with which the test files are predicted."""
    best: list[SeedRun] | None = None
    tried: list[tuple[Recipe, float]] = []
    for recipe, seeded in zip(plan.recipes, plan.seeded, strict=True):
        runs = [plan.runs[seed] for seed in seeded]
        median = spread([run.score for run in runs]).median
        tried.append((recipe, median))
        if best is None or median > spread([run.score for run in best]).median:
            best = runs
        log.info("%s: lr %g, batch %d: median score %.4f over %d seeds", plan.data.task.key,
                 recipe.learning_rate, recipe.batch_size, median, len(runs))
    result = TaskResult(plan.data, best, tried)
    # a median seed reused without its model (dropped when an earlier run's median was another
    # seed) is fine-tuned again, here: the same recipe gives the same model
    while (median := result.median_run()).model_dir is None:
        job = suite.job(plan.data.task, median.recipe, plan.names[median.recipe],
                        shared_encoder(suite.model.encoder, None), Shared(plan.inputs, None))
        result.runs[result.runs.index(median)] = log_fine_tune(
            job, fine_tune_job(job), suite.start_run, suite.finished.folder)
    every = list(plan.runs.values())
    suite.finished.drop_models_except([result.median_run()], among=every + result.runs)
    predict_test(result, plan.inputs, suite)
    if plan.reused:
        log.info("glue: %s: %d of %d fine-tunes reused from %s (finished by an earlier run "
                 "of the same model, data and recipe)", plan.data.task.key, plan.reused,
                 len(every), suite.finished.folder)
    return result


def predict_test(result: TaskResult, inputs: TaskInputs, suite: Suite) -> None:
    """The median seed's predictions of the task's test rows (its leaderboard files), made
    with its model as saved: the same weights, bit for bit, as when it was fine-tuned."""
    if not result.data.test:
        return
    median = result.median_run()
    model = suite.model
    classifier = hf.load_classifier(median.model_dir, model.encoder.config,
                                    list(result.task.labels))
    median.test_predictions = {
        name: predict(classifier, rows, suite.device, model.pad_id)
        for name, rows in inputs.encoded.test.items()}


def run_glue(tasks: list[GlueTask], suite: Suite) -> list[TaskResult | TaskFailure]:
    """Read every task's files first (their mistakes in seconds, before any training), then
    fine-tune the tasks that read, in GLUE's order. A tokenizer that cannot read a task's
    text stops the suite before any training."""
    readable: list[TaskData | TaskFailure] = []
    for task in tasks:
        try:
            readable.append(read_task(task, suite.config))
        except BertError as error:
            readable.append(TaskFailure(task, str(error)))
            log.warning("glue: %s is left out: %s", task.key, error)
    for data in readable:
        if not isinstance(data, TaskFailure):
            require_readable_task(data, suite.model, suite.config)
    # to its end (each task finished as its last fine-tune comes in): its pool shut down
    results = iter(list(run_tasks([data for data in readable
                                   if not isinstance(data, TaskFailure)], suite)))
    return [data if isinstance(data, TaskFailure) else next(results) for data in readable]
