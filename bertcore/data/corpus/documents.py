"""What every corpus source yields: `Document`s whose text arrives as `pieces`, and the spans
of them that worker processes clean (`Span`, `bertcore.data.corpus.tasks`).

A piece is a (text, boundary) pair, where `boundary` marks a hard break after the text (the
end of a paragraph in prose, the end of a line in one-sentence-per-line input). Pieces are
short (a line, or part of a very long line). Cleaning and sentence splitting start afresh
after every boundary, so a document can be cut after any boundary into spans that are cleaned
apart (in different processes) and give, in order, the document's sentences.

A span is one of: a `Record` (a record's text: a whole document), a `PieceRun` (pieces of a
document, up to a boundary), a `TextBlock` (`textblocks`: raw lines of a UTF-8 file), a
`TextStream` (`textblocks`: the rest of a file with a paragraph too long for a block) or a
`RecordBlock` (`jsonl`: raw lines of a JSON Lines file); what they have in common is `Span`.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from bertcore.data.corpus.counts import CorpusCounts
from bertcore.data.corpus.sentences import split_sentences

Piece = tuple[str, bool]
Advance = Callable[[int], object]
_TERMINAL = tuple(".!?。！？…\"'”’)」』")


@dataclass
class Document:
    origin: str  # for messages: a path, "module:os", ...
    pieces: Iterable[Piece]
    split_sentences: bool = True  # False: every piece boundary already ends a sentence


class Span(Protocol):
    """A stretch of a source's documents that one process cleans whole, in order with the
    others (cleaning and sentence splitting start afresh where it ends)."""

    @property
    def size(self) -> int:
        """How much text it holds (bytes or characters), to group spans into tasks."""
        ...

    @property
    def read_as(self) -> str | None:
        """prose or lines where the span decides how its text file is read (a TextBlock or
        TextStream of a whole file with corpus.format auto), else None (the source counted
        it, or it is no text file)."""
        ...

    def parts(self, counts: CorpusCounts) -> Iterable[tuple[Document | Record, bool]]:
        """(document, ends) pairs, `ends` False when the document goes on in the next span;
        adds to `counts` what it finds where it is read (a RecordBlock: its records, and
        the lines that are not)."""
        ...


@dataclass
class Record:
    """A record's text (JSON Lines, Parquet, a dataset, a built-in topic): one document of
    prose (blank lines end paragraphs), whose pieces are made where it is cleaned.
    `corpus.format` is for text files: a record is a document whatever it says (as `lines`,
    a record of one line would be one sentence)."""

    origin: str
    text: str
    split_sentences = True
    read_as = None

    @property
    def pieces(self) -> Iterator[Piece]:
        return prose_pieces((line, True) for line in self.text.splitlines())

    def parts(self, counts: CorpusCounts) -> list[tuple[Record, bool]]:
        return [(self, True)]

    @property
    def size(self) -> int:
        return len(self.text)


@dataclass
class PieceRun:
    """Pieces of one document up to a boundary; `ends`: the document ends with them."""

    pieces: list[Piece]
    split_sentences: bool
    ends: bool
    read_as = None

    def parts(self, counts: CorpusCounts) -> list[tuple[Document, bool]]:
        return [(Document("", self.pieces, self.split_sentences), self.ends)]

    @property
    def size(self) -> int:
        return sum(len(text) for text, _ in self.pieces)


class Source:
    """A resolved `corpus.source`: `spans()` streams it (for the stage; by default from
    `documents()`); `total`/`unit` size the progress."""

    total: int | None = None
    unit: str = "doc"

    def made_with(self) -> dict[str, str]:
        """What the text depends on besides `corpus.source` and its content, recorded in
        metrics/corpus.json (the built-in docs: the interpreter's version)."""
        return {}

    def documents(self, counts: CorpusCounts, advance: Advance) -> Iterator[Document | Record]:
        raise NotImplementedError

    def spans(self, counts: CorpusCounts, advance: Advance, size: int) -> Iterator[Span]:
        """The documents as spans of about `size` characters (see `document_spans`)."""
        for document in self.documents(counts, advance):
            yield from document_spans(document, size)


def document_spans(document: Document | Record, size: int) -> Iterator[Record | PieceRun]:
    """A record whole; a document's pieces in runs cut after a boundary once `size` is met."""
    if isinstance(document, Record):
        yield document
        return
    run, length = [], 0
    for text, boundary in document.pieces:
        run.append((text, boundary))
        length += len(text)
        if boundary and length >= size:
            yield PieceRun(run, document.split_sentences, ends=False)
            run, length = [], 0
    yield PieceRun(run, document.split_sentences, ends=True)


def prose_pieces(lines: Iterable[Piece]) -> Iterator[Piece]:
    """Prose: lines of a paragraph join with a space; a blank line ends the paragraph."""
    for text, complete, blank in _mark_blank(lines):
        yield ("", True) if blank else ((text + " " if complete else text), False)


def records_with_text(record, field: str, origin: str, counts: CorpusCounts) -> Iterator[Record]:
    """The record's document when its `field` holds text, counted as one of `records`; else
    nothing, counted as one of `records_without_text`."""
    text = record.get(field) if isinstance(record, dict) else None
    if isinstance(text, str):
        counts.records += 1
        yield Record(origin, text)
    else:
        counts.records_without_text += 1


def line_documents(lines: Iterable[Piece], origin: str) -> Iterator[Document]:
    """One sentence per line, blank lines between documents. (A document's pieces are read
    on, if its consumer left some, when the next document is asked for.)"""
    for blank, group in itertools.groupby(_mark_blank(lines), key=operator.itemgetter(2)):
        if not blank:
            pieces = ((text, complete) for text, complete, _ in group)
            yield Document(origin, pieces, split_sentences=False)


def _mark_blank(lines: Iterable[Piece]) -> Iterator[tuple[str, bool, bool]]:
    """(text, complete, whether it is a blank line) per piece."""
    at_line_start = True
    for text, complete in lines:
        yield text, complete, at_line_start and complete and (not text or text.isspace())
        at_line_start = complete


def detect_format(sample: str) -> str:
    """"lines" when the sample reads as one sentence per line, else "prose".

    One sentence per line: most lines end like a sentence, few hold a sentence end inside,
    and blocks between blank lines (documents) hold two lines or more on average. Wrapped
    prose has lines ending mid-sentence; paragraph-per-line prose has sentence ends inside
    its lines; one-sentence paragraphs make blocks of one line.
    """
    lines = sample.splitlines()[:-1] or sample.splitlines()  # the last may be cut short
    lines = [line.strip() for line in lines][:400]
    text_lines = [line for line in lines if line]
    blocks = sum(1 for i, line in enumerate(lines) if line and (i == 0 or not lines[i - 1]))
    if len(text_lines) < 2 or len(text_lines) < 2 * blocks:
        return "prose"
    ending = sum(line.endswith(_TERMINAL) for line in text_lines) / len(text_lines)
    inner = sum(len(split_sentences(line, 10**9)) > 1 for line in text_lines) / len(text_lines)
    return "lines" if ending >= 0.6 and inner <= 0.25 else "prose"
