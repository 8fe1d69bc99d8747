"""Cloze probes: a sentence with one word hidden behind [MASK], and the word (LAMA: Petroni et
al. 2019, JSON Lines with `masked_sentences`, whose first entry holds one [MASK], and
`obj_label`; grouped by `predicate_id` where a line has one, else by the file's name).
Precision at k: the share of items whose answer is among the model's k likeliest words,
over the answers that are one whole-word token of the model's vocabulary (after its
tokenizer's normalisation, e.g. lower-casing); the others cannot be predicted in one slot, so
they are not counted, and are reported. Over no counted item a precision is None (JSON null),
never 0, which `dvc exp show` would read as a score. The model ranks whole-word tokens only (no
punctuation, `##` piece or special token), the set the word-frequency baseline guesses from,
so that the two compare like with like."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from bertcore.common.errors import BertError
from bertcore.downstream.probes.frequencies import TrainCounts
from bertcore.downstream.probes.masked_lm import MASK, MaskedLM
from bertcore.downstream.probes.probe_files import group_of, probe_files, records, text_field

EXPECTED = ("one JSON object per line with masked_sentences (a list whose first sentence "
            f"holds one {MASK}) and obj_label (LAMA)")
TOP_K = 10
NOT_COUNTED_EXAMPLES = 5


@dataclass(frozen=True)
class ClozeItem:
    text: str  # holds one [MASK]
    answer: str
    group: str
    where: str


@dataclass(frozen=True)
class ScoredCloze:
    item: ClozeItem
    answer_id: int | None  # None: not one whole-word token, not counted
    top: list[int]  # the model's TOP_K likeliest whole-word ids, likeliest first

    def row(self, lm: MaskedLM) -> dict:
        return {"group": self.item.group, "where": self.item.where,
                "masked_sentence": self.item.text, "answer": self.item.answer,
                "counted": self.answer_id is not None,
                "rank": self.top.index(self.answer_id) + 1 if self.answer_id in self.top
                else None,
                "top10": [lm.tokenizer.id_to_token(i) for i in self.top]}


def read_cloze(path: str | Path) -> list[ClozeItem]:
    items = []
    for file in probe_files(path, "cloze"):
        for number, record in records(file, EXPECTED):
            sentences = record.get("masked_sentences")
            if not isinstance(sentences, list) or not sentences or not isinstance(
                    sentences[0], str):
                raise BertError(f"{file} line {number} has no list of sentences in "
                                f"'masked_sentences': expected {EXPECTED}")
            masks = sentences[0].count(MASK)
            if masks != 1:
                raise BertError(f"{file} line {number}: the first of masked_sentences holds "
                                f"{masks} {MASK}: expected exactly one")
            answer = text_field(record, "obj_label", file, number, EXPECTED)
            items.append(ClozeItem(sentences[0], answer.strip(),
                                   group_of(record, "predicate_id", file),
                                   f"{file} line {number}"))
    return items


def score_cloze(lm: MaskedLM, items: Sequence[ClozeItem], what: str = "cloze items",
                progress: bool | None = None) -> list[ScoredCloze]:
    """The model's TOP_K likeliest whole-word tokens at each item's [MASK], in batches of
    `lm.batch_size` items. `progress`: a progress bar (None: on a terminal)."""
    encoded = [_encoded(lm, item) for item in items]
    top: list[list[int]] = [[] for _ in items]
    order = sorted(range(len(items)), key=lambda i: -len(encoded[i]))
    for start in tqdm(range(0, len(order), lm.batch_size), desc=what, unit="batch",
                      disable=None if progress is None else not progress):
        chunk = order[start: start + lm.batch_size]
        blocks = [torch.tensor([encoded[i]]) for i in chunk]
        positions = torch.tensor([encoded[i].index(lm.mask_id) for i in chunk])
        scores = lm.log_probs_at(blocks, positions).masked_fill(~lm.word_mask, -torch.inf)
        best = scores.topk(min(TOP_K, int(lm.word_mask.sum()))).indices
        for i, ids in zip(chunk, best.tolist(), strict=True):
            top[i] = ids
    return [ScoredCloze(item, lm.word_token(item.answer), ids)
            for item, ids in zip(items, top, strict=True)]


def _encoded(lm: MaskedLM, item: ClozeItem) -> list[int]:
    try:
        ids = lm.encode(item.text)
    except BertError as error:
        raise BertError(f"{item.where}: {error}; shorten the sentence or leave it out") from None
    if ids.count(lm.mask_id) != 1:
        raise BertError(f"{item.where}: the tokenizer does not read {MASK} as its mask token "
                        f"(found {ids.count(lm.mask_id)}): is it a BERT tokenizer?")
    return ids


def counted(scored: Sequence[ScoredCloze]) -> list[ScoredCloze]:
    """The items whose answer is one whole-word token: the ones a precision counts."""
    return [s for s in scored if s.answer_id is not None]


def hits(scored: Sequence[ScoredCloze], k: int, guess: Sequence[int] | None = None
         ) -> list[int]:
    """For each counted item, 1 when its answer is among the model's top k (or among one
    `guess`'s first k, for all), else 0: the outcomes P@k is the mean of."""
    return [int(s.answer_id in (s.top if guess is None else guess)[:k]) for s in counted(scored)]


def precision(scored: Sequence[ScoredCloze], k: int, guess: Sequence[int] | None = None
              ) -> float | None:
    """P@k over the counted items: of the model's top k, or of one `guess` for all; None
    when no item is counted."""
    outcomes = hits(scored, k, guess)
    return sum(outcomes) / len(outcomes) if outcomes else None


def cloze_report(scored: Sequence[ScoredCloze], counts: TrainCounts, lm: MaskedLM
                 ) -> tuple[dict, dict]:
    """(metrics, details): P@1 and P@10 of the model; beside them the frequency baseline's,
    the counts, the answers not counted (a few examples) and each group's figures."""
    guess = counts.most_frequent(lm, TOP_K)
    not_counted = [s.item.answer for s in scored if s.answer_id is None]
    groups: dict[str, list[ScoredCloze]] = {}
    for s in scored:
        groups.setdefault(s.item.group, []).append(s)
    details = {
        "items": len(scored) - len(not_counted),
        "frequency_baseline": {"p_at_1": precision(scored, 1, guess),
                               "p_at_10": precision(scored, TOP_K, guess),
                               "guess": [lm.tokenizer.id_to_token(i) for i in guess]},
        "not_counted": {"count": len(not_counted),
                        "why": "the answer is not one whole-word token of the vocabulary",
                        "examples": list(dict.fromkeys(not_counted))[:NOT_COUNTED_EXAMPLES]},
        "groups": {name: {"items": sum(s.answer_id is not None for s in members),
                          "p_at_1": precision(members, 1), "p_at_10": precision(members, TOP_K)}
                   for name, members in groups.items()},
    }
    return {"p_at_1": precision(scored, 1), "p_at_10": precision(scored, TOP_K)}, details
