"""The samples stage's tokenising: a corpus split into a document table
(`bertcore.data.samples.doctable`) and its `tokens.npy` (`tokenize_corpus`), its sentences read
in batches of lines (`LineBatch`) and tokenised in worker processes, a batch per task
(`EncodeTask`, `encode_lines`), into token arrays (`SentenceBatch`); `SentenceEncoder` hands
the batches to the pool.

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
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from bertcore.data.samples.doctable import DocTableWriter

if TYPE_CHECKING:
    from bertcore.data.samples.store import NpyAppender


# ---------------------------------------------------------------------------------------------
# Reading the corpus, and the table written (in the main process)


class LineBatch(NamedTuple):
    """Sentences of a corpus file, in order: their text and the document each is in."""

    texts: list[str]
    documents: list[int]


class SentenceBatch(NamedTuple):
    """A `LineBatch` tokenised: each sentence's token count, their ids one after the other
    (no special tokens), and the document of each sentence."""

    lengths: np.ndarray  # int64
    ids: np.ndarray  # the token dtype
    documents: np.ndarray  # int64


def tokenize_corpus(
    path: str | Path,
    encode: Callable[[Iterable[LineBatch]], Iterator[SentenceBatch]],
    table_dir: str | Path,
    tokens: NpyAppender,
    *,
    batch_bytes: int = 1 << 20,
    progress: bool = False,
) -> dict:
    """Tokenise `path` into a document table in `table_dir`, its tokens appended to `tokens`
    (an `NpyAppender` of the token dtype); return its counts.

    `encode` maps the stream of the file's `LineBatch`es to their `SentenceBatch`es, in order
    (in worker processes, or here). Sentences that tokenise to nothing are dropped; documents
    left empty disappear.
    """
    path = Path(path)
    bar = tqdm(
        total=path.stat().st_size,
        unit="B",
        unit_scale=True,
        desc=f"tokenise {path.name}",
        disable=not progress,
        leave=False,
    )
    with DocTableWriter(Path(table_dir), tokens) as table, bar:
        batches = _line_batches(path, batch_bytes, bar)
        for sentences in encode(batch for batch in batches if batch.texts):
            table.add(sentences.lengths, sentences.ids, sentences.documents)
        table.finish()
    return table.counts()


def _line_batches(path: Path, batch_bytes: int, progress: tqdm) -> Iterator[LineBatch]:
    """The non-blank lines (stripped) of a UTF-8 file (invalid bytes replaced), streamed in
    batches of about `batch_bytes`, and the document of each: blank lines between two lines
    of text end a document; blank lines before the first text separate nothing."""
    document, new = -1, True
    with open(path, "rb") as handle:
        while chunk := handle.readlines(batch_bytes):
            data = b"".join(chunk)
            progress.update(len(data))
            batch = LineBatch([], [])
            for line in data.decode("utf-8", errors="replace").split("\n")[: len(chunk)]:
                line = line.strip()
                if not line:
                    new = True
                    continue
                if new:
                    document, new = document + 1, False
                batch.texts.append(line)
                batch.documents.append(document)
            yield batch


# ---------------------------------------------------------------------------------------------
# Tokenising (in worker processes)


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
