"""`bert vocab`: train the WordPiece vocabulary on the corpus's train split."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bertcore.atomic import atomic_dir
from bertcore.errors import BertError
from bertcore.vocab import VocabConfig, line_batches, save_vocab, train_tokenizer
from stages.options import corpus_option, folder_option, stage_options
from stages.params import load_params, parse_section


@click.command()
@corpus_option
@folder_option("--out", "out_dir", "data/vocab", "Where vocab.txt and tokenizer.json go.")
@stage_options
def command(corpus_dir: str, out_dir: str, params_file: str, overrides: tuple[str, ...]) -> None:
    """Train a WordPiece vocabulary (vocab.txt + tokenizer.json) on the train split."""
    config = parse_section(load_params(params_file, overrides), "vocab", VocabConfig)
    train = Path(corpus_dir) / "train.txt"
    if not train.is_file():
        raise BertError(f"no corpus at {train}: run `bert corpus` first or pass --corpus")
    if next(line_batches(train, batch_size=1), None) is None:
        raise BertError(f"{train} holds no text: check corpus.source and rerun `bert corpus`")
    tokenizer = train_tokenizer(line_batches(train), config, show_progress=sys.stderr.isatty())
    with atomic_dir(out_dir) as staging:
        save_vocab(tokenizer, staging, config)
    click.echo(f"vocab: {tokenizer.get_vocab_size()} tokens -> {out_dir}", err=True)
