"""Counter-based hashing of numpy arrays: splitmix64, whose output for a key and a counter
depends on those two numbers alone. The masks (`bertcore.training.data.masking`) and the epoch
order (`bertcore.training.data.order`) draw their random numbers from it, so any process, worker
or batch computes any of them without a generator's state."""

from __future__ import annotations

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment: key + i * GOLDEN is stream i
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective avalanche on uint64 arrays (wraps by design)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))
