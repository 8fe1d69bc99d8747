"""GLUE's per-item outcomes (bertcore/downstream/glue/outcomes.py): each figure of glue.json
from the golds and every seed's dev predictions, on GLUE's scale (x100), as the task's
official metric scores it; a task whose reused fine-tunes lack their predictions has no
interval, and says why; the file read back gives the same intervals."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from helpers.glue_files import expected_examples
from scipy.stats import pearsonr, spearmanr

from bertcore.common.outcomes import items_text, read_items
from bertcore.downstream.config import Recipe
from bertcore.downstream.glue.metrics import task_metrics, task_score
from bertcore.downstream.glue.outcomes import glue_items, no_interval
from bertcore.downstream.glue.records import SeedRun
from bertcore.downstream.glue.suite import TaskData, TaskResult
from bertcore.downstream.glue.tasks import GLUE_TASKS

ROWS = 24


def task_result(key: str, seeds: int = 3, rows: int = ROWS) -> TaskResult:
    """A task's dev files as `write_glue_folder` makes them, and `seeds` fine-tunes whose
    predictions are the golds with some of them wrong (seeded)."""
    task = GLUE_TASKS[key]
    dev = {name: expected_examples(key, file, rows) for name, file in task.dev.items()}
    rng = np.random.default_rng(7)
    runs = []
    for seed in range(42, 42 + seeds):
        predictions = {}
        for name, examples in dev.items():
            if task.is_regression:
                gold = np.array([example.label for example in examples])
                predictions[name] = (gold + rng.normal(0, 1.5, len(gold))).astype(np.float32)
            else:
                gold = np.array([task.labels.index(example.label) for example in examples])
                wrong = rng.random(len(gold)) < 0.3
                predictions[name] = np.where(wrong, rng.integers(0, len(task.labels), len(gold)),
                                             gold)
        golds = {name: [e.label if task.is_regression else task.labels.index(e.label)
                        for e in examples] for name, examples in dev.items()}
        metrics = {name: task_metrics(task, predictions[name], golds[name]) for name in dev}
        recipe = Recipe(1e-4, 8, 3.0, 3, 0.1, 0.01, 1.0, seed)
        runs.append(SeedRun(recipe, metrics, task_score(task, metrics), 3, 0, predictions, {}))
    return TaskResult(TaskData(task, [], dev, {}, {}), runs, [])


def median_x100(result: TaskResult, name: str, metric: str) -> float:
    return 100 * statistics.median(run.metrics[name][metric] for run in result.runs)


@pytest.mark.parametrize("key", ["cola", "mrpc", "stsb", "mnli"])
def test_each_figure_is_the_median_over_seeds_of_the_official_metric_x100(key):
    result = task_result(key)
    items, missing = glue_items([result], max_seq_length=32)
    assert not missing
    expected = {f"{key}.{column}": median_x100(result, name, metric)
                for column, name, metric in result.task.columns()}
    if len(expected) == 1:  # the task's score is its one metric
        expected[f"{key}.score"] = 100 * statistics.median(run.score for run in result.runs)
    estimates = items.estimates()
    assert set(estimates) == set(expected)
    for name, value in expected.items():
        assert estimates[name].value == pytest.approx(value, abs=1e-4), name
        assert estimates[name].contains(estimates[name].value)
        assert estimates[name].high - estimates[name].low > 1  # over seeds and 24 examples
    assert {s.items for s in items.sets.values()} == {ROWS}
    assert set(items.sets) == {f"{key}_{name}" for name in result.task.dev}
    assert all(f.run_labels == ("42", "43", "44") for f in items.figures.values())


def test_stsb_correlations_are_scipys_of_each_seed():
    result = task_result("stsb", seeds=1)
    items, _ = glue_items([result], max_seq_length=32)
    gold = [example.label for example in result.data.dev["dev"]]
    pred = result.runs[0].dev_predictions["dev"]
    values = {name: e.value for name, e in items.estimates().items()}
    assert values["stsb.pearson"] == pytest.approx(100 * pearsonr(pred, gold).statistic)
    assert values["stsb.spearman"] == pytest.approx(100 * spearmanr(pred, gold).statistic)


def test_the_file_read_back_gives_the_same_figures_and_intervals():
    items, _ = glue_items([task_result("mrpc"), task_result("rte", seeds=1)], 32)
    again = read_items_text(items_text(items))
    assert again.figures["mrpc.f1"].scale == 100
    for name, found in items.estimates().items():
        back = again.estimates()[name]
        assert back.text() == found.text(), name


def read_items_text(text: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "glue_items.json"
        path.write_text(text, encoding="utf-8")
        return read_items(path)


def test_the_dev_set_is_named_by_its_examples_and_the_length_they_were_cut_to():
    result = task_result("rte")
    digest = glue_items([result], 32)[0].sets["rte_dev"].digest
    assert glue_items([task_result("rte")], 32)[0].sets["rte_dev"].digest == digest
    assert glue_items([result], 64)[0].sets["rte_dev"].digest != digest
    fewer = task_result("rte", rows=ROWS - 1)
    assert glue_items([fewer], 32)[0].sets["rte_dev"].digest != digest


def test_a_reused_fine_tune_without_dev_predictions_leaves_its_task_without_interval():
    kept, lacking = task_result("cola"), task_result("mnli")
    lacking.runs[1].dev_predictions.pop("mnli_mm")
    items, missing = glue_items([kept, lacking], 32)
    assert set(missing) == {"mnli"} and "seed 43" in missing["mnli"]
    assert "mnli_mm" in missing["mnli"]
    assert {name.split(".")[0] for name in items.figures} == {"cola"}
    assert set(items.sets) == {"cola_dev"}
    notes = no_interval([kept, lacking], missing)
    assert notes["mnli"] == missing["mnli"] and notes["score"].startswith("none drawn")
    assert "cola.score" not in notes
