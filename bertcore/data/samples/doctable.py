"""Tokenised documents on disk, so that memory does not grow with the corpus.

A corpus file (one sentence per line, blank line between documents) becomes three flat files:

- `tokens.bin`: every sentence's token ids, concatenated (no special tokens);
- `sentences.bin`: int64, sentence i is tokens[s[i]:s[i+1]] (n_sentences + 1 entries);
- `documents.bin`: int64 rows (first sentence, first token), document d spans rows d..d+1
  (n_documents + 1 rows);
- `origins.bin`: int64, the block of the corpus file each document came from (blocks that
  tokenise to nothing leave no document, so the two numberings can differ).

Readers fetch what they need with `os.pread`, not a memory map: random segments are read
from anywhere in the corpus, and a map would keep every touched page in the process's RSS.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from itertools import chain
from pathlib import Path

import numpy as np
from tqdm import tqdm

TOKENS = "tokens.bin"
SENTENCES = "sentences.bin"
DOCUMENTS = "documents.bin"
ORIGINS = "origins.bin"
NEIGHBOURS = "neighbours.bin"

# How many sentence offsets a random segment reads at a time.
_SENTENCE_WINDOW = 16


def read_line_batches(path: Path, batch_bytes: int, progress: tqdm | None) -> Iterator[list[str]]:
    """Stream the lines of a UTF-8 file in lists of about `batch_bytes` (invalid bytes replaced)."""
    with open(path, "rb") as handle:
        while True:
            chunk = handle.readlines(batch_bytes)
            if not chunk:
                return
            data = b"".join(chunk)
            if progress is not None:
                progress.update(len(data))
            yield data.decode("utf-8", errors="replace").split("\n")[: len(chunk)]


def tokenize_corpus(
    path: str | Path,
    encode_batch: Callable[[list[str]], list[list[int]]],
    table_dir: str | Path,
    dtype: np.dtype,
    *,
    batch_bytes: int = 1 << 20,
    progress: bool = False,
) -> dict:
    """Tokenise `path` into a document table in `table_dir`; return its counts.

    `encode_batch` maps a list of sentences to their token ids (without special tokens).
    Sentences that tokenise to nothing are dropped; documents left empty disappear.
    """
    path, table_dir = Path(path), Path(table_dir)
    table_dir.mkdir(parents=True, exist_ok=True)
    documents = _LineDocuments()
    bar = tqdm(
        total=path.stat().st_size,
        unit="B",
        unit_scale=True,
        desc=f"tokenise {path.name}",
        disable=not progress,
        leave=False,
    )
    with _TableWriter(table_dir, dtype) as table, bar:
        for lines in read_line_batches(path, batch_bytes, bar):
            texts, numbers = documents.number(lines)
            if texts:
                table.add(encode_batch(texts), numbers)
        table.finish()
    return _table_counts(table_dir, dtype, table)


class _LineDocuments:
    """Numbers the documents of a stream of lines, batch after batch: blank lines between two
    lines of text end a document; blank lines before the first text separate nothing."""

    def __init__(self):
        self.current = 0  # counts blank-line gaps between text seen so far
        self.gap = False  # a blank line came since the last non-blank line
        self.seen_text = False

    def number(self, lines: list[str]) -> tuple[list[str], list[int]]:
        """The non-blank lines of `lines` (stripped) and the document of each."""
        texts: list[str] = []
        numbers: list[int] = []
        for line in lines:
            line = line.strip()
            if not line:
                self.gap = self.seen_text
                continue
            self.seen_text = True
            if self.gap:
                self.current += 1
                self.gap = False
            texts.append(line)
            numbers.append(self.current)
        return texts, numbers


class _TableWriter:
    """The files of a document table, appended one batch of tokenised sentences at a time;
    `finish` writes the closing row of the document index."""

    def __init__(self, table_dir: Path, dtype: np.dtype):
        self.dtype = np.dtype(dtype)
        self.sentences = self.tokens = 0  # kept so far
        self.dropped = 0  # sentences that tokenised to nothing
        self.last_doc = -1  # document number of the last kept sentence
        self.files = {}
        for name in (TOKENS, SENTENCES, DOCUMENTS, ORIGINS):
            self.files[name] = open(table_dir / name, "wb")  # noqa: SIM115 - closed on exit
        np.zeros(1, np.int64).tofile(self.files[SENTENCES])

    def __enter__(self) -> _TableWriter:
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.files.values():
            handle.close()

    def add(self, ids: list[list[int]], documents: list[int]) -> None:
        """Sentences with token `ids`, of the documents numbered `documents`."""
        lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
        kept = lengths > 0
        self.dropped += int((~kept).sum())
        lengths = lengths[kept]
        if not len(lengths):
            return
        doc_of = np.asarray(documents, np.int64)[kept]
        ends = self.tokens + np.cumsum(lengths)
        starts = ends - lengths
        new_doc = doc_of != np.concatenate([[self.last_doc], doc_of[:-1]])
        first_sentence = self.sentences + np.flatnonzero(new_doc)
        rows = np.stack([first_sentence, starts[new_doc]], axis=1).astype(np.int64)
        rows.tofile(self.files[DOCUMENTS])
        doc_of[new_doc].tofile(self.files[ORIGINS])
        # empty sentences add no tokens, so all ids can be flattened as they are
        flat = np.fromiter(chain.from_iterable(ids), self.dtype, count=int(lengths.sum()))
        flat.tofile(self.files[TOKENS])
        ends.tofile(self.files[SENTENCES])
        self.sentences += len(lengths)
        self.tokens = int(ends[-1])
        self.last_doc = int(doc_of[-1])

    def finish(self) -> None:
        """The document index's last row: where a document after the last would begin."""
        np.array([[self.sentences, self.tokens]], np.int64).tofile(self.files[DOCUMENTS])


def _table_counts(table_dir: Path, dtype: np.dtype, written: _TableWriter) -> dict:
    """What `tokenize_corpus` returns: the counts of the table `written` to `table_dir`."""
    with DocTable(table_dir, dtype) as table:
        per_doc = np.diff(table.documents[:, 0])
        return {
            "documents": table.n_documents,
            "sentences": written.sentences,
            "tokens": written.tokens,
            "single_sentence_documents": int((per_doc == 1).sum()),
            "empty_sentences_dropped": written.dropped,
        }


class DocTable:
    """Random access to a tokenised corpus written by `tokenize_corpus` (held in memory:
    only the document index, two int64 per document, and the neighbour flags if any).

    `neighbours` (from `neighbours.bin`, written by the samples stage when the corpus is split
    by parts): per document, bit 0 when the document before it is its neighbour, bit 1 when
    the one after it is; neighbours give no random B.
    """

    def __init__(self, table_dir: str | Path, dtype: np.dtype):
        table_dir = Path(table_dir)
        self.dtype = np.dtype(dtype)
        self.documents = np.fromfile(table_dir / DOCUMENTS, np.int64).reshape(-1, 2)
        self.n_documents = len(self.documents) - 1
        flags = table_dir / NEIGHBOURS
        self.neighbours = np.fromfile(flags, np.uint8) if flags.is_file() else None
        self._sentences = os.open(table_dir / SENTENCES, os.O_RDONLY)
        self._tokens = os.open(table_dir / TOKENS, os.O_RDONLY)

    def close(self) -> None:
        for fd in (self._sentences, self._tokens):
            os.close(fd)

    def __enter__(self) -> DocTable:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sentence_starts(self, first: int, stop: int) -> np.ndarray:
        """Token offsets where sentences first..stop begin (stop's is the end of stop-1)."""
        return _pread(self._sentences, np.int64, first, stop + 1 - first)

    def tokens(self, start: int, stop: int) -> np.ndarray:
        return _pread(self._tokens, self.dtype, start, stop - start)

    def segment(self, doc: int, first_sentence: int, min_tokens: int) -> tuple[int, int]:
        """Token range of whole sentences of `doc` from `first_sentence` (absolute index) on,
        just long enough to reach `min_tokens` or the end of the document."""
        last = int(self.documents[doc + 1, 0])
        sentence = first_sentence
        start = None
        while True:
            stop = min(last, sentence + _SENTENCE_WINDOW)
            offsets = self.sentence_starts(sentence, stop).tolist()
            if start is None:
                start = offsets[0]
            for end in offsets[1:]:
                if end - start >= min_tokens:
                    return start, end
            if stop == last:
                return start, offsets[-1]
            sentence = stop


def _pread(fd: int, dtype: np.dtype, first: int, count: int) -> np.ndarray:
    dtype = np.dtype(dtype)
    size = count * dtype.itemsize
    data = os.pread(fd, size, first * dtype.itemsize)
    if len(data) != size:
        raise OSError(f"short read from a document table ({len(data)} of {size} bytes)")
    return np.frombuffer(data, dtype)
