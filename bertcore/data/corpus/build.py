"""From a source to train.txt / val.txt: clean, split into sentences, deduplicate, split."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from bertcore.common.errors import BertError
from bertcore.common.pool import TaskRunner, worker_count
from bertcore.data.corpus.config import CorpusConfig
from bertcore.data.corpus.counts import CorpusCounts
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
    clean_in_order,
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

    train: SplitStats = field(default_factory=SplitStats)
    val: SplitStats = field(default_factory=SplitStats)
    counts: CorpusCounts = field(default_factory=CorpusCounts)  # read, dropped, cleaned
    split: dict = field(default_factory=lambda: {"by": "documents"})  # how train/val were made
    documents: int = 0
    made_with: dict = field(default_factory=dict)  # what the text depends on beyond the source

    @property
    def input(self) -> Counter:
        """What was read (files, bytes, records, documents), by name."""
        return Counter(self.counts.section("input"))

    @property
    def dropped(self) -> Counter:
        """What was left out, by reason."""
        return Counter(self.counts.section("dropped"))

    @property
    def cleaning(self) -> Counter:
        """What cleaning replaced, removed or cut, by name."""
        return Counter(self.counts.section("cleaning"))

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
        prose, lines = self.counts.prose_files, self.counts.lines_files
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
    counts = CorpusCounts()  # filled by the source, the tasks and the writing below
    stats = CorpusStats(counts=counts, made_with=source.made_with())
    bar = tqdm(total=source.total, unit=source.unit, unit_scale=True, desc="corpus",
               disable=None if progress else True, leave=False)

    def advance(amount: int) -> None:
        if source.unit == "B":
            counts.bytes += amount
        else:
            counts.units_read += amount
        bar.update(amount)

    out_dir = Path(out_dir)
    writer = SplitWriter(out_dir, config.val_fraction, config.seed, _record_limit(config))
    workers = worker_count(config.workers, "corpus.workers")
    with bar, writer, TaskRunner(workers, lazy=True) as run:
        spans = source.spans(counts, advance, TASK_SIZE)
        tasks = group_spans(spans, config.normalization, config.max_sentence_chars, TASK_SIZE)
        parts = _parts(clean_in_order(run, tasks), counts)
        for lines, ends in parts:
            counts.documents += 1
            outcome = writer.add(_document_parts(lines, ends, parts))
            if outcome == "empty":
                counts.empty_documents += 1
            elif outcome == "duplicate":
                counts.duplicate_documents += 1
        plan = _part_plan(config, writer)
        if plan is None:
            writer.balance()
        stats.train, stats.val = writer.stats["train"], writer.stats["val"]
    stats.documents = stats.train.documents + stats.val.documents
    _write_split(out_dir, config, stats, writer, plan)
    if stats.documents == 0:
        raise BertError(_nothing_left(config, stats))
    if plan is None:
        _warn_too_small_for_nsp(config, stats, writer)
    return stats


def _write_split(out_dir: Path, config: CorpusConfig, stats: CorpusStats, writer: SplitWriter,
                 plan: PartPlan | None) -> None:
    """Write `parts.json`, saying how the split was made: by whole documents (`plan` None),
    or by parts of documents, cut now from the written splits (their stats then replace the
    documents')."""
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


def _parts(results: Iterator[TaskResult],
           counts: CorpusCounts) -> Iterator[tuple[Lines, bool]]:
    """The parts of documents in the tasks' results, in order; what each task counted is
    added to `counts` once its parts are read."""
    for result in results:
        yield from result.parts
        counts.add(result.counts)


def _document_parts(lines: Lines, ends: bool,
                    parts: Iterator[tuple[Lines, bool]]) -> Iterator[Lines]:
    """One document's lines: the first part's, then the next parts' until one ends it."""
    yield lines
    while not ends:
        lines, ends = next(parts)
        yield lines


def _nothing_left(config: CorpusConfig, stats: CorpusStats) -> str:
    """Why a source gave no text, in words the user can act on."""
    source, counts = config.source, stats.counts
    if counts.binary_files and counts.binary_files == counts.files:
        count = counts.binary_files
        return f"corpus source {source} holds only binary files ({count}); give it text"
    if counts.files and counts.empty_files == counts.files:
        return f"corpus source {source} is empty: its files hold no text"
    if counts.records_without_text and not counts.records:
        return (
            f"no record of {source} has a text field {config.text_field!r} "
            "(set corpus.text_field to the field holding the text)"
        )
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(stats.dropped.items()) if n)
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


def _warn_too_small_for_nsp(config: CorpusConfig, stats: CorpusStats, writer: SplitWriter) -> None:
    """Warn when a split (by documents) cannot give NSP pairs, with what to do."""
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
        log.warning(
            f"corpus too small for NSP pairs: {split} got {split_stats.documents} document(s), "
            f"{pairable} of two sentences or more; `bert samples` needs two in both train and "
            f"val, one of two sentences or more: {advice}"
        )
        return
