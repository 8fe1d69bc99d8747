"""Where the real tokens of a padded batch lie, to compute on them alone: a batch [B, L] with an
attention mask becomes one packed sequence of its T real tokens [T, ...] and back.

The unpadded encoder (`BertPretrainingModel.encode(..., unpad=True)`) runs its embeddings,
projections, feed-forward layers and layer norms on the packed rows, which on a batch of short
GLUE sentences padded to its longest is a fraction of the padded work; attention, which needs
each sequence's rows side by side, re-pads its queries, keys and values (`pad`) and packs its
output again (`unpad`). As in MosaicBERT's `bert_padding.py`, the packing is an index of the
real positions in the flattened batch, gathered and scattered with index_select/index_copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Packing:
    """The real positions of a batch of `batch` rows of `length` tokens: `index` [T], their
    places in the flattened [B * L] batch, row by row (its nonzero: a data-dependent shape,
    computed once per batch and shared by every layer)."""

    index: torch.Tensor
    batch: int
    length: int

    @classmethod
    def of(cls, attention_mask: torch.Tensor) -> Packing:
        """The packing of `attention_mask` [B, L]: 1 (or True) on real tokens."""
        batch, length = attention_mask.shape
        index = attention_mask.reshape(-1).nonzero().squeeze(1)
        return cls(index, batch, length)

    @property
    def columns(self) -> torch.Tensor:
        """Each real token's position in its row [T] (the position embedding it takes)."""
        return self.index % self.length

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """[B, L, ...] -> the real rows [T, ...], in order."""
        return padded.reshape(self.batch * self.length, *padded.shape[2:]).index_select(
            0, self.index)

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """[T, ...] -> [B, L, ...], zeros at the padding."""
        flat = packed.new_zeros(self.batch * self.length, *packed.shape[1:])
        return flat.index_copy(0, self.index, packed).view(self.batch, self.length,
                                                          *packed.shape[1:])
