"""How fast a DataLoader worker reads samples: `SampleStore[i]` over random i, alone and with
the collation a worker does after it (PretrainingCollator, batches of 32), on one core.

Target: >= 20,000 samples/s per worker at 128 tokens, collation included. Reads a samples
folder the samples stage built (default: data/samples/train, i.e. after `dvc repro samples`).
Passes alternate between the two measurements and the median is taken, so a loaded machine
disturbs both alike. Last line: `store_samples_per_s=N collated_samples_per_s=M target_ratio=R`
(R = collated / 20,000).

    python benchmarks/sample_store.py [--split data/samples/train] [--samples 50000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from bertcore.data.samples.store import SampleStore
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec

TARGET = 20_000  # samples/s per DataLoader worker, collation included
BATCH = 32


def read_samples(store: SampleStore, order: np.ndarray) -> float:
    """Seconds to read the samples of `order` one by one, as TaggedSamples does."""
    started = time.perf_counter()
    for i in order.tolist():
        store[i]
    return time.perf_counter() - started


def read_and_collate(store: SampleStore, order: np.ndarray, collate) -> float:
    """Seconds to read the samples of `order` and collate them in batches of BATCH."""
    started = time.perf_counter()
    for lo in range(0, len(order) - BATCH + 1, BATCH):
        collate([(0, i, *store[i]) for i in order[lo : lo + BATCH].tolist()])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", type=Path, default=Path("data/samples/train"))
    parser.add_argument("--samples", type=int, default=50_000, help="samples read per pass")
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    store = SampleStore(args.split)
    vocab_size = int(store.tokens.max()) + 1
    collate = PretrainingCollator(MaskingConfig(), VocabSpec(max(vocab_size, 5)), seed=1)
    rng = np.random.default_rng(0)
    alone, collated = [], []
    for _ in range(args.passes):
        order = rng.integers(0, len(store), args.samples)
        alone.append(args.samples / read_samples(store, order))
        collated.append(args.samples // BATCH * BATCH / read_and_collate(store, order, collate))
    mean_length = float(store.lengths.mean())
    store_rate, collated_rate = statistics.median(alone), statistics.median(collated)
    print(f"{args.split}: {len(store)} samples, mean length {mean_length:.1f}")
    print(f"store[i]            {store_rate:12,.0f} samples/s")
    print(f"store[i] + collate  {collated_rate:12,.0f} samples/s (target {TARGET:,})")
    print(f"store_samples_per_s={store_rate:.0f} collated_samples_per_s={collated_rate:.0f} "
          f"target_ratio={collated_rate / TARGET:.2f}")


if __name__ == "__main__":
    main()
