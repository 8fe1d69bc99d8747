"""vocab.sample_bytes: the share of the train split drawn, and its documents, found alike in
a file whatever its chunks and last newline (tests/stages/test_vocab_sample_cli.py: the stage's
vocabulary of a sample)."""

from __future__ import annotations

import hashlib
import random

import pytest

import bertcore.data.vocab.sample as vocab_sampling
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.sample import corpus_documents, sample_share


@pytest.mark.parametrize(("train", "sample", "share"), [
    (100, None, 1.0), (100, 100, 1.0), (100, 1000, 1.0), (100, 25, 0.25)])
def test_sample_share(train, sample, share):
    assert sample_share(train, sample) == share
    assert VocabConfig(sample_bytes=sample).sample_bytes == sample


def test_a_document_is_its_lines_whatever_their_number_and_the_last_newline(tmp_path):
    """Documents of more lines than are hashed at once, and a file without its last newline:
    each document's hash and copy are those of its lines (blank lines apart), so they do not
    depend on where it sits in the file."""
    long = [f"line {i} of a long document" for i in range(3000)]
    documents = [long, [*long[:-1], "another end"], ["one line"], ["two", "lines"]]
    text = "\n\n \n".join("\n".join(doc) for doc in documents)  # no newline at the very end
    (tmp_path / "a.txt").write_text(text, "utf-8")
    (tmp_path / "b.txt").write_text("\n\n" + "\n\n".join("".join(f"{line}\n" for line in doc)
                                                         for doc in reversed(documents)))
    found = {}
    for name in ("a.txt", "b.txt"):
        found[name] = sorted((key, b"".join(pieces)) for key, pieces in
                             corpus_documents(tmp_path / name))
    assert found["a.txt"] == found["b.txt"]
    assert len({key for key, _ in found["a.txt"]}) == len(documents)  # every line counts
    assert sorted(content for _, content in found["a.txt"]) == sorted(
        "".join(f"{line}\n" for line in doc).encode() for doc in documents)


def lines_documents(data: bytes) -> list[bytes]:
    """The documents of a corpus file read line by line: runs of lines that are not blank (as
    bytes.strip sees them), each line given its newline."""
    pieces = data.split(b"\n")
    lines = [piece + b"\n" for piece in pieces[:-1]] + ([pieces[-1] + b"\n"] if pieces[-1] else [])
    documents, current = [], []
    for line in lines:
        if line.strip():
            current.append(line)
        elif current:
            documents.append(b"".join(current))
            current = []
    return [*documents, b"".join(current)] if current else documents


@pytest.mark.parametrize("chunk", [7, 64, 1 << 22])
def test_documents_are_found_alike_whatever_the_chunks(tmp_path, monkeypatch, chunk):
    """Documents are cut out of chunks of the file at runs of blank lines: the same documents
    and hashes as a read line by line, when chunks cut lines, blank runs and documents, and a
    document longer than a spool's worth is read again line by line."""
    rng = random.Random(chunk)
    blanks = [b"\n", b" \n", b"\t \r\n", b"\x0c\n", b"\n\n \n"]
    parts = [rng.choice(blanks)]  # blank lines before the first document
    for d in range(40):
        lines = [f"doc {d} line {i} {'x' * rng.randint(0, 30)}".encode()
                 for i in range(rng.choice([1, 2, 5, 60]))]
        ending = b"\r\n" if d % 7 == 3 else b"\n"
        parts.append(ending.join(lines) + ending + rng.choice(blanks))
    parts.append(b"the last document \n  whose last line has no newline")
    data = b"".join(parts)
    (tmp_path / "c.txt").write_bytes(data)
    expected = lines_documents(data)
    assert len(expected) == 41
    monkeypatch.setattr(vocab_sampling, "_CHUNK_BYTES", chunk)
    monkeypatch.setattr(vocab_sampling, "_SPOOL_BYTES", 1000)  # docs of 60 lines: spooled
    found = [b"".join(pieces) for _, pieces in corpus_documents(tmp_path / "c.txt")]
    assert found == expected
    keys = [key for key, _ in corpus_documents(tmp_path / "c.txt")]
    assert keys == [int.from_bytes(hashlib.blake2b(d, digest_size=8, person=b"bertcore-vocab")
                                   .digest(), "little") for d in expected]
