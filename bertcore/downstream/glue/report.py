"""What the GLUE stage writes of a suite's outcome: metrics/glue.json (the GLUE score and
each task's medians: `dvc exp show` columns), its details (every seed, min and max, the
recipes tried, the data, the tasks that failed), a TSV of every seed's score (`dvc plots`),
each task's dev predictions and leaderboard files, and the median seed's model per task.

Scores are GLUE's scale, x100, as the papers and the leaderboard print them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from bertcore.common.atomic import atomic_file
from bertcore.downstream.glue.metrics import glue_score
from bertcore.downstream.glue.predictions import write_dev_predictions, write_submission
from bertcore.downstream.glue.suite import GlueModel, TaskFailure, TaskResult
from bertcore.model.hf import export_hf_classifier

Outcome = TaskResult | TaskFailure
SEEDS_HEADER = ("task", "seed", "score")


def metric_names(result: TaskResult) -> list[tuple[str, str, str]]:
    """(column, evaluation, metric) of a task: `matthews`, or `mnli_m_accuracy` where a task
    has several evaluations."""
    task = result.task
    return [(metric if len(task.dev) == 1 else f"{name}_{metric}", name, metric)
            for name in task.dev for metric in task.metrics]


def glue_metrics(outcomes: Sequence[Outcome]) -> dict:
    """metrics/glue.json: the GLUE score of the tasks' medians (null when no task ran) and per
    task the median of its score and of each metric, x100."""
    results = [o for o in outcomes if isinstance(o, TaskResult)]
    medians = {r.task.key: r.spread().median for r in results}
    score = 100 * glue_score(medians)[0] if medians else None
    metrics: dict = {"score": score}
    for result in results:
        metrics[result.task.key] = {"score": 100 * medians[result.task.key]} | {
            column: 100 * result.spread(name, metric).median
            for column, name, metric in metric_names(result)}
    return metrics


def glue_details(outcomes: Sequence[Outcome], model_name: str | None, seeds: int) -> dict:
    """metrics/glue_details.json: what the medians are read against."""
    results = [o for o in outcomes if isinstance(o, TaskResult)]
    averaged = glue_score({r.task.key: r.spread().median for r in results})[1] if results else []
    return {
        "model": model_name,
        "averaged": averaged,  # the tasks the GLUE score is the mean of
        "seeds": seeds,
        "tasks": {r.task.key: _task_details(r) for r in results},
        "failed": {o.task.key: o.reason for o in outcomes if isinstance(o, TaskFailure)},
    }


def _task_details(result: TaskResult) -> dict:
    chosen = result.runs[0].recipe
    return {
        "score": _scaled(result.spread()),
        "metrics": {column: _scaled(result.spread(name, metric))
                    for column, name, metric in metric_names(result)},
        "recipe": {key: value for key, value in dataclasses.asdict(chosen).items()
                   if key != "seed"},
        "seeds": [run.recipe.seed for run in result.runs],
        "steps": result.runs[0].steps,
        "tried": [{"learning_rate": recipe.learning_rate, "batch_size": recipe.batch_size,
                   "median_score": 100 * median} for recipe, median in result.tried],
        "train_examples": len(result.data.train),
        "dev_examples": {name: len(rows) for name, rows in result.data.dev.items()},
        "truncated": result.truncated,
    }


def _scaled(spread) -> dict:
    return {"median": 100 * spread.median, "min": 100 * spread.min, "max": 100 * spread.max,
            "values": [100 * v for v in spread.values]}


def write_seed_scores(path: str | Path, outcomes: Sequence[Outcome]) -> None:
    """One row per fine-tune (task, seed, score x100) for `dvc plots`: the seeds' spread."""
    rows = ["\t".join(SEEDS_HEADER)] + [
        f"{result.task.key}\t{run.recipe.seed}\t{100 * run.score:.4f}"
        for result in outcomes if isinstance(result, TaskResult) for run in result.runs]
    with atomic_file(path, "w") as handle:
        handle.write("\n".join(rows) + "\n")


def write_predictions(folder: Path, outcomes: Sequence[Outcome]) -> None:
    """Into a new folder: `<task>_<evaluation>.tsv`, the median seed's dev predictions beside
    the gold labels, and `submission/`, GLUE's leaderboard files of the tasks that have test
    files."""
    folder.mkdir(parents=True, exist_ok=True)
    for result in outcomes:
        if not isinstance(result, TaskResult):
            continue
        run, data = result.median_run(), result.data
        for name, rows in data.dev.items():
            write_dev_predictions(folder / f"{result.task.key}_{name}.tsv", result.task, rows,
                                  run.dev_predictions[name])
        for name, rows in data.test.items():
            (folder / "submission").mkdir(exist_ok=True)
            write_submission(folder / "submission", result.task, name,
                             run.test_predictions[name], [row.index for row in rows])


def write_models(folder: Path, outcomes: Sequence[Outcome], model: GlueModel | None) -> None:
    """Into a new folder, per task, the median seed's model in Hugging Face's format
    (`BertForSequenceClassification`; STS-B's with `problem_type: regression`)."""
    folder.mkdir(parents=True, exist_ok=True)
    for result in outcomes:
        if isinstance(result, TaskResult):
            export_hf_classifier(result.median_run().model, folder / result.task.folder,
                                 model.tokenizer_dir)
