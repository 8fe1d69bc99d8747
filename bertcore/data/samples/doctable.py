"""The document table: a tokenised corpus split on disk, its writer (`DocTableWriter`) and its
reader (`DocTable`), so that memory does not grow with the corpus. It lives in the samples
folder's `.work/` while the stage runs (`bertcore.data.samples.tokenizing` writes it,
`bertcore.data.samples.pairing` reads it) and is removed when the stage is done.

A corpus file (one sentence per line, blank line between documents) becomes flat files:

- the tokens: every sentence's token ids, concatenated (no special tokens), appended to the
  `NpyAppender` given (the samples folder's `tokens.npy`, which the pairs point into);
- `sentences.bin`: int64, sentence i is tokens[s[i]:s[i+1]] (n_sentences + 1 entries);
- `documents.bin`: int64 rows (first sentence, first token), document d spans rows d..d+1
  (n_documents + 1 rows);
- `origins.bin`: int64, the block of the corpus file each document came from (blocks that
  tokenise to nothing leave no document, so the two numberings can differ);
- `neighbours.bin` (a corpus split by parts only): uint8 neighbour flags per document.

Readers fetch what they need with `os.pread`, not a memory map and not whole: random segments
are read from anywhere in the corpus, and a map would keep every touched page in the process's
RSS; the document index is read a shard (or a chunk) at a time, so no process holds a table
that grows with the corpus.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from bertcore.data.samples.store import NpyAppender

SENTENCES = "sentences.bin"
DOCUMENTS = "documents.bin"
ORIGINS = "origins.bin"
NEIGHBOURS = "neighbours.bin"

# How many sentence offsets a random segment reads at a time.
_SENTENCE_WINDOW = 16
# How many rows of the document index a pass over all of it reads at a time.
INDEX_CHUNK = 1 << 16
_ROW_BYTES = 16  # a row of the document index: two int64


class DocTableWriter:
    """A document table written into `table_dir`, one batch of tokenised sentences at a time
    (their ids appended to `tokens`); `finish` writes the closing row of the document index,
    and once closed `counts` reads the table's counts back."""

    def __init__(self, table_dir: Path, tokens: NpyAppender):
        table_dir.mkdir(parents=True, exist_ok=True)
        self.table_dir = table_dir
        self.tokens_file = tokens
        self.sentences = self.tokens = 0  # kept so far
        self.dropped = 0  # sentences that tokenised to nothing
        self.last_doc = -1  # document number of the last kept sentence
        self.files = {name: open(table_dir / name, "wb")  # noqa: SIM115 - closed on exit
                      for name in (SENTENCES, DOCUMENTS, ORIGINS)}
        np.zeros(1, np.int64).tofile(self.files[SENTENCES])

    def __enter__(self) -> DocTableWriter:
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.files.values():
            handle.close()

    def add(self, lengths: np.ndarray, ids: np.ndarray, documents: np.ndarray) -> None:
        """The next sentences of the file, tokenised: each one's token count (int64), their
        ids one after the other, and the document (int64) of each."""
        kept = lengths > 0
        self.dropped += int((~kept).sum())
        lengths = lengths[kept]
        if not len(lengths):
            return
        doc_of = documents[kept]
        ends = self.tokens + np.cumsum(lengths)
        starts = ends - lengths
        new_doc = doc_of != np.concatenate([[self.last_doc], doc_of[:-1]])
        first_sentence = self.sentences + np.flatnonzero(new_doc)
        rows = np.stack([first_sentence, starts[new_doc]], axis=1).astype(np.int64)
        rows.tofile(self.files[DOCUMENTS])
        doc_of[new_doc].tofile(self.files[ORIGINS])
        self.tokens_file.append(ids)  # empty sentences hold no ids
        ends.tofile(self.files[SENTENCES])
        self.sentences += len(lengths)
        self.tokens = int(ends[-1])
        self.last_doc = int(doc_of[-1])

    def finish(self) -> None:
        """The document index's last row: where a document after the last would begin."""
        np.array([[self.sentences, self.tokens]], np.int64).tofile(self.files[DOCUMENTS])

    def counts(self) -> dict:
        """The counts of the table written (once closed): documents, sentences, tokens,
        single-sentence documents and the sentences dropped (tokenised to nothing)."""
        with DocTable(self.table_dir) as table:
            single = sum(int((np.diff(rows[:, 0]) == 1).sum()) for _, rows in table.index_chunks())
            documents = table.n_documents
        return {
            "documents": documents,
            "sentences": self.sentences,
            "tokens": self.tokens,
            "single_sentence_documents": single,
            "empty_sentences_dropped": self.dropped,
        }


class DocTable:
    """Random access to a document table written by `DocTableWriter`: its sentences and
    document index, read where needed (nothing held in memory but the open files).

    `neighbour_flags` (from `neighbours.bin`, which `bertcore.data.samples.build` writes for a
    corpus split by parts before it opens the table): per document, bit 0 when the document
    before it is its neighbour, bit 1 when the one after it is; neighbours give no random B.
    """

    def __init__(self, table_dir: str | Path):
        table_dir = Path(table_dir)
        self._sentences = os.open(table_dir / SENTENCES, os.O_RDONLY)
        self._documents = os.open(table_dir / DOCUMENTS, os.O_RDONLY)
        flags = table_dir / NEIGHBOURS
        self._neighbours = os.open(flags, os.O_RDONLY) if flags.is_file() else None
        self.n_documents = os.fstat(self._documents).st_size // _ROW_BYTES - 1

    def __enter__(self) -> DocTable:
        return self

    def __exit__(self, *exc) -> None:
        for fd in (self._sentences, self._documents, self._neighbours):
            if fd is not None:
                os.close(fd)

    def documents(self, first: int, stop: int) -> np.ndarray:
        """Rows first..stop of the document index, (first sentence, first token) each: documents
        first..stop-1 and where the one after them begins."""
        return _pread(self._documents, np.int64, 2 * first, 2 * (stop + 1 - first)).reshape(-1, 2)

    def index_chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        """The whole document index, INDEX_CHUNK documents at a time: (first, its rows
        first..stop), consecutive chunks sharing their boundary row."""
        for first in range(0, self.n_documents, INDEX_CHUNK):
            yield first, self.documents(first, min(first + INDEX_CHUNK, self.n_documents))

    def neighbour_flags(self, first: int, stop: int) -> np.ndarray:
        """uint8 flags of documents first..stop-1 (none without a neighbours file: zeros)."""
        if self._neighbours is None:
            return np.zeros(stop - first, np.uint8)
        return _pread(self._neighbours, np.uint8, first, stop - first)

    def sentence_starts(self, first: int, stop: int) -> np.ndarray:
        """Token offsets where sentences first..stop begin (stop's is the end of stop-1)."""
        return _pread(self._sentences, np.int64, first, stop + 1 - first)

    def segment(self, first_sentence: int, last: int, min_tokens: int) -> tuple[int, int]:
        """Token range of whole sentences from `first_sentence` on, before sentence `last` (the
        end of its document), just long enough to reach `min_tokens` or that end."""
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
