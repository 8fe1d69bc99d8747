"""What a GLUE suite reads: the encoder it fine-tunes with its tokenizer (`glue_model`), each
task's files (`read_task`: train drawn down to `glue.max_train_examples`, every dev and test
file, the rows that do not parse), their examples encoded for the model on first use
(`TaskInputs`), and the check that the tokenizer reads them (`require_readable_task`). Each
mistake is a one-line `BertError`, found before any training.
"""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from bertcore.common.digests import fingerprint_files
from bertcore.common.errors import BertError
from bertcore.data.vocab.files import load_tokenizer
from bertcore.downstream.glue.config import GLUE_DATA_HF, GlueConfig
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
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.tokenizer import (
    model_tokenizer,
    require_own_tokenizer,
    require_readable,
    unknown_tokens,
)
from bertcore.saved import hf
from bertcore.saved.pretrained import load_pretrained

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

    def rows(self) -> dict[str, int]:
        """The rows of each dev evaluation a fine-tune predicts: {name: count}."""
        return {name: len(rows) for name, rows in self.dev.items()}

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
    all reused is never encoded. Pickled (for a worker: `Shared`), it is its encoded examples
    alone."""

    data: TaskData
    model: GlueModel
    max_length: int

    def __getstate__(self) -> dict:
        return {"encoded": self.encoded, "max_length": self.max_length}

    @cached_property
    def encoded(self) -> EncodedTask:
        encode = partial(encode_examples, tokenizer=self.model.tokenizer,
                         labels=list(self.data.task.labels), max_length=self.max_length)
        return EncodedTask(encode(self.data.train),
                           {name: encode(rows) for name, rows in self.data.dev.items()},
                           {name: encode(rows) for name, rows in self.data.test.items()})


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


