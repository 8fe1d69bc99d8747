"""Speed and memory of the epoch order (bertcore.training.data.order) on one CPU core, against
the loader's need (target: >= 20,000 samples/s per DataLoader worker) and against the
permutation it replaced (`rng.permutation(n)` per epoch, in every process).

For n samples (default 200 M, Wikipedia at dupe factor 5; lengths computed from the index, as
the store would give them): the order's positions/s in chunks, the samples/s the training
loop gets from `EpochSteps` (one bin, and 32-token bins up to 512), the cost of resuming
mid-epoch (the stream dealt again up to the step), and the peak memory (tracemalloc) of
each, beside what numpy's permutation of n costs in time and memory (at --permutation-n, default
20 M, scaled to n: it is linear). Times are CPU seconds of this one-threaded process, so a
shared machine disturbs them less; the ratios are the point.
Last line: `order_positions_per_s=N steps_samples_per_s=N binned_samples_per_s=N`.

    python benchmarks/epoch_order.py [--samples 200000000] [--batch-size 256]
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from bertcore.training.data.order import CHUNK, EpochOrder, EpochSteps, LengthBins

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
# the tests' store of any size, lengths from the index
from helpers.pattern_store import PatternStore

LOADER_TARGET = 20_000  # samples/s per DataLoader worker


def measured(work):
    """(result, CPU seconds, peak bytes) of `work()`: CPU time, as the machine is shared (the
    work is one thread)."""
    tracemalloc.start()
    started = time.process_time()
    try:
        result = work()
        seconds = time.process_time() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, seconds, peak


def order_speed(n: int) -> float:
    order = EpochOrder(n, 42, 0)
    count = 40
    _, seconds, _ = measured(lambda: [order(np.arange(i * CHUNK, (i + 1) * CHUNK))
                                      for i in range(count)])
    return count * CHUNK / seconds


def steps_speed(steps: EpochSteps, count: int) -> tuple[float, int]:
    def draw():
        batches = steps.batches(1)
        for _ in range(count):
            next(batches).tolist()  # as the sampler hands them on

    _, seconds, peak = measured(draw)
    return count * steps.batch_size / seconds, peak


def at_least(low: int):
    """argparse's type for an integer >= `low` (a bad value: argparse's one-line error)."""

    def integer(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is not an integer >= {low}")
        return value

    integer.__name__ = f"integer >= {low}"  # how argparse names it for a non-integer
    return integer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=at_least(1), default=200_000_000)
    parser.add_argument("--batch-size", type=at_least(1), default=256)
    parser.add_argument("--steps", type=at_least(1), default=2000)
    parser.add_argument("--resume-step", type=at_least(0),
                        help="step to resume at (default: 20,000, or half an epoch if less)")
    parser.add_argument("--permutation-n", type=at_least(1), default=20_000_000)
    args = parser.parse_args()
    n, size = args.samples, args.batch_size
    if n < size:
        parser.error(f"--samples {n} is fewer than --batch-size {size}: an epoch has no step")
    if args.resume_step is not None and args.resume_step >= n // size:
        parser.error(f"--resume-step {args.resume_step} is past the epoch's {n // size} steps")
    if args.resume_step is None:
        args.resume_step = min(20_000, n // size // 2)

    positions = order_speed(n)
    print(f"EpochOrder, {n:,} samples: {positions:,.0f} positions/s "
          f"({positions / LOADER_TARGET:.0f}x a worker's {LOADER_TARGET:,} samples/s)")
    speeds = {}
    for name, bins in (("one bin", LengthBins()), ("32-token bins", LengthBins(32, 512))):
        steps, planned, plan_peak = measured(
            lambda bins=bins: EpochSteps(PatternStore(n), bins, size, 42))
        speed, peak = steps_speed(steps, args.steps)
        _, resumed, resume_peak = measured(
            lambda steps=steps: next(steps.batches(1, args.resume_step)))
        skipped = args.resume_step * size
        speeds[name] = speed
        print(f"EpochSteps, {name}: plan {planned:.2f} s (peak {plan_peak / 2**20:.1f} MiB), "
              f"{speed:,.0f} samples/s ({speed / LOADER_TARGET:.0f}x a worker; peak "
              f"{peak / 2**20:.1f} MiB), resume at step {args.resume_step:,} "
              f"{resumed:.2f} s = {skipped / resumed:,.0f} positions/s skipped "
              f"(peak {resume_peak / 2**20:.1f} MiB)")

    m = args.permutation_n
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([42, 0])))
    _, seconds, peak = measured(lambda: rng.permutation(m))
    print(f"numpy permutation of {m:,}: {seconds:.2f} s, {peak / 2**20:,.0f} MiB; scaled to "
          f"{n:,}: {seconds * n / m:.1f} s and {peak * n / m / 2**30:.2f} GiB per process "
          "per epoch")
    print(f"order_positions_per_s={positions:.0f} steps_samples_per_s={speeds['one bin']:.0f} "
          f"binned_samples_per_s={speeds['32-token bins']:.0f}")


if __name__ == "__main__":
    main()
