"""What each GLUE fine-tune got on each dev example (`metrics/glue_items.json`,
`bertcore.common.outcomes`): per task and evaluation a set of items (the dev file's examples),
per figure of metrics/glue.json the gold labels and every seed's predictions, from which the
figure (the median over seeds, x100) has its 95% interval over seeds and dev examples together.

A task's metrics map to the statistics of `bertcore.common.intervals`: accuracy is the mean
of 0/1 outcomes (`x`), F1 (of class "1"), Matthews, Pearson and Spearman read `label` and
`pred` (class indices; STS-B's floats: `as_scored`). A task's `score` has its figure where
it is the task's one metric on one evaluation (CoLA, SST-2, QNLI, RTE, WNLI); the scores that
average several (MRPC, QQP, STS-B, MNLI) and the GLUE score have none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bertcore.common.intervals import Runs
from bertcore.common.outcomes import Figure, ItemSet, StageItems, items_digest
from bertcore.downstream.glue.suite import TaskResult
from bertcore.downstream.glue.tasks import GlueExample, GlueTask
from bertcore.downstream.metrics import CONSTANT_SPAN

SCALE = 100.0  # glue.json's figures are GLUE's scale, x100
STATISTIC = {"accuracy": "mean", "f1": "f1", "matthews": "mcc", "pearson": "pearson",
             "spearman": "spearman"}


def glue_items(results: Sequence[TaskResult], max_seq_length: int
               ) -> tuple[StageItems, dict[str, str]]:
    """The per-item outcomes of every task whose fine-tunes all hold their dev predictions,
    and, per task that has none, why (a fine-tune reused from a record without them: nothing
    is fine-tuned again for an interval)."""
    items = StageItems("glue")
    missing: dict[str, str] = {}
    for result in results:
        reason = missing_predictions(result)
        if reason:
            missing[result.task.key] = reason
            continue
        for name, rows in result.data.dev.items():
            items.sets[set_name(result.task, name)] = ItemSet(
                dev_digest(result.task, name, rows, max_seq_length), len(rows),
                f"{result.task.folder} {name} example")
        items.figures |= task_figures(result)
    return items, missing


def set_name(task: GlueTask, eval_name: str) -> str:
    """`cola_dev`, `mnli_mnli_m`: as its dev predictions' file is named."""
    return f"{task.key}_{eval_name}"


def dev_digest(task: GlueTask, eval_name: str, rows: Sequence[GlueExample],
               max_seq_length: int) -> str:
    """The identity of a dev set: its examples (texts, labels) in order and the length they
    were cut to."""
    return items_digest("glue", task.key, eval_name, max_seq_length,
                        [(row.text, row.pair, row.label) for row in rows])


def missing_predictions(result: TaskResult) -> str | None:
    """Why the task's fine-tunes cannot give its intervals (None: they can)."""
    for run in result.runs:
        for name, rows in result.data.dev.items():
            found = run.dev_predictions.get(name)
            if found is None or len(found) != len(rows):
                return (f"no interval: the fine-tune of seed {run.recipe.seed} has no dev "
                        f"predictions of {name}")
    return None


def gold_labels(task: GlueTask, rows: Sequence[GlueExample]) -> np.ndarray:
    """Class indices in the order of the task's labels (STS-B: its scores), as the
    fine-tunes were scored against."""
    if task.is_regression:
        return np.asarray([float(row.label) for row in rows], dtype=np.float64)
    return np.asarray([task.labels.index(row.label) for row in rows], dtype=np.int64)


def as_scored(task: GlueTask, predictions) -> np.ndarray:
    """A seed's predictions as its metric counts them: a regression's that span less than
    `CONSTANT_SPAN` (float noise about one value, whose correlation GLUE's metric counts as 0)
    as that one value, their mean, so that every resample counts them as constant too."""
    predictions = np.asarray(predictions)
    if task.is_regression and np.ptp(predictions) < CONSTANT_SPAN:
        return np.full(predictions.shape, np.mean(predictions), dtype=np.float64)
    return predictions


def task_figures(result: TaskResult) -> dict[str, Figure]:
    """Per metric column of glue.json (`cola.matthews`, `mnli.mnli_m_accuracy`) and, for a
    task of one metric on one evaluation, its `score`: the golds and each seed's predictions."""
    task, seeds = result.task, tuple(str(run.recipe.seed) for run in result.runs)
    figures = {}
    for column, name, metric in task.columns():
        label = gold_labels(task, result.data.dev[name])
        pred = np.stack([as_scored(task, run.dev_predictions[name]) for run in result.runs])
        if metric == "accuracy":
            columns = {"x": (pred == label).astype(np.int64)}
        else:
            columns = {"label": np.broadcast_to(label, pred.shape), "pred": pred}
        figures[f"{task.key}.{column}"] = Figure(
            set_name(task, name), Runs.of_one(STATISTIC[metric], over_runs="median", **columns),
            True, seeds, SCALE)
    if len(figures) == 1:
        figures[f"{task.key}.score"] = next(iter(figures.values()))
    return figures


def no_interval(results: Sequence[TaskResult], missing: dict[str, str]) -> dict[str, str]:
    """Why the figures of glue.json that have no interval have none (the details say so)."""
    notes = dict(missing)
    for result in results:
        if result.task.key not in missing and len(result.task.columns()) > 1:
            notes[f"{result.task.key}.score"] = ("none drawn: the median over seeds of the "
                                                 "mean of several metrics")
    if results:
        notes["score"] = "none drawn: the mean of the tasks' medians"
    return notes
