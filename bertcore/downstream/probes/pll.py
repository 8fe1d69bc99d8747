"""Pseudo-log-likelihood, two ways:

- `pll` (Salazar et al. 2020, "Masked Language Model Scoring"): each token of a sentence masked
  in turn, the sentence scores the sum of the log-probabilities the model gives its tokens at
  their masked positions. A word split into pieces is inflated: each piece is guessed with its
  siblings in view.
- `pll_word_l2r` (Kauf & Ivanova 2023, "A Better Way to Do Masked Language Model Scoring"):
  each token masked together with the later tokens of its word, the earlier ones in view. For
  the last token of a word (so for every one-token word) its masked copy is PLL's, so both
  are scored for the cost of PLL's copies and one more copy per piece that ends no word.

[CLS] and [SEP] are never masked nor scored. The copies of one or several whole sentences go
through the model in one padded forward pass (`MaskedLM.batch_size` copies at most, unless
one sentence alone has more), longest sentences first, so that a batch pads little; PLL's
batches do not depend on whether the other scoring is asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from tqdm import tqdm

from bertcore.downstream.probes.masked_lm import MaskedLM, TokenizedSentence

PLL, WORD_L2R = "pll", "pll_word_l2r"
SCORINGS = (PLL, WORD_L2R)
NAMES = {PLL: "PLL", WORD_L2R: "PLL-word-l2r"}  # as the console and the model card say them


@dataclass(frozen=True)
class SentenceScores:
    pll: list[float]
    pll_word_l2r: list[float] | None  # None: not asked for


def pseudo_log_likelihoods(lm: MaskedLM, sentences: Sequence[Sequence[int]],
                           what: str = "sentences", progress: bool | None = None
                           ) -> list[float]:
    """The PLL of each sentence (ids with [CLS] first and [SEP] last), in their order.
    `progress`: a progress bar (None: on a terminal)."""
    tensors = [torch.tensor(ids, dtype=torch.long) for ids in sentences]
    jobs = [_targeted(ids, masked_copies(ids, lm.mask_id)) for ids in tensors]
    return _totals(_log_probs(lm, jobs, f"PLL of {what}", progress))


def sentence_scores(lm: MaskedLM, sentences: Sequence[TokenizedSentence],
                    what: str = "sentences", progress: bool | None = None,
                    word_l2r: bool = True) -> SentenceScores:
    """Each sentence's PLL and, with `word_l2r`, its PLL-word-l2r, in their order."""
    tensors = [torch.tensor(s.ids, dtype=torch.long) for s in sentences]
    per_token = _log_probs(lm, [_targeted(ids, masked_copies(ids, lm.mask_id))
                                for ids in tensors], f"PLL of {what}", progress)
    if not word_l2r:
        return SentenceScores(_totals(per_token), None)
    rest = [_targeted(ids, word_l2r_copies(ids, s.words, lm.mask_id))
            for ids, s in zip(tensors, sentences, strict=True)]
    extra = _log_probs(lm, rest, f"PLL-word-l2r of {what}, pieces", progress)
    l2r = []
    for pll, (_, positions, _), pieces in zip(per_token, rest, extra, strict=True):
        values = pll.clone()
        values[positions - 1] = pieces  # per_token[i] is position i + 1's
        l2r.append(values)
    return SentenceScores(_totals(per_token), _totals(l2r))


def masked_copies(ids: torch.Tensor, mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(copies [n, len], positions [n]): the sentence with each of its n tokens between
    [CLS] and [SEP] masked in turn, and where."""
    positions = torch.arange(1, len(ids) - 1)
    copies = ids.repeat(len(positions), 1)
    copies[torch.arange(len(positions)), positions] = mask_id
    return copies, positions


def word_l2r_copies(ids: torch.Tensor, words: Sequence[tuple[int, int]], mask_id: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(copies [k, len], positions [k]): for each of the k tokens that are not their word's
    last, the sentence with that token and the later ones of its word masked, and where.
    (A word's last token masked alone is `masked_copies`' copy.)"""
    spans = [(position, end) for start, end in words for position in range(start, end - 1)]
    copies = ids.repeat(len(spans), 1)
    for row, (position, end) in enumerate(spans):
        copies[row, position:end] = mask_id
    return copies, torch.tensor([position for position, _ in spans], dtype=torch.long)


Job = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # copies, masked positions, targets


def _targeted(ids: torch.Tensor, made: tuple[torch.Tensor, torch.Tensor]) -> Job:
    """(copies, positions, the sentence's own id at each position)."""
    copies, positions = made
    return copies, positions, ids[positions]


def _log_probs(lm: MaskedLM, jobs: Sequence[Job], desc: str, progress: bool | None
               ) -> list[torch.Tensor]:
    """For each job, the log-probability (float64) of each target at its masked position."""
    found = [torch.zeros(len(positions), dtype=torch.float64) for _, positions, _ in jobs]
    with tqdm(total=sum(len(p) for _, p, _ in jobs), desc=desc, unit="copy",
              disable=None if progress is None else not progress) as bar:
        for members in _batches(lm, jobs):
            blocks = [jobs[i][0] for i in members]
            positions = torch.cat([jobs[i][1] for i in members])
            targets = torch.cat([jobs[i][2] for i in members])
            log_probs = lm.log_probs_at(blocks, positions)
            picked = log_probs[torch.arange(len(targets)), targets].double()
            for i, values in zip(members, picked.split([len(jobs[i][1]) for i in members]),
                                 strict=True):
                found[i] = values
            bar.update(len(targets))
    return found


def _batches(lm: MaskedLM, jobs: Sequence[Job]) -> Iterator[list[int]]:
    """The jobs of each forward pass, longest sentences first; a job is never split."""
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i][0].shape[1])
    pending: list[int] = []
    size = 0
    for index in order:
        count = len(jobs[index][1])
        if count == 0:  # nothing to mask: scores 0
            continue
        if pending and size + count > lm.batch_size:
            yield pending
            pending, size = [], 0
        pending.append(index)
        size += count
    if pending:
        yield pending


def _totals(per_token: Sequence[torch.Tensor]) -> list[float]:
    """Each sentence's sum of its tokens' log-probabilities, added in position order."""
    if not per_token:
        return []
    owners = torch.cat([torch.full((len(v),), i) for i, v in enumerate(per_token)])
    totals = torch.zeros(len(per_token), dtype=torch.float64)
    totals.index_add_(0, owners, torch.cat(list(per_token)))
    return totals.tolist()
