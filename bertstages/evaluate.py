"""`bert evaluate`: held-out MLM and NSP metrics of the pretrained model, with fixed masks.
With BERT's second phase on (samples in `phase2/` of the samples folder), it scores the
model at both lengths: at the second under `length_<N>` in both files.

Writes `metrics/eval.json` (the scores: `dvc metrics`, `dvc exp show`) and, beside it,
`metrics/eval_details.json` (the baselines they are read against, and how much was scored),
and logs both into the MLflow run that trained the model (found by the sha256 of its weights,
the run's tag `model.sha256`: see `bertstages/downstream.py`): the scores as results at the
model's last step (`eval_mlm_accuracy`, ...), the details as tags (`eval.mlm_baseline_accuracy`,
...), both files as artifacts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bertcore.common.dotted import flatten
from bertcore.common.report import track_report, write_report
from bertcore.common.tracking import TrackingConfig
from bertcore.training.config import CpuConfig, EvalConfig, MaskingConfig
from bertstages.options import (
    file_option,
    pretrained_option,
    samples_option,
    stage_options,
    stops_at_once,
    vocab_option,
)
from bertstages.params import load_params, read_params
from bertstages.repo import tracking_target

if TYPE_CHECKING:
    from bertcore.training.evaluation.heldout import HeldOutScore

log = logging.getLogger("bert.evaluate")


# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"masking": MaskingConfig, "eval": EvalConfig, "cpu": CpuConfig,
          "tracking": TrackingConfig}


@click.command()
@pretrained_option
@samples_option
@vocab_option
@file_option("--out", "out_file", "metrics/eval.json",
             "Where the scores go (dvc metrics); baselines and counts go beside it, in "
             "NAME_details.json.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N.")
@stage_options
@stops_at_once
def command(model_dir, samples_dir, vocab_dir, out_file, device, params_file, overrides):
    """Score the model on the val split: MLM loss/accuracy/perplexity, NSP loss/accuracy."""
    sections = read_params(load_params(params_file, overrides), PARAMS)
    # torch, once the params are read (cli.py)
    from bertcore.model.hf import load_pretrained
    from bertcore.training.data.masking import VocabSpec
    from bertcore.training.evaluation.heldout import heldout_report, heldout_splits, score_heldout
    from bertcore.training.hardware.cpu import pin_cpu
    from bertcore.training.hardware.devices import resolve_device
    from bertcore.training.run.model_run import pretraining_run

    pin_cpu(sections["cpu"])  # before torch computes
    masking, config, tracking = sections["masking"], sections["eval"], sections["tracking"]
    splits = heldout_splits(samples_dir, vocab_dir, masking)  # phase 2's too, when built
    model, tokens = load_pretrained(model_dir, vocab_dir)
    tracker, step, why_not = pretraining_run(tracking_target(tracking), Path(model_dir))
    if why_not:  # say so rather than stay silent
        log.warning("nothing will be logged to MLflow: %s; the scores go to %s only", why_not,
                    out_file)

    target = resolve_device(device)
    scored = score_heldout(model.to(target), splits, VocabSpec.from_tokens(tokens), config,
                           target)
    scores, context = heldout_report(scored)
    files = write_report(out_file, scores, context)
    if tracker:
        results = {f"eval_{k}".replace(".", "_"): v for k, v in flatten(scores).items()}
        track_report(tracker, files, results, context, step=step, tag_prefix="eval.")
    for line in _summary(scored, out_file):
        click.echo(line, err=True)


def _summary(scored: list[HeldOutScore], out_file: str) -> list[str]:
    """The console's lines, each naming the length it scores at: phase 1's scores against
    their baselines, then each longer length's."""
    first, *longer = scored
    metrics, words = first.metrics, first.bag_of_words
    length = f" (length {first.max_seq_length})" if first.max_seq_length else ""
    lines = [
        f"evaluate{length}: MLM accuracy {metrics.mlm_accuracy:.4f} (most frequent token "
        f"{metrics.mlm_baseline_accuracy:.4f}), perplexity {metrics.perplexity:.2f}, NSP "
        f"accuracy {metrics.nsp_accuracy:.4f} (majority {metrics.nsp_baseline_accuracy:.4f}"
        + (f", bag of words {words:.4f}" if words is not None else "") + f") -> {out_file}"
    ]
    lines += [f"evaluate (length {score.max_seq_length}): MLM accuracy "
              f"{score.metrics.mlm_accuracy:.4f}, NSP accuracy {score.metrics.nsp_accuracy:.4f}"
              for score in longer]
    return lines
