"""The corpus stage's work in worker processes: spans of documents (`documents`) grouped into
tasks in order, each cleaned and split into sentences where it runs (`clean_task`), the
sentences coming back encoded as the lines of train.txt / val.txt (`clean_in_order`).

Every task is a function of its spans and the config alone, and the results are taken in
task order, so the output does not depend on how many processes run them. A `TextStream`
(the rest of a file past a paragraph too long for a block) reads its file through the
handle the source holds open: it is a task of its own, cleaned in the main process as it
is read, in its turn.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from bertcore.data.corpus.cleaning import TextCleaner, safe_cut
from bertcore.data.corpus.counts import CorpusCounts
from bertcore.data.corpus.documents import Document, Span
from bertcore.data.corpus.sentences import SentenceSplitter
from bertcore.data.corpus.textblocks import TextStream
from bertcore.data.corpus.writer import Lines

CHUNK_CHARS = 1 << 16  # raw text is cleaned in pieces of about this size
# A task holds spans of about this much text (bytes or characters): enough work (tens of
# milliseconds) to outweigh handing it to a process, little enough for memory in flight.
TASK_SIZE = 1 << 18
STREAM_BATCH = 1000  # sentences per part of a document cleaned as it is read


@dataclass
class CleanTask:
    spans: list[Span]
    normalization: str
    max_sentence_chars: int

    @property
    def streamed(self) -> bool:
        """A `TextStream`'s task: cleaned in the main process as its text is read."""
        return isinstance(self.spans[0], TextStream)

    @property
    def where(self) -> str:
        """The files (or origins) its spans come from, for messages."""
        names = (getattr(span, "path", None) or getattr(span, "origin", None)
                 for span in self.spans)
        return ", ".join(dict.fromkeys(str(name) for name in names if name))


@dataclass
class TaskResult:
    """Per part of a document: its sentences as lines, and whether the document ends there
    (False: it goes on in the next part); and what the task counted (complete once the parts,
    a stream for a streamed task, are read): what cleaning removed and cut, the text files
    whose format it found (`prose_files`, `lines_files`), the records of JSON Lines."""

    parts: Iterable[tuple[Lines, bool]]
    counts: CorpusCounts = field(default_factory=CorpusCounts)


def group_spans(spans: Iterable[Span], normalization: str, max_sentence_chars: int,
                size: int = TASK_SIZE) -> Iterator[CleanTask]:
    """Consecutive spans in tasks of about `size` each (a larger span, or a `TextStream`, is
    a task of its own)."""
    group, total = [], 0
    for span in spans:
        streamed = isinstance(span, TextStream)
        if streamed and group:
            yield CleanTask(group, normalization, max_sentence_chars)
            group, total = [], 0
        group.append(span)
        total += span.size
        if total >= size or streamed:
            yield CleanTask(group, normalization, max_sentence_chars)
            group, total = [], 0
    if group:
        yield CleanTask(group, normalization, max_sentence_chars)


Run = Callable[[Callable, Iterable], Iterator]  # a TaskRunner's: func(task) for each, in order


class _UntilStreamed:
    """The tasks of `tasks` up to the next streamed one, which it keeps as `streamed` (None
    when `tasks` ended first)."""

    def __init__(self, tasks: Iterator[CleanTask]):
        self.tasks, self.streamed = tasks, None

    def __iter__(self) -> Iterator[CleanTask]:
        for task in self.tasks:
            if task.streamed:
                self.streamed = task
                return
            yield task


def clean_in_order(run: Run, tasks: Iterable[CleanTask]) -> Iterator[TaskResult]:
    """`clean_task` of each task, in order: the tasks between two streamed ones through
    `run` (in workers), a streamed task here once the results before it are taken. The task
    after it is taken only once its parts are read, as the source reads on in its file
    only then."""
    tasks = iter(tasks)
    while True:
        stretch = _UntilStreamed(tasks)
        yield from run(clean_task, iter(stretch))
        if stretch.streamed is None:
            return
        yield clean_task(stretch.streamed)


def clean_task(task: CleanTask) -> TaskResult:
    """Clean and split every part of the task's spans (in a worker process, or streamed in
    this one for a streamed task)."""
    counts = CorpusCounts()
    for span in task.spans:
        if span.read_as:
            counts.file_read_as(span.read_as)
    parts = _clean_parts(task, counts)
    return TaskResult(parts if task.streamed else list(parts), counts)


def _clean_parts(task: CleanTask, counts: CorpusCounts) -> Iterator[tuple[Lines, bool]]:
    cleaner = TextCleaner(task.normalization)
    for span in task.spans:
        for document, ends in span.parts(counts):
            splitter = SentenceSplitter(task.max_sentence_chars, document.split_sentences)
            sentences = document_sentences(document, cleaner, splitter)
            if task.streamed:
                yield from _in_batches(sentences, ends)
            else:
                yield Lines.of(sentences), ends
            counts.overlong_sentence_cuts += splitter.overlong_cuts
    counts.add(cleaner.counts)


def _in_batches(sentences: Iterator[str], ends: bool) -> Iterator[tuple[Lines, bool]]:
    """A document's sentences as parts of about STREAM_BATCH sentences, the last ending it."""
    while batch := list(itertools.islice(sentences, STREAM_BATCH)):
        yield Lines.of(batch), False
    yield Lines.of([]), ends


def document_sentences(
    document: Document, cleaner: TextCleaner, splitter: SentenceSplitter
) -> Iterator[str]:
    """The cleaned sentences of one document, produced as its pieces arrive."""
    parts: list[str] = []
    size = 0
    for text, boundary in document.pieces:
        if text:
            parts.append(text)
            size += len(text)
        if boundary:
            yield from splitter.feed(cleaner.clean("".join(parts)))
            yield from splitter.end()
            parts, size = [], 0
        elif size >= CHUNK_CHARS:  # a long paragraph or line: clean what is safe to cut
            raw = "".join(parts)
            cut = safe_cut(raw, len(raw))
            yield from splitter.feed(cleaner.clean(raw[:cut]))
            parts = [raw[cut:]]
            size = len(parts[0])
    yield from splitter.feed(cleaner.clean("".join(parts)))
    yield from splitter.end()
