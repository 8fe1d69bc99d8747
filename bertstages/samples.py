"""`bert samples`: NSP training samples (memory-mappable arrays) from the corpus and vocab.

With BERT's second phase on (`phase2.enabled`), it pairs the same tokenised corpus again at
`phase2.max_seq_length`, into `phase2/` inside the output (only the pairs: they point into the
first length's tokens); the files of the first length are the same bytes with it on or off."""

from __future__ import annotations

import sys
import time

import click

from bertcore.data.samples.config import Phase2Samples, SamplesConfig, SamplesParams
from bertstages.apart import keep_outputs_apart
from bertstages.options import (
    corpus_option,
    file_option,
    folder_option,
    stage_options,
    vocab_option,
)
from bertstages.params import Keys, load_params, read_params

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py):
# with BERT's second phase on, its samples too
PARAMS = {"samples": SamplesConfig, "phase2": Keys(Phase2Samples)}


@click.command()
@corpus_option
@vocab_option
@folder_option("--out", "out_dir", "data/samples", "Where the samples go.")
@file_option("--metrics", "metrics_file", "metrics/samples.json",
             "Counts and NSP balance, for `dvc metrics`.")
@stage_options
def command(corpus_dir: str, vocab_dir: str, out_dir: str, metrics_file: str,
            params_file: str, overrides: tuple[str, ...]) -> None:
    """Build NSP pairs as in Google's create_pretraining_data.py (masking happens in training)."""
    sections = SamplesParams(**read_params(load_params(params_file, overrides, PARAMS), PARAMS))
    keep_outputs_apart()
    # what computes (numpy), once the params are read (cli.py)
    from bertcore.data.samples.build import SamplesPaths, build_samples_from_corpus

    started = time.perf_counter()
    paths = SamplesPaths(corpus_dir, vocab_dir, out_dir, metrics_file)
    report = build_samples_from_corpus(sections.samples, sections.phase2, paths,
                                       progress=sys.stderr.isatty())
    for line in report.summary():
        click.echo(line, err=True)
    click.echo(f"samples: done in {time.perf_counter() - started:.1f}s -> {out_dir}", err=True)
