"""A UTF-8 text file as spans for the corpus stage's workers: blocks of whole lines, cut where
cleaning starts afresh (`utf8_blocks`, `TextBlock`), and, past a paragraph or line too long
for a block, the rest of the file cleaned in the main process as it is read (`TextStream`).
How the bytes are read and checked as UTF-8: `textfile`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO

from bertcore.data.corpus.counts import CorpusCounts
from bertcore.data.corpus.documents import (
    Advance,
    Document,
    detect_format,
    line_documents,
    prose_pieces,
)
from bertcore.data.corpus.textfile import SNIFF_BYTES, Utf8Check, decoded_lines, read_block

MAX_BLOCK_BYTES = 4 << 20  # a block of a file held at most (a longer paragraph: TextStream)


class _FileLayout:
    """How a span of a text file is read: `fmt` (prose or lines), or auto: detected from the
    `data` of the span, which holds the file's beginning."""

    fmt: str
    data: bytes

    @cached_property
    def layout(self) -> str:
        """prose or lines: `fmt`, or as detected from the file's first bytes (auto)."""
        if self.fmt != "auto":
            return self.fmt
        return detect_format(self.data[:SNIFF_BYTES].decode("utf-8", "replace"))

    @property
    def read_as(self) -> str | None:
        """How its file is read when the span decides it (fmt auto), else None."""
        return self.layout if self.fmt == "auto" else None

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass
class TextBlock(_FileLayout):
    """Whole lines of a UTF-8 text file, cut where cleaning starts afresh (`utf8_blocks`): a
    span of its document (prose) or documents (lines), cleaned in a worker process.
    `ends`: its last document ends with it; `final`: the file ends with it."""

    data: bytes
    fmt: str  # prose, lines, or auto: the whole file, its format to detect
    ends: bool
    final: bool
    path: str = ""  # its file, for messages

    def parts(self, counts: CorpusCounts) -> list[tuple[Document, bool]]:
        """(document, ends) of what the block holds: the same pieces as a read of the file."""
        lines = decoded_lines(io.BytesIO(self.data), Path("<block>"), final=self.final)
        if self.layout == "prose":
            return [(Document("", list(prose_pieces(lines))), self.ends)]
        documents = [Document("", list(d.pieces), False) for d in line_documents(lines, "")]
        return [(document, i + 1 < len(documents) or self.ends)
                for i, document in enumerate(documents)]


@dataclass
class TextStream(_FileLayout):
    """The rest of a UTF-8 file from a run of MAX_BLOCK_BYTES with nowhere to end a block (a
    paragraph or line that long): cleaned in the main process as it is read, so that memory
    stays bounded (`tasks.clean_in_order`); `data` is what was read of it already."""

    data: bytes
    handle: BinaryIO
    check: Utf8Check
    fmt: str
    advance: Advance

    def parts(self, counts: CorpusCounts) -> Iterator[tuple[Document, bool]]:
        reader = _Rejoined(self.data, self.handle, self.advance)
        lines = decoded_lines(reader, self.check.path, self.check, final=True)
        if self.layout == "prose":
            yield Document("", prose_pieces(lines)), True
            return
        for document in line_documents(lines, ""):
            yield document, True


class _Rejoined:
    """`readline(limit)` over `head` and then the rest of `handle`, as over the whole file."""

    def __init__(self, head: bytes, handle, advance: Advance):
        self.head, self.handle, self.advance = io.BytesIO(head), handle, advance

    def readline(self, limit: int) -> bytes:
        line = self.head.readline(limit)
        if len(line) < limit and not line.endswith(b"\n"):  # the head ended within it
            more = self.handle.readline(limit - len(line))
            self.advance(len(more))
            line += more
        return line


# Where a block may end. Prose: after a blank line (cleaning and splitting start afresh after
# it). Lines: after a blank line too, or else between two lines that are surely not blank (a
# printable ASCII character ends the one and starts the other): the document goes on.
_BLANK_LINE = re.compile(rb"\n[ \t\r\f\v]{0,1000}\n")
_INSIDE_DOCUMENT = re.compile(rb"[!-~]\r?\n(?=[!-~])")
_CUT_OVERLAP = 1024  # bytes searched again: a blank line may straddle two reads


def utf8_blocks(handle, check: Utf8Check, fmt: str, size: int,
                advance: Advance) -> Iterator[TextBlock | TextStream]:
    """The file (from its start) in blocks of whole lines of about `size` bytes (cut at the
    last place a block may end, see _BLANK_LINE; longer when there is none), each counted by
    `check` as a read line by line counts it. Past MAX_BLOCK_BYTES with nowhere to end a
    block (a paragraph or line that long), the rest of the file is a `TextStream`."""
    buffer = bytearray()
    searched = 0  # where to look for the next cut from
    while data := read_block(handle, check.path, size):
        advance(len(data))
        buffer += data
        cut, ends = _last_cut(buffer, fmt, max(0, searched - _CUT_OVERLAP))
        searched = len(buffer)
        if not cut and len(buffer) > MAX_BLOCK_BYTES:
            yield TextStream(bytes(buffer), handle, check, fmt, advance)
            return  # the stream read the file to its end
        if cut:
            block = bytes(buffer[:cut])
            del buffer[:cut]
            searched = len(buffer)
            check.block(block)
            yield TextBlock(block, fmt, ends, final=False, path=str(check.path))
    block = bytes(buffer)
    check.block(block, final=True)
    yield TextBlock(block, fmt, ends=True, final=True, path=str(check.path))


def _last_cut(buffer: bytearray, fmt: str, start: int) -> tuple[int, bool]:
    """(offset just after the last place in buffer[start:] where a block may end, or 0;
    whether the block's last document ends there)."""
    if fmt == "auto":  # the whole file is one block (see sources.WHOLE_FILE_BLOCKS)
        return 0, False
    cut = 0
    for match in _BLANK_LINE.finditer(buffer, start):
        cut = match.end()
    if cut or fmt == "prose":
        return cut, fmt == "lines"  # a prose file is one document: it goes on
    for match in _INSIDE_DOCUMENT.finditer(buffer, start):
        cut = match.end()
    return cut, False
