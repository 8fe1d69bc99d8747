"""One run's interval over many items (a user's BLiMP: 67,000 pairs) in bounded memory: BCa's
jackknife and the resamples are drawn in chunks, not as [items, items] at once."""

from __future__ import annotations

import tracemalloc

import numpy as np

from bertcore.common.intervals import Runs, estimate


def test_an_interval_over_8000_items_takes_under_100_mb():
    """All at once, BCa's jackknife alone holds 8000 x 7999 indices (512 MB); in chunks of
    250 resamples a few tens of MB. The interval is BCa's all the same: it holds the mean."""
    outcomes = (np.random.default_rng(0).random(8000) < 0.7).astype(np.int8)
    tracemalloc.start()
    try:
        found = estimate(Runs.of_one("mean", x=outcomes))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, f"{peak / 2**20:.0f} MB"
    assert found.low < outcomes.mean() < found.high and found.high - found.low < 0.03
