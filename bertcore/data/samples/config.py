"""The samples stage's knobs (params.yaml section `samples`; flag names of Google's
`create_pretraining_data.py`), and the two keys of section `phase2` it reads: with BERT's second
phase on, it builds the samples at that phase's length too."""

from __future__ import annotations

from pydantic import model_validator

from bertcore.common.errors import ConfigError
from bertcore.common.validation import Bool, integer, number, params_section

SeqLength = integer(ge=8, le=8192)  # tokens of a sample, [CLS] and [SEP]s included


@params_section(frozen=True)
class SamplesConfig:
    max_seq_length: SeqLength = 128
    short_seq_prob: number(ge=0, le=1, allowed="a probability in [0, 1]") = 0.1
    dupe_factor: integer(ge=1, le=1000) = 5  # passes over the train split, each with new pairs
    # Passes over the val split (up to VAL_MAX_PASSES) until it holds this many pairs; 0: one.
    val_pairs: integer(ge=0, le=10**7) = 1000
    random_seed: integer(ge=0) = 12345
    # processes that tokenise and pair (0: one per core); the output does not depend on it
    workers: integer(ge=0, le=1024, allowed="0..1024 (0: one per core)") = 0


@params_section(frozen=True)
class Phase2Samples:
    """What the samples stage reads of params.yaml's `phase2` section (the pretrain stage reads
    all of it: `bertcore.training.run.phases.Phase2Config`): whether BERT's second phase is on, and
    the length of its samples, built beside phase 1's (`store.PHASE2_DIR`)."""

    enabled: Bool = False
    max_seq_length: SeqLength = 512


def require_longer_phase2(phase2: Phase2Samples, length: int, where: str) -> None:
    """With BERT's second phase on, its samples must be longer than phase 1's, of `length`
    tokens (`where` says where that length is from): a ConfigError naming
    phase2.max_seq_length otherwise."""
    if phase2.enabled and phase2.max_seq_length <= length:
        raise ConfigError("phase2.max_seq_length",
                          f"{phase2.max_seq_length} is not longer than phase 1's samples "
                          f"({where} {length}): phase 2 goes on at a longer length; raise it, "
                          "or set phase2.enabled: false")


@params_section(frozen=True)
class SamplesParams:
    """The params sections the samples stage reads, checked against each other."""

    samples: SamplesConfig
    phase2: Phase2Samples

    @model_validator(mode="after")
    def _phase2_longer(self) -> SamplesParams:
        require_longer_phase2(self.phase2, self.samples.max_seq_length,
                              "samples.max_seq_length is")
        return self
