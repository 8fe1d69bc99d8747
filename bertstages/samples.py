"""`bert samples`: NSP training samples (memory-mappable arrays) from the corpus and vocab.

With BERT's second phase on (`phase2.enabled`), it pairs the same tokenised corpus again at
`phase2.max_seq_length`, into `phase2/` inside the output (only the pairs: they point into the
first length's tokens); the files of the first length are the same bytes with it on or off."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from bertcore.common.atomic import atomic_dir, write_json
from bertcore.common.errors import BertError
from bertcore.data.samples.config import Phase2Samples, SamplesConfig, SamplesParams
from bertstages.options import (
    corpus_option,
    file_option,
    folder_option,
    stage_options,
    stops_at_once,
    vocab_option,
)
from bertstages.params import Keys, load_params, read_params

SPLITS = ("train", "val")
METRIC_KEYS = ("documents", "split_by", "count", "tokens", "mean_length", "max_length",
               "nsp_random_fraction")


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
@stops_at_once
def command(corpus_dir: str, vocab_dir: str, out_dir: str, metrics_file: str,
            params_file: str, overrides: tuple[str, ...]) -> None:
    """Build NSP pairs as in Google's create_pretraining_data.py (masking happens in training)."""
    sections = SamplesParams(**read_params(load_params(params_file, overrides), PARAMS))
    config, phase2 = sections.samples, sections.phase2
    # what computes (numpy), once the params are read (cli.py)
    from bertcore.data.corpus.parts import read_parts
    from bertcore.data.samples.build import build_samples
    from bertcore.data.samples.store import PHASE1_DIR, PHASE2_DIR
    from bertcore.data.vocab.files import load_tokenizer, vocab_fingerprint

    corpus_files = {split: Path(corpus_dir) / f"{split}.txt" for split in SPLITS}
    for path in corpus_files.values():
        if not path.is_file():
            raise BertError(f"no corpus at {path}: run `bert corpus` first or pass --corpus")
    tokenizer = load_tokenizer(vocab_dir)
    fingerprint = vocab_fingerprint(vocab_dir)
    started = time.perf_counter()
    parts = read_parts(corpus_dir)  # split by parts: no random B from a neighbouring part
    with atomic_dir(out_dir) as staging:
        built = build_samples(corpus_files, tokenizer, staging, config, fingerprint,
                              phase2_length=phase2.max_seq_length if phase2.enabled else None,
                              parts=parts, progress=sys.stderr.isatty())
    metrics = {s: {k: built[PHASE1_DIR][s][k] for k in METRIC_KEYS} for s in SPLITS}
    if phase2.enabled:  # only then: with phase 2 off the file is what it always was
        metrics[PHASE2_DIR] = {s: {k: built[PHASE2_DIR][s][k] for k in METRIC_KEYS}
                               for s in SPLITS}
    write_json(metrics_file, metrics)
    for meta in built.values():
        for split in SPLITS:
            m = meta[split]
            click.echo(f"samples {split} (length {meta['max_seq_length']}): {m['count']} pairs, "
                       f"{m['tokens']} tokens, mean length {m['mean_length']}, random B "
                       f"{m['nsp_random_fraction']:.1%}", err=True)
    click.echo(f"samples: done in {time.perf_counter() - started:.1f}s -> {out_dir}", err=True)
