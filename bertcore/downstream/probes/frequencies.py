"""What the train split's frequencies alone predict: the baselines the probes are read
against. Counted on the train text (`data/corpus/train.txt`, its first FREQUENCY_BYTES),
tokenised by the probed model's own tokenizer, so that the counts fit any model probed,
Google's vocabulary as well as the pipeline's.

- tokens: the frequency baseline of a cloze is the k most frequent whole-word tokens
  (alphabetic, no `##` piece, no special token), the same guess for every item, whatever
  its context; and a sentence's unigram score, the sum of its tokens' log-frequencies
  (add-one), is what a pair is told apart by with no context at all;
- words (lower-case alphabetic, as the built-in probes move them): ranked by count, so that a
  word can be replaced by one of close rank, which a frequency count cannot tell apart.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bertcore.common.errors import BertError
from bertcore.common.text_files import utf8_lines
from bertcore.downstream.probes.masked_lm import MaskedLM

FREQUENCY_BYTES = 20_000_000  # of train text: enough for the top tokens' order, seconds to read
_LINES_PER_BATCH = 10_000


@dataclass
class TrainCounts:
    tokens: np.ndarray  # count per token id
    words: Counter[str]
    bytes_read: int
    _ranks: dict[str, int] = field(default_factory=dict, repr=False)
    _ranked: list[str] = field(default_factory=list, repr=False)

    def __post_init__(self):
        # by count, ties by the word itself: the order depends on the counts alone
        self._ranked = sorted(self.words, key=lambda w: (-self.words[w], w))
        self._ranks = {w: r for r, w in enumerate(self._ranked)}

    def most_frequent(self, lm: MaskedLM, k: int) -> list[int]:
        """The k most frequent whole-word tokens (ties by id), the frequency baseline's guess."""
        order = np.argsort(-self.tokens[: lm.vocab_size], kind="stable")
        return [i for i in order.tolist() if lm.word_mask[i]][:k]

    def unigram_score(self, ids: Sequence[int]) -> float:
        """Sum of the add-one log-frequencies of the tokens between [CLS] and [SEP]."""
        total, size = float(self.tokens.sum()), len(self.tokens)
        # fsum: exact, so the same tokens in another order (a swap) score the very same
        return math.fsum(math.log((int(self.tokens[i]) + 1) / (total + size)) for i in ids[1:-1])

    def close_frequency_word(self, word: str, rng: random.Random) -> str | None:
        """A word ranked next to `word` (one above or below, drawn), None when `word` is not
        among the counted words."""
        rank = self._ranks.get(word)
        if rank is None or len(self._ranked) < 2:
            return None
        neighbours = [r for r in (rank - 1, rank + 1) if 0 <= r < len(self._ranked)]
        return self._ranked[rng.choice(neighbours)]


def count_train(path: str | Path, lm: MaskedLM, limit: int = FREQUENCY_BYTES) -> TrainCounts:
    """Token counts (by `lm`'s tokenizer) and word counts of the first `limit` bytes of the
    train text (whole lines)."""
    path = Path(path)
    if not path.is_file():
        raise BertError(f"{path} not found: the probes' frequency baselines count the train "
                        "split (run `bert corpus`, or pass --train)")
    tokens = np.zeros(lm.vocab_size, dtype=np.int64)
    words: Counter[str] = Counter()
    read, lines = 0, []
    for line in utf8_lines(path):
        if read >= limit:
            break
        read += len(line.encode("utf-8"))
        if line.strip():
            lines.append(line)
        if len(lines) == _LINES_PER_BATCH:
            _count(lines, lm, tokens, words)
            lines = []
    _count(lines, lm, tokens, words)
    return TrainCounts(tokens, words, read)


def _count(lines: list[str], lm: MaskedLM, tokens: np.ndarray, words: Counter[str]) -> None:
    if not lines:
        return
    encoded = lm.tokenizer.encode_batch(lines, add_special_tokens=False)
    ids = np.fromiter((i for e in encoded for i in e.ids), dtype=np.int64)
    tokens += np.bincount(ids[ids < len(tokens)], minlength=len(tokens))
    for line in lines:
        words.update(w for w in line.split() if w.isalpha() and w.islower())
