"""What pretraining reads: the params sections (`PretrainConfig`, parsed and validated by the
caller), the paths,
and the inputs opened and checked before anything slow (samples of both phases, vocabulary,
the model's architecture, the BERT to start from)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bertcore.common.errors import BertError
from bertcore.data.samples.config import require_longer_phase2
from bertcore.data.samples.store import PHASE2_DIR, SampleStore, check_vocab, holds_samples
from bertcore.data.samples.verify import SamplesCheck
from bertcore.data.vocab.files import read_vocab
from bertcore.model.config import BertConfig
from bertcore.saved.init_from import InitModel

if TYPE_CHECKING:  # the sections it reads: parsed by the caller (bertcore.training.run.pretrain)
    from bertcore.training.config import PretrainConfig


@dataclass(frozen=True)
class PretrainPaths:
    """What pretraining reads (samples, vocab, checkpoints) and writes."""

    samples: Path  # with BERT's second phase, its samples are in samples/PHASE2_DIR
    vocab: Path
    checkpoints: Path
    out: Path
    metrics: Path  # what training reached, compared across runs (dvc exp show)
    details: Path  # counts beside it (not compared)
    log: Path
    eval_log: Path
    # the reports of the stages that log into the run (prefix -> metrics file), carried into
    # a new run that wrote the weights they scored (`run_reports.carry_reports`)
    reports: Mapping[str, Path] = field(default_factory=dict)
    corpus: Path | None = None  # the corpus the samples were made of: the run's dataset

    @property
    def phase2_samples(self) -> Path:
        return self.samples / PHASE2_DIR


@dataclass(frozen=True)
class PretrainInputs:
    """The opened inputs, all checked before anything slow."""

    train_store: SampleStore
    val_store: SampleStore
    max_seq_length: int  # of the samples (phase 1)
    tokens: list[str]
    model_config: BertConfig
    init: InitModel | None = None  # the BERT to start from (model.init_from)
    phase2_train: SampleStore | None = None  # BERT's second phase, when it is on
    phase2_val: SampleStore | None = None

    @classmethod
    def open(cls, config: PretrainConfig, paths: PretrainPaths) -> PretrainInputs:
        meta = check_vocab(paths.samples, paths.vocab)
        tokens = read_vocab(paths.vocab)
        init = InitModel.open(config.model) if config.model.init_from else None
        if init is not None:
            init.check_vocab(tokens, paths.vocab)
            model_config = init.config
        else:
            model_config = config.model.to_config(vocab_size=len(tokens))
        positions = model_config.max_position_embeddings
        if meta.get("max_seq_length", 0) > positions:
            fix = (" (from model.init_from): lower" if init else
                   ": raise model.max_position_embeddings or lower")
            raise BertError(
                f"samples are up to {meta['max_seq_length']} tokens but the model has "
                f"max_position_embeddings={positions}{fix} samples.max_seq_length"
            )
        verify = SamplesCheck(paths.vocab)  # after the checks above, which cost nothing
        verify(paths.samples)
        inputs = cls(SampleStore(paths.samples / "train"), SampleStore(paths.samples / "val"),
                     int(meta.get("max_seq_length", 0)), tokens, model_config, init)
        if not config.phase2.enabled:
            return inputs
        require_longer_phase2(config.phase2, inputs.max_seq_length,
                              f"those in {paths.samples} are up to")
        length = config.phase2.max_seq_length
        if length > positions:  # one model for both phases: built for the longer one
            fix = ("lower phase2.max_seq_length" if init else
                   "raise model.max_position_embeddings (phase 1 trains with it from its first "
                   "step) or lower phase2.max_seq_length")
            owner = "the model of model.init_from" if init else "the model"
            raise BertError(f"phase2.max_seq_length is {length} but {owner} has "
                            f"max_position_embeddings={positions}: {fix}")
        folder = paths.phase2_samples
        rebuild = "rebuild the samples with `bert samples` (dvc repro does) with phase2 on"
        if not holds_samples(folder):
            raise BertError(f"phase2.enabled, but {paths.samples} holds no samples of phase 2 "
                            f"({PHASE2_DIR}/): {rebuild}")
        built = check_vocab(folder, paths.vocab).get("max_seq_length")
        if built != length:
            raise BertError(f"the samples of phase 2 in {folder} are up to {built} tokens, "
                            f"phase2.max_seq_length is {length}: {rebuild}")
        verify(folder)
        return dataclasses.replace(inputs, phase2_train=SampleStore(folder / "train"),
                                   phase2_val=SampleStore(folder / "val"))
