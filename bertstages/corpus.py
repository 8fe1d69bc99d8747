"""`bert corpus`: raw text -> data/corpus/{train,val}.txt + metrics/corpus.json."""

from __future__ import annotations

import click

from bertcore.common.atomic import atomic_dir, write_json
from bertcore.data.corpus.config import CorpusConfig
from bertstages.apart import keep_outputs_apart
from bertstages.options import file_option, folder_option, stage_options
from bertstages.params import load_params, read_params

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"corpus": CorpusConfig}


@click.command("corpus")
@folder_option("--out", "out", "data/corpus", "Folder for train.txt and val.txt.")
@file_option("--metrics", "metrics_path", "metrics/corpus.json",
             "Where to write the corpus statistics.")
@stage_options
def command(out: str, metrics_path: str, params_file: str, overrides: tuple[str, ...]) -> None:
    """Clean the text of `corpus.source` into one-sentence-per-line documents, split into
    train and val by document (by parts of documents when they are few)."""
    config = read_params(load_params(params_file, overrides, PARAMS), PARAMS)["corpus"]
    keep_outputs_apart({"corpus.source": config.source})
    from bertcore.data.corpus.build import build_corpus  # once the params are read (cli.py)
    with atomic_dir(out) as staging:
        stats = build_corpus(config, staging)
    write_json(metrics_path, stats.to_dict())
    click.echo(f"corpus: {stats.summary()} -> {out}", err=True)
