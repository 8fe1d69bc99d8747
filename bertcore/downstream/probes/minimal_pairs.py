"""Minimal pairs: a sentence and a worse version of it (BLiMP: Warstadt et al. 2020), told
apart when the model's pseudo-log-likelihood of the good one is the higher. Read from BLiMP's
JSON Lines (`sentence_good`, `sentence_bad`, grouped by `UID` where a line has one, else by
the file's name); the built-in probes make pairs of their own (`builtin.py`). Over no pair an
accuracy is None (JSON null), never 0."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.downstream.probes.frequencies import TrainCounts
from bertcore.downstream.probes.masked_lm import MaskedLM
from bertcore.downstream.probes.pll import pseudo_log_likelihoods
from bertcore.downstream.probes.probe_files import group_of, probe_files, records, text_field

EXPECTED = "one JSON object per line with sentence_good and sentence_bad (BLiMP)"


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str
    group: str
    where: str  # file and line, or what made it


@dataclass(frozen=True)
class ScoredPair:
    pair: MinimalPair
    good: float  # PLL
    bad: float
    unigram_good: float  # the token frequencies' score, the baseline
    unigram_bad: float

    def row(self) -> dict:
        p = self.pair
        return {"group": p.group, "where": p.where, "sentence_good": p.good,
                "sentence_bad": p.bad, "pll_good": round(self.good, 6),
                "pll_bad": round(self.bad, 6), "correct": self.good > self.bad,
                "unigram_good": round(self.unigram_good, 6),
                "unigram_bad": round(self.unigram_bad, 6)}


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
                what: str = "minimal pairs", progress: bool | None = None) -> list[ScoredPair]:
    """Each pair's two PLLs and unigram scores. The sentences are scored together, in
    batches, each distinct sentence once (the built-in pairs share their good sentence).
    `progress`: a progress bar (None: on a terminal)."""
    sentences = []
    for pair in pairs:
        for text in (pair.good, pair.bad):
            try:
                sentences.append(tuple(lm.encode(text)))
            except BertError as error:
                raise BertError(f"{pair.where}: {text[:40]!r}...: {error}; shorten it or leave "
                                "it out") from None
    distinct = list(dict.fromkeys(sentences))
    pll = dict(zip(distinct, pseudo_log_likelihoods(lm, distinct, what, progress), strict=True))
    return [ScoredPair(pair, pll[sentences[2 * i]], pll[sentences[2 * i + 1]],
                       counts.unigram_score(sentences[2 * i]),
                       counts.unigram_score(sentences[2 * i + 1]))
            for i, pair in enumerate(pairs)]


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


def pair_report(scored: Sequence[ScoredPair]) -> tuple[dict, dict]:
    """(metrics, details) of scored pairs: accuracy overall; pairs, unigram baseline and the
    accuracy of each group."""
    groups: dict[str, list[ScoredPair]] = {}
    for s in scored:
        groups.setdefault(s.pair.group, []).append(s)
    details = {
        "pairs": len(scored),
        "unigram_baseline": {"accuracy": _unigram_accuracy(scored)},
        "groups": {name: {"pairs": len(members),
                          "accuracy": accuracy([(s.good, s.bad) for s in members]),
                          "unigram_baseline": _unigram_accuracy(members)}
                   for name, members in groups.items()},
    }
    return {"accuracy": accuracy([(s.good, s.bad) for s in scored])}, details


def _unigram_accuracy(scored: Sequence[ScoredPair]) -> float | None:
    return accuracy([(s.unigram_good, s.unigram_bad) for s in scored])
