"""`bert vocab`: train the WordPiece vocabulary on the train split, or take an existing one
(`vocab.source`); write data/vocab/ and its coverage of the train split (metrics/vocab.json)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click
from tokenizers import Tokenizer

from bertcore.common.atomic import atomic_dir, write_json
from bertcore.common.digests import fingerprint_files
from bertcore.common.errors import BertError
from bertcore.data.vocab.config import AUTO, AUTO_MIN_COUNT, TRAIN, VocabConfig
from bertcore.data.vocab.coverage import vocab_coverage
from bertcore.data.vocab.existing import CONFIGURED_RULES, load_source_vocabulary
from bertcore.data.vocab.files import casing_rules, save_vocab
from bertcore.data.vocab.sample import vocab_sample
from bertcore.data.vocab.training import LineBatches, auto_vocab_size, train_tokenizer
from bertstages.dvcdeps import warn_unless_a_dep
from bertstages.options import (
    corpus_option,
    file_option,
    folder_option,
    stage_options,
    stops_at_once,
)
from bertstages.params import load_params, read_params

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"vocab": VocabConfig}


@click.command()
@corpus_option
@folder_option("--out", "out_dir", "data/vocab", "Where vocab.txt and tokenizer.json go.")
@file_option("--metrics", "metrics_path", "metrics/vocab.json",
             "Where to write the vocabulary's source and its coverage of the train split.")
@stage_options
@stops_at_once
def command(corpus_dir: str, out_dir: str, metrics_path: str, params_file: str,
            overrides: tuple[str, ...]) -> None:
    """Train a WordPiece vocabulary (vocab.txt + tokenizer.json) on the train split, or write
    the one `vocab.source` points at in the same form."""
    config = read_params(load_params(params_file, overrides), PARAMS)["vocab"]
    train = Path(corpus_dir) / "train.txt"
    if not train.is_file():
        raise BertError(f"no corpus at {train}: run `bert corpus` first or pass --corpus")
    if next(iter(LineBatches(train, batch_size=1)), None) is None:
        raise BertError(f"{train} holds no text: check corpus.source and rerun `bert corpus`")
    with atomic_dir(out_dir) as staging:
        if config.source == TRAIN:
            tokenizer, origin = _trained(train, config, scratch_dir=staging)
        else:
            tokenizer, origin = _from_source(config)
        coverage = vocab_coverage(tokenizer, train)
        save_vocab(tokenizer, staging)
    rules = casing_rules(tokenizer)
    write_json(metrics_path, {**origin, "vocab_size": tokenizer.get_vocab_size(),
                              "lowercase": rules.lowercase, "strip_accents": rules.strips_accents,
                              **coverage})
    how = "trained" if config.source == TRAIN else f"from {config.source}"
    click.echo(f"vocab: {tokenizer.get_vocab_size()} tokens ({how}, {rules.describe()}) -> "
               f"{out_dir}; on {train}: [UNK] {coverage['unk_rate']:.2%} of tokens, "
               f"{coverage['tokens_per_word']} tokens per word", err=True)


def _trained(train: Path, config: VocabConfig, scratch_dir: Path) -> tuple[Tokenizer, dict]:
    """A WordPiece vocabulary trained on `train`, or on a sample of it (`vocab.sample_bytes`)
    written into `scratch_dir` while it trains; and what metrics/vocab.json says of it."""
    origin: dict = {"source": TRAIN, "casing_from": CONFIGURED_RULES}
    with vocab_sample(train, config.sample_bytes, scratch_dir) as sample:
        origin.update(sample.metrics())
        where = train if sample.path == train else "the sample"
        if sample.path != train:
            click.echo(f"vocab: training on {sample.documents} of the {sample.train_documents} "
                       f"documents of {train} ({sample.bytes / 1e6:.1f} of "
                       f"{sample.train_bytes / 1e6:.1f} MB: vocab.sample_bytes)", err=True)
        if config.vocab_size == AUTO:
            size, frequent = auto_vocab_size(LineBatches(sample.path), config)
            config = dataclasses.replace(config, vocab_size=size)
            origin["frequent_words"] = frequent  # seen >= AUTO_MIN_COUNT times in the sample
            click.echo(f"vocab: vocab_size auto -> {size} ({frequent} words seen >= "
                       f"{AUTO_MIN_COUNT} times in {where})", err=True)
        origin["vocab_size_target"] = config.vocab_size  # the trainer's cap
        tokenizer = train_tokenizer(LineBatches(sample.path), config,
                                    show_progress=sys.stderr.isatty())
    return tokenizer, origin


def _from_source(config: VocabConfig) -> tuple[Tokenizer, dict]:
    """The existing vocabulary `vocab.source` names, and what metrics/vocab.json says of it."""
    source = load_source_vocabulary(config.source, config)
    warn_unless_a_dep("vocab.source", config.source, source.files)
    return source.tokenizer, {"source": config.source,
                              "source_sha256": fingerprint_files(source.files),
                              "casing_from": source.rules_from}
