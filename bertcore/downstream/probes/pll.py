"""Pseudo-log-likelihood (Salazar et al. 2020, "Masked Language Model Scoring"): each token of
a sentence masked in turn, the sentence scores the sum of the log-probabilities the model
gives its tokens at their masked positions; [CLS] and [SEP] are never masked nor scored.

A sentence of n tokens is n masked copies; the copies of one or several whole sentences go
through the model in one padded forward pass (`MaskedLM.batch_size` copies at most, unless
one sentence alone has more), longest sentences first, so that a batch pads little.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from tqdm import tqdm

from bertcore.downstream.probes.masked_lm import MaskedLM


def pseudo_log_likelihoods(lm: MaskedLM, sentences: Sequence[Sequence[int]],
                           what: str = "sentences", progress: bool | None = None
                           ) -> list[float]:
    """The PLL of each sentence (ids with [CLS] first and [SEP] last), in their order.
    `progress`: a progress bar (None: on a terminal)."""
    totals = torch.zeros(len(sentences), dtype=torch.float64)
    batches = _batches(lm, sentences)
    copies = sum(max(len(s) - 2, 0) for s in sentences)
    with tqdm(total=copies, desc=f"PLL of {what}", unit="copy",
              disable=None if progress is None else not progress) as bar:
        for blocks, owners, positions, targets in batches:
            log_probs = lm.log_probs_at(blocks, positions)
            picked = log_probs[torch.arange(len(targets)), targets].double()
            totals.index_add_(0, owners, picked)
            bar.update(len(targets))
    return totals.tolist()


def masked_copies(ids: torch.Tensor, mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(copies [n, len], positions [n]): the sentence with each of its n tokens between
    [CLS] and [SEP] masked in turn, and where."""
    positions = torch.arange(1, len(ids) - 1)
    copies = ids.repeat(len(positions), 1)
    copies[torch.arange(len(positions)), positions] = mask_id
    return copies, positions


def _batches(lm: MaskedLM, sentences: Sequence[Sequence[int]]) -> Iterator[tuple]:
    """(blocks, owner sentence of each row, masked position, original id) per forward pass."""
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    pending: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    size = 0
    for index in order:
        ids = torch.tensor(sentences[index], dtype=torch.long)
        if len(ids) <= 2:  # nothing between [CLS] and [SEP]: scores 0
            continue
        copies, positions = masked_copies(ids, lm.mask_id)
        if pending and size + len(positions) > lm.batch_size:
            yield _joined(pending)
            pending, size = [], 0
        pending.append((index, copies, positions, ids[positions]))
        size += len(positions)
    if pending:
        yield _joined(pending)


def _joined(pending: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]) -> tuple:
    owners = torch.cat([torch.full((len(p),), i) for i, _, p, _ in pending])
    return ([c for _, c, _, _ in pending], owners, torch.cat([p for _, _, p, _ in pending]),
            torch.cat([t for _, _, _, t in pending]))
