"""What the finetune stage reports over its seeds, in the three files of `common/report.py`:

- `metrics/finetune.json`: each model's test scores and the gain (pretrained minus scratch),
  each the median over the seeds, with its 95% interval (`_ci95`) by the bootstrap over the
  seeds and the test items together (`intervals.Runs` of columns [seeds, items], the median
  over runs): how far the median would move with other seeds and other test items of the
  same kind. The gain's interval is paired: both models of a seed, and every seed, scored on
  the same items, resampled together.
- its details: each seed's scores, their spread (min and max over the seeds), the seed whose
  model is written, a paired test over the seeds, the baselines, the data, the training;
- `metrics/finetune_items.json`: per seed and test example, the label and each model's
  prediction, from which the intervals are drawn (`bert compare` reads it).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bertcore.common.intervals import SEED, Estimate, Runs
from bertcore.common.outcomes import Figure, ItemSet, StageItems
from bertcore.common.report import with_items
from bertcore.downstream.config import Recipe
from bertcore.downstream.finetune_runs import Comparison
from bertcore.downstream.finetune_task import FinetuneTask

MODELS = ("pretrained", "scratch", "gain")
# The test over seeds: flipping the sign of each seed's gain (pretrained and scratch swapped
# within a seed) is the paired permutation test of the mean gain; exact (every flip) up to 13
# seeds. With n seeds its smallest two-sided p is 2 / 2**n (0.25 at 3 seeds): it speaks only
# with many seeds; the interval over seeds and items is the headline.
PAIRED_TEST = ("sign flips of the per-seed gains (scipy.stats.permutation_test, "
               "permutation_type='samples', statistic: the mean gain, two-sided)")


@dataclass(frozen=True)
class FinetuneReport:
    """The stage's three files' contents, and each figure's estimate (the summary's)."""

    metrics: dict
    details: dict
    items: StageItems
    estimates: dict[str, Estimate]


def scores_over_seeds(result: Comparison) -> dict[str, dict[str, list[float]]]:
    """Each model's (and the gain's) scores, one per seed in seed order."""
    per_seed = [{"pretrained": run.pretrained.test, "scratch": run.scratch.test,
                 "gain": run.gain()} for run in result.runs]
    return {which: {key: [seed[which][key] for seed in per_seed] for key in per_seed[0][which]}
            for which in MODELS}


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def paired_p_value(pretrained: Sequence[float], scratch: Sequence[float]) -> float | None:
    """The two-sided p-value of `PAIRED_TEST` on the per-seed scores; None for one seed."""
    if len(pretrained) < 2:
        return None
    from scipy import stats

    result = stats.permutation_test(
        (np.asarray(pretrained, dtype=float), np.asarray(scratch, dtype=float)),
        _mean_difference, permutation_type="samples", vectorized=True,
        alternative="two-sided", rng=np.random.default_rng(SEED))
    return float(result.pvalue)


def finetune_items(task: FinetuneTask, result: Comparison) -> StageItems:
    """Per seed and test example: the label and both models' predictions, as the figures of
    metrics/finetune.json (each the median over the seeds)."""
    labels = np.asarray(task.test.labels)
    pretrained = np.stack([run.pretrained.predictions for run in result.runs])
    scratch = np.stack([run.scratch.predictions for run in result.runs])
    golds = np.broadcast_to(labels, pretrained.shape)
    seeds = tuple(str(run.seed) for run in result.runs)

    def figure(statistic: str, **columns: np.ndarray) -> Figure:
        return Figure("test", Runs.of_one(statistic, "median", **columns), True, seeds)

    if task.is_regression:
        figures = {f"{which}.{key}": figure(key, label=golds, pred=predictions)
                   for which, predictions in (("pretrained", pretrained), ("scratch", scratch))
                   for key in ("pearson", "spearman")}
        figures |= {f"gain.{key}": figure(f"{key}_gain", label=golds, pred=pretrained,
                                          base=scratch) for key in ("pearson", "spearman")}
    else:
        right = {"pretrained": (pretrained == labels).astype(np.int8),
                 "scratch": (scratch == labels).astype(np.int8)}
        figures = {f"{which}.{key}": figure("mean", x=right[which]) if key == "accuracy"
                   else figure("macro_f1", label=golds, pred=predictions)
                   for which, predictions in (("pretrained", pretrained), ("scratch", scratch))
                   for key in ("accuracy", "macro_f1")}
        figures |= {"gain.accuracy": figure("mean", x=right["pretrained"] - right["scratch"]),
                    "gain.macro_f1": figure("macro_f1_gain", label=golds, pred=pretrained,
                                            base=scratch)}
    test = ItemSet(task.test_digest, len(task.test), "test example")
    return StageItems("finetune", {"test": test}, figures)


def _data(task: FinetuneTask, max_seq_length: int) -> dict:
    values = [*task.train.labels, *task.test.labels]  # a regression task's lowest, highest
    labels = {"problem": task.problem, "problem_from": task.problem_from,
              "label_range": [min(values), max(values)]} if task.is_regression else {
        "labels": task.labels}
    return {"description": task.description, **labels, "train_examples": len(task.train),
            "test_examples": len(task.test),
            "truncated": {"train": task.train.truncated, "test": task.test.truncated},
            "max_seq_length": max_seq_length}


def _seeds(result: Comparison) -> dict:
    return {str(run.seed): {"pretrained": run.pretrained.test, "scratch": run.scratch.test,
                            "gain": run.gain(),
                            "final_train_loss": {"pretrained": run.pretrained.final_train_loss,
                                                 "scratch": run.scratch.final_train_loss}}
            for run in result.runs}


def finetune_report(task: FinetuneTask, result: Comparison, recipe: Recipe,
                    max_seq_length: int) -> FinetuneReport:
    """metrics/finetune.json (the medians over seeds, compared across runs), its details (what
    they were measured on and against) and the per-item outcomes: the one place all are
    built."""
    scores = scores_over_seeds(result)
    metrics = {"task": task.name,  # short: a column of `dvc exp show`
               **{which: {key: statistics.median(values) for key, values in by_key.items()}
                  for which, by_key in scores.items()}}  # gain: what pretraining bought
    details = {
        **({"majority_class": result.majority} if result.majority else {}),
        "bag_of_words": result.bag_of_words,
        "data": _data(task, max_seq_length),
        "training": {"learning_rate": recipe.learning_rate,
                     "steps": result.runs[0].pretrained.steps,
                     "seeds": [run.seed for run in result.runs]},
        # no seconds: the report is the same bytes on any machine (the log has them)
        "median_seed": result.median_run().seed,  # models/finetuned: its pretrained fine-tune
        "spread": {which: {key: {"min": min(values), "max": max(values)}
                           for key, values in by_key.items()} for which, by_key in scores.items()},
        "paired_test": {"test": PAIRED_TEST, "p_value": {
            key: paired_p_value(scores["pretrained"][key], scores["scratch"][key])
            for key in scores["gain"]}},
        "seeds": _seeds(result),
    }
    items = finetune_items(task, result)
    metrics, details, estimates = with_items(metrics, details, items)
    return FinetuneReport(metrics, details, items, estimates)


@dataclass(frozen=True)
class FinetuneOutcome:
    """What the finetune stage did: the comparison over seeds, its report, and whether the
    task was classification or regression, and why (finetune.task, or what auto found)."""

    result: Comparison
    report: FinetuneReport
    problem: str
    problem_from: str

    def summary(self) -> str:
        """The gain in the headline score with its interval and spread over seeds, both
        models' medians, the baselines, in one line."""
        key, estimates = self.result.headline, self.report.estimates
        name = "Pearson" if key == "pearson" else "accuracy"
        runs = self.result.runs
        spread = self.report.details["spread"]["gain"][key]
        over = (f"median; seeds from {spread['min']:+.3f} to {spread['max']:+.3f}"
                if len(runs) > 1 else f"seed {runs[0].seed}")
        words = self.result.bag_of_words
        baselines = f"bag of words {words[key]:.3f}" + (
            f", majority class {self.result.majority[key]:.3f}" if self.result.majority else "")
        return (f"finetune ({len(runs)} seed{'s' if len(runs) > 1 else ''}): gain in {name} "
                f"{estimates[f'gain.{key}'].text(signed=True)} ({over}), pretrained "
                f"{estimates[f'pretrained.{key}'].text()} vs scratch "
                f"{estimates[f'scratch.{key}'].text()}; {baselines}; "
                f"{self.problem} ({self.problem_from})")
