"""Minimal pairs: a sentence and a worse version of it (BLiMP: Warstadt et al. 2020), told
apart when the model scores the good one the higher, by PLL and by PLL-word-l2r (`pll.py`;
`probe.scoring` names the headline one, `accuracy`). Read from BLiMP's JSON Lines
(`sentence_good`, `sentence_bad`, grouped by `UID` where a line has one, else by the file's
name); the built-in probes make pairs of their own (`builtin.py`). Each pair says whether a word
it differs in is split into pieces (`differing_words.py`), where the two scorings part. Over no
pair an accuracy is None (JSON null), never 0."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.downstream.probes.differing_words import differs_in_split_word
from bertcore.downstream.probes.frequencies import TrainCounts
from bertcore.downstream.probes.masked_lm import MaskedLM, TokenizedSentence
from bertcore.downstream.probes.pll import PLL, SCORINGS, WORD_L2R, sentence_scores
from bertcore.downstream.probes.probe_files import group_of, probe_files, records, text_field

EXPECTED = "one JSON object per line with sentence_good and sentence_bad (BLiMP)"

Scores = tuple[float, float]  # the good sentence's, the bad one's


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str
    group: str
    where: str  # file and line, or what made it


@dataclass(frozen=True)
class ScoredPair:
    pair: MinimalPair
    pll: Scores
    pll_word_l2r: Scores | None  # None: not scored (the probes while pretraining)
    unigram: Scores  # the token frequencies' scores, the baseline
    split_word: bool  # a word the pair differs in is several tokens

    def scores(self, scoring: str) -> Scores | None:
        """The pair's scores by `scoring` (`pll.SCORINGS`)."""
        return {PLL: self.pll, WORD_L2R: self.pll_word_l2r}[scoring]

    def row(self, scoring: str) -> dict:
        """The pair with its scores; `correct` by `scoring`, the headline."""
        p, l2r = self.pair, self.pll_word_l2r
        good, bad = self.scores(scoring)
        return {"group": p.group, "where": p.where, "sentence_good": p.good,
                "sentence_bad": p.bad, "pll_good": round(self.pll[0], 6),
                "pll_bad": round(self.pll[1], 6),
                **({} if l2r is None else {"pll_word_l2r_good": round(l2r[0], 6),
                                           "pll_word_l2r_bad": round(l2r[1], 6)}),
                "correct": good > bad, "split_word": self.split_word,
                "unigram_good": round(self.unigram[0], 6),
                "unigram_bad": round(self.unigram[1], 6)}


def read_minimal_pairs(path: str | Path) -> list[MinimalPair]:
    pairs = []
    for file in probe_files(path, "minimal_pairs"):
        for number, record in records(file, EXPECTED):
            good, bad = (text_field(record, name, file, number, EXPECTED)
                         for name in ("sentence_good", "sentence_bad"))
            pairs.append(MinimalPair(good, bad, group_of(record, "UID", file),
                                     f"{file} line {number}"))
    return pairs


def score_pairs(lm: MaskedLM, pairs: Sequence[MinimalPair], counts: TrainCounts,
                what: str = "minimal pairs", progress: bool | None = None,
                word_l2r: bool = True) -> list[ScoredPair]:
    """Each pair's PLLs, PLL-word-l2r scores (with `word_l2r`) and unigram scores. The
    sentences are scored together, in batches, each distinct sentence once (the built-in pairs
    share their good sentence). `progress`: a progress bar (None: on a terminal)."""
    sentences = [_tokenized(lm, pair, text) for pair in pairs for text in (pair.good, pair.bad)]
    distinct = list(dict.fromkeys(sentences))
    scores = sentence_scores(lm, distinct, what, progress, word_l2r)
    pll = dict(zip(distinct, scores.pll, strict=True))
    l2r = {} if scores.pll_word_l2r is None else dict(zip(distinct, scores.pll_word_l2r,
                                                          strict=True))
    scored = []
    for pair, good, bad in zip(pairs, sentences[::2], sentences[1::2], strict=True):
        scored.append(ScoredPair(
            pair, (pll[good], pll[bad]), (l2r[good], l2r[bad]) if word_l2r else None,
            (counts.unigram_score(good.ids), counts.unigram_score(bad.ids)),
            differs_in_split_word(good, bad)))
    return scored


def _tokenized(lm: MaskedLM, pair: MinimalPair, text: str) -> TokenizedSentence:
    try:
        return lm.tokenize(text)
    except BertError as error:
        raise BertError(f"{pair.where}: {text[:40]!r}...: {error}; shorten it or leave "
                        "it out") from None


def outcomes(wins: Sequence[tuple[float, float]]) -> list[float]:
    """Each pair's outcome from its (good, bad) scores: 1 with good above bad, 0 below, a tie
    half (as a coin would): the outcomes an accuracy is the mean of."""
    return [1.0 if g > b else 0.5 if g == b else 0.0 for g, b in wins]


def accuracy(wins: Sequence[tuple[float, float]]) -> float | None:
    """Share of (good, bad) scores with good above bad, a tie counting half: a score that
    cannot tell a pair apart gets 0.5. None for no pair."""
    if not wins:
        return None
    return sum(outcomes(wins)) / len(wins)


def pair_report(scored: Sequence[ScoredPair], scoring: str) -> tuple[dict, dict]:
    """(metrics, details) of scored pairs: the accuracy by `scoring` (the headline) and by each
    scoring the pairs have; in the details the pairs, the unigram baseline, the accuracies on
    the pairs that differ in a word split into pieces and on the others, and per group."""
    scorings = [s for s in SCORINGS if all(p.scores(s) is not None for p in scored)]
    groups: dict[str, list[ScoredPair]] = {}
    for s in scored:
        groups.setdefault(s.pair.group, []).append(s)
    split = [s for s in scored if s.split_word]
    details = {
        "pairs": len(scored),
        "unigram_baseline": {"accuracy": _unigram_accuracy(scored)},
        "split_word": {"share": len(split) / len(scored) if scored else None,
                       **_accuracies(split, scorings)},
        "whole_words": _accuracies([s for s in scored if not s.split_word], scorings),
        "groups": {name: {**_accuracies(members, scorings, scoring),
                          "split_word_pairs": sum(s.split_word for s in members),
                          "unigram_baseline": _unigram_accuracy(members)}
                   for name, members in groups.items()},
    }
    metrics = _accuracies(scored, scorings, scoring)
    del metrics["pairs"]
    return metrics, details


def _accuracies(scored: Sequence[ScoredPair], scorings: Sequence[str],
                headline: str | None = None) -> dict:
    """The pairs, the accuracy by `headline` (if any) and by each of `scorings`."""
    head = {} if headline is None else {"accuracy": accuracy([s.scores(headline)
                                                               for s in scored])}
    return {"pairs": len(scored), **head,
            **{f"accuracy_{name}": accuracy([s.scores(name) for s in scored])
               for name in scorings}}


def _unigram_accuracy(scored: Sequence[ScoredPair]) -> float | None:
    return accuracy([s.unigram for s in scored])
