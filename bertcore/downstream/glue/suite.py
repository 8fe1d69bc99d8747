"""GLUE in one call: each task of a GLUE folder fine-tuned `glue.seeds` times (for each recipe
of Turc et al.'s grid too, the best on dev), scored on dev with the task's official metrics.

The fine-tuning is the `finetune` stage's loop (`bertcore.downstream.finetune`). A task whose
files are unusable is a `TaskFailure` with its one-line reason, found before any training, and
the other tasks run: a task that fails never loses the scores of those that ran. Each
fine-tune is saved as it finishes (`records`), its model on disk and out of memory, and one
that an earlier run of the same model, data and recipe finished is reused.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import torch

from bertcore.common.digests import fingerprint_files, source_digest
from bertcore.common.errors import BertError
from bertcore.data.vocab.files import load_tokenizer
from bertcore.downstream.config import GLUE_DATA_HF, GlueConfig, Recipe
from bertcore.downstream.finetune import build_classifier, predict, train_classifier
from bertcore.downstream.glue.metrics import Spread, spread, task_metrics, task_score
from bertcore.downstream.glue.records import FinishedRuns, SeedRun
from bertcore.downstream.glue.tasks import (
    GlueExample,
    GlueTask,
    SplitRows,
    hf_split,
    read_hf_split,
    read_split,
    task_file,
)
from bertcore.downstream.tasks import EncodedExamples, encode_examples
from bertcore.model import hf
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.pretrained import load_pretrained
from bertcore.model.tokenizer import (
    model_tokenizer,
    require_own_tokenizer,
    require_readable,
    unknown_tokens,
)

log = logging.getLogger(__name__)


@dataclass
class GlueModel:
    """The pretrained encoder GLUE fine-tunes, its tokenizer (a `tokenizers.Tokenizer`), the
    folder of its tokenizer files (for the exports), what it is (a path), for the report, and
    the sha256 of its weights' files."""

    encoder: BertPretrainingModel
    tokenizer: Any
    tokenizer_dir: Path
    name: str
    sha256: str = ""

    @property
    def pad_id(self) -> int:
        return self.tokenizer.token_to_id("[PAD]")

    def identity(self) -> dict[str, str]:
        """What of the model a fine-tune's result depends on: its weights and tokenizer."""
        return {"model": self.sha256,
                "tokenizer": hashlib.sha256(self.tokenizer.to_str().encode()).hexdigest()}


# an encoder may come without these: GLUE fine-tunes only the encoder (and the pooler, which
# a classifier from a bare encoder draws afresh, as transformers does)
HEADS = ("mlm_head.", "nsp_head.", "pooler.")


def glue_model(config: GlueConfig, model_dir: str, vocab_dir: str) -> GlueModel:
    """The encoder GLUE fine-tunes: `glue.model` (a Hugging Face BERT folder with its
    tokenizer), else the pipeline's model with its vocabulary."""
    if config.model is None:
        model, _ = load_pretrained(model_dir, vocab_dir)
        return GlueModel(model, load_tokenizer(vocab_dir), Path(vocab_dir), model_dir,
                         fingerprint_files(hf.weight_files(Path(model_dir))))
    directory = Path(config.model).expanduser()
    if not directory.is_dir():
        raise BertError(f"glue.model: {directory} is not a folder: give a Hugging Face BERT "
                        "folder, or null for the pipeline's model")
    require_own_tokenizer(directory, "glue.model")
    bert_config = hf.read_config(directory)
    tokenizer = model_tokenizer(directory, None, bert_config)
    model = hf.load_model(directory, strict=False, config=bert_config)
    missing = [name for name in model.missing_weights if not name.startswith(HEADS)]
    if missing:
        raise BertError(f"glue.model: {directory} has no weights for {missing[0]} (and "
                        f"{len(missing) - 1} more): is it a BERT encoder?")
    return GlueModel(model, tokenizer, directory, str(Path(config.model)),  # name as written
                     fingerprint_files(hf.weight_files(directory)))


@dataclass
class TaskData:
    """A task's files, read: train, and per evaluation its dev and (where given) test rows;
    per file, the rows skipped because they do not parse; per test evaluation left without a
    leaderboard file, why."""

    task: GlueTask
    train: list[GlueExample]
    dev: dict[str, list[GlueExample]]
    test: dict[str, list[GlueExample]]
    skipped: dict[str, int]
    unsubmitted: dict[str, str] = field(default_factory=dict)

    def rows(self) -> dict[str, dict[str, int]]:
        """The rows of each evaluation a fine-tune predicts: {"dev": {name: count}, "test": ...}."""
        return {"dev": {name: len(rows) for name, rows in self.dev.items()},
                "test": {name: len(rows) for name, rows in self.test.items()}}

    def digest(self) -> str:
        """sha256 of every example as read (train after its draw), in order."""
        digest = hashlib.sha256()
        splits = [("train", self.train), *((f"dev {k}", v) for k, v in self.dev.items()),
                  *((f"test {k}", v) for k, v in self.test.items())]
        for name, rows in splits:
            digest.update(f"\x1e{name}".encode())
            for row in rows:
                digest.update(repr((row.text, row.pair, row.label, row.index)).encode())
        return digest.hexdigest()


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

    def identity(self, data: TaskData) -> dict[str, Any]:
        """What a fine-tune's result depends on besides its recipe (seed included): the
        model's weights and tokenizer, the task's examples, the length, the device's kind and
        the code. Each is part of its record's name: a change to any fine-tunes anew."""
        return {**self.model.identity(), "data": data.digest(),
                "max_seq_length": self.config.max_seq_length, "device": self.device.type,
                "code": self.code}


# the packages whose code fine-tunes and scores (those glue's stage depends on in dvc.yaml)
FINE_TUNING_CODE = ("bertcore.common", "bertcore.data.corpus", "bertcore.data.vocab",
                    "bertcore.model", "bertcore.downstream")


def fine_tuning_code() -> str:
    """The code a fine-tune's result depends on: the source of FINE_TUNING_CODE, and torch."""
    return f"{source_digest(FINE_TUNING_CODE)} torch {torch.__version__}"


def read_task(task: GlueTask, config: GlueConfig) -> TaskData:
    """Every file of the task that `glue.data` holds; train cut to `glue.max_train_examples`
    by a seeded draw. A BertError (one line) when a file is missing or unusable."""
    files = {name: _read(task, config, name) for name in ["train.tsv", *task.dev.values()]}
    files |= {name: _read(task, config, name) for name in _test_files(task, config)}
    train = files["train.tsv"].examples
    if config.max_train_examples and len(train) > config.max_train_examples:
        train = random.Random(config.seed).sample(train, config.max_train_examples)
    dev = {name: files[file_name].examples for name, file_name in task.dev.items()}
    test = {name: files[file_name] for name, file_name in task.test.items()
            if file_name in files}
    unsubmitted = {name: _unsubmittable(task, name, rows) for name, rows in test.items()
                   if rows.skipped}
    skipped = {name: rows.skipped for name, rows in files.items() if rows.skipped}
    return TaskData(task, train, dev, {name: rows.examples for name, rows in test.items()
                                       if name not in unsubmitted}, skipped, unsubmitted)


def _unsubmittable(task: GlueTask, eval_name: str, rows: SplitRows) -> str:
    """Why a test file with rows that do not parse gets no leaderboard file (said once):
    GLUE's server refuses a file without a prediction for every row."""
    why = (f"{rows.skipped} of {rows.skipped + len(rows.examples)} rows do not parse (the "
           f"first: {rows.first_skipped}), and GLUE's server takes only a prediction for "
           "every row: fix the file and rerun")
    log.warning("glue: %s: no leaderboard file for %s: %s", task.key, eval_name, why)
    return why


def _read(task: GlueTask, config: GlueConfig, file_name: str) -> SplitRows:
    if config.data == GLUE_DATA_HF:
        return read_hf_split(task, hf_split(file_name))
    return read_split(Path(config.data).expanduser(), task, file_name)


def _test_files(task: GlueTask, config: GlueConfig) -> list[str]:
    """The test files to predict: hf:glue has every split; a folder may leave them out, and
    where it has only some of a task's (MNLI's test_matched.tsv alone) it says which not."""
    names = list(task.test.values())
    if config.data == GLUE_DATA_HF:
        return names
    folder = Path(config.data).expanduser()
    present = [name for name in names if task_file(folder, task, name).is_file()]
    missing = [name for name in names if name not in present]
    if present and missing:
        log.warning("glue: %s has %s but not %s: no leaderboard file for the latter",
                    task.folder, ", ".join(present), ", ".join(missing))
    return present


@dataclass
class EncodedTask:
    train: EncodedExamples
    dev: dict[str, EncodedExamples]
    test: dict[str, EncodedExamples]


@dataclass
class TaskInputs:
    """A task's examples, encoded for the model on first use: a task whose fine-tunes are
    all reused is never encoded."""

    data: TaskData
    model: GlueModel
    max_length: int

    @cached_property
    def encoded(self) -> EncodedTask:
        encode = partial(encode_examples, tokenizer=self.model.tokenizer,
                         labels=list(self.data.task.labels), max_length=self.max_length)
        return EncodedTask(encode(self.data.train),
                           {name: encode(rows) for name, rows in self.data.dev.items()},
                           {name: encode(rows) for name, rows in self.data.test.items()})


def fine_tune_once(task: GlueTask, inputs: TaskInputs, suite: Suite, recipe: Recipe,
                   name: str) -> SeedRun:
    """Fine-tune the encoder on the task with `recipe`, score it on every dev evaluation and
    predict the test rows; logged as one run and saved as `name` with its model, which then
    leaves memory."""
    model, device, encoded = suite.model, suite.device, inputs.encoded
    run_name = f"{task.key}-lr{recipe.learning_rate:g}-bs{recipe.batch_size}-seed{recipe.seed}"
    run = suite.start_run(run_name, {"task": task.key, "learning_rate": recipe.learning_rate,
                                          "batch_size": recipe.batch_size,
                                          "epochs": recipe.epochs, "seed": recipe.seed})
    try:
        classifier = build_classifier(model.encoder.config, list(task.labels), model.encoder,
                                      recipe.seed)
        steps, _ = train_classifier(
            classifier, encoded.train, recipe, device, model.pad_id, name=run_name,
            on_log=lambda step, loss: run.log_metrics({"train_loss": loss}, step=step))
        if (bad := hf.first_nonfinite(classifier.state_dict())) is not None:
            raise BertError(f"glue: {task.key} diverged with seed {recipe.seed} at learning "
                            f"rate {recipe.learning_rate:g} (NaN or infinite weights: {bad}); "
                            "lower glue.learning_rate. No output was written; the fine-tunes "
                            f"finished so far are in {suite.finished.folder}, and the next run "
                            "reuses them")
        dev_predictions = {name: predict(classifier, rows, device, model.pad_id)
                           for name, rows in encoded.dev.items()}
        metrics = {name: task_metrics(task, dev_predictions[name], encoded.dev[name].labels)
                   for name in encoded.dev}
        score = task_score(task, metrics)
        run.log_results({"score": score, **{f"{name}_{metric}": value
                                            for name, values in metrics.items()
                                            for metric, value in values.items()}}, step=steps)
    except BaseException:
        run.finish("FAILED")
        raise
    run.finish("FINISHED")
    test_predictions = {name: predict(classifier, rows, device, model.pad_id)
                        for name, rows in encoded.test.items()}
    truncated = encoded.train.truncated + sum(rows.truncated for rows in encoded.dev.values())
    done = SeedRun(recipe, metrics, score, steps, truncated, dev_predictions, test_predictions)
    return suite.finished.save(name, done, lambda folder: hf.export_hf_classifier(
        classifier.cpu(), folder, model.tokenizer_dir))


def run_task(data: TaskData, suite: Suite) -> TaskResult:
    """Every recipe with every seed, each reused where an earlier run finished it; the recipe
    of the best median score is the task's, and only its median seed keeps its model."""
    inputs = TaskInputs(data, suite.model, suite.config.max_seq_length)
    identity, rows = suite.identity(data), data.rows()
    reused_before = suite.finished.reused
    best: list[SeedRun] | None = None
    tried: list[tuple[Recipe, float]] = []
    every: list[SeedRun] = []
    for recipe in suite.config.recipes(suite.model.encoder.config.hidden_size):
        runs = []
        for i in range(suite.config.seeds):
            seeded = replace(recipe, seed=suite.config.seed + i)
            name = suite.finished.name(data.task.key, seeded, identity)
            runs.append(suite.finished.find(name, rows)
                        or fine_tune_once(data.task, inputs, suite, seeded, name))
        every += runs
        median = spread([run.score for run in runs]).median
        tried.append((recipe, median))
        if best is None or median > spread([run.score for run in best]).median:
            best = runs
        log.info("%s: lr %g, batch %d: median score %.4f over %d seeds", data.task.key,
                 recipe.learning_rate, recipe.batch_size, median, len(runs))
    result = TaskResult(data, best, tried)
    # a median seed reused without its model (dropped when an earlier run's median was another
    # seed) is fine-tuned again: the same recipe gives the same model
    while (median := result.median_run()).model_dir is None:
        name = suite.finished.name(data.task.key, median.recipe, identity)
        result.runs[result.runs.index(median)] = fine_tune_once(data.task, inputs, suite,
                                                                median.recipe, name)
    suite.finished.drop_models_except([result.median_run()], among=every + result.runs)
    reused = suite.finished.reused - reused_before
    if reused:
        log.info("glue: %s: %d of %d fine-tunes reused from %s (finished by an earlier run "
                 "of the same model, data and recipe)", data.task.key, reused, len(every),
                 suite.finished.folder)
    return result


# train rows of each task whose [UNK] share is checked: enough for a share, a second to encode
READABLE_SAMPLE = 1000


def require_readable_task(data: TaskData, model: GlueModel, config: GlueConfig) -> None:
    """Stop when the model's tokenizer reads most of the task's first train rows as [UNK]:
    its scores would be the model's guesses from nothing."""
    rows = data.train[:READABLE_SAMPLE]
    texts = [row.text if row.pair is None else (row.text, row.pair) for row in rows]
    encoded = (e.ids for e in model.tokenizer.encode_batch(texts, add_special_tokens=False))
    where = (f"hf:glue {data.task.key}" if config.data == GLUE_DATA_HF
             else str(task_file(config.data, data.task, "train.tsv")))
    require_readable(*unknown_tokens(model.tokenizer, encoded), model.tokenizer_dir,
                     f"{where} (its first {len(rows)} rows)")


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
    return [data if isinstance(data, TaskFailure) else run_task(data, suite)
            for data in readable]
