"""`bert evaluate`: held-out MLM and NSP metrics of the pretrained model, with fixed masks.
With BERT's second phase on (samples in `phase2/` of the samples folder), it scores the
model at both lengths: at the second under `length_<N>` in both files.

Writes `metrics/eval.json` (the scores: `dvc metrics`, `dvc exp show`, each with its 95%
interval beside it, `mlm_accuracy_ci95`) and, beside it, `metrics/eval_details.json` (the
baselines they are read against, and how much was scored) and `metrics/eval_items.json` (what
the model got on each val pair, which the intervals are drawn from), and logs them into the
MLflow run that trained the model (found by the sha256 of its weights, the run's tag
`model.sha256`: see `bertcore/saved/model_run.py`): the scores as results at the model's last
step (`eval_mlm_accuracy`, `eval_mlm_accuracy_ci95_low`, ...), the details as tags
(`eval.mlm_baseline_accuracy`, ...), the files as artifacts.
"""

from __future__ import annotations

import click

from bertcore.common.config import CpuConfig
from bertcore.common.tracking import TrackingConfig
from bertcore.training.config import EvalConfig, MaskingConfig
from bertstages.apart import keep_outputs_apart
from bertstages.options import (
    device_option,
    file_option,
    pretrained_option,
    samples_option,
    stage_options,
    vocab_option,
)
from bertstages.params import load_params, read_params
from bertstages.repo import tracking_target

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"masking": MaskingConfig, "eval": EvalConfig, "cpu": CpuConfig,
          "tracking": TrackingConfig}


@click.command()
@pretrained_option
@samples_option
@vocab_option
@file_option("--out", "out_file", "metrics/eval.json",
             "Where the scores go (dvc metrics); baselines and counts go beside it, in "
             "NAME_details.json, and each val pair's outcomes in NAME_items.json.")
@device_option
@stage_options
def command(model_dir, samples_dir, vocab_dir, out_file, device, params_file, overrides):
    """Score the model on the val split: MLM loss/accuracy/perplexity, NSP loss/accuracy."""
    sections = read_params(load_params(params_file, overrides, PARAMS), PARAMS)
    keep_outputs_apart()
    # torch, once the params are read (cli.py)
    from bertcore.common.cpu import pin_cpu
    from bertcore.training.run.heldout import HeldOutPaths, evaluate_pretrained

    pin_cpu(sections["cpu"])  # before torch computes
    paths = HeldOutPaths(model_dir, samples_dir, vocab_dir, out_file)
    outcome = evaluate_pretrained(sections["masking"], sections["eval"], paths, device,
                                  tracking_target(sections["tracking"], "evaluate"))
    for line in outcome.summary(out_file):
        click.echo(line, err=True)
