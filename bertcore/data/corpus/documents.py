"""What every corpus source yields: `Document`s whose text arrives as `pieces`.

A piece is a (text, boundary) pair, where `boundary` marks a hard break after the text (the
end of a paragraph in prose, the end of a line in one-sentence-per-line input). Pieces are
short (a line, or part of a very long line), so nothing holds more than one line or record
in memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

Piece = tuple[str, bool]
Advance = Callable[[int], object]


@dataclass
class Document:
    origin: str  # for messages: a path, "module:os", ...
    pieces: Iterable[Piece]
    split_sentences: bool = True  # False: every piece boundary already ends a sentence


class Source:
    """A resolved `corpus.source`: `documents()` streams it; `total`/`unit` size the progress."""

    total: int | None = None
    unit: str = "doc"

    def documents(self, counts: Counter, advance: Advance) -> Iterator[Document]:
        raise NotImplementedError


def prose_pieces(lines: Iterable[Piece]) -> Iterator[Piece]:
    """Prose: lines of a paragraph join with a space; a blank line ends the paragraph."""
    at_line_start = True
    for text, complete in lines:
        if at_line_start and complete and (not text or text.isspace()):
            yield "", True
        else:
            yield (text + " " if complete else text), False
        at_line_start = complete


def record_document(text: str, origin: str, fmt: str) -> Document:
    """A record's text is one document: prose (blank lines end paragraphs) unless `fmt` is
    "lines", where each line is a sentence."""
    if fmt == "lines":
        pieces = ((line, True) for line in text.splitlines() if line.strip())
        return Document(origin, pieces, split_sentences=False)
    return Document(origin, prose_pieces((line, True) for line in text.splitlines()))
