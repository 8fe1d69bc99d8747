"""The words a minimal pair differs in, and whether one of them is split into pieces: where
PLL and PLL-word-l2r part (`pll.py`), PLL inflating a word of several tokens. A pair differs
in the words between the longest run of words its two sentences start with alike and the
longest they end with alike (a swap: both words swapped; a replacement: the old word and the
new; BLiMP: whatever changed), on either side; a word is the tokens the tokenizer made of it
(`TokenizedSentence`)."""

from __future__ import annotations

from bertcore.downstream.probes.masked_lm import TokenizedSentence


def differing_words(good: TokenizedSentence, bad: TokenizedSentence
                    ) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(the good sentence's words the bad one lacks there, the bad one's), each word its ids."""
    a, b = good.word_tokens(), bad.word_tokens()
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while (suffix < min(len(a), len(b)) - prefix
           and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]):
        suffix += 1
    return a[prefix:len(a) - suffix], b[prefix:len(b) - suffix]


def differs_in_split_word(good: TokenizedSentence, bad: TokenizedSentence) -> bool:
    """Whether a word the pair differs in (on either side) is more than one token."""
    return any(len(word) > 1 for side in differing_words(good, bad) for word in side)
