"""The record of a training run: two TSV files (one row per logging step, one per
evaluation) written row by row, each row also handed to its mirror (`RecordMirror`: by
default none; pretraining's MLflow run, `bertcore.training.run.mlflow_run`, which names its
metrics). Their whole text also goes into every checkpoint, so a resumed run continues the
same files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertcore.training.evaluation.metrics import EvalMetrics

TRAIN_COLUMNS = (
    "step",
    "epoch",
    "loss",
    "mlm_loss",
    "mlm_accuracy",
    "nsp_loss",
    "nsp_accuracy",
    "learning_rate",
    "grad_norm",
    "skipped_steps",
)  # no speed: the files are pipeline outputs, the same bytes on any machine (MLflow has it)
# then the zero-shot probes, when the evaluation has them (eval.probe_sentences; else empty)
EVAL_COLUMNS = ("step", "mlm_loss", "mlm_accuracy", "perplexity", "nsp_loss", "nsp_accuracy",
                "cloze_p_at_1", "cloze_p_at_10", "swapped_pairs", "replaced_pairs")
TRAIN_LOG = "train_log.tsv"
EVAL_LOG = "eval_log.tsv"


class TsvLog:
    """A TSV file written row by row (flushed, so a crash keeps every row written so far);
    its whole text is also kept to be stored in checkpoints."""

    def __init__(self, path: str | Path | None, columns: tuple[str, ...], previous: str | None):
        self.columns = columns
        header = "\t".join(columns) + "\n"
        self.text = previous if previous and previous.startswith(header) else header
        self.path = Path(path) if path else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(self.text, encoding="utf-8")

    def rows(self) -> list[dict[str, float]]:
        """The rows written so far (e.g. restored from a checkpoint), as numbers."""
        lines = self.text.rstrip("\n").split("\n")[1:]
        return [
            {c: float(v) for c, v in zip(self.columns, line.split("\t"), strict=False) if v != ""}
            for line in lines
        ]

    def last_row(self) -> dict[str, float]:
        """The last row written, as numbers; {} if none."""
        rows = self.rows()
        return rows[-1] if rows else {}

    def add(self, values: Mapping[str, Any]) -> None:
        row = "\t".join(_format(values.get(c)) for c in self.columns) + "\n"
        self.text += row
        if self.path:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(row)


def as_logged(value: float) -> float:
    """`value` as a log row holds it (8 significant digits): what a run resumed after its
    last step reads back, so a report built from it has the same bytes either way."""
    return float(_format(float(value)))


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.8g}"
    return str(value)


class RecordMirror:
    """Where a record's rows go besides its files: nowhere, as here (transformers'
    `TrainerCallback` in small). Pretraining's recorder sends them to its MLflow run."""

    def log_train(self, row: Mapping[str, Any], tokens_per_s: float | None = None) -> None:
        """A row of the train log (`tokens_per_s`: the window's speed, which the files leave
        out; None for a row read back)."""

    def log_eval(self, step: int, values: Mapping[str, Any]) -> None:
        """A row of the eval log, by column (those of probes that did not run: None or
        absent)."""


class TrainingRecord:
    """The local record (TSV files) and its `mirror` (None: a `RecordMirror`, nowhere)."""

    def __init__(
        self,
        train_path: str | Path | None = None,
        eval_path: str | Path | None = None,
        mirror: RecordMirror | None = None,
        previous: Mapping[str, str] | None = None,
    ):
        previous = previous or {}
        self.train = TsvLog(train_path, TRAIN_COLUMNS, previous.get(TRAIN_LOG))
        self.eval = TsvLog(eval_path, EVAL_COLUMNS, previous.get(EVAL_LOG))
        self.mirror = mirror or RecordMirror()

    def log_train(self, row: Mapping[str, Any], tokens_per_s: float | None = None) -> None:
        """A row of the train log; `tokens_per_s` goes to the mirror alone (a measurement of
        the machine: the files are the same bytes on any)."""
        self.train.add(row)
        self.mirror.log_train(row, tokens_per_s)

    def log_eval(self, step: int, metrics: EvalMetrics, track: bool = True) -> None:
        """A row of the eval log, unless its last row is of this step (a rerun of a finished
        run evaluates its last step again: the same weights and masks, the same row);
        `track`: handed to the mirror too (False: it has it already)."""
        values = {**metrics.to_dict(), **metrics.probes}
        if self.eval.last_row().get("step") != step:
            self.eval.add({"step": step, **values})
        if track:
            self.mirror.log_eval(step, values)

    def texts(self) -> dict[str, str]:
        return {TRAIN_LOG: self.train.text, EVAL_LOG: self.eval.text}

    def replay(self) -> None:
        """Hand every row recorded so far to the mirror: a new MLflow run that continues an
        earlier one (an extended run) then shows the whole curve from step 1."""
        for row in self.train.rows():
            self.mirror.log_train(row)
        for row in self.eval.rows():
            self.mirror.log_eval(int(row["step"]), row)
