"""The documents a vocabulary is trained on: the whole train split, or, for a split larger than
`vocab.sample_bytes`, a sample of about that many bytes of its documents.

A document is kept when a hash of its content falls below sample_bytes / (the split's size),
so the sample is the same whatever the order of the documents in the file, and costs one read
of the split with one document in memory at a time (held in a spool that moves to disk when
large). Keeping the documents of smallest hash up to exactly sample_bytes would need either a
second read of the split or the sample held in memory; the sampled share instead varies by a
little about its target (the sum of many small documents). The hash is keyed apart from the
train/val split's, so the sample is not tied to which documents went to val.

The sample is written to a file that training reads twice (or three times, with `vocab_size:
auto`); a split no larger than sample_bytes is not copied: the vocabulary is trained on the
split itself, so it is the one the whole split gives, byte for byte."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from bertcore.common.errors import BertError

SAMPLE_FILE = "vocab-sample.txt"
_PERSON = b"bertcore-vocab"  # blake2b personalisation: a hash unrelated to the corpus stage's
_SPOOL_BYTES = 1 << 24  # a document larger than this is held on disk while it is hashed
_BLOCK_LINES = 1024  # lines of a document hashed and copied at once


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
        documents = sum(1 for _ in document_spools(train))
        yield VocabSample(train, documents, train_bytes, documents, train_bytes)
        return
    path = Path(scratch_dir) / SAMPLE_FILE
    try:
        with open(path, "wb") as out:
            kept, seen = write_sample(train, share, out)
            written = out.tell()
        if kept == 0:
            raise BertError(f"vocab.sample_bytes {sample_bytes} drew none of the {seen} "
                            f"documents of {train} ({train_bytes} bytes): raise it, or set it "
                            f"to null for the whole split")
        yield VocabSample(path, kept, written, seen, train_bytes)
    finally:
        path.unlink(missing_ok=True)


def write_sample(train: Path, share: float, out: BinaryIO) -> tuple[int, int]:
    """Copy the documents of `train` whose hash falls below `share` into `out`, a blank line
    between them; return (documents kept, documents seen)."""
    threshold = int(share * 2**64)
    kept = seen = 0
    for key, spool in document_spools(train):
        seen += 1
        if key < threshold:
            if kept:
                out.write(b"\n")
            shutil.copyfileobj(spool, out)
            kept += 1
    return kept, seen


def document_spools(path: Path) -> Iterator[tuple[int, BinaryIO]]:
    """Each document of a corpus file: a 64-bit hash of its lines and a file holding them (the
    last line of the file given its newline), positioned at its start; valid until the next
    document. Lines are hashed and copied in blocks: per line, Python is slow."""
    with open(path, "rb") as handle:
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
                yield int.from_bytes(digest.digest(), "little"), spool
