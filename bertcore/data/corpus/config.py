"""The corpus stage's knobs (params.yaml section `corpus`)."""

from __future__ import annotations

from typing import Literal

from bertcore.common.validation import integer, number, params_section, text


@params_section
class CorpusSource:
    """`corpus.source` alone: for the stages whose model cards name the corpus (`card`)."""

    # builtin:python-docs | file/folder/glob | hf:NAME[:CONFIG]
    source: text(pattern=r"\S", allowed="a path, glob or builtin:NAME") = "builtin:python-docs"


@params_section
class CorpusConfig(CorpusSource):
    # the text of a record in .jsonl / .parquet / hf: sources
    text_field: text(min_length=1, allowed="a field name") = "text"
    # How text files are laid out: prose (a file is a document; blank lines end paragraphs)
    # or lines (one sentence per line, blank lines between documents); auto: per file.
    # Records (.jsonl, .parquet, hf:) are documents of prose whatever this says.
    format: Literal["auto", "prose", "lines"] = "auto"
    normalization: Literal["NFC", "NFKC"] = "NFKC"
    val_fraction: number(gt=0, lt=1) = 0.1  # share of documents held out, chosen by hash
    # chooses which documents are held out
    seed: integer(ge=0, le=2**63 - 1, allowed="an integer >= 0") = 12345
    # longer sentences are cut (at a space when there is one)
    max_sentence_chars: integer(ge=16) = 1000
    # What the train/val split deals out: whole documents, or parts of documents (runs of
    # sentences; see bertcore.data.corpus.parts); auto: parts when train or val would get fewer
    # than 10 documents (a small folder, one book).
    split_by: Literal["auto", "documents", "parts"] = "auto"
    # Processes that clean and split the text (0: one per core); the output does not depend
    # on it.
    workers: integer(ge=0, le=1024, allowed="0..1024 (0: one per core)") = 0
