"""What the corpus stage counts as it reads, cleans and writes: `CorpusCounts`, one field per
count, each in the section of metrics/corpus.json it belongs to (`input`, `dropped`,
`cleaning`) or in none (the summary line's formats of text files).

The source counts into one in the main process, each task into its own in a worker (the
records of JSON Lines, what cleaning did), added to the source's in task order (`add`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields


def _count(section: str | None, default: int | None = 0):
    return field(default=default, metadata={"section": section})


@dataclass
class CorpusCounts:
    """Counts by name. A count of None was never taken: a cleaning step that no text needed
    (metrics/corpus.json lists only the steps taken, with 0 when they removed nothing)."""

    # input: what was read
    files: int = _count("input")
    bytes: int = _count("input")  # of a source of files, as read from disk
    units_read: int = _count("input")  # of another source: its records or topics
    records: int = _count("input")  # records with text: JSON Lines, Parquet, a dataset
    documents: int = _count("input")  # parts of documents from the tasks, before dedup
    # dropped: what was left out, and why
    binary_files: int = _count("dropped")
    empty_files: int = _count("dropped")
    invalid_json_lines: int = _count("dropped")
    records_without_text: int = _count("dropped")
    unparsable_modules: int = _count("dropped")  # of the built-in corpus
    empty_documents: int = _count("dropped")  # nothing left after cleaning
    duplicate_documents: int = _count("dropped")
    # cleaning: what cleaning replaced, removed or cut
    invalid_utf8_sequences: int = _count("cleaning")  # replaced by U+FFFD
    overlong_sentence_cuts: int = _count("cleaning")
    html_tags_removed: int | None = _count("cleaning", None)  # None: no text held a "<"
    control_characters_removed: int | None = _count("cleaning", None)  # None: all printable
    # how the documents of text files were found (the summary line only)
    prose_files: int = _count(None)
    lines_files: int = _count(None)

    def add(self, other: CorpusCounts) -> None:
        """Add `other`'s counts to these (a count never taken stays so)."""
        for count in fields(self):
            theirs = getattr(other, count.name)
            if theirs is not None:
                setattr(self, count.name, (getattr(self, count.name) or 0) + theirs)

    def file_read_as(self, layout: str) -> None:
        """Count one more text file whose documents were found as `layout` (prose or lines)."""
        if layout == "prose":
            self.prose_files += 1
        else:
            self.lines_files += 1

    def section(self, name: str) -> dict[str, int]:
        """The counts of one section of metrics/corpus.json, by name: those taken, and, in
        input and dropped, only those above zero."""
        listed = {}
        for count in fields(self):
            value = getattr(self, count.name)
            if count.metadata["section"] != name or value is None:
                continue
            if value or name == "cleaning":
                listed[count.name] = value
        return listed
