"""The corpus stage's library: raw text in, one-sentence-per-line train/val documents out.

config (CorpusConfig) -> sources (documents as pieces of raw text, in spans) -> tasks (spans
cleaned: HTML, control characters, Unicode; and split into sentences, in worker processes) ->
writer (dedup, train/val split) -> parts (a small corpus split by parts of documents instead)
-> build; each counts what it finds into a `CorpusCounts` (counts: metrics/corpus.json's
figures). The package imports nothing itself: `bert corpus` reads its params (config) before
it imports what computes.
"""
