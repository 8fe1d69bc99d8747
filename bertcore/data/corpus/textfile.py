"""The bytes of a corpus file as text lines: decompressed, decoded, and what happens to bytes
that do not decode.

- gzip, bzip2 and xz files (known by their first bytes, whatever their name) are read through
  their decompressor as they stream, so `books.txt.gz` gives the same corpus as `books.txt`.
  Other archives (zip, zstd, 7z, tar) hold files, not text: they are skipped with a warning
  that says to unpack them.
- Text is UTF-8, or UTF-16/UTF-32 when a byte order mark says so.
- A few invalid UTF-8 sequences in a file become U+FFFD and are counted: a damaged byte should
  not stop a large corpus. A file whose non-ASCII characters mostly do not decode is in
  another encoding (Latin-1, Windows-1252, ...), and every accented letter would be lost: it
  stops the stage with one line naming the file and how to convert it. The encoding is not
  guessed: the single-byte encodings differ exactly on the accented letters, and a guesser
  gets them wrong without a sign (charset-normalizer reads French Latin-1 as Windows-1250:
  "très" becomes "trčs").
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import gzip
import io
import logging
import lzma
import os
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO

import numpy as np

from bertcore.common.errors import BertError
from bertcore.data.corpus.documents import (
    Advance,
    Document,
    Piece,
    detect_format,
    line_documents,
    prose_pieces,
)

logger = logging.getLogger(__name__)

SNIFF_BYTES = 64 << 10  # looked at to detect binary files and the text format
LINE_CHUNK_BYTES = 1 << 20  # longer lines are read in pieces of this size
MAX_BLOCK_BYTES = 4 << 20  # a block of a file held at most (a longer paragraph: TextStream)
_FFFD = "\ufffd".encode()  # a replacement character that was in the file already
# Byte order marks of the Unicode encodings besides UTF-8 (UTF-32 first: its LE mark starts
# with UTF-16's), as Windows tools write them.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Compressed streams, read as they come: (the tool that makes them, opener) by first bytes.
_GZIP, _XZ = b"\x1f\x8b\x08", b"\xfd7zXZ\x00"
_BZIP2_BLOCKS = (b"1AY&SY", b"\x17rE8P\x90")  # after "BZh" and a level: data, or end of stream
# Archives of files: first bytes -> what to unpack them with.
_ARCHIVES = {
    b"PK\x03\x04": "a zip archive (unzip it)",
    b"\x28\xb5\x2f\xfd": "zstd-compressed (zstd -d it)",
    b"7z\xbc\xaf\x27\x1c": "a 7z archive (7z x it)",
}
_DECOMPRESS_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)

# A file is taken for another encoding when at least this many sequences are invalid, more
# than its non-ASCII characters that decode, at one or more per this many lines (rarer ones
# are damage in a large file, and cost a handful of characters).
MIN_INVALID = 8
LINES_PER_INVALID = 1000


@contextlib.contextmanager
def open_bytes(path: Path, advance: Advance) -> Iterator[tuple[BinaryIO, Advance, str | None]]:
    """(the file's bytes, decompressed if they are gzip, bzip2 or xz; an `advance` that counts
    the bytes read from disk, whatever it is given, and all of them once the file is closed;
    the tool that made the compressed file, or None)."""
    with open(path, "rb") as raw:
        kind = _compression(raw.read(10))
        raw.seek(0)
        if kind is None:
            yield raw, advance, None
            return
        done = 0

        def on_disk(_amount: int = 0) -> None:
            nonlocal done
            position = raw.tell()
            advance(position - done)
            done = position

        tool, opener = kind
        try:
            with opener(raw) as stream:
                yield stream, on_disk, tool
        finally:
            advance(os.fstat(raw.fileno()).st_size - done)


def _compression(magic: bytes) -> tuple[str, Callable[[BinaryIO], BinaryIO]] | None:
    if magic.startswith(_GZIP):
        return "gzip", gzip.open
    if magic.startswith(_XZ):
        return "xz", lzma.open
    if magic[:3] == b"BZh" and magic[3:4].isdigit() and magic[4:10] in _BZIP2_BLOCKS:
        return "bzip2", bz2.open
    return None


def archive_kind(head: bytes) -> str | None:
    """Why `head` (the first bytes of a decompressed file) is no text: an archive of files
    (what to unpack it with); None for any other."""
    if head[257:262] == b"ustar":
        return "a tar archive (tar -xf it), not text: unpack it"
    kind = next((kind for start, kind in _ARCHIVES.items() if head.startswith(start)), None)
    return f"{kind}, not text: unpack it" if kind else None


def binary_kind(head: bytes) -> str | None:
    """Why `head`, the first bytes of a file without a byte order mark, is no text: NUL bytes
    in at least 1% of them (UTF-16 or UTF-32 text has them in a quarter or more). A few NULs
    in text are damage: `Utf8Check` counts them, and cleaning removes them."""
    nuls = head.count(b"\0")
    if nuls * 100 < len(head):
        return None
    return (f"binary, not text ({nuls} NUL bytes in its first {len(head)}, the first at byte "
            f"{head.index(0)}; UTF-16 or UTF-32 text needs a byte order mark, or conversion to "
            "UTF-8)")


def bom_encoding(head: bytes) -> str:
    """utf-16 or utf-32 when a byte order mark says so, else utf-8."""
    return next((name for bom, name in _BOMS if head.startswith(bom)), "utf-8")


def read_head(handle, path: Path) -> bytes:
    """The first SNIFF_BYTES of a stream (to tell text from binary, and lines from prose)."""
    try:
        return handle.read(SNIFF_BYTES)
    except (UnicodeError, *_DECOMPRESS_ERRORS) as exc:
        raise _read_error(path, exc) from None


def read_line(handle, path: Path, limit: int = LINE_CHUNK_BYTES) -> bytes:
    """The next line, or its next `limit` bytes (-1: the whole line); b"" at the end. (Called
    once a line: a plain try, no context manager.)"""
    try:
        return handle.readline(limit)
    except (UnicodeError, *_DECOMPRESS_ERRORS) as exc:
        raise _read_error(path, exc) from None


def _read_error(path: Path, exc: Exception) -> BertError:
    """A disk or network error halfway through a file, or a damaged compressed file: one line."""
    detail = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return BertError(f"cannot read {path}: {detail}")


class Utf8Check:
    """Counts, in one file, the invalid UTF-8 sequences and the non-ASCII characters that
    decoded, and stops when the file reads as another encoding (see the module's doc)."""

    def __init__(self, path: Path, tool: str | None = None):
        self.path, self.tool = path, tool
        self.invalid = self.decoded = self.lines = self.nuls = 0
        self.first: tuple[int, bytes] | None = None  # line number and bytes of the first
        self.first_nul = 0  # the line of the first NUL byte

    def line(self, raw: bytes, text: str) -> int:
        """Count one line (or piece of one) as read and decoded; return its invalid sequences.
        Raises BertError once the file reads as another encoding."""
        self.lines += 1
        if b"\0" in raw:  # no text holds one: damage, which cleaning removes
            self.nuls += raw.count(b"\0")
            self.first_nul = self.first_nul or self.lines
        if raw.isascii() and "\ufffd" not in text:
            return 0
        replaced = text.count("\ufffd")
        invalid = max(0, replaced - raw.count(_FFFD))
        self.decoded += len(text) - len(text.encode("ascii", "ignore")) - invalid
        if invalid:
            self.invalid += invalid
            self.first = self.first or (self.lines, raw)
            if (self.invalid >= MIN_INVALID and self.invalid > self.decoded
                    and self.invalid * LINES_PER_INVALID >= self.lines):
                raise BertError(self._not_utf8())
        return invalid

    def block(self, data: bytes, final: bool = False) -> None:
        """Count whole lines as `line` counts them piece by piece: at once when they are valid
        UTF-8 (and no U+FFFD of the file straddles a piece of a long line)."""
        text = _strict_utf8(data)
        if text is None or (len(data) > LINE_CHUNK_BYTES and _FFFD in data):
            for _ in decoded_lines(io.BytesIO(data), self.path, self, final=final):
                pass
            return
        self._count_valid(data, text, LINE_CHUNK_BYTES)

    def whole_lines(self, data: bytes) -> None:
        """Count whole lines as `line` counts them when each is read whole (JSON Lines records
        are parsed whole): at once when they are valid UTF-8."""
        text = _strict_utf8(data)
        if text is None:
            for raw in io.BytesIO(data):
                self.line(raw, raw.decode("utf-8", "replace"))
            return
        self._count_valid(data, text, None)

    def _count_valid(self, data: bytes, text: str, limit: int | None) -> None:
        """Count valid UTF-8 `data` (decoded: `text`) as `line` counts its pieces of `limit`."""
        if b"\0" in data:  # as `line` counts them: damage, which cleaning removes
            self.nuls += data.count(b"\0")
            self.first_nul = self.first_nul or self.lines + line_pieces(
                data[: data.index(b"\0") + 1], limit)
        self.lines += line_pieces(data, limit)
        if not data.isascii():
            self.decoded += len(text) - len(text.encode("ascii", "ignore"))

    def report(self, counts) -> None:
        """At the end of the file: warn of the invalid sequences, and count them; warn of the
        NUL bytes (which cleaning removed)."""
        if self.invalid:
            logger.warning("%s: %d invalid UTF-8 sequences replaced by U+FFFD (first on line "
                           "%d)", self.path, self.invalid, self.first[0])
            counts["invalid_utf8_sequences"] += self.invalid
        if self.nuls:
            logger.warning("%s: %d NUL bytes removed (first on line %d): text holds none, so "
                           "the file may be damaged", self.path, self.nuls, self.first_nul)

    def _not_utf8(self) -> str:
        number, raw = self.first
        try:
            raw.decode("utf-8")
            start = 0
        except UnicodeDecodeError as exc:
            start = exc.start
        sample = raw[max(0, start - 24) : start + 8]
        plain = self.path.name.removesuffix(".gz").removesuffix(".bz2").removesuffix(".xz")
        target = self.path.with_name(Path(plain).stem + f".utf8{Path(plain).suffix or '.txt'}")
        convert = (f"{self.tool} -dc {self.path} | iconv -f WINDOWS-1252 -t UTF-8 > {target}"
                   if self.tool else f"iconv -f WINDOWS-1252 -t UTF-8 {self.path} > {target}")
        return (f"{self.path} is not UTF-8: {self.invalid} of the first "
                f"{self.invalid + self.decoded} non-ASCII characters do not decode (line "
                f"{number}: {sample!r}); convert it to UTF-8 and point corpus.source at the "
                f"result, e.g. `{convert}` for Western European text (Latin-1, Windows-1252; "
                "other encodings need their own -f)")


def decoded_lines(handle, path: Path, check: Utf8Check | None = None,
                  final: bool = True) -> Iterator[Piece]:
    """(text, complete) per line of a binary stream of UTF-8; a long line comes in several
    pieces. Invalid UTF-8 becomes U+FFFD, counted by `check` (which stops the stage when the
    file is in another encoding). `final`: the stream ends the file (an unfinished character
    at its end is invalid)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    while raw := read_line(handle, path):
        complete = raw.endswith(b"\n")
        text = decoder.decode(raw, final=False)
        if check is not None:
            check.line(raw, text)
        yield (text.rstrip("\r\n") if complete else text), complete
    rest = decoder.decode(b"", final=True) if final else ""
    if rest:
        if check is not None:
            check.line(b"", rest)
        yield rest, True


class _FileLayout:
    """How a span of a text file is read: `fmt` (prose or lines), or auto: detected from the
    `start` of the span, which holds the file's beginning."""

    fmt: str
    start: bytes

    @cached_property
    def layout(self) -> str:
        """prose or lines: `fmt`, or as detected (auto)."""
        return _format(self.fmt, self.start)

    @property
    def read_as(self) -> str | None:
        """How its file is read when the span decides it (fmt auto), else None."""
        return self.layout if self.fmt == "auto" else None


@dataclass
class TextBlock(_FileLayout):
    """Whole lines of a UTF-8 text file, cut where cleaning starts afresh (`utf8_blocks`): a
    span of its document (prose) or documents (lines), cleaned in a worker process.
    `ends`: its last document ends with it; `final`: the file ends with it."""

    data: bytes
    fmt: str  # prose, lines, or auto: the whole file, its format to detect
    ends: bool
    final: bool
    inline = False

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def start(self) -> bytes:
        return self.data

    def parts(self, counts: Counter) -> list[tuple[Document, bool]]:
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
    paragraph or line that long): cleaned in the main process as it is read (`inline`), so
    that memory stays bounded; `head` is what was read of it already."""

    head: bytes
    handle: BinaryIO
    check: Utf8Check
    fmt: str
    advance: Advance
    inline = True

    @property
    def size(self) -> int:
        return len(self.head)

    @property
    def start(self) -> bytes:
        return self.head

    def parts(self, counts: Counter) -> Iterator[tuple[Document, bool]]:
        reader = _Rejoined(self.head, self.handle, self.advance)
        lines = decoded_lines(reader, self.check.path, self.check, final=True)
        if self.layout == "prose":
            yield Document("", prose_pieces(lines)), True
            return
        for document in line_documents(lines, ""):
            yield document, True


def _format(fmt: str, data: bytes) -> str:
    """prose or lines: `fmt`, or when it is auto, as detected from the file's first bytes."""
    if fmt != "auto":
        return fmt
    return detect_format(data[:SNIFF_BYTES].decode("utf-8", "replace"))


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
            yield TextBlock(block, fmt, ends, final=False)
    block = bytes(buffer)
    check.block(block, final=True)
    yield TextBlock(block, fmt, ends=True, final=True)


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


def read_block(handle, path: Path, size: int) -> bytes:
    """The next `size` bytes of a stream (fewer at its end; b"" past it)."""
    try:
        return handle.read(size)
    except (UnicodeError, *_DECOMPRESS_ERRORS) as exc:
        raise _read_error(path, exc) from None


def _strict_utf8(data: bytes) -> str | None:
    """`data` decoded, or None where it is no valid UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def line_pieces(data: bytes, limit: int | None = LINE_CHUNK_BYTES) -> int:
    """How many pieces `read_line` makes of `data` (a line longer than `limit` is several;
    None: each line is one)."""
    if limit is None or len(data) <= limit:
        return data.count(b"\n") + (not data.endswith(b"\n") and len(data) > 0)
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1
    if not data.endswith(b"\n"):
        ends = np.append(ends, len(data))
    lengths = np.diff(ends, prepend=0)
    return int(((lengths + limit - 1) // limit).sum())


def wide_lines(handle, encoding: str, path: Path, counts, advance: Advance) -> Iterator[Piece]:
    """(text, complete) per line of a UTF-16/UTF-32 stream with a byte order mark."""
    width = 2 if encoding == "utf-16" else 4
    text = io.TextIOWrapper(handle, encoding=encoding, errors="replace", newline="")
    invalid = 0
    while line := read_line(text, path):
        advance(len(line) * width)
        invalid += line.count("\ufffd")
        complete = line.endswith(("\n", "\r"))
        yield (line.rstrip("\r\n") if complete else line), complete
    if invalid:
        logger.warning("%s: %d invalid %s sequences replaced by U+FFFD", path, invalid,
                       encoding.upper())
        counts["invalid_utf8_sequences"] += invalid
