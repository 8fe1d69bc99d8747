"""The samples stage's tokenising in worker processes: a corpus file's sentences, a batch per
task (`EncodeTask`), tokenised where the task runs (`encode_lines`) and returned as token
arrays; `SentenceEncoder` is what `doctable.tokenize_corpus` calls to have them tokenised.

Tokenisation is a pure function of the tokenizer and the text, and `TaskRunner` returns the
results in task order, so the tokens do not depend on the number of workers.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from bertcore.data.samples.doctable import LineBatch, SentenceBatch


@dataclasses.dataclass(frozen=True)
class EncodeTask:
    """One worker task: tokenise a batch of a corpus file's sentences with the tokenizer saved
    at `tokenizer_file` (whose sha256 is `tokenizer_sha256`)."""

    tokenizer_file: str
    tokenizer_sha256: str
    dtype: str
    in_pool: bool  # in a pool's worker: the pool is the parallelism, not tokenizers' threads
    lines: LineBatch

    @property
    def where(self) -> str:
        """What it tokenises, for messages."""
        documents = self.lines.documents
        return (f"tokenising {len(documents)} sentences of documents {documents[0]}-"
                f"{documents[-1]}" if documents else "tokenising no sentence")


def encode_lines(task: EncodeTask) -> SentenceBatch:
    """The sentences of `task`, tokenised without special tokens."""
    if task.in_pool:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # read by tokenizers at every call
    tokenizer = _saved_tokenizer(task.tokenizer_file, task.tokenizer_sha256)
    ids = [e.ids for e in tokenizer.encode_batch_fast(task.lines.texts, add_special_tokens=False)]
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
    flat = np.fromiter(chain.from_iterable(ids), task.dtype, count=int(lengths.sum()))
    return SentenceBatch(lengths, flat, np.asarray(task.lines.documents, np.int64))


@functools.lru_cache(maxsize=1)
def _saved_tokenizer(path: str, sha256: str) -> Tokenizer:
    """The tokenizer of a task, loaded once per process (the digest tells builds apart)."""
    return Tokenizer.from_file(path)


class SentenceEncoder:
    """`tokenize_corpus`'s `encode`: every batch of sentences a task through `run`, the
    tokenizer saved where the workers load it."""

    def __init__(self, tokenizer: Tokenizer, work_dir: Path, dtype: np.dtype, run: Callable,
                 workers: int):
        work_dir.mkdir(parents=True, exist_ok=True)
        self.file = work_dir / "tokenizer.json"
        tokenizer.save(str(self.file))
        self.sha256 = hashlib.sha256(self.file.read_bytes()).hexdigest()
        self.dtype, self.run, self.in_pool = dtype.str, run, workers > 1

    def __call__(self, batches: Iterable[LineBatch]) -> Iterator[SentenceBatch]:
        tasks = (EncodeTask(str(self.file), self.sha256, self.dtype, self.in_pool, lines)
                 for lines in batches)
        return self.run(encode_lines, tasks)
