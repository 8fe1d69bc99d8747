"""The epoch order (bertcore.training.data.order): a permutation of the samples for every n, the
same whatever part of it is computed where, in memory that does not grow with the samples
(200 M of them), and mixed: each step draws from across the whole split, epochs are unrelated.
How steps are cut from it, split over processes and resumed: test_batches.py."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from helpers.pattern_store import PatternStore

from bertcore.training.data.order import EpochOrder, EpochSteps, LengthBins

WIKIPEDIA = 200_000_000  # samples of Wikipedia at dupe factor 5
MEMORY_LIMIT = 100 * 2**20  # bytes per process, at WIKIPEDIA samples


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 31, 100, 1000, 4096, 4097, 65537])
def test_every_sample_once_per_epoch(n):
    for seed, epoch in [(0, 0), (42, 0), (42, 1), (-3, 7)]:
        order = EpochOrder(n, seed, epoch)(np.arange(n))
        assert order.dtype == np.int64
        assert np.array_equal(np.sort(order), np.arange(n)), (seed, epoch)


def test_any_part_of_the_order_is_the_same_wherever_it_is_computed():
    """Positions in any order, in any pieces, in any shape: the same samples."""
    n = 10_007
    whole = EpochOrder(n, 5, 2)(np.arange(n))
    positions = np.random.default_rng(0).permutation(n)
    pieces = np.concatenate([EpochOrder(n, 5, 2)(part) for part in np.array_split(positions, 13)])
    assert np.array_equal(pieces, whole[positions])
    assert np.array_equal(EpochOrder(n, 5, 2)(np.arange(10_000).reshape(100, 100)),
                          whole[:10_000].reshape(100, 100))


def test_seed_and_epoch_give_other_orders():
    n = 1000
    base = EpochOrder(n, 42, 0)(np.arange(n))
    for seed, epoch in [(43, 0), (42, 1), (42, 2)]:
        other = EpochOrder(n, seed, epoch)(np.arange(n))
        assert np.mean(other == base) < 0.01
        # unrelated, not shifted or mirrored: no rank correlation between the two orders
        assert abs(np.corrcoef(base, other)[0, 1]) < 0.1


def ks_distance(indices: np.ndarray, n: int) -> float:
    """Kolmogorov-Smirnov distance between the indices and the uniform law on [0, n)."""
    x = np.sort(indices) / n
    k = np.arange(1, len(x) + 1) / len(x)
    return float(max((k - x).max(), (x - (k - 1 / len(x))).max()))


@pytest.mark.parametrize("n", [10_000, WIKIPEDIA])
def test_each_step_draws_from_across_the_whole_split(n):
    """The samples are stored in corpus and dupe-pass order: a step of 256 must spread over
    all of it (a shuffle within blocks of the file would not), like 256 uniform draws: their
    KS distance to uniform stays below 0.122 (the 0.1% critical value) in each of 20 steps."""
    order = EpochOrder(n, 42, 3)
    steps = order(np.arange(20 * 256).reshape(20, 256))
    distances = [ks_distance(step, n) for step in steps]
    assert max(distances) < 0.122, distances
    tenths = np.bincount(steps[0] * 10 // n, minlength=10)
    assert tenths.min() >= 10, tenths  # 25.6 expected in each tenth of the split


def test_neighbouring_positions_are_unrelated():
    n = 1_000_003
    order = EpochOrder(n, 1, 0)(np.arange(100_000))
    assert abs(np.corrcoef(np.arange(100_000), order)[0, 1]) < 0.02
    assert abs(np.corrcoef(order[:-1], order[1:])[0, 1]) < 0.02
    gaps = np.abs(np.diff(order))
    assert np.median(gaps) > n / 5  # uniform pairs: n (1 - 1/sqrt 2) = 0.29 n


def first_steps(steps: EpochSteps, epoch: int, start_step: int, count: int) -> list[np.ndarray]:
    batches = steps.batches(epoch, start_step)
    return [next(batches) for _ in range(count)]


@pytest.mark.parametrize("bins", [LengthBins(), LengthBins(32, 512)])
def test_memory_per_process_does_not_grow_with_the_samples(bins):
    """200 M samples: planning the epochs (counting the bins' samples) and drawing steps,
    from an epoch's start and resumed in it, stay within 100 MB (a permutation of the
    samples alone would be 1.6 GB)."""
    tracemalloc.start()
    try:
        steps = EpochSteps(PatternStore(WIKIPEDIA), bins, 256, seed=42)
        first = first_steps(steps, 3, 0, 3)
        resumed = first_steps(steps, 3, 1, 2)
        later = first_steps(steps, 3, 2000, 1)[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_LIMIT, peak
    assert steps.per_epoch >= WIKIPEDIA // 256 - bins.count
    assert all(np.array_equal(a, b) for a, b in zip(first[1:], resumed, strict=True))
    assert len(later) == 256 and len(np.unique(np.concatenate([*first, later]))) == 4 * 256
    if bins.count > 1:
        assert len(set(bins.of(steps.store.lengths[later]))) == 1
    assert ks_distance(first[0], WIKIPEDIA) < 0.122
