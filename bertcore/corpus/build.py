"""From a source to train.txt / val.txt: clean, split into sentences, deduplicate, split."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from bertcore.corpus.cleaning import TextCleaner, safe_cut
from bertcore.corpus.config import CorpusConfig
from bertcore.corpus.sentences import SentenceSplitter
from bertcore.corpus.sources import Document, open_source
from bertcore.corpus.writer import SplitStats, SplitWriter
from bertcore.errors import BertError

CHUNK_CHARS = 1 << 16  # raw text is cleaned in pieces of about this size


@dataclass
class CorpusStats:
    """What `build_corpus` read, kept and dropped; `to_dict()` is metrics/corpus.json."""

    source: str
    train: SplitStats = field(default_factory=SplitStats)
    val: SplitStats = field(default_factory=SplitStats)
    input: Counter = field(default_factory=Counter)  # files, records, documents, bytes
    dropped: Counter = field(default_factory=Counter)  # reason -> count
    cleaning: Counter = field(default_factory=Counter)  # what cleaning removed or cut

    @property
    def documents(self) -> int:
        return self.train.documents + self.val.documents

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
            "input": dict(sorted(self.input.items())),
            "dropped": dict(sorted(self.dropped.items())),
            "cleaning": dict(sorted(self.cleaning.items())),
        }

    def summary(self) -> str:
        dropped = ", ".join(f"{n} {reason}" for reason, n in sorted(self.dropped.items()) if n)
        return (
            f"{self.documents} documents ({self.train.documents} train, {self.val.documents} "
            f"val), {self.sentences} sentences, {self.characters / 1e6:.2f}M characters"
            + (f"; dropped {dropped}" if dropped else "")
        )


# Counters the sources keep, and where they belong in the stats.
_DROP_REASONS = (
    "binary_files", "empty_files", "invalid_json_lines", "records_without_text",
    "unparsable_modules",
)


def build_corpus(config: CorpusConfig, out_dir: str | Path, progress: bool = True) -> CorpusStats:
    """Write `out_dir/train.txt` and `out_dir/val.txt` from `config.source`.

    Streams: one document at a time (larger ones spill to disk), so memory does not grow with
    the corpus. Raises BertError when the source is missing or yields no text.
    """
    source = open_source(config.source, config.text_field, config.format)
    stats = CorpusStats(config.source)
    counts: Counter = Counter()  # filled by the source
    cleaner = TextCleaner(config.normalization)
    overlong_cuts = 0
    bar = tqdm(total=source.total, unit=source.unit, unit_scale=True, desc="corpus",
               disable=None if progress else True, leave=False)

    def advance(amount: int) -> None:
        counts["bytes" if source.unit == "B" else "units_read"] += amount
        bar.update(amount)

    with bar, SplitWriter(out_dir, config.val_fraction, config.seed) as writer:
        for document in source.documents(counts, advance):
            stats.input["documents"] += 1
            splitter = SentenceSplitter(config.max_sentence_chars, document.split_sentences)
            outcome = writer.add(document_sentences(document, cleaner, splitter))
            overlong_cuts += splitter.overlong_cuts
            if outcome in ("empty", "duplicate"):
                stats.dropped[f"{outcome}_documents"] += 1
        stats.train, stats.val = writer.stats["train"], writer.stats["val"]
    for key, value in counts.items():
        target = stats.dropped if key in _DROP_REASONS else stats.input
        target[key] += value
    stats.cleaning.update(cleaner.counts)
    stats.cleaning["invalid_utf8_sequences"] = stats.input.pop("invalid_utf8_sequences", 0)
    stats.cleaning["overlong_sentence_cuts"] = overlong_cuts
    if stats.documents == 0:
        raise BertError(_nothing_left(config, stats))
    return stats


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
