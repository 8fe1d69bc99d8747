"""Whether a corpus file is the one a samples split was made from, for a reader of the corpus
beside the samples (pretraining's periodic probes draw their sentences from `--corpus`):
the file's sentences (its non-blank lines, read as the samples stage reads them) counted
against those the split's meta.json entry was made of, the ones kept and the ones dropped as
tokenising to nothing. One pass over the file, no vocabulary: another corpus almost never
has the same count, and the samples record nothing finer of their corpus (a digest in
meta.json would change the samples' fingerprint, and every checkpoint's identity with it)."""

from __future__ import annotations

from pathlib import Path

from bertcore.data.samples.store import read_meta


def corpus_sentences(path: str | Path) -> int:
    """The non-blank lines of a UTF-8 file (invalid bytes replaced, stripped), as
    `tokenizing.py` reads a corpus file."""
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.decode("utf-8", errors="replace").strip())


def other_corpus(samples_dir: str | Path, corpus_file: str | Path, split: str) -> str | None:
    """None when `corpus_file` holds as many sentences as the samples' `split` was made of;
    else the two counts, in words."""
    entry = read_meta(samples_dir).get(split)
    if not isinstance(entry, dict) or not isinstance(entry.get("sentences"), int):
        return None  # nothing to check against: the samples' own check speaks
    made_of = entry["sentences"] + int(entry.get("empty_sentences_dropped") or 0)
    found = corpus_sentences(corpus_file)
    if found == made_of:
        return None
    return (f"{corpus_file} holds {found} sentences, but the {split} samples in {samples_dir} "
            f"were made from {made_of}")
