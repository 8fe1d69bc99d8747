"""Collated batches as the tests read them: the MLM slots back as dense labels, and one batch
cut into micro-batches."""

from __future__ import annotations

import torch

from bertcore.training.data.masking import IGNORE_INDEX


def slots_to_labels(positions, targets, length: int) -> torch.Tensor:
    """The inverse of `labels_to_slots`: [B, length] labels (IGNORE_INDEX elsewhere)."""
    positions, targets = torch.as_tensor(positions), torch.as_tensor(targets)
    labels = torch.full((positions.shape[0], length), IGNORE_INDEX, dtype=torch.long)
    used = targets != IGNORE_INDEX
    rows = torch.arange(positions.shape[0])[:, None].expand_as(positions)
    labels[rows[used], positions[used]] = targets[used]
    return labels


def micro_batches_of(batch: dict[str, torch.Tensor], parts: int) -> list[dict]:
    """Cut one collated batch into `parts` equal micro-batches."""
    step = next(iter(batch.values())).shape[0] // parts
    return [{k: v[i * step : (i + 1) * step] for k, v in batch.items()} for i in range(parts)]
