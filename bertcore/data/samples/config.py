"""The samples stage's knobs (params.yaml section `samples`; flag names of Google's
`create_pretraining_data.py`), and the two keys of section `phase2` it reads: with BERT's second
phase on, it builds the samples at that phase's length too."""

from __future__ import annotations

import dataclasses

from bertcore.common.errors import require


def check_seq_length(value: int) -> None:
    require(8 <= value <= 8192, "max_seq_length", value, "8..8192")


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
        check_seq_length(self.max_seq_length)
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


@dataclasses.dataclass(frozen=True)
class Phase2Samples:
    """What the samples stage reads of params.yaml's `phase2` section (the pretrain stage reads
    all of it: `bertcore.training.phases.Phase2Config`): whether BERT's second phase is on, and
    the length of its samples, built beside phase 1's (`store.PHASE2_DIR`)."""

    enabled: bool = False
    max_seq_length: int = 512

    def __post_init__(self):
        check_seq_length(self.max_seq_length)
