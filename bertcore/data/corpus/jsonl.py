"""JSON Lines files: read in the main process in blocks of whole lines (`jsonl_blocks`), and
parsed in the worker process that cleans them (`RecordBlock`), so that reading a corpus of
records costs the main process little more than the read itself.

Each line is decoded (invalid UTF-8 becomes U+FFFD) and parsed whole, as when the file was
read a record at a time; the UTF-8 check that stops a file in another encoding runs on the
blocks as they are read, at the same line (`Utf8Check.whole_lines`), and warns of the invalid
sequences at the end of the file as for a text file (`Utf8Check.report`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bertcore.data.corpus.counts import CorpusCounts
from bertcore.data.corpus.documents import Advance, Record, records_with_text
from bertcore.data.corpus.textfile import Utf8Check, open_bytes, read_block, read_line

logger = logging.getLogger(__name__)


@dataclass
class RecordBlock:
    """Whole lines of a JSON Lines file, the first being line `first_line`: a span whose
    records (those with text in `field`) are documents (see `Record`)."""

    data: bytes
    path: str
    first_line: int
    field: str
    read_as = None

    @property
    def size(self) -> int:
        return len(self.data)

    def parts(self, counts: CorpusCounts) -> Iterator[tuple[Record, bool]]:
        """Each record with text, a whole document; the records, the records without text
        and the lines that are no JSON are counted in `counts`."""
        lines = self.data.split(b"\n")
        if not lines[-1]:  # the block ends with a line's end
            lines.pop()
        for number, raw in enumerate(lines, self.first_line):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                counts.invalid_json_lines += 1
                logger.debug("%s:%d: not JSON", self.path, number)
                continue
            for document in records_with_text(record, self.field, f"{self.path}:{number}",
                                              counts):
                yield document, True


def jsonl_blocks(path: Path, field: str, counts: CorpusCounts, advance: Advance,
                 size: int) -> Iterator[RecordBlock]:
    """The file in blocks of whole lines of `size` bytes or a little more (up to the end of
    the line where `size` falls), each checked as UTF-8 as it is read."""
    with open_bytes(path, advance) as (handle, progress, tool):
        check = Utf8Check(path, tool)
        while data := read_block(handle, path, size):
            data += read_line(handle, path, limit=-1)  # a record is parsed whole
            progress(len(data))
            first_line = check.lines + 1  # the lines before are whole: the check counted them
            check.whole_lines(data)
            yield RecordBlock(data, str(path), first_line, field)
        # no warning of NUL bytes: a raw one is no JSON, and its line is an invalid_json_line
        check.report(counts, nuls=False)
