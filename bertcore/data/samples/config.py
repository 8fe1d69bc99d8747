"""The samples stage's knobs (params.yaml section `samples`; flag names of Google's
`create_pretraining_data.py`)."""

from __future__ import annotations

import dataclasses

from bertcore.common.errors import require


@dataclasses.dataclass(frozen=True)
class SamplesConfig:
    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    dupe_factor: int = 5  # passes over the train split, each with new pairs
    # Passes over the val split (up to VAL_MAX_PASSES) until it holds this many pairs; 0: one.
    val_pairs: int = 1000
    random_seed: int = 12345
    workers: int = 2

    def __post_init__(self):
        require(
            8 <= self.max_seq_length <= 8192, "max_seq_length", self.max_seq_length, "8..8192"
        )
        require(
            0.0 <= self.short_seq_prob <= 1.0,
            "short_seq_prob",
            self.short_seq_prob,
            "a probability in [0, 1]",
        )
        require(1 <= self.dupe_factor <= 1000, "dupe_factor", self.dupe_factor, "1..1000")
        require(0 <= self.val_pairs <= 10**7, "val_pairs", self.val_pairs, "0..10000000")
        require(self.random_seed >= 0, "random_seed", self.random_seed, "an integer >= 0")
        require(1 <= self.workers <= 256, "workers", self.workers, "1..256")

