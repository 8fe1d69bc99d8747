"""Writing documents into train.txt / val.txt as they come: split by hash, deduplicated.

Format (Google's `create_pretraining_data.py`): UTF-8, one sentence per line, a blank line
between documents. A document goes to val when a hash of (seed, its content) falls below
`val_fraction`, so its split depends on nothing else: adding or reordering documents moves
no other document. Exact duplicates are recognised by a 64-bit digest of the content, kept in
a sorted array (8 bytes a document): the only thing that grows with the corpus (with, for a
small corpus that may be split by parts instead, 5 bytes a document of DocumentRecords).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import tempfile
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertcore.data.corpus.splits import SPLITS, split_file

_SPOOL_BYTES = 8 << 20  # a document larger than this waits on disk, not in memory
_COPY_BYTES = 1 << 20  # a spooled document is copied into its split this much at a time
_DIGEST_BYTES = 16  # of a document's content: 8 of them deduplicate, all 16 choose its split


@dataclass
class Lines:
    """Sentences encoded as lines of train.txt / val.txt (UTF-8, one per line), and the
    digest of those bytes, computed where they are made (a worker process): for a document
    of one part, the digest that deduplicates and splits it."""

    data: bytes
    count: int  # sentences
    characters: int
    digest: bytes

    @classmethod
    def of(cls, sentences: Iterable[str]) -> Lines:
        sentences = list(sentences)
        data = ("\n".join(sentences) + "\n").encode("utf-8") if sentences else b""
        digest = hashlib.blake2b(data, digest_size=_DIGEST_BYTES).digest()
        return cls(data, len(sentences), sum(map(len, sentences)), digest)


@dataclass
class SplitStats:
    documents: int = 0
    sentences: int = 0
    characters: int = 0


@dataclass
class _Written:
    """Where the last document of a split lies in its file, to move it if need be."""

    separator_at: int
    content_at: int
    sentences: int
    characters: int


class DigestSet:
    """A set of 64-bit digests at 8 bytes each: a sorted array plus a small set of recent ones.

    A Python set costs ~80 bytes a member, which at millions of documents is most of the
    stage's memory; here recent members go to a bounded set, merged into the array in bulk.
    """

    def __init__(self, pending_limit: int = 1 << 16):
        self._sorted = np.empty(0, dtype=np.uint64)
        self._view = memoryview(self._sorted)  # bisect on it: a third of searchsorted's time
        self._pending: set[int] = set()
        self._pending_limit = pending_limit

    def __len__(self) -> int:
        return len(self._sorted) + len(self._pending)

    def __contains__(self, key: int) -> bool:
        if key in self._pending:
            return True
        at = bisect.bisect_left(self._view, key)
        return at < len(self._view) and self._view[at] == key

    def add(self, key: int) -> None:
        self._pending.add(key)
        if len(self._pending) >= self._pending_limit:
            recent = np.fromiter(self._pending, dtype=np.uint64, count=len(self._pending))
            merged = np.concatenate([self._sorted, recent])
            merged.sort(kind="stable")  # (np.union1d's unique() costs ~10x the memory here)
            keep = np.ones(len(merged), dtype=bool)
            keep[1:] = merged[1:] != merged[:-1]
            self._sorted = merged[keep]
            self._view = memoryview(self._sorted)
            self._pending.clear()


class DocumentRecords:
    """The split and sentence count of every document written, in order (5 bytes each), kept
    while a split by parts may still be wanted (`bertcore.data.corpus.parts`): up to `limit`."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.splits = array("B")
        self.sentences = array("I")
        self.complete = limit != 0  # False once `limit` was passed and the records dropped

    def add(self, split: str, sentences: int) -> None:
        if not self.complete:
            return
        if self.limit is not None and len(self.splits) >= self.limit:
            self.complete = False
            self.splits, self.sentences = array("B"), array("I")
            return
        self.splits.append(SPLITS.index(split))
        self.sentences.append(min(sentences, 2**32 - 1))


class SplitWriter:
    """`add(sentences)` writes one document and says where it went (or why not).

    `record_limit`: keep the split and sentence count of up to this many documents
    (None: of all), for a split by parts after the fact; 0: keep none.
    """

    def __init__(self, out_dir: str | Path, val_fraction: float, seed: int,
                 record_limit: int | None = 0):
        self.out_dir = Path(out_dir)
        self.val_fraction = val_fraction
        self.seed = seed.to_bytes(8, "little", signed=False)
        self.stats = {split: SplitStats() for split in SPLITS}
        self.records = DocumentRecords(record_limit)
        self.pairable = dict.fromkeys(SPLITS, 0)  # documents of two sentences or more
        self._files = {split: open(split_file(self.out_dir, split), "w+b") for split in SPLITS}  # noqa: SIM115
        self._sizes = dict.fromkeys(SPLITS, 0)  # bytes in each file (tell() costs a call)
        self._last: dict[str, _Written | None] = dict.fromkeys(SPLITS)
        self._seen = DigestSet()

    def add(self, parts: Iterable[Lines]) -> str:
        """Write one document, given as its sentences' lines in parts; returns "train", "val",
        "empty" or "duplicate"."""
        parts = iter(parts)
        first = next(parts, None) or Lines.of([])
        second = next(parts, None)
        if second is None:  # most documents: one part, in memory, its digest made
            return self._place(first.digest, first.count, first.characters, [first.data])
        with tempfile.SpooledTemporaryFile(_SPOOL_BYTES) as spool:
            digest = hashlib.blake2b(digest_size=_DIGEST_BYTES)
            count = characters = 0
            for lines in itertools.chain((first, second), parts):
                digest.update(lines.data)
                spool.write(lines.data)
                count += lines.count
                characters += lines.characters
            spool.seek(0)
            chunks = iter(lambda: spool.read(_COPY_BYTES), b"")
            return self._place(digest.digest(), count, characters, chunks)

    def _place(self, key: bytes, count: int, characters: int, chunks: Iterable[bytes]) -> str:
        """Write a document of `count` sentences whose content has digest `key` from `chunks`,
        unless it is empty or a duplicate; returns where it went, or why not."""
        if count == 0:
            return "empty"
        short = int.from_bytes(key[:8], "little")
        if short in self._seen:
            return "duplicate"
        self._seen.add(short)
        split = self.split_of(key)
        handle, separator_at = self._files[split], self._sizes[split]
        if separator_at:
            handle.write(b"\n")
        content_at = separator_at + bool(separator_at)
        size = content_at
        for chunk in chunks:
            handle.write(chunk)
            size += len(chunk)
        self._sizes[split] = size
        self._last[split] = _Written(separator_at, content_at, count, characters)
        self._count(split, 1, count, characters)
        self.records.add(split, count)
        self.pairable[split] += count >= 2
        return split

    def split_of(self, digest: bytes) -> str:
        """val for a share `val_fraction` of digests, chosen by the seed."""
        mixed = hashlib.blake2b(self.seed + digest, digest_size=8).digest()
        return "val" if int.from_bytes(mixed, "little") / 2**64 < self.val_fraction else "train"

    def balance(self) -> None:
        """With two documents or more, leave neither split empty: the last document written
        to the other split moves over. (Not for a split by parts, which rewrites both.)"""
        train, val = self.stats["train"].documents, self.stats["val"].documents
        if train + val >= 2 and val == 0:
            self._move_last("train", "val")
        elif train + val >= 2 and train == 0:
            self._move_last("val", "train")

    def _move_last(self, source: str, target: str) -> None:
        last = self._last[source]
        assert last is not None
        handle = self._files[source]
        handle.seek(last.content_at)
        content = handle.read()
        handle.seek(last.separator_at)
        handle.truncate()
        self._files[target].write(content)  # the target is empty: no separator
        self._sizes[source], self._sizes[target] = last.separator_at, len(content)
        self._count(source, -1, -last.sentences, -last.characters)
        self._count(target, 1, last.sentences, last.characters)
        self.pairable[source] -= last.sentences >= 2
        self.pairable[target] += last.sentences >= 2

    def _count(self, split: str, documents: int, sentences: int, characters: int) -> None:
        stats = self.stats[split]
        stats.documents += documents
        stats.sentences += sentences
        stats.characters += characters

    def __enter__(self) -> SplitWriter:
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._files.values():
            handle.close()
