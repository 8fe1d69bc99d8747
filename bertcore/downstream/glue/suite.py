"""GLUE in one call: each task of a GLUE folder fine-tuned `glue.seeds` times (for each recipe
of Turc et al.'s grid too, the best on dev), scored on dev with the task's official metrics.

The fine-tuning is the `finetune` stage's loop (`bertcore.downstream.finetune`). A task whose
files are unusable is a `TaskFailure` with its one-line reason, found before any training, and
the other tasks run: a task that fails never loses the scores of those that ran.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertcore.common.errors import BertError
from bertcore.data.vocab.files import load_tokenizer
from bertcore.downstream.config import GLUE_DATA_HF, GlueConfig, Recipe
from bertcore.downstream.finetune import build_classifier, predict, train_classifier
from bertcore.downstream.glue.metrics import Spread, spread, task_metrics, task_score
from bertcore.downstream.glue.tasks import (
    GlueExample,
    GlueTask,
    hf_split,
    read_hf_split,
    read_split,
)
from bertcore.downstream.tasks import EncodedExamples, encode_examples
from bertcore.model import hf
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.classifier import BertForSequenceClassification
from bertcore.model.pretrained import load_pretrained
from bertcore.model.tokenizer import model_tokenizer, require_readable, unknown_tokens

log = logging.getLogger(__name__)


@dataclass
class GlueModel:
    """The pretrained encoder GLUE fine-tunes, its tokenizer (a `tokenizers.Tokenizer`), the
    folder of its tokenizer files (for the exports) and what it is (a path), for the report."""

    encoder: BertPretrainingModel
    tokenizer: Any
    tokenizer_dir: Path
    name: str

    @property
    def pad_id(self) -> int:
        return self.tokenizer.token_to_id("[PAD]")


# an encoder may come without these: GLUE fine-tunes only the encoder (and the pooler, which
# a classifier from a bare encoder draws afresh, as transformers does)
HEADS = ("mlm_head.", "nsp_head.", "pooler.")


def glue_model(config: GlueConfig, model_dir: str, vocab_dir: str) -> GlueModel:
    """The encoder GLUE fine-tunes: `glue.model` (a Hugging Face BERT folder with its
    tokenizer), else the pipeline's model with its vocabulary."""
    if config.model is None:
        model, _ = load_pretrained(model_dir, vocab_dir)
        return GlueModel(model, load_tokenizer(vocab_dir), Path(vocab_dir), model_dir)
    directory = Path(config.model)
    if not directory.is_dir():
        raise BertError(f"glue.model: {directory} is not a folder: give a Hugging Face BERT "
                        "folder, or null for the pipeline's model")
    bert_config = hf.read_config(directory)
    tokenizer = model_tokenizer(directory, None, bert_config)
    model = hf.load_model(directory, strict=False, config=bert_config)
    missing = [name for name in model.missing_weights if not name.startswith(HEADS)]
    if missing:
        raise BertError(f"glue.model: {directory} has no weights for {missing[0]} (and "
                        f"{len(missing) - 1} more): is it a BERT encoder?")
    return GlueModel(model, tokenizer, directory, str(directory))


@dataclass
class TaskData:
    """A task's files, read: train, and per evaluation its dev and (where given) test rows."""

    task: GlueTask
    train: list[GlueExample]
    dev: dict[str, list[GlueExample]]
    test: dict[str, list[GlueExample]]


@dataclass
class SeedRun:
    """One fine-tune: its recipe (seed included), dev metrics per evaluation, GLUE's score of
    the task, and its predictions (dev and test) by evaluation."""

    recipe: Recipe
    metrics: dict[str, dict[str, float]]
    score: float
    steps: int
    dev_predictions: dict[str, np.ndarray]
    test_predictions: dict[str, np.ndarray]
    model: BertForSequenceClassification


@dataclass
class TaskResult:
    """A task's seeds under the recipe chosen (the only one, or the grid's best median), and
    every recipe tried with its median score."""

    data: TaskData
    runs: list[SeedRun]
    tried: list[tuple[Recipe, float]]
    truncated: int

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


# Opens the run a fine-tune is logged in (`name`, `params`): an MLflow run nested under the
# suite's, or one that logs nothing; it has log_metrics, log_results and finish (Tracker's).
StartRun = Callable[[str, dict], Any]


def read_task(task: GlueTask, config: GlueConfig) -> TaskData:
    """Every file of the task that `glue.data` holds; train cut to `glue.max_train_examples`
    by a seeded draw. A BertError (one line) when a file is missing or unusable."""
    train = _read(task, config, "train.tsv")
    if config.max_train_examples and len(train) > config.max_train_examples:
        train = random.Random(config.seed).sample(train, config.max_train_examples)
    dev = {name: _read(task, config, file_name) for name, file_name in task.dev.items()}
    test = ({name: _read(task, config, file_name) for name, file_name in task.test.items()}
            if _has_test(task, config) else {})
    return TaskData(task, train, dev, test)


def _read(task: GlueTask, config: GlueConfig, file_name: str) -> list[GlueExample]:
    if config.data == GLUE_DATA_HF:
        return read_hf_split(task, hf_split(file_name))
    return read_split(Path(config.data), task, file_name)


def _has_test(task: GlueTask, config: GlueConfig) -> bool:
    """hf:glue has every test split; a folder may leave them out."""
    return config.data == GLUE_DATA_HF or all(
        (Path(config.data) / task.folder / name).is_file() for name in task.test.values())


@dataclass
class EncodedTask:
    train: EncodedExamples
    dev: dict[str, EncodedExamples]
    test: dict[str, EncodedExamples]


def encode(data: TaskData, model: GlueModel, max_length: int) -> EncodedTask:
    labels = list(data.task.labels)
    return EncodedTask(
        encode_examples(data.train, model.tokenizer, labels, max_length),
        {name: encode_examples(rows, model.tokenizer, labels, max_length)
         for name, rows in data.dev.items()},
        {name: encode_examples(rows, model.tokenizer, labels, max_length)
         for name, rows in data.test.items()})


def fine_tune_once(task: GlueTask, encoded: EncodedTask, model: GlueModel, recipe: Recipe,
                   device: torch.device, start_run: StartRun) -> SeedRun:
    """Fine-tune the encoder on the task with `recipe`, score it on every dev evaluation and
    predict the test rows; logged as one run."""
    train, dev, test = encoded.train, encoded.dev, encoded.test
    run_name = f"{task.key}-lr{recipe.learning_rate:g}-bs{recipe.batch_size}-seed{recipe.seed}"
    run = start_run(run_name, {"task": task.key, "learning_rate": recipe.learning_rate,
                                    "batch_size": recipe.batch_size, "epochs": recipe.epochs,
                                    "seed": recipe.seed})
    try:
        classifier = build_classifier(model.encoder.config, list(task.labels), model.encoder,
                                      recipe.seed)
        steps, _ = train_classifier(
            classifier, train, recipe, device, model.pad_id, name=run_name,
            on_log=lambda step, loss: run.log_metrics({"train_loss": loss}, step=step))
        dev_predictions = {name: predict(classifier, rows, device, model.pad_id)
                           for name, rows in dev.items()}
        metrics = {name: task_metrics(task, dev_predictions[name], dev[name].labels)
                   for name in dev}
        score = task_score(task, metrics)
        run.log_results({"score": score, **{f"{name}_{metric}": value
                                            for name, values in metrics.items()
                                            for metric, value in values.items()}}, step=steps)
    except BaseException:
        run.finish("FAILED")
        raise
    run.finish("FINISHED")
    test_predictions = {name: predict(classifier, rows, device, model.pad_id)
                        for name, rows in test.items()}
    return SeedRun(recipe, metrics, score, steps, dev_predictions, test_predictions,
                   classifier.cpu())


def run_task(data: TaskData, model: GlueModel, config: GlueConfig, device: torch.device,
             start_run: StartRun) -> TaskResult:
    """Every recipe with every seed; the recipe of the best median score is the task's."""
    encoded = encode(data, model, config.max_seq_length)
    best: list[SeedRun] | None = None
    tried: list[tuple[Recipe, float]] = []
    for recipe in config.recipes(model.encoder.config.hidden_size):
        runs = [fine_tune_once(data.task, encoded, model, seeded, device, start_run)
                for seeded in config.seeds_of(recipe)]
        median = spread([run.score for run in runs]).median
        tried.append((recipe, median))
        if best is None or median > spread([run.score for run in best]).median:
            best = runs
        log.info("%s: lr %g, batch %d: median score %.4f over %d seeds", data.task.key,
                 recipe.learning_rate, recipe.batch_size, median, len(runs))
    truncated = encoded.train.truncated + sum(rows.truncated for rows in encoded.dev.values())
    return TaskResult(data, best, tried, truncated)


# train rows of each task whose [UNK] share is checked: enough for a share, a second to encode
READABLE_SAMPLE = 1000


def require_readable_task(data: TaskData, model: GlueModel, config: GlueConfig) -> None:
    """Stop when the model's tokenizer reads most of the task's first train rows as [UNK]:
    its scores would be the model's guesses from nothing."""
    rows = data.train[:READABLE_SAMPLE]
    texts = [row.text if row.pair is None else (row.text, row.pair) for row in rows]
    encoded = (e.ids for e in model.tokenizer.encode_batch(texts, add_special_tokens=False))
    where = (f"hf:glue {data.task.key}" if config.data == GLUE_DATA_HF
             else str(Path(config.data) / data.task.folder / "train.tsv"))
    require_readable(*unknown_tokens(model.tokenizer, encoded), model.tokenizer_dir,
                     f"{where} (its first {len(rows)} rows)")


def run_glue(tasks: list[GlueTask], model: GlueModel, config: GlueConfig,
             device: torch.device, start_run: StartRun) -> list[TaskResult | TaskFailure]:
    """Read every task's files first (their mistakes in seconds, before any training), then
    fine-tune the tasks that read, in GLUE's order. A tokenizer that cannot read a task's
    text stops the suite before any training."""
    readable: list[TaskData | TaskFailure] = []
    for task in tasks:
        try:
            readable.append(read_task(task, config))
        except BertError as error:
            readable.append(TaskFailure(task, str(error)))
            log.warning("glue: %s is left out: %s", task.key, error)
    for data in readable:
        if not isinstance(data, TaskFailure):
            require_readable_task(data, model, config)
    return [data if isinstance(data, TaskFailure)
            else run_task(data, model, config, device, start_run) for data in readable]
