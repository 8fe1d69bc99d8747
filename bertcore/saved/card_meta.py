"""What the model cards' metadata say of a model that its figures do not: its name, licence,
language and the corpus it was trained on, from the `card:` params (`CardConfig`) with `auto`
resolved from `corpus.source`. The same params give the same metadata: nothing is looked up
(no Hub call)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from bertcore.saved.config import CardConfig

AUTO = "auto"
BUILTIN_CORPUS = "builtin:python-docs"
# Python's documentation, the built-in corpus: the PSF License Version 2 (its code examples
# also under the Zero-Clause BSD), which the Hub lists as no id of its own
PYTHON_DOCS_LICENSE = ("other", "psf-2.0", "https://docs.python.org/3/license.html")
UNKNOWN_LICENSE = "unknown"  # a user's corpus: its terms are the user's to state (card.license)
_RECORD_SUFFIXES = {".txt", ".text", ".md", ".jsonl", ".json", ".parquet", ".csv", ".tsv"}


@dataclass(frozen=True)
class CardMeta:
    """The resolved `card:` params, as every card of the pipeline's models says them."""

    model_name: str  # the pretrained model's (downstream cards: their base_model)
    dataset: str  # the corpus's name: `datasets`, and the type of its results' dataset
    corpus_source: str  # as corpus.source gives it
    license: str
    license_name: str | None = None
    license_link: str | None = None
    language: tuple[str, ...] = ()

    @property
    def builtin(self) -> bool:
        """Whether the corpus is the built-in one (Python's documentation)."""
        return self.corpus_source == BUILTIN_CORPUS


def card_meta(config: CardConfig, corpus_source: str) -> CardMeta:
    """`config` with each `auto` resolved from the corpus's source."""
    builtin = corpus_source == BUILTIN_CORPUS
    dataset = corpus_name(corpus_source) if config.dataset == AUTO else config.dataset
    if config.license == AUTO:
        license, name, link = PYTHON_DOCS_LICENSE if builtin else (UNKNOWN_LICENSE, None, None)
    else:
        license, name, link = config.license, config.license_name, config.license_link
    if config.language == AUTO:
        language = ("en",) if builtin else ()
    elif isinstance(config.language, str):
        language = (config.language,)
    else:
        language = tuple(config.language or ())
    model_name = (f"bert-{_slug(dataset.rsplit('/', 1)[-1])}" if config.model_name == AUTO
                  else config.model_name)
    return CardMeta(model_name, dataset, corpus_source, license, name, link, language)


def corpus_name(source: str) -> str:
    """A corpus's name from its source: `python-docs` for the built-in one, NAME for
    `hf:NAME[:CONFIG]` (the Hub's dataset id), else the file's or folder's name without its
    suffix (a glob's folder: `texts/*.txt` -> texts)."""
    if source.startswith("builtin:"):
        return source.partition(":")[2]
    if source.startswith("hf:"):
        return source[3:].split(":")[0]
    parts = [part for part in PurePosixPath(source.replace("\\", "/")).parts
             if not any(char in part for char in "*?[") and part not in ("/", ".", "..")]
    if not parts:
        return "corpus"
    name = PurePosixPath(parts[-1])
    return name.stem if name.suffix.lower() in _RECORD_SUFFIXES else name.name


def _slug(name: str) -> str:
    """`name` as a Hub repository name: lower case, runs of other characters as one `-`."""
    return re.sub(r"[^a-z0-9._]+", "-", name.lower()).strip("-._") or "corpus"
