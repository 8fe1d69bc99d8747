"""GLUE's metrics (scikit-learn's, and a regression's of `downstream/metrics.py`), its
per-task score and its average, and the spread of a score over seeds. Values are plain
floats, as fractions (accuracy 0..1, correlations -1..1); a report scales them.
scikit-learn is imported where a metric is computed (`downstream/metrics.py` says why)."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bertcore.downstream.glue.tasks import GLUE_TASKS, GlueTask
from bertcore.downstream.metrics import pearson, spearman

log = logging.getLogger(__name__)


def _matthews(task: GlueTask, predictions: Sequence, golds: Sequence) -> float:
    from sklearn.metrics import matthews_corrcoef

    if len(set(golds)) < 2:
        log.warning("%s: Matthews correlation of a dev set of one class is undefined, counted "
                    "as 0", task.key)
    return matthews_corrcoef(golds, predictions)


def _accuracy(task: GlueTask, predictions: Sequence, golds: Sequence) -> float:
    from sklearn.metrics import accuracy_score

    return accuracy_score(golds, predictions)


def _f1(task: GlueTask, predictions: Sequence, golds: Sequence) -> float:
    from sklearn.metrics import f1_score

    return f1_score(golds, predictions, pos_label=task.labels.index("1"), average="binary",
                    zero_division=0.0)


_METRICS: dict[str, Callable[[GlueTask, Sequence, Sequence], float]] = {
    "matthews": _matthews,
    "accuracy": _accuracy,
    "f1": _f1,
    "pearson": lambda task, predictions, golds: pearson(predictions, golds, task.key),
    "spearman": lambda task, predictions, golds: spearman(predictions, golds, task.key),
}


def task_metrics(task: GlueTask, predictions: Sequence, golds: Sequence) -> dict[str, float]:
    """The task's metrics (task.metrics) of predictions against golds: class indices for
    classification, floats for regression. F1 is the positive class's ("1")."""
    if len(predictions) != len(golds) or not len(golds):
        raise ValueError(f"{task.key}: {len(predictions)} predictions for {len(golds)} golds")
    return {name: float(_METRICS[name](task, predictions, golds)) for name in task.metrics}


def task_score(task: GlueTask, metrics_by_eval: Mapping[str, Mapping[str, float]]) -> float:
    """GLUE's score of a task: the mean of its metrics, over its evaluations (MNLI: the mean of
    mnli_m's and mnli_mm's)."""
    missing = [name for name in task.dev if name not in metrics_by_eval]
    if missing:
        raise ValueError(f"{task.key}: no metrics for {', '.join(missing)}")
    return statistics.fmean(
        statistics.fmean(metrics_by_eval[name][metric] for metric in task.metrics)
        for name in task.dev)


def glue_score(scores: Mapping[str, float]) -> tuple[float, list[str]]:
    """The mean of the tasks' scores (unweighted, as the GLUE paper averages them) and the keys
    of the tasks it averaged, in GLUE's order: with fewer than nine, not GLUE's own score."""
    unknown = [key for key in scores if key not in GLUE_TASKS]
    if unknown or not scores:
        raise ValueError(f"no GLUE score of tasks {list(scores)}")
    keys = [key for key in GLUE_TASKS if key in scores]
    return statistics.fmean(scores[key] for key in keys), keys


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float
    values: tuple[float, ...]


def spread(values: Sequence[float]) -> Spread:
    """The median, lowest and highest of a score over seeds."""
    if not values:
        raise ValueError("no values to spread")
    values = tuple(float(v) for v in values)
    return Spread(statistics.median(values), min(values), max(values), values)
