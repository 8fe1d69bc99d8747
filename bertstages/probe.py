"""`bert probe`: zero-shot probes of the pretrained model (or of any BERT folder in Hugging
Face format, `probe.model`): how well it knows which word fits a slot, without fine-tuning.

The built-in probes come from the held-out val split (cloze of held-out words; sentences
against the same with two adjacent words swapped, or a word replaced by one of close
frequency), read against what the train split's frequencies alone predict; `probe.minimal_pairs`
(BLiMP) and `probe.cloze` (LAMA) add the user's files. Writes `metrics/probe.json` (the
scores, each with its 95% interval over the probe's items: `dvc exp show`),
`metrics/probe_details.json` (baselines, counts, answers not counted),
`metrics/probe_items.json` (each item's outcome behind each score) and `metrics/probe/` (each
item's scores), and logs the scores into the MLflow run that trained the model, as `evaluate`
does (`probe_<name>` results, `probe.` tags).
"""

from __future__ import annotations

import click

from bertcore.common.config import CpuConfig
from bertcore.common.tracking import TrackingConfig
from bertcore.data.corpus.splits import split_file
from bertcore.downstream.probes.config import ProbeConfig
from bertstages.apart import keep_outputs_apart
from bertstages.options import (
    corpus_option,
    device_option,
    file_option,
    folder_option,
    pretrained_option,
    stage_options,
    vocab_option,
)
from bertstages.params import load_params, read_params
from bertstages.repo import tracking_target

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"probe": ProbeConfig, "cpu": CpuConfig, "tracking": TrackingConfig}


@click.command()
@pretrained_option
@vocab_option
@corpus_option
@file_option("--out", "out_file", "metrics/probe.json",
             "Where the scores go (dvc metrics); baselines and counts go beside it, in "
             "NAME_details.json, and each item's outcome in NAME_items.json.")
@folder_option("--items", "items_dir", "metrics/probe",
               "Where each probe's items go with their scores (JSON Lines).")
@device_option
@stage_options
def command(model_dir, vocab_dir, corpus_dir, out_file, items_dir, device, params_file,
            overrides):
    """Zero-shot probes: cloze P@1/P@10 and minimal pairs by pseudo-log-likelihood."""
    sections = read_params(load_params(params_file, overrides, PARAMS), PARAMS)
    config = sections["probe"]
    keep_outputs_apart({"probe.model": config.model, "probe.minimal_pairs": config.minimal_pairs,
                        "probe.cloze": config.cloze})
    # torch, once the params are read (cli.py)
    from bertcore.common.cpu import pin_cpu
    from bertcore.common.outcomes import items_file
    from bertcore.downstream.probes.probing import ProbePaths, probe_model

    pin_cpu(sections["cpu"])  # before torch computes
    paths = ProbePaths(model_dir, vocab_dir, split_file(corpus_dir, "val"),
                       split_file(corpus_dir, "train"), out_file, items_dir)
    target = tracking_target(sections["tracking"], "probe")
    outcome = probe_model(sections["probe"], paths, device, target)
    for line in outcome.summary():
        click.echo(line, err=True)
    click.echo(f"probe: -> {out_file}, {items_file(out_file)}, {items_dir}/", err=True)
