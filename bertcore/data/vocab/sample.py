"""The documents a vocabulary is trained on: the whole train split, or, for a split larger than
`vocab.sample_bytes`, a sample of about that many bytes of its documents.

A document is kept when a hash of its content falls below sample_bytes / (the split's size),
so the sample is the same whatever the order of the documents in the file, and costs one read
of the split, a few MB of it in memory at a time (a document longer than 16 MB is held in a
spool that moves to disk). Keeping the documents of smallest hash up to exactly sample_bytes
would need either a second read of the split or the sample held in memory; the sampled share
instead varies by a little about its target (the sum of many small documents). The hash is
keyed apart from the train/val split's, so the sample is not tied to which documents went to
val.

The sample is written to a file that training reads twice (or three times, with `vocab_size:
auto`); a split no larger than sample_bytes is not copied: the vocabulary is trained on the
split itself, so it is the one the whole split gives, byte for byte."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import re
import tempfile
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from bertcore.common.errors import BertError

SAMPLE_FILE = "vocab-sample.txt"
_PERSON = b"bertcore-vocab"  # blake2b personalisation: a hash unrelated to the corpus stage's
_SPOOL_BYTES = 1 << 24  # a document larger than this is held on disk while it is hashed
_BLOCK_LINES = 1024  # lines of a long document hashed and copied at once
_BLOCK_BYTES = 1 << 20  # a spooled document is handed on in pieces of this size
_CHUNK_BYTES = 1 << 22  # a corpus file is read and cut into documents this much at a time
# Blank lines (empty, or only the whitespace that bytes.strip removes) after a line's end: where
# one document ends and the next begins. And blank lines at the start of a text.
_BLANK_RUN = re.compile(rb"\n(?:[ \t\r\x0b\x0c]*\n)+")
_LEADING_BLANKS = re.compile(rb"(?:[ \t\r\x0b\x0c]*\n)*")


@dataclasses.dataclass(frozen=True)
class VocabSample:
    """What the vocabulary is trained on (`path`: the split itself or a sample of it)."""

    path: Path
    documents: int
    bytes: int
    train_documents: int
    train_bytes: int

    def metrics(self) -> dict:
        return {"trained_on_documents": self.documents, "trained_on_bytes": self.bytes,
                "train_documents": self.train_documents, "train_bytes": self.train_bytes}


def sample_share(train_bytes: int, sample_bytes: int | None) -> float:
    """The share of the split's documents drawn: 1 for the whole split."""
    if sample_bytes is None or train_bytes <= sample_bytes:
        return 1.0
    return sample_bytes / train_bytes


@contextlib.contextmanager
def vocab_sample(train: str | Path, sample_bytes: int | None,
                 scratch_dir: str | Path) -> Iterator[VocabSample]:
    """The documents of corpus file `train` (one sentence per line, a blank line between
    documents) to train on: all of them, or, above `sample_bytes`, a sample written into
    `scratch_dir` and removed again when the block ends."""
    train = Path(train)
    train_bytes = train.stat().st_size
    share = sample_share(train_bytes, sample_bytes)
    if share >= 1.0:
        documents = sum(1 for _ in corpus_documents(train))
        yield VocabSample(train, documents, train_bytes, documents, train_bytes)
        return
    path = Path(scratch_dir) / SAMPLE_FILE
    threshold = int(share * 2**64)  # the documents whose hash falls below it are kept
    kept = seen = 0
    try:
        with open(path, "wb") as out:
            for key, pieces in corpus_documents(train):
                seen += 1
                if key < threshold:
                    if kept:
                        out.write(b"\n")  # a blank line between documents
                    out.writelines(pieces)
                    kept += 1
            written = out.tell()
        if kept == 0:
            raise BertError(f"vocab.sample_bytes {sample_bytes} drew none of the {seen} "
                            f"documents of {train} ({train_bytes} bytes): raise it, or set it "
                            f"to null for the whole split")
        yield VocabSample(path, kept, written, seen, train_bytes)
    finally:
        path.unlink(missing_ok=True)


def corpus_documents(path: Path) -> Iterator[tuple[int, Iterable[bytes]]]:
    """Each document of a corpus file: a 64-bit hash of its lines (the last line of the file
    given its newline) and those lines, in pieces valid until the next document.

    The file is read in chunks, and the documents found in a chunk by one regular expression
    (their blank lines) are hashed where they lie, without a copy: per line, Python is slow. A
    document that runs past a chunk and is longer than _SPOOL_BYTES is read again from its
    start, line by line, into a spool."""
    with open(path, "rb") as handle:
        pending, offset = b"", 0  # the start of a document that may go on, and its offset
        while data := handle.read(_CHUNK_BYTES):
            buffer = pending + data
            end = yield from _documents_in(buffer)
            pending = buffer[end:]
            offset += end
            if len(pending) > _SPOOL_BYTES:
                handle.seek(offset)
                yield from itertools.islice(_spooled_documents(handle), 1)
                pending, offset = b"", handle.tell()
        if pending:  # the file's end ends its last document, and its last line
            yield from _documents_in(pending if pending.endswith(b"\n") else pending + b"\n",
                                     final=True)


def _documents_in(buffer: bytes, final: bool = False) -> Generator[tuple, None, int]:
    """The documents of `buffer` that a run of blank lines ends (all of them when `final`);
    returns the offset where the rest, not ended yet, begins."""
    view, start = memoryview(buffer), 0
    ends = [(m.start() + 1, m.end()) for m in _BLANK_RUN.finditer(buffer)]
    if final:
        ends.append((len(buffer), len(buffer)))
    for end, after in ends:
        start = _LEADING_BLANKS.match(buffer, start, end).end()
        if start < end:
            text = view[start:end]
            digest = hashlib.blake2b(text, digest_size=8, person=_PERSON).digest()
            yield int.from_bytes(digest, "little"), (text,)
        start = after
    return start


def _spooled_documents(handle: BinaryIO) -> Iterator[tuple[int, Iterable[bytes]]]:
    """The documents from the handle's position on, line by line, each held in a spool that
    moves to disk when large. Lines are hashed and copied in blocks."""
    for first in handle:
        if not first.strip():
            continue  # the blank lines between documents
        lines = itertools.chain([first], itertools.takewhile(bytes.strip, handle))
        digest = hashlib.blake2b(digest_size=8, person=_PERSON)
        with tempfile.SpooledTemporaryFile(_SPOOL_BYTES) as spool:
            while block := b"".join(itertools.islice(lines, _BLOCK_LINES)):
                block += b"" if block.endswith(b"\n") else b"\n"
                digest.update(block)
                spool.write(block)
            spool.seek(0)
            yield int.from_bytes(digest.digest(), "little"), iter(
                lambda spool=spool: spool.read(_BLOCK_BYTES), b"")
