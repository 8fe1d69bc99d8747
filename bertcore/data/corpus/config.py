"""The corpus stage's knobs (params.yaml section `corpus`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bertcore.common.errors import require


@dataclass
class CorpusConfig:
    source: str = "builtin:python-docs"  # builtin:python-docs | file/folder/glob | hf:NAME[:CONFIG]
    text_field: str = "text"  # the text of a record in .jsonl / .parquet / hf: sources
    # How text files are laid out: prose (a file is a document; blank lines end paragraphs)
    # or lines (one sentence per line, blank lines between documents); auto: per file.
    # Records (.jsonl, .parquet, hf:) are prose unless this says lines.
    format: Literal["auto", "prose", "lines"] = "auto"
    normalization: Literal["NFC", "NFKC"] = "NFKC"
    val_fraction: float = 0.1  # share of documents held out, chosen by hash
    seed: int = 12345  # chooses which documents are held out
    max_sentence_chars: int = 1000  # longer sentences are cut (at a space when there is one)
    # What the train/val split deals out: whole documents, or parts of documents (runs of
    # sentences; see bertcore.data.corpus.parts); auto: parts when train or val would get fewer
    # than 10 documents (a small folder, one book).
    split_by: Literal["auto", "documents", "parts"] = "auto"
    # Processes that clean and split the text (0: one per core); the output does not depend
    # on it.
    workers: int = 0

    def __post_init__(self):
        require(bool(self.source.strip()), "source", self.source, "a path, glob or builtin:NAME")
        require(bool(self.text_field), "text_field", self.text_field, "a field name")
        require(self.format in ("auto", "prose", "lines"), "format", self.format,
                "one of auto, prose, lines")
        require(self.normalization in ("NFC", "NFKC"), "normalization", self.normalization,
                "one of NFC, NFKC")
        require(0.0 < self.val_fraction < 1.0, "val_fraction", self.val_fraction,
                "a number between 0 and 1 (exclusive)")
        require(0 <= self.seed < 2**63, "seed", self.seed, "an integer >= 0")
        require(self.max_sentence_chars >= 16, "max_sentence_chars", self.max_sentence_chars,
                "an integer >= 16")
        require(self.split_by in ("auto", "documents", "parts"), "split_by", self.split_by,
                "one of auto, documents, parts")
        require(0 <= self.workers <= 1024, "workers", self.workers,
                "0..1024 (0: one per core)")
