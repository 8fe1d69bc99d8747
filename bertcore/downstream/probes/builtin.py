"""Probes made from any corpus's held-out val split (one sentence per line, blank lines
between documents; pretraining never saw it), so that a corpus nobody prepared still gets
them. From a seeded draw of its sentences (of MIN_WORDS..MAX_WORDS words, with a word that may
move: lower-case alphabetic, not the first, as the built-in fine-tune tasks choose them):

- a cloze of a held-out word: one such word that is one token of the vocabulary, masked;
- two minimal pairs, the sentence as written against
  - `swapped`: the same sentence with two adjacent such words swapped (the same tokens, so
    neither a bag of words nor a frequency count tells them apart);
  - `replaced`: the same sentence with one such word replaced by the word of the next
    frequency rank in the train split (above or below, drawn), which a frequency count
    barely tells apart.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.data.corpus.splits import read_documents
from bertcore.downstream.movable import movable_positions
from bertcore.downstream.probes.cloze import ClozeItem
from bertcore.downstream.probes.frequencies import TrainCounts
from bertcore.downstream.probes.masked_lm import MASK, MaskedLM
from bertcore.downstream.probes.minimal_pairs import MinimalPair

CLOZE_GROUP, SWAPPED, REPLACED = "held-out word", "swapped", "replaced"


@dataclass(frozen=True)
class BuiltinProbes:
    cloze: list[ClozeItem]
    pairs: list[MinimalPair]  # group SWAPPED or REPLACED
    eligible: int  # val sentences that could be drawn
    drawn: int


def builtin_probes(val_file: str | Path, lm: MaskedLM, counts: TrainCounts, sentences: int,
                   seed: int, setting: str = "probe.builtin_sentences") -> BuiltinProbes:
    """Up to `sentences` val sentences drawn with `seed`, and the probes made of each;
    `setting`: the param that chose `sentences`, which a message names."""
    documents = read_documents(val_file)
    every = [" ".join(words) for s in itertools.chain.from_iterable(documents)
             if movable_positions(words := s.split())]
    rng = random.Random(seed)
    drawn = [every[i] for i in sorted(rng.sample(range(len(every)), min(sentences, len(every))))]
    drawn = [s for s in drawn if _fits(lm, s)]
    if not drawn:
        raise BertError(f"{val_file} has no sentence of 5 to 40 words with a lower-case word "
                        f"to probe: use a larger corpus, or set {setting} to 0")
    cloze, pairs = [], []
    for number, sentence in enumerate(drawn, start=1):
        where = f"{Path(val_file).name} sentence {number} drawn"
        words = sentence.split()
        if (item := _cloze(words, lm, rng, where)) is not None:
            cloze.append(item)
        for group, made in ((SWAPPED, swap_adjacent(words, rng)),
                            (REPLACED, replace_close_frequency(words, counts, rng))):
            if made is not None:
                pairs.append(MinimalPair(sentence, made, group, where))
    return BuiltinProbes(cloze, pairs, len(every), len(drawn))


def _fits(lm: MaskedLM, sentence: str) -> bool:
    try:
        lm.encode(sentence)
    except BertError:
        return False
    return True


def _cloze(words: list[str], lm: MaskedLM, rng: random.Random, where: str) -> ClozeItem | None:
    """The sentence with one of its movable one-token words masked, or None."""
    candidates = [i for i in movable_positions(words) if lm.word_token(words[i]) is not None]
    if not candidates:
        return None
    i = rng.choice(candidates)
    return ClozeItem(" ".join([*words[:i], MASK, *words[i + 1:]]), words[i], CLOZE_GROUP, where)


def swap_adjacent(words: list[str], rng: random.Random) -> str | None:
    """The sentence with two adjacent movable words that differ swapped, or None."""
    movable = set(movable_positions(words))
    candidates = [i for i in sorted(movable) if i + 1 in movable and words[i] != words[i + 1]]
    if not candidates:
        return None
    i = rng.choice(candidates)
    return " ".join([*words[:i], words[i + 1], words[i], *words[i + 2:]])


def replace_close_frequency(words: list[str], counts: TrainCounts, rng: random.Random
                            ) -> str | None:
    """The sentence with one movable word replaced by a word of the next frequency rank in
    the train split, or None when none of its words was counted there."""
    candidates = [i for i in movable_positions(words) if words[i] in counts.words]
    if not candidates:
        return None
    i = rng.choice(candidates)
    new = counts.close_frequency_word(words[i], rng)
    if new is None or new == words[i]:
        return None
    return " ".join([*words[:i], new, *words[i + 1:]])
