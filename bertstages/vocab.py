"""`bert vocab`: train the WordPiece vocabulary on the train split, or take an existing one
(`vocab.source`); write data/vocab/ and its coverage of the train split (metrics/vocab.json)."""

from __future__ import annotations

import sys

import click

from bertcore.data.corpus.splits import split_file
from bertcore.data.vocab.config import TRAIN, VocabConfig
from bertstages.apart import keep_outputs_apart
from bertstages.dvcdeps import warn_unless_a_dep
from bertstages.options import corpus_option, file_option, folder_option, stage_options
from bertstages.params import load_params, read_params

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"vocab": VocabConfig}


@click.command()
@corpus_option
@folder_option("--out", "out_dir", "data/vocab", "Where vocab.txt and tokenizer.json go.")
@file_option("--metrics", "metrics_path", "metrics/vocab.json",
             "Where to write the vocabulary's source and its coverage of the train split.")
@stage_options
def command(corpus_dir: str, out_dir: str, metrics_path: str, params_file: str,
            overrides: tuple[str, ...]) -> None:
    """Train a WordPiece vocabulary (vocab.txt + tokenizer.json) on the train split, or write
    the one `vocab.source` points at in the same form."""
    config = read_params(load_params(params_file, overrides, PARAMS), PARAMS)["vocab"]
    keep_outputs_apart({"vocab.source": None if config.source == TRAIN else config.source},
                       warn_deps=False)  # the files it reads, once read: below
    from bertcore.data.vocab.build import VocabPaths, build_vocab  # once the params are read

    paths = VocabPaths(split_file(corpus_dir, "train"), out_dir, metrics_path)
    report = build_vocab(config, paths, progress=sys.stderr.isatty())
    if config.source != TRAIN:
        warn_unless_a_dep("vocab.source", config.source, report.source_files)
    click.echo(f"vocab: {report.summary(out_dir)}", err=True)
