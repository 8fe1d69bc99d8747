"""From a source to train.txt / val.txt: clean, split into sentences, deduplicate, split."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from operator import attrgetter
from pathlib import Path

from tqdm import tqdm

from bertcore.common.errors import BertError
from bertcore.common.pool import TaskRunner
from bertcore.common.workers import worker_count
from bertcore.data.corpus.config import CorpusConfig
from bertcore.data.corpus.parts import (
    MIN_SPLIT_DOCUMENTS,
    PartPlan,
    cut_into_parts,
    plan_parts,
    write_parts_file,
)
from bertcore.data.corpus.sources import open_source
from bertcore.data.corpus.tasks import (
    TASK_SIZE,
    TaskResult,
    clean_task,
    group_spans,
)
from bertcore.data.corpus.writer import Lines, SplitStats, SplitWriter

log = logging.getLogger(__name__)

@dataclass
class CorpusStats:
    """What `build_corpus` read, kept and dropped; `to_dict()` is metrics/corpus.json.

    `documents` counts the documents kept; `train.documents` / `val.documents` count the
    blank-line separated blocks of train.txt / val.txt: parts, when `split["by"]` is parts.
    """

    source: str
    train: SplitStats = field(default_factory=SplitStats)
    val: SplitStats = field(default_factory=SplitStats)
    input: Counter = field(default_factory=Counter)  # files, records, documents, bytes
    dropped: Counter = field(default_factory=Counter)  # reason -> count
    cleaning: Counter = field(default_factory=Counter)  # what cleaning removed or cut
    split: dict = field(default_factory=lambda: {"by": "documents"})  # how train/val were made
    documents: int = 0
    read_as: Counter = field(default_factory=Counter)  # text files per format (not in metrics)
    made_with: dict = field(default_factory=dict)  # what the text depends on beyond the source

    @property
    def sentences(self) -> int:
        return self.train.sentences + self.val.sentences

    @property
    def characters(self) -> int:
        return self.train.characters + self.val.characters

    def to_dict(self) -> dict:
        return {
            "documents": self.documents,
            "sentences": self.sentences,
            "characters": self.characters,
            "train": asdict(self.train),
            "val": asdict(self.val),
            "split": self.split,
            "input": dict(sorted(self.input.items())),
            "dropped": dict(sorted(self.dropped.items())),
            "cleaning": dict(sorted(self.cleaning.items())),
            **({"made_with": self.made_with} if self.made_with else {}),
        }

    def summary(self) -> str:
        dropped = ", ".join(f"{n} {reason}" for reason, n in sorted(self.dropped.items()) if n)
        if self.split["by"] == "parts":
            split = (f"{self.documents} documents, split by parts: {self.split['parts']} parts "
                     f"of about {self.split['part_sentences']} sentences "
                     f"({self.train.documents} train, {self.val.documents} val)")
        else:
            split = (f"{self.documents} documents ({self.train.documents} train, "
                     f"{self.val.documents} val)")
        return (
            f"{split}, {self.sentences} sentences, {self.characters / 1e6:.2f}M characters"
            + (f"; dropped {dropped}" if dropped else "") + self._how_found()
        )

    def _how_found(self) -> str:
        """How the documents were found in text files; where prose files gave too few to
        split by documents, how to give several documents in one file."""
        prose, lines = self.read_as["prose_files"], self.read_as["lines_files"]
        found = [f"{prose} file(s) read as prose, one document each"] if prose else []
        if lines:
            found.append(f"{lines} file(s) of one sentence per line, documents between blank "
                         "lines")
        if not found:
            return ""
        advice = ("; several documents in one file: corpus.format: lines (one sentence per "
                  "line, a blank line between documents) or JSON Lines (one per record)"
                  if prose and self.split["by"] == "parts" else "")
        return f" (documents: {', '.join(found)}{advice})"


# Counters the sources keep, and where they belong in the stats.
_DROP_REASONS = (
    "binary_files", "empty_files", "invalid_json_lines", "records_without_text",
    "unparsable_modules",
)
_READ_AS = ("prose_files", "lines_files")  # for the summary only: metrics stay as they were


def build_corpus(config: CorpusConfig, out_dir: str | Path, progress: bool = True) -> CorpusStats:
    """Write `out_dir/train.txt` and `out_dir/val.txt` from `config.source`.

    Streams: the source is read here in spans of documents, cleaned and split into sentences
    by `config.workers` processes (`tasks`), and written here in order, deduplicated and split
    (larger documents spill to disk), so memory does not grow with the corpus. Small corpora
    are split by parts of documents (`bertcore.data.corpus.parts`); `out_dir/parts.json` says
    how the split was made. Raises BertError when the source is missing or yields no text;
    warns when the result is too small for NSP pairs.
    """
    source = open_source(config.source, config.text_field, config.format)
    stats = CorpusStats(config.source, made_with=source.made_with())
    counts: Counter = Counter()  # filled by the source
    bar = tqdm(total=source.total, unit=source.unit, unit_scale=True, desc="corpus",
               disable=None if progress else True, leave=False)

    def advance(amount: int) -> None:
        counts["bytes" if source.unit == "B" else "units_read"] += amount
        bar.update(amount)

    out_dir = Path(out_dir)
    writer = SplitWriter(out_dir, config.val_fraction, config.seed, _record_limit(config))
    workers = worker_count(config.workers, "corpus.workers")
    with bar, writer, TaskRunner(workers, lazy=True) as run:
        spans = source.spans(counts, advance, TASK_SIZE)
        tasks = group_spans(spans, config.normalization, config.max_sentence_chars, TASK_SIZE)
        parts = _parts(run(clean_task, tasks, in_parent=attrgetter("inline")), stats, counts)
        for lines, ends in parts:
            stats.input["documents"] += 1
            outcome = writer.add(_document_parts(lines, ends, parts))
            if outcome in ("empty", "duplicate"):
                stats.dropped[f"{outcome}_documents"] += 1
        plan = _part_plan(config, writer)
        if plan is None:
            writer.balance()
        stats.train, stats.val = writer.stats["train"], writer.stats["val"]
    stats.documents = stats.train.documents + stats.val.documents
    if plan is None:
        write_parts_file(out_dir, {"split_by": "documents", "requested": config.split_by})
    else:
        split_stats, entries = cut_into_parts(out_dir, writer.records.splits, plan)
        stats.train, stats.val = split_stats["train"], split_stats["val"]
        stats.split = {
            "by": "parts",
            "part_sentences": plan.part_sentences,
            "documents_cut": plan.documents_cut,
            "parts": plan.parts,
            "train_parts": stats.train.documents,
            "val_parts": stats.val.documents,
        }
        write_parts_file(out_dir, {"split_by": "parts", "requested": config.split_by,
                                   "part_sentences": plan.part_sentences, **entries})
    for key, value in counts.items():
        if key in _READ_AS:
            stats.read_as[key] += value
            continue
        target = stats.dropped if key in _DROP_REASONS else stats.input
        target[key] += value
    stats.cleaning["invalid_utf8_sequences"] = stats.input.pop("invalid_utf8_sequences", 0)
    stats.cleaning.setdefault("overlong_sentence_cuts", 0)
    if stats.documents == 0:
        raise BertError(_nothing_left(config, stats))
    if plan is None:
        warning = _too_small_for_nsp(config, stats, writer)
        if warning:
            log.warning(warning)
    return stats


def _parts(results: Iterator[TaskResult], stats: CorpusStats,
           counts: Counter) -> Iterator[tuple[Lines, bool]]:
    """The parts of documents in the tasks' results, in order; what cleaning did goes to
    `stats.cleaning`, the formats of files found in the tasks to `stats.read_as`, what the
    tasks read of the source (records) to the source's `counts`."""
    for result in results:
        yield from result.parts
        stats.cleaning.update(result.cleaning)
        stats.read_as.update(result.read_as)
        counts.update(result.found)


def _document_parts(lines: Lines, ends: bool,
                    parts: Iterator[tuple[Lines, bool]]) -> Iterator[Lines]:
    """One document's lines: the first part's, then the next parts' until one ends it."""
    yield lines
    while not ends:
        lines, ends = next(parts)
        yield lines


def _nothing_left(config: CorpusConfig, stats: CorpusStats) -> str:
    """Why a source gave no text, in words the user can act on."""
    source, dropped = config.source, stats.dropped
    if dropped["binary_files"] and dropped["binary_files"] == stats.input["files"]:
        count = dropped["binary_files"]
        return f"corpus source {source} holds only binary files ({count}); give it text"
    if stats.input["files"] and dropped["empty_files"] == stats.input["files"]:
        return f"corpus source {source} is empty: its files hold no text"
    if dropped["records_without_text"] and not stats.input["records"]:
        return (
            f"no record of {source} has a text field {config.text_field!r} "
            "(set corpus.text_field to the field holding the text)"
        )
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items()) if n)
    return f"no text left after cleaning {source} ({reasons or 'nothing read'})"


def _record_limit(config: CorpusConfig) -> int | None:
    """How many documents to keep records of for a split by parts (None: all): in auto mode,
    until the smaller split can no longer end up with fewer than MIN_SPLIT_DOCUMENTS."""
    if config.split_by == "documents":
        return 0
    if config.split_by == "parts":
        return None
    share = min(config.val_fraction, 1.0 - config.val_fraction)
    return min(1 << 22, int(10 * MIN_SPLIT_DOCUMENTS / share) + 1)


def _part_plan(config: CorpusConfig, writer: SplitWriter) -> PartPlan | None:
    """The parts to split by, or None to keep whole documents."""
    records = writer.records
    fewest = min(stats.documents for stats in writer.stats.values())
    if not records.complete or (config.split_by == "auto" and fewest >= MIN_SPLIT_DOCUMENTS):
        return None
    plan = plan_parts(records.sentences, records.splits, config.val_fraction, config.seed)
    if plan is None and config.split_by == "parts":
        log.warning("corpus: too little text to cut into parts (fewer than 4 parts of two "
                    "sentences or more): split by whole documents")
    return plan


def _too_small_for_nsp(config: CorpusConfig, stats: CorpusStats, writer: SplitWriter) -> str:
    """A warning when a split (by documents) cannot give NSP pairs, with what to do."""
    for split, split_stats in (("train", stats.train), ("val", stats.val)):
        pairable = writer.pairable[split]
        if split_stats.documents >= 2 and pairable >= 1:
            continue
        if config.split_by == "documents":
            advice = "set corpus.split_by: auto (cuts documents into parts) or add documents"
        elif not writer.records.complete:
            advice = "raise corpus.val_fraction"
        else:
            advice = ("add text (about 8 sentences or more, in documents of two sentences or "
                      "more)")
        return (
            f"corpus too small for NSP pairs: {split} got {split_stats.documents} document(s), "
            f"{pairable} of two sentences or more; `bert samples` needs two in both train and "
            f"val, one of two sentences or more: {advice}"
        )
    return ""
