"""A store of any size without its samples: lengths computed from the index, for what needs
only `len(store)` and `store.lengths` (the epoch order's tests and benchmarks/epoch_order.py)."""

from __future__ import annotations

import numpy as np


class PatternLengths:
    """The full lengths 1..512 of `count` samples, computed from the index (slices and index
    arrays), so 200 M of them are held without storing them."""

    def __init__(self, count: int):
        self.count = count

    def __getitem__(self, key):
        if isinstance(key, slice):
            key = np.arange(*key.indices(self.count))
        return 1 + (np.asarray(key, dtype=np.int64) * 7919) % 512


class PatternStore:
    def __init__(self, count: int):
        self.count = count
        self.lengths = PatternLengths(count)

    def __len__(self) -> int:
        return self.count
