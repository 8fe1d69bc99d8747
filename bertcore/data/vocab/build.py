"""The vocab stage's work: a WordPiece vocabulary trained on the train split (or on a sample
of it, `vocab.sample_bytes`), or the existing one `vocab.source` names, written as
vocab.txt + tokenizer.json, with its coverage of the train split (metrics/vocab.json)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from bertcore.common.atomic import atomic_dir, write_json
from bertcore.common.digests import fingerprint_files
from bertcore.common.errors import BertError
from bertcore.data.vocab.config import AUTO, AUTO_MIN_COUNT, TRAIN, VocabConfig
from bertcore.data.vocab.coverage import vocab_coverage
from bertcore.data.vocab.existing import CONFIGURED_RULES, load_source_vocabulary
from bertcore.data.vocab.files import CasingRules, casing_rules, save_vocab
from bertcore.data.vocab.sample import vocab_sample
from bertcore.data.vocab.training import LineBatches, auto_vocab_size, train_tokenizer

log = logging.getLogger("bert.vocab")


@dataclass(frozen=True)
class VocabPaths:
    """What the vocab stage reads and writes."""

    train_file: str | Path  # the corpus' train split
    out_dir: str | Path  # vocab.txt and tokenizer.json
    metrics_file: str | Path  # the vocabulary's source and its coverage of the train split


@dataclass(frozen=True)
class VocabReport:
    """What the vocab stage wrote: metrics/vocab.json's content, the casing rules, and the
    files `vocab.source` read (none when trained), which the edge checks against the stage's
    deps."""

    metrics: dict
    rules: CasingRules
    train_file: Path
    source_files: list[Path]

    def summary(self, out_dir: str | Path) -> str:
        """The vocabulary's size, origin and casing, and how it covers the train split."""
        metrics = self.metrics
        how = "trained" if metrics["source"] == TRAIN else f"from {metrics['source']}"
        return (f"{metrics['vocab_size']} tokens ({how}, {self.rules.describe()}) -> "
                f"{out_dir}; on {self.train_file}: [UNK] {metrics['unk_rate']:.2%} of tokens, "
                f"{metrics['tokens_per_word']} tokens per word")


def build_vocab(config: VocabConfig, paths: VocabPaths, progress: bool = False) -> VocabReport:
    """The vocab stage: the vocabulary (trained, or `vocab.source`'s) and its metrics, each
    written whole. `progress`: show the trainer's progress bar."""
    train = Path(paths.train_file)
    if not train.is_file():
        raise BertError(f"no corpus at {train}: run `bert corpus` first or pass --corpus")
    if next(iter(LineBatches(train, batch_size=1)), None) is None:
        raise BertError(f"{train} holds no text: check corpus.source and rerun `bert corpus`")
    files: list[Path] = []
    with atomic_dir(paths.out_dir) as staging:
        if config.source == TRAIN:
            tokenizer, origin = _trained(train, config, staging, progress)
        else:
            source = load_source_vocabulary(config.source, config)
            tokenizer, files = source.tokenizer, source.files
            origin = {"source": config.source, "source_sha256": fingerprint_files(files),
                      "casing_from": source.rules_from}
        coverage = vocab_coverage(tokenizer, train)
        save_vocab(tokenizer, staging)
    rules = casing_rules(tokenizer)
    metrics = {**origin, "vocab_size": tokenizer.get_vocab_size(),
               "lowercase": rules.lowercase, "strip_accents": rules.strips_accents, **coverage}
    write_json(paths.metrics_file, metrics)
    return VocabReport(metrics, rules, train, files)


def _trained(train: Path, config: VocabConfig, scratch_dir: Path, progress: bool
             ) -> tuple[Tokenizer, dict]:
    """A WordPiece vocabulary trained on `train`, or on a sample of it (`vocab.sample_bytes`)
    written into `scratch_dir` while it trains; and what metrics/vocab.json says of it."""
    origin: dict = {"source": TRAIN, "casing_from": CONFIGURED_RULES}
    with vocab_sample(train, config.sample_bytes, scratch_dir) as sample:
        origin.update(sample.metrics())
        where = train if sample.path == train else "the sample"
        if sample.path != train:
            log.info("training on %d of the %d documents of %s (%.1f of %.1f MB: "
                     "vocab.sample_bytes)", sample.documents, sample.train_documents, train,
                     sample.bytes / 1e6, sample.train_bytes / 1e6)
        if config.vocab_size == AUTO:
            size, frequent = auto_vocab_size(LineBatches(sample.path), config)
            config = dataclasses.replace(config, vocab_size=size)
            origin["frequent_words"] = frequent  # seen >= AUTO_MIN_COUNT times in the sample
            log.info("vocab_size auto -> %d (%d words seen >= %d times in %s)", size, frequent,
                     AUTO_MIN_COUNT, where)
        origin["vocab_size_target"] = config.vocab_size  # the trainer's cap
        tokenizer = train_tokenizer(LineBatches(sample.path), config, show_progress=progress)
    return tokenizer, origin

