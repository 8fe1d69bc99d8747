"""The vocab stage's knobs (params.yaml section `vocab`): train a WordPiece vocabulary, or
take an existing one."""

from __future__ import annotations

import dataclasses

from bertcore.common.errors import require

TRAIN = "train"  # vocab.source: train a new vocabulary on the corpus
# vocab.vocab_size: auto = one token per word seen at least AUTO_MIN_COUNT times in the train
# split, clamped to AUTO_RANGE: rarer words are left to ## pieces, so most tokens occur often
# enough to be learnt (a fixed 8000 on 0.3 M characters leaves most tokens rare).
AUTO = "auto"
AUTO_MIN_COUNT = 5
AUTO_RANGE = (500, 30522)  # 30522: BERT's own vocabulary
# vocab.sample_bytes: a vocabulary is trained on about this much of the train split (documents
# drawn by a hash of their content, `data/vocab/sample.py`); tokenizers' maintainers advise
# about 1 GB (tokenizers issue #316). None: the whole split.
SAMPLE_BYTES = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class VocabConfig:
    # train, or an existing vocabulary: a vocab.txt, a tokenizer.json, or a folder holding a
    # Hugging Face tokenizer or model (tokenizer.json, and/or vocab.txt + tokenizer_config.json)
    source: str = TRAIN
    vocab_size: int | str = AUTO  # these two: only when training; auto: see auto_vocab_size
    min_frequency: int = 2
    sample_bytes: int | None = SAMPLE_BYTES  # train only: see SAMPLE_BYTES
    # Casing and accents of a trained vocabulary, or of a bare vocab.txt; other sources bring
    # their own (from tokenizer_config.json or the tokenizer.json normaliser).
    lowercase: bool = True
    strip_accents: bool | None = None  # None: follow `lowercase`, as BERT does

    def __post_init__(self):
        require(bool(self.source.strip()), "source", self.source,
                "train, or the path of a vocab.txt, a tokenizer.json or a tokenizer folder")
        size = self.vocab_size
        require(size == AUTO or (type(size) is int and 32 <= size <= 1_000_000),
                "vocab_size", size, f"{AUTO} or an integer in 32..1000000")
        require(self.min_frequency >= 1, "min_frequency", self.min_frequency, "an integer >= 1")
        require(self.sample_bytes is None or self.sample_bytes >= 1, "sample_bytes",
                self.sample_bytes, "null (the whole train split) or a number of bytes >= 1")

    @property
    def strips_accents(self) -> bool:
        return self.lowercase if self.strip_accents is None else self.strip_accents

