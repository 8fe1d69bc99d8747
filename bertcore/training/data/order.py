"""Which samples make each optimizer step of an epoch, with memory that does not grow with
the data.

**The epoch's order** (`EpochOrder`) is a keyed bijection on [0, n): position p of epoch e's
stream is sample `order(p)`. It is a Feistel network on a grid of A x B cells, A = ceil(sqrt n)
and B = ceil(n / A), so A x B >= n with fewer than A cells past n: position p is the cell
(row, column) = divmod(p, B), and each of `ROUNDS` rounds adds to one coordinate a hash of the
other (splitmix64 keyed by (seed, epoch, round)), modulo its size. A round is undone by
subtracting the same hash, so the network permutes the grid; a position it maps past n is
mapped again until it lands below n (cycle walking: following the grid permutation's cycles,
a permutation of [0, n) itself). Any positions are computed at once, vectorised, from the keys
alone: no process holds anything of size n, and all compute the same order.

Why this design: `rng.permutation(n)`, what it replaced, is n int64 per process (1.6 GB at 200 M
samples). A shuffle within blocks of the file would be small too, but the samples are stored in
corpus and dupe-pass order, so it would train on one stretch of the corpus at a time; a
permutation computed by blocks with a global interleave mixes, but needs more parts (block
permutations, an interleave, their seeds) for what one keyed bijection gives: every step draws
from the whole split. The order is not numpy's: the same (seed, epoch) give other orders than
`rng.permutation` drew, for every n.

**The steps** (`EpochSteps`): the stream, in order of position, is dealt into length bins
(`LengthBins`, `width` tokens each; no width: one bin, no binning). Whenever a bin has
received `batch_size` samples since its last step, those samples are the next step. Steps per
epoch are sum(floor(n_bin / batch_size)), known in advance from the bins' sizes; what is left
in the bins at the epoch's end is dropped. A step's samples come from across the whole split and,
with several bins, are of similar length, so a micro-batch padded to its longest pads little.
With one bin, step s is positions [s * batch_size, (s + 1) * batch_size).

A step is found by dealing the epoch's stream from its start again, chunk by chunk
(`CHUNK` positions), without building the steps before it: resuming mid-epoch costs, with
several bins, hashing the positions before it and reading their lengths (with one bin only
counting them), and memory stays a chunk plus the bins' part-filled steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bertcore.common.errors import require
from bertcore.common.hashing import GOLDEN, mix64

# Feistel rounds: 4 of pseudo-random functions make a strong pseudo-random permutation
# (Luby-Rackoff); with 1 or 2 the orders of successive epochs are correlated (test_order.py)
ROUNDS = 6
CHUNK = 1 << 16  # positions dealt into the bins at a time
_DOMAIN = np.uint64(0x6F726465725F7631)  # "order_v1": these keys are not the masks' keys


class LengthSource(Protocol):
    """What the steps need from a sample store (bertcore.data.samples.store.SampleStore
    fits): its size and, with several bins, the full length of every sample."""

    def __len__(self) -> int: ...

    @property
    def lengths(self) -> np.ndarray: ...


class EpochOrder:
    """The order of one epoch: `order(positions)` -> the samples at those positions (int64,
    same shape), a keyed bijection on [0, num_samples) (see the module's docstring)."""

    def __init__(self, num_samples: int, seed: int, epoch: int):
        self.num_samples = int(num_samples)
        rows = math.isqrt(self.num_samples - 1) + 1
        self._rows = np.uint64(rows)
        self._cols = np.uint64(-(-self.num_samples // rows))
        self._keys = _round_keys(seed, epoch)

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        out = self._permute_grid(positions.ravel())
        walking = np.flatnonzero(out >= self.num_samples)
        while walking.size:
            out[walking] = self._permute_grid(out[walking])
            walking = walking[out[walking] >= self.num_samples]
        return out.reshape(positions.shape)

    def _permute_grid(self, cells: np.ndarray) -> np.ndarray:
        """The Feistel network: a permutation of [0, rows x cols)."""
        cells = cells.astype(np.uint64)
        rows, cols = self._rows, self._cols
        row, col = cells // cols, cells % cols
        for number, key in enumerate(self._keys):
            if number % 2 == 0:
                row = (row + mix64(key + col * GOLDEN) % rows) % rows
            else:
                col = (col + mix64(key + row * GOLDEN) % cols) % cols
        return (row * cols + col).astype(np.int64)


def _round_keys(seed: int, epoch: int) -> np.ndarray:
    """ROUNDS uint64 keys from (seed, epoch): splitmix64's stream of a key of the two."""
    base = np.array([seed % 2**64], dtype=np.uint64)
    base = mix64(mix64(base ^ _DOMAIN) ^ np.uint64(epoch))
    return mix64(base + np.arange(1, ROUNDS + 1, dtype=np.uint64) * GOLDEN)


@dataclass(frozen=True)
class LengthBins:
    """Bins of sequence length `width` tokens wide: a sample of length l goes to bin
    (l - 1) // width, lengths 1..width to the first; `count` bins cover up to `max_length`
    (longer ones go to the last). No width: one bin, no binning, the lengths never read."""

    width: int | None = None
    max_length: int = 1  # the longest a sample of the split can be (its max_seq_length)

    def __post_init__(self):
        require(self.width is None or self.width >= 1, "length_bin_width", self.width,
                "an integer >= 1, or null")

    @property
    def count(self) -> int:
        return 1 if self.width is None else -(-self.max_length // self.width)

    def of(self, lengths: np.ndarray) -> np.ndarray:
        """The bin of each length."""
        lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 1)
        return np.minimum((lengths - 1) // (self.width or self.max_length), self.count - 1)

    def sizes(self, store: LengthSource) -> np.ndarray:
        """Samples per bin (int64, `count`), the lengths read in chunks."""
        if self.count == 1:
            return np.array([len(store)], dtype=np.int64)
        lengths, sizes = store.lengths, np.zeros(self.count, dtype=np.int64)
        for first in range(0, len(store), CHUNK):
            sizes += np.bincount(self.of(lengths[first : first + CHUNK]), minlength=self.count)
        return sizes


NO_BINS = LengthBins()


class EpochSteps:
    """The global batches of every epoch of one split (see the module's docstring):
    `batches(epoch, start_step)` yields each step's `batch_size` sample indices."""

    def __init__(self, store: LengthSource, bins: LengthBins, batch_size: int, seed: int):
        self.store = store
        self.bins = bins
        self.batch_size = batch_size
        self.seed = int(seed)
        self.bin_sizes = bins.sizes(store)
        self.per_epoch = int((self.bin_sizes // batch_size).sum())

    def batches(self, epoch: int, start_step: int = 0) -> Iterator[np.ndarray]:
        """Steps `start_step ..` of `epoch`, each as int64 sample indices (`batch_size`)."""
        if start_step >= self.per_epoch:
            return
        order = EpochOrder(len(self.store), self.seed, epoch)
        dealer = _Dealer(self.bins.count, self.batch_size)
        step = 0
        for first in range(0, len(self.store), CHUNK):
            positions = np.arange(first, min(first + CHUNK, len(self.store)), dtype=np.int64)
            completed = dealer.deal(positions, self._bins_at(order, positions))
            wanted = completed[max(0, start_step - step) :]
            step += len(completed)
            if len(wanted):
                yield from order(wanted)

    def _bins_at(self, order: EpochOrder, positions: np.ndarray) -> np.ndarray:
        if self.bins.count == 1:
            return np.zeros(len(positions), dtype=np.uint8)
        return self.bins.of(self.store.lengths[order(positions)])


class _Dealer:
    """Deals stream positions into bins; each bin holds the positions of its part-filled step."""

    def __init__(self, bins: int, batch_size: int):
        self.batch_size = batch_size
        self.pending = [np.empty(0, dtype=np.int64) for _ in range(bins)]

    def deal(self, positions: np.ndarray, bins: np.ndarray) -> np.ndarray:
        """Deal consecutive `positions` (in their `bins`): the steps they complete, as
        positions (steps x batch_size), in the order their last sample arrived."""
        small = bins.astype(np.min_scalar_type(len(self.pending) - 1))  # a radix sort
        grouped = positions[np.argsort(small, kind="stable")]
        ends = np.cumsum(np.bincount(small, minlength=len(self.pending)))
        full = []
        for number, members in enumerate(np.split(grouped, ends[:-1])):
            joined = np.concatenate([self.pending[number], members])
            cut = len(joined) - len(joined) % self.batch_size
            full.append(joined[:cut].reshape(-1, self.batch_size))
            self.pending[number] = joined[cut:]
        steps = np.concatenate(full)
        return steps[np.argsort(steps[:, -1])]
