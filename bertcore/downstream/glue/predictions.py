"""The files of predictions: on dev, for a user to read the errors, and on test, the files
GLUE's leaderboard takes (gluebenchmark.com: one TSV per task and evaluation, zipped)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bertcore.common.atomic import atomic_file
from bertcore.downstream.glue.tasks import GlueExample, GlueTask

SUBMISSION_FILES: dict[tuple[str, str], str] = {  # (task key, evaluation) -> file name
    ("cola", "test"): "CoLA.tsv", ("sst2", "test"): "SST-2.tsv", ("mrpc", "test"): "MRPC.tsv",
    ("stsb", "test"): "STS-B.tsv", ("qqp", "test"): "QQP.tsv",
    ("mnli", "mnli_m"): "MNLI-m.tsv", ("mnli", "mnli_mm"): "MNLI-mm.tsv",
    ("qnli", "test"): "QNLI.tsv", ("rte", "test"): "RTE.tsv", ("wnli", "test"): "WNLI.tsv",
}


def write_dev_predictions(path: str | Path, task: GlueTask, examples: Sequence[GlueExample],
                          predictions: Sequence) -> None:
    """A TSV of index, text, pair (pair tasks), gold and prediction per example, as class names
    (floats with 3 decimals for STS-B); written whole or not at all."""
    _check_count(task, examples, predictions)
    header = ["index", "text", *(["pair"] if task.pair else []), "gold", "prediction"]
    rows = ([example.index, example.text, *([example.pair] if task.pair else []),
             _gold(task, example.label), _prediction(task, prediction)]
            for example, prediction in zip(examples, predictions, strict=True))
    _write_tsv(Path(path), header, rows)


def write_submission(folder: str | Path, task: GlueTask, eval_name: str, predictions: Sequence,
                     indices: Sequence[str] | None = None) -> Path:
    """GLUE's submission file of a task's test evaluation in `folder` (`index`, `prediction`):
    label names for MNLI, QNLI and RTE, 0/1 for the binary tasks, STS-B's score with 3
    decimals clipped to [0, 5]. `indices`: the test file's (GlueExample.index), else 0..n-1,
    which is what GLUE's test files hold."""
    path = Path(folder) / SUBMISSION_FILES[(task.key, eval_name)]
    if indices is None:
        indices = [str(i) for i in range(len(predictions))]
    _check_count(task, indices, predictions)
    if task.is_regression:
        predictions = [min(max(float(p), 0.0), 5.0) for p in predictions]
    rows = ([index, _prediction(task, prediction)]
            for index, prediction in zip(indices, predictions, strict=True))
    _write_tsv(path, ["index", "prediction"], rows)
    return path


def _check_count(task: GlueTask, rows: Sequence, predictions: Sequence) -> None:
    if len(rows) != len(predictions):
        raise ValueError(f"{task.key}: {len(predictions)} predictions for {len(rows)} rows")


def _gold(task: GlueTask, label: str | float | None) -> str:
    if label is None:
        return ""
    return f"{label:.3f}" if task.is_regression else str(label)


def _prediction(task: GlueTask, prediction) -> str:
    """A class index as its name, a score with 3 decimals."""
    if task.is_regression:
        return f"{float(prediction):.3f}"
    index = int(prediction)
    if not 0 <= index < len(task.labels):
        raise ValueError(f"{task.key}: class {index} of {len(task.labels)}")
    return task.labels[index]


def _write_tsv(path: Path, header: list[str], rows) -> None:
    with atomic_file(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write("\t".join(header) + "\n")
        for row in rows:
            handle.write("\t".join(_cell(value) for value in row) + "\n")


def _cell(value: str) -> str:
    """A value as one TSV cell: a tab or line break in a text would shift the columns."""
    return " ".join(value.replace("\t", " ").splitlines()) if value else value
