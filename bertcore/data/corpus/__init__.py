"""The corpus stage's library: raw text in, one-sentence-per-line train/val documents out.

config (CorpusConfig) -> sources (documents as pieces of raw text, in spans) -> tasks (spans
cleaned: HTML, control characters, Unicode; and split into sentences, in worker processes) ->
writer (dedup, train/val split) -> parts (a small corpus split by parts of documents instead)
-> build.
"""

from bertcore.data.corpus.build import CorpusStats, build_corpus
from bertcore.data.corpus.cleaning import TextCleaner
from bertcore.data.corpus.config import CorpusConfig
from bertcore.data.corpus.sentences import SentenceSplitter, split_sentences
from bertcore.data.corpus.sources import Document, open_source
from bertcore.data.corpus.tasks import document_sentences

__all__ = [
    "CorpusConfig",
    "CorpusStats",
    "Document",
    "SentenceSplitter",
    "TextCleaner",
    "build_corpus",
    "document_sentences",
    "open_source",
    "split_sentences",
]
