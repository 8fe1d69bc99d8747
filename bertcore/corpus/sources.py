"""Where raw text comes from: files, folders and globs of text, JSON Lines, Parquet, a
Hugging Face dataset, or the built-in Python documentation.

A source yields `Document`s. A document's text arrives as `pieces`: (text, boundary) pairs,
where `boundary` marks a hard break after the text (the end of a paragraph in prose, the
end of a line in one-sentence-per-line input). Pieces are short (a line, or part of a very
long line), so nothing here holds more than one line or record in memory.
"""

from __future__ import annotations

import codecs
import glob
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bertcore.corpus.sentences import split_sentences
from bertcore.errors import BertError

logger = logging.getLogger(__name__)

Piece = tuple[str, bool]
Advance = Callable[[int], object]

SNIFF_BYTES = 64 << 10  # looked at to detect binary files and the text format
LINE_CHUNK_BYTES = 1 << 20  # longer lines are read in pieces of this size
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
_FFFD = "\ufffd".encode()  # a replacement character that was in the file already
_TERMINAL = tuple(".!?。！？…\"'”’)」』")


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


def open_source(spec: str, text_field: str = "text", fmt: str = "auto") -> Source:
    """Resolve `spec`; a missing path, an empty folder or a missing package is a BertError."""
    if spec.startswith("builtin:"):
        from bertcore.corpus.pythondocs import BUILTINS

        if spec not in BUILTINS:
            raise BertError(f"unknown built-in corpus {spec!r}; available: {', '.join(BUILTINS)}")
        return BUILTINS[spec]()
    if spec.startswith("hf:"):
        return HubSource(spec, text_field, fmt)
    return FileSource(resolve_files(spec), text_field, fmt)


def resolve_files(spec: str) -> list[Path]:
    """The files named by a path, a folder (walked recursively) or a glob, sorted."""
    pattern = os.path.expanduser(spec)
    if glob.has_magic(pattern):
        matches = sorted(glob.glob(pattern, recursive=True))
        if not matches:
            raise BertError(f"corpus source {spec!r} matches no files")
    elif os.path.exists(pattern):
        matches = [pattern]
    else:
        raise BertError(
            f"corpus source not found: {spec} (give a file, folder or glob, "
            "builtin:python-docs, or hf:NAME[:CONFIG])"
        )
    files: list[Path] = []
    for match in matches:
        path = Path(match)
        files.extend(_walk(path) if path.is_dir() else [path] if path.is_file() else [])
    if not files:
        raise BertError(f"corpus source {spec} is empty: it holds no files")
    return files


def _walk(folder: Path) -> list[Path]:
    """Files under `folder` in a stable order, skipping hidden ones (.git, .DS_Store)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        paths = (Path(root, f) for f in sorted(files) if not f.startswith("."))
        found.extend(path for path in paths if path.is_file())  # not broken links, not FIFOs
    return found


class FileSource(Source):
    unit = "B"

    def __init__(self, files: list[Path], text_field: str, fmt: str):
        self.files = files
        self.text_field = text_field
        self.format = fmt
        self.total = sum(path.stat().st_size for path in files)

    def documents(self, counts: Counter, advance: Advance) -> Iterator[Document]:
        for path in self.files:
            counts["files"] += 1
            name = path.name.lower()
            try:
                if name.endswith(PARQUET_SUFFIXES):
                    yield from parquet_documents(path, self.text_field, self.format, counts)
                    advance(path.stat().st_size)
                elif name.endswith(JSONL_SUFFIXES):
                    yield from jsonl_documents(path, self.text_field, self.format, counts, advance)
                else:
                    yield from text_file_documents(path, self.format, counts, advance)
            except OSError as exc:
                raise BertError(f"cannot read {path}: {exc.strerror or exc}") from None


def text_file_documents(
    path: Path, fmt: str, counts: Counter, advance: Advance
) -> Iterator[Document]:
    """A prose file is one document; a one-sentence-per-line file holds many, blank-separated."""
    with open(path, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
        if not head:
            counts["empty_files"] += 1
            return
        if b"\0" in head:
            logger.warning("skipping binary file %s", path)
            counts["binary_files"] += 1
            advance(path.stat().st_size)
            return
        if fmt == "auto":
            fmt = detect_format(head.decode("utf-8", "replace"))
            logger.debug("%s: format %s", path, fmt)
        handle.seek(0)
        lines = _decoded_lines(handle, counts, advance, path)
        if fmt == "prose":
            yield Document(str(path), _prose_pieces(lines))
        else:
            yield from _line_documents(lines, str(path))


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


def _decoded_lines(handle, counts: Counter, advance: Advance, path: Path) -> Iterator[Piece]:
    """(text, complete) per line of a binary file; a long line comes in several pieces.

    Invalid UTF-8 becomes U+FFFD and is counted (`invalid_utf8_sequences`)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    invalid = 0
    while raw := _read_line(handle, path):
        advance(len(raw))
        complete = raw.endswith(b"\n")
        text = decoder.decode(raw, final=False)
        if "\ufffd" in text:
            invalid += max(0, text.count("\ufffd") - raw.count(_FFFD))
        yield (text.rstrip("\r\n") if complete else text), complete
    rest = decoder.decode(b"", final=True)
    if rest:
        invalid += rest.count("\ufffd")
        yield rest, True
    if invalid:
        logger.warning("%s: %d invalid UTF-8 sequences replaced by U+FFFD", path, invalid)
        counts["invalid_utf8_sequences"] += invalid


def _read_line(handle, path: Path) -> bytes:
    try:
        return handle.readline(LINE_CHUNK_BYTES)
    except OSError as exc:  # a disk or network error halfway through the file
        raise BertError(f"cannot read {path}: {exc.strerror or exc}") from None


def _prose_pieces(lines: Iterable[Piece]) -> Iterator[Piece]:
    """Prose: lines of a paragraph join with a space; a blank line ends the paragraph."""
    at_line_start = True
    for text, complete in lines:
        if at_line_start and complete and (not text or text.isspace()):
            yield "", True
        else:
            yield (text + " " if complete else text), False
        at_line_start = complete


def _line_documents(lines: Iterable[Piece], origin: str) -> Iterator[Document]:
    """One sentence per line, blank lines between documents."""
    marked = _mark_blank(lines)
    for text, complete, blank in marked:
        if blank:
            continue
        pieces = _until_blank(marked, (text, complete))
        yield Document(origin, pieces, split_sentences=False)
        for _ in pieces:  # the consumer normally read them all
            pass


def _mark_blank(lines: Iterable[Piece]) -> Iterator[tuple[str, bool, bool]]:
    at_line_start = True
    for text, complete in lines:
        yield text, complete, at_line_start and complete and (not text or text.isspace())
        at_line_start = complete


def _until_blank(marked: Iterator[tuple[str, bool, bool]], first: Piece) -> Iterator[Piece]:
    yield first
    for text, complete, blank in marked:
        if blank:
            return
        yield text, complete


def record_document(text: str, origin: str, fmt: str) -> Document:
    """A record's text is one document: prose (blank lines end paragraphs) unless `fmt` is
    "lines", where each line is a sentence."""
    if fmt == "lines":
        pieces = ((line, True) for line in text.splitlines() if line.strip())
        return Document(origin, pieces, split_sentences=False)
    return Document(origin, _prose_pieces((line, True) for line in text.splitlines()))


def jsonl_documents(
    path: Path, field: str, fmt: str, counts: Counter, advance: Advance
) -> Iterator[Document]:
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            advance(len(raw))
            if not raw.strip():
                continue
            line = raw.decode("utf-8", "replace")
            if "\ufffd" in line:
                counts["invalid_utf8_sequences"] += line.count("\ufffd") - raw.count(_FFFD)
            try:
                record = json.loads(line)
            except ValueError:
                counts["invalid_json_lines"] += 1
                logger.debug("%s:%d: not JSON", path, number)
                continue
            yield from _text_of(record, field, f"{path}:{number}", fmt, counts)


def parquet_documents(path: Path, field: str, fmt: str, counts: Counter) -> Iterator[Document]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise BertError(f"{path} is not a readable Parquet file ({exc})") from None
    columns = table.schema_arrow.names
    if field not in columns:
        raise BertError(
            f"{path} has no column {field!r} (columns: {', '.join(columns)}); "
            "set corpus.text_field"
        )
    row = 0
    try:
        for batch in table.iter_batches(batch_size=1024, columns=[field]):
            for value in batch.column(0).to_pylist():
                row += 1
                yield from _text_of({field: value}, field, f"{path}[{row}]", fmt, counts)
    except pa.ArrowException as exc:
        raise BertError(f"{path}: cannot read row {row + 1} and on ({exc})") from None


def _text_of(record, field: str, origin: str, fmt: str, counts: Counter) -> Iterator[Document]:
    text = record.get(field) if isinstance(record, dict) else None
    if isinstance(text, str):
        counts["records"] += 1
        yield record_document(text, origin, fmt)
    else:
        counts["records_without_text"] += 1


class HubSource(Source):
    """`hf:NAME[:CONFIG]`: the train split of a Hugging Face dataset, streamed."""

    def __init__(self, spec: str, text_field: str, fmt: str):
        try:
            import datasets  # noqa: F401
        except ImportError:
            raise BertError(
                f"corpus source {spec} needs the Hugging Face datasets package: "
                "pip install datasets (or pip install 'bertpretrain[hf]')"
            ) from None
        name, _, config = spec.removeprefix("hf:").partition(":")
        if not name:
            raise BertError(f"corpus source {spec!r}: write hf:NAME or hf:NAME:CONFIG")
        self.name, self.config = name, config or None
        self.text_field, self.format = text_field, fmt

    def documents(self, counts: Counter, advance: Advance) -> Iterator[Document]:
        import datasets

        try:
            records = datasets.load_dataset(
                self.name, self.config, split="train", streaming=True
            )
            for number, record in enumerate(records):
                advance(1)
                yield from _text_of(record, self.text_field, f"{self.name}[{number}]",
                                    self.format, counts)
        except BertError:
            raise
        except Exception as exc:  # network, unknown name, ...: one line for the user
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            message = f"cannot read hf:{self.name}: {type(exc).__name__}: {first_line}"
            raise BertError(message) from None
