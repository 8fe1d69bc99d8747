"""`bert prune`: remove the attention heads that matter least (Michel et al. 2019), optionally
pretrain the pruned model a little more, and measure what it cost and what it saved.

Reads the sections prune, masking, eval (the val metrics' batch size and masks), train (the
optimizer settings of the recovery steps) and tracking. Writes `models/pruned/` (Hugging Face
format: full shapes with the pruned heads zeroed, `pruned_heads` in config.json; bertcore
loads it back as the smaller model), `metrics/prune.json` (heads, val metrics with their 95%
intervals, and parameters, before and after), `metrics/prune_details.json` (which heads went,
their importance, the settings, what pruning changed on the val split with the paired
interval of each difference) and `metrics/prune_items.json` (each val pair's outcomes), and
logs a child run of the pretraining run in MLflow, with the throughput before
and after and the seconds of each phase (measurements of the machine: not in the files).
"""

from __future__ import annotations

import click

from bertcore.common.config import CpuConfig
from bertcore.common.tracking import TrackingConfig
from bertcore.data.corpus.config import CorpusSource
from bertcore.downstream.config import PruneConfig
from bertcore.saved.config import CardConfig
from bertcore.training.config import EvalConfig, MaskingConfig, TrainConfig
from bertstages.apart import keep_outputs_apart
from bertstages.options import (
    file_option,
    folder_option,
    pretrained_option,
    samples_option,
    stage_options,
    vocab_option,
)
from bertstages.params import Keys, load_params, read_params
from bertstages.repo import tracking_target

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"prune": PruneConfig, "masking": MaskingConfig, "train": TrainConfig,
          "eval": EvalConfig, "cpu": CpuConfig, "tracking": TrackingConfig,
          # what its model card says of the model it was made from
          "card": CardConfig, "corpus": Keys(CorpusSource)}


@click.command()
@pretrained_option
@samples_option
@vocab_option
@folder_option("--out", "out_dir", "models/pruned",
               "Where the pruned model goes (Hugging Face format, pruned heads zeroed).")
@file_option("--metrics", "metrics_file", "metrics/prune.json",
             "Heads, parameters, val metrics and throughput before/after (dvc metrics); the "
             "pruned heads, importance and settings go beside it, in NAME_details.json, and "
             "each val pair's outcomes in NAME_items.json.")
@stage_options
def command(model_dir, samples_dir, vocab_dir, out_dir, metrics_file, params_file, overrides):
    """Prune the least important attention heads of the pretrained model."""
    sections = read_params(load_params(params_file, overrides, PARAMS), PARAMS)
    keep_outputs_apart()
    # torch, once the params are read (cli.py)
    from bertcore.common.cpu import pin_cpu
    from bertcore.downstream.prune import PrunePaths, prune_pretrained
    from bertcore.saved.card_meta import card_meta

    pin_cpu(sections["cpu"])  # before torch computes
    paths = PrunePaths(model_dir, samples_dir, vocab_dir, out_dir, metrics_file)
    target = tracking_target(sections["tracking"], "prune")
    pruned = prune_pretrained(sections["prune"], sections["masking"], sections["eval"],
                              sections["train"], paths, target,
                              card_meta(sections["card"], sections["corpus"].source))
    click.echo(f"prune: {pruned.summary()} -> {out_dir}", err=True)
