"""The vocab stage's knobs (params.yaml section `vocab`): train a WordPiece vocabulary, or
take an existing one."""

from __future__ import annotations

from typing import Annotated, Literal

from bertcore.common.validation import Allowed, Bool, integer, params_section, text

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


@params_section(frozen=True)
class VocabConfig:
    # train, or an existing vocabulary: a vocab.txt, a tokenizer.json, or a folder holding a
    # Hugging Face tokenizer or model (tokenizer.json, and/or vocab.txt + tokenizer_config.json)
    source: text(pattern=r"\S", allowed="train, or the path of a vocab.txt, a tokenizer.json "
                                        "or a tokenizer folder") = TRAIN
    # these two: only when training; auto: see auto_vocab_size
    vocab_size: Annotated[integer(ge=32, le=1_000_000) | Literal["auto"],
                          Allowed(f"{AUTO} or an integer in 32..1000000")] = AUTO
    min_frequency: integer(ge=1) = 2
    sample_bytes: integer(ge=1, allowed="an integer >= 1 (bytes), or null to train on the "
                                        "whole split") | None = SAMPLE_BYTES  # train only
    # Casing and accents of a trained vocabulary, or of a bare vocab.txt; other sources bring
    # their own (from tokenizer_config.json or the tokenizer.json normaliser).
    lowercase: Bool = True
    strip_accents: Bool | None = None  # None: follow `lowercase`, as BERT does

    @property
    def strips_accents(self) -> bool:
        return self.lowercase if self.strip_accents is None else self.strip_accents

