"""Where raw text comes from: files, folders and globs of text, JSON Lines, Parquet, a
Hugging Face dataset, or the built-in Python documentation (`pythondocs`).

A source yields `Document`s (see `documents`): pieces of text, streamed. Folders and `**`
globs follow links to folders, but never one back into the tree: each file is read once.
How the bytes of a file become text lines (compression, encodings): `textfile`.
"""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.data.corpus.counts import CorpusCounts
from bertcore.data.corpus.documents import (
    Advance,
    Document,
    Record,
    Source,
    Span,
    detect_format,
    document_spans,
    line_documents,
    prose_pieces,
    records_with_text,
)
from bertcore.data.corpus.jsonl import jsonl_blocks
from bertcore.data.corpus.pythondocs import BUILTINS
from bertcore.data.corpus.textblocks import utf8_blocks
from bertcore.data.corpus.textfile import (
    SNIFF_BYTES,
    Utf8Check,
    archive_kind,
    binary_kind,
    bom_encoding,
    open_bytes,
    read_block,
    wide_lines,
)

logger = logging.getLogger(__name__)

__all__ = ["Document", "Source", "detect_format", "open_source", "resolve_files"]

JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz")
# A UTF-8 file of up to this many blocks, with corpus.format auto, is one block, its format
# detected in the worker that cleans it (detection reads as much text as cleaning).
WHOLE_FILE_BLOCKS = 4


def open_source(spec: str, text_field: str = "text", fmt: str = "auto") -> Source:
    """Resolve `spec`; a missing path, an empty folder or a missing package is a BertError."""
    if spec.startswith("builtin:"):
        if spec not in BUILTINS:
            raise BertError(f"unknown built-in corpus {spec!r}; available: {', '.join(BUILTINS)}")
        return BUILTINS[spec]()
    if spec.startswith("hf:"):
        return HubSource(spec, text_field)
    return FileSource(resolve_files(spec), text_field, fmt)


def resolve_files(spec: str) -> list[Path]:
    """The files named by a path, a folder (walked recursively) or a glob, sorted."""
    pattern = os.path.expanduser(spec)
    if glob.has_magic(pattern):
        matches = _glob(pattern)
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
    seen: set[str] = set()  # real paths: a file reached twice (links, overlapping matches)
    for match in matches:
        path = Path(match)
        found = _walk(path) if path.is_dir() else [path] if path.is_file() else []
        for file in found:
            real = os.path.realpath(file)
            if real not in seen:
                seen.add(real)
                files.append(file)
    if not files:
        raise BertError(f"corpus source {spec} is empty: it holds no files")
    return files


def _walk(folder: Path) -> list[Path]:
    """Files under `folder` in a stable order, skipping hidden ones (.git, .DS_Store)."""
    return [path for parts, path in _tree(folder) if parts and path.is_file()]


def _tree(base: Path) -> Iterator[tuple[tuple[str, ...], Path]]:
    """(path relative to `base` as parts, path) of `base`, and of every folder and file under
    it that is not hidden, in a stable order. Links to folders are followed unless they lead
    to a folder already visited (a loop back into the tree, or a second link to the same
    folder). An unreadable folder is a BertError, like an unreadable file."""
    seen = {os.path.realpath(base)}
    yield (), base

    def unreadable(error: OSError) -> None:
        raise BertError(f"cannot read folder {error.filename}: {error.strerror or error}; fix "
                        "its permissions or leave it out of corpus.source")

    for root, dirs, files in os.walk(base, followlinks=True, onerror=unreadable):
        relative = Path(root).relative_to(base).parts
        kept = []
        for name in sorted(dirs):
            real = os.path.realpath(os.path.join(root, name))
            if name.startswith(".") or real in seen:
                continue
            seen.add(real)
            kept.append(name)
        dirs[:] = kept
        entries = sorted([*kept, *(f for f in files if not f.startswith("."))])
        for name in entries:
            yield (*relative, name), Path(root, name)


def _glob(pattern: str) -> list[str]:
    """The paths matching a glob, sorted. `**` (any number of folders) is matched on a walk
    that never loops (see `_tree`), unlike `glob.glob`, which follows every link."""
    if "**" not in pattern:
        return sorted(glob.glob(pattern))
    parts = Path(pattern).parts
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    base = Path(*parts[:fixed]) if fixed else Path(".")
    if not base.is_dir():
        return []
    return sorted(str(path) for relative, path in _tree(base) if _matches(parts[fixed:], relative))


def _matches(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    """Whether path `parts` match glob `pattern` parts, as `glob.glob(recursive=True)` reads
    them: `**` is zero or more names, and wildcards do not match hidden names."""
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_matches(rest, parts[i:]) for i in range(len(parts) + 1))
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], head) and _matches(rest, parts[1:])


class FileSource(Source):
    unit = "B"

    def __init__(self, files: list[Path], text_field: str, fmt: str):
        self.files = files
        self.text_field = text_field
        self.format = fmt
        self.total = sum(path.stat().st_size for path in files)

    def spans(self, counts: CorpusCounts, advance: Advance, size: int) -> Iterator[Span]:
        for path in self.files:
            counts.files += 1
            name = path.name.lower()
            for suffix in COMPRESSED_SUFFIXES:  # books.jsonl.gz holds JSON Lines
                name = name.removesuffix(suffix)
            try:
                if name.endswith(PARQUET_SUFFIXES):
                    yield from parquet_documents(path, self.text_field, counts)
                    advance(path.stat().st_size)
                elif name.endswith(JSONL_SUFFIXES):
                    yield from jsonl_blocks(path, self.text_field, counts, advance, size)
                else:
                    yield from text_file_spans(path, self.format, counts, advance, size,
                                               alone=len(self.files) == 1)
            except OSError as exc:
                raise BertError(f"cannot read {path}: {exc.strerror or exc}") from None


def text_file_spans(
    path: Path, fmt: str, counts: CorpusCounts, advance: Advance, size: int, alone: bool = False
) -> Iterator[Span]:
    """A prose file is one document; a one-sentence-per-line file holds many, blank-separated.
    UTF-8 comes in raw blocks of about `size` bytes (decoded where they are cleaned), UTF-16
    and UTF-32 as runs of decoded pieces. A binary file is skipped with a warning, or, when it
    is the whole source (`alone`), a BertError naming it."""
    with open_bytes(path, advance) as (handle, progress, tool):
        head = read_block(handle, path, SNIFF_BYTES)  # to tell text from binary, lines from prose
        if not head:
            counts.empty_files += 1
            return
        encoding = bom_encoding(head)
        binary = archive_kind(head) or (binary_kind(head) if encoding == "utf-8" else None)
        if binary and alone:
            raise BertError(f"cannot use {path} as corpus.source: it is {binary}")
        if binary:
            logger.warning("skipping %s: %s", path, binary)
            counts.binary_files += 1
            progress(path.stat().st_size)
            return
        handle.seek(0)
        whole = WHOLE_FILE_BLOCKS * size  # a file up to this size is one block ...
        if fmt == "auto" and (tool or encoding != "utf-8" or path.stat().st_size > whole):
            fmt = detect_format(head.decode(encoding, "replace"))
            logger.debug("%s: format %s", path, fmt)
        if fmt != "auto":  # how its documents were found (the summary says it); a format
            counts.file_read_as(fmt)  # found where the file is cleaned is counted there
        if encoding == "utf-8":  # ... whose format is found where it is cleaned (tasks)
            check = Utf8Check(path, tool)
            yield from utf8_blocks(handle, check, fmt, whole if fmt == "auto" else size,
                                   progress)
            check.report(counts)
            return
        lines = wide_lines(handle, encoding, path, counts, progress)
        documents = ([Document(str(path), prose_pieces(lines))] if fmt == "prose"
                     else line_documents(lines, str(path)))
        for document in documents:
            yield from document_spans(document, size)


def parquet_documents(path: Path, field: str, counts: CorpusCounts) -> Iterator[Record]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise BertError(f"{path} is not a readable Parquet file ({exc})") from None
    schema = table.schema_arrow
    columns = schema.names
    if field not in columns:
        raise BertError(
            f"{path} has no column {field!r} (columns: {', '.join(columns)}); "
            "set corpus.text_field"
        )
    column_type = schema.field(field).type
    if not _is_text(column_type):
        text_columns = [f.name for f in schema if _is_text(f.type)]
        others = f" (text columns: {', '.join(text_columns)})" if text_columns else ""
        raise BertError(
            f"{path}: column {field!r} holds {column_type}, not text; set corpus.text_field "
            f"to a column of strings{others}"
        )
    row = 0
    try:
        for batch in table.iter_batches(batch_size=1024, columns=[field]):
            for value in batch.column(0).to_pylist():
                row += 1
                yield from records_with_text({field: value}, field, f"{path}[{row}]", counts)
    except pa.ArrowException as exc:
        raise BertError(f"{path}: cannot read row {row + 1} and on ({exc})") from None


def _is_text(arrow_type) -> bool:
    """Strings, in any of Arrow's layouts (plain, large, view, dictionary-encoded)."""
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    is_view = getattr(pa.types, "is_string_view", lambda t: False)
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or is_view(
        arrow_type
    )


class HubSource(Source):
    """`hf:NAME[:CONFIG]`: the train split of a Hugging Face dataset, streamed."""

    def __init__(self, spec: str, text_field: str):
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
        self.text_field = text_field

    def documents(self, counts: CorpusCounts, advance: Advance) -> Iterator[Record]:
        import datasets

        try:
            records = datasets.load_dataset(
                self.name, self.config, split="train", streaming=True
            )
            for number, record in enumerate(records):
                advance(1)
                yield from records_with_text(record, self.text_field,
                                             f"{self.name}[{number}]", counts)
        except Exception as exc:  # network, unknown name, ...: one line for the user
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            message = f"cannot read hf:{self.name}: {type(exc).__name__}: {first_line}"
            raise BertError(message) from None
