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
    sentences = tokens = 0
    last_doc = -1  # document number of the last kept sentence
    doc_number = 0  # counts blank-line gaps between text seen so far
    gap = False  # a blank line came since the last non-blank line
    seen_text = False  # blank lines before the first text separate nothing
    dropped = 0
    bar = tqdm(
        total=path.stat().st_size,
        unit="B",
        unit_scale=True,
        desc=f"tokenise {path.name}",
        disable=not progress,
        leave=False,
    )
    with (
        open(table_dir / TOKENS, "wb") as tok_out,
        open(table_dir / SENTENCES, "wb") as sent_out,
        open(table_dir / DOCUMENTS, "wb") as doc_out,
        open(table_dir / ORIGINS, "wb") as origin_out,
        bar,
    ):
        np.zeros(1, np.int64).tofile(sent_out)
        for lines in read_line_batches(path, batch_bytes, bar):
            texts: list[str] = []
            docs: list[int] = []
            for line in lines:
                line = line.strip()
                if not line:
                    gap = seen_text
                    continue
                seen_text = True
                if gap:
                    doc_number += 1
                    gap = False
                texts.append(line)
                docs.append(doc_number)
            if not texts:
                continue
            ids = encode_batch(texts)
            lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
            kept = lengths > 0
            dropped += int((~kept).sum())
            lengths = lengths[kept]
            if not len(lengths):
                continue
            doc_of = np.asarray(docs, np.int64)[kept]
            ends = tokens + np.cumsum(lengths)
            starts = ends - lengths
            new_doc = doc_of != np.concatenate([[last_doc], doc_of[:-1]])
            first_sentence = sentences + np.flatnonzero(new_doc)
            np.stack([first_sentence, starts[new_doc]], axis=1).astype(np.int64).tofile(doc_out)
            doc_of[new_doc].tofile(origin_out)
            # empty sentences add no tokens, so all ids can be flattened as they are
            np.fromiter(chain.from_iterable(ids), dtype, count=int(lengths.sum())).tofile(tok_out)
            ends.tofile(sent_out)
            sentences += len(lengths)
            tokens = int(ends[-1])
            last_doc = int(doc_of[-1])
        np.array([[sentences, tokens]], np.int64).tofile(doc_out)
    table = DocTable(table_dir, dtype)
    try:
        per_doc = np.diff(table.documents[:, 0])
        return {
            "documents": table.n_documents,
            "sentences": sentences,
            "tokens": tokens,
            "single_sentence_documents": int((per_doc == 1).sum()),
            "empty_sentences_dropped": dropped,
        }
    finally:
        table.close()


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
