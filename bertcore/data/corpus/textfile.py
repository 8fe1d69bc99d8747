"""The bytes of a corpus file as text lines: decompressed, decoded, and what happens to bytes
that do not decode.

- gzip, bzip2 and xz files (known by their first bytes, whatever their name) are read through
  their decompressor as they stream, so `books.txt.gz` gives the same corpus as `books.txt`.
  Other archives (zip, zstd, 7z, tar) hold files, not text: they are skipped with a warning
  that says to unpack them. So are other binary files: known by their first bytes (images,
  PDF, executables, ...), or by NUL or control bytes in their first 64 KB, which text holds
  few of (random bytes hold about 11% control bytes, Latin-1 or Windows-1252 text none).
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
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from bertcore.common.errors import BertError
from bertcore.data.corpus.counts import CorpusCounts
from bertcore.data.corpus.documents import Advance, Piece

logger = logging.getLogger(__name__)

SNIFF_BYTES = 64 << 10  # looked at to detect binary files and the text format
LINE_CHUNK_BYTES = 1 << 20  # longer lines are read in pieces of this size
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
# Other files that are no text, by their first bytes.
_SIGNATURES = {
    b"\x89PNG\r\n\x1a\n": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF87a": "a GIF image",
    b"GIF89a": "a GIF image",
    b"%PDF-": "a PDF document: extract its text first, e.g. with pdftotext",
    b"\x7fELF": "an executable (ELF)",
    b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1": "an old Microsoft Office document",
    b"SQLite format 3\x00": "an SQLite database",
}
# Control bytes that text does not hold (it may hold tabs, line ends, form feeds, and ESC for
# terminal colours); a file whose first block is this share of them or more is binary.
_CONTROL = bytes(sorted(set(range(0x20)) - set(b"\t\n\v\f\r\x1b"))) + b"\x7f"
CONTROL_SHARE = 0.05
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
    """Why `head`, the first bytes of a file without a byte order mark, is no text: a known
    file signature; NUL bytes in at least 1% of them (UTF-16 or UTF-32 text has them in a
    quarter or more); control bytes in CONTROL_SHARE of them. A few NULs in text are damage:
    `Utf8Check` counts them, and cleaning removes them."""
    kind = next((kind for start, kind in _SIGNATURES.items() if head.startswith(start)), None)
    if kind:
        return f"binary, not text ({kind})"
    nuls = head.count(b"\0")
    if nuls * 100 >= len(head):
        return (f"binary, not text ({nuls} NUL bytes in its first {len(head)}, the first at "
                f"byte {head.index(0)}; UTF-16 or UTF-32 text needs a byte order mark, or "
                "conversion to UTF-8)")
    controls = len(head) - len(head.translate(None, _CONTROL))
    if controls < CONTROL_SHARE * len(head):
        return None
    return (f"binary, not text ({controls} control bytes in its first {len(head)}, where "
            "text holds next to none)")


def bom_encoding(head: bytes) -> str:
    """utf-16 or utf-32 when a byte order mark says so, else utf-8."""
    return next((name for bom, name in _BOMS if head.startswith(bom)), "utf-8")


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

    def line(self, raw: bytes, text: str) -> None:
        """Count one line (or piece of one) as read and decoded. Raises BertError once the
        file reads as another encoding."""
        self.lines += 1
        if b"\0" in raw:  # no text holds one: damage, which cleaning removes
            self.nuls += raw.count(b"\0")
            self.first_nul = self.first_nul or self.lines
        if raw.isascii() and "\ufffd" not in text:
            return
        replaced = text.count("\ufffd")
        invalid = max(0, replaced - raw.count(_FFFD))
        self.decoded += len(text) - len(text.encode("ascii", "ignore")) - invalid
        if invalid:
            self.invalid += invalid
            self.first = self.first or (self.lines, raw)
            if (self.invalid >= MIN_INVALID and self.invalid > self.decoded
                    and self.invalid * LINES_PER_INVALID >= self.lines):
                raise BertError(self._not_utf8())

    def block(self, data: bytes, final: bool = False) -> None:
        """Count whole lines as `line` counts them piece by piece: at once when they are valid
        UTF-8 (and no U+FFFD of the file straddles a piece of a long line)."""
        if not _is_utf8(data) or (len(data) > LINE_CHUNK_BYTES and _FFFD in data):
            for _ in decoded_lines(io.BytesIO(data), self.path, self, final=final):
                pass
            return
        self._count_valid(data, LINE_CHUNK_BYTES)

    def whole_lines(self, data: bytes) -> None:
        """Count whole lines as `line` counts them when each is read whole (JSON Lines records
        are parsed whole): at once when they are valid UTF-8."""
        if not _is_utf8(data):
            for raw in io.BytesIO(data):
                self.line(raw, raw.decode("utf-8", "replace"))
            return
        self._count_valid(data, None)

    def _count_valid(self, data: bytes, limit: int | None) -> None:
        """Count valid UTF-8 `data` as `line` counts its pieces of `limit`."""
        if b"\0" in data:  # as `line` counts them: damage, which cleaning removes
            self.nuls += data.count(b"\0")
            self.first_nul = self.first_nul or self.lines + line_pieces(
                data[: data.index(b"\0") + 1], limit)
        self.lines += line_pieces(data, limit)
        if not data.isascii():  # a character past ASCII has one lead byte, 0xC0 or above
            self.decoded += int(np.count_nonzero(np.frombuffer(data, np.uint8) >= 0xC0))

    def report(self, counts: CorpusCounts, nuls: bool = True) -> None:
        """At the end of the file: warn of the invalid sequences, and count them; and (`nuls`)
        warn of the NUL bytes, which cleaning removed from a text file."""
        if self.invalid:
            logger.warning("%s: %d invalid UTF-8 sequences replaced by U+FFFD (first on line "
                           "%d)", self.path, self.invalid, self.first[0])
            counts.invalid_utf8_sequences += self.invalid
        if nuls and self.nuls:
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


def read_block(handle, path: Path, size: int) -> bytes:
    """The next `size` bytes of a stream (fewer at its end; b"" past it)."""
    try:
        return handle.read(size)
    except (UnicodeError, *_DECOMPRESS_ERRORS) as exc:
        raise _read_error(path, exc) from None


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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


def wide_lines(handle, encoding: str, path: Path, counts: CorpusCounts,
               advance: Advance) -> Iterator[Piece]:
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
        counts.invalid_utf8_sequences += invalid
