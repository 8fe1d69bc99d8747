"""`bert prune`: remove the attention heads that matter least (Michel et al. 2019), optionally
pretrain the pruned model a little more, and measure what it cost and what it saved.

Reads the sections prune, masking, eval (the val metrics' batch size and masks), train (the
optimizer settings of the recovery steps) and tracking. Writes `models/pruned/` (Hugging Face
format: full shapes with the pruned heads zeroed, `pruned_heads` in config.json; bertcore
loads it back as the smaller model), `metrics/prune.json` (heads, val metrics and parameters,
before and after) and `metrics/prune_details.json` (which heads went, their importance, the
settings), and logs a child run of the pretraining run in MLflow, with the throughput before
and after and the seconds of each phase (measurements of the machine: not in the files).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from bertcore.common.dotted import flatten
from bertcore.common.errors import BertError
from bertcore.common.report import write_report
from bertcore.common.tracking import TrackingConfig
from bertcore.downstream.config import PruneConfig
from bertcore.training.config import CpuConfig, EvalConfig, MaskingConfig, TrainConfig
from bertstages.options import (
    file_option,
    folder_option,
    pretrained_option,
    samples_option,
    stage_options,
    stops_at_once,
    vocab_option,
)
from bertstages.params import load_params, read_params
from bertstages.repo import tracking_target

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"prune": PruneConfig, "masking": MaskingConfig, "train": TrainConfig,
          "eval": EvalConfig, "cpu": CpuConfig, "tracking": TrackingConfig}


@click.command()
@pretrained_option
@samples_option
@vocab_option
@folder_option("--out", "out_dir", "models/pruned",
               "Where the pruned model goes (Hugging Face format, pruned heads zeroed).")
@file_option("--metrics", "metrics_file", "metrics/prune.json",
             "Heads, parameters, val metrics and throughput before/after (dvc metrics); the "
             "pruned heads, importance and settings go beside it, in NAME_details.json.")
@stage_options
@stops_at_once
def command(model_dir, samples_dir, vocab_dir, out_dir, metrics_file, params_file, overrides):
    """Prune the least important attention heads of the pretrained model."""
    sections = read_params(load_params(params_file, overrides), PARAMS)
    # torch, once the params are read (cli.py)
    from bertcore.common.atomic import atomic_dir
    from bertcore.data.samples.store import SampleStore
    from bertcore.data.samples.verify import SamplesCheck
    from bertcore.downstream.prune import VAL_KEYS, PruneData, prune_report, run_pruning
    from bertcore.downstream.tracking import DownstreamTracking
    from bertcore.model.hf import export_hf, load_pretrained
    from bertcore.training.data.masking import VocabSpec
    from bertcore.training.evaluation.heldout import val_split
    from bertcore.training.hardware.cpu import pin_cpu
    from bertcore.training.hardware.devices import resolve_device

    pin_cpu(sections["cpu"])  # before torch computes
    config, masking, train = sections["prune"], sections["masking"], sections["train"]
    eval_config, tracking = sections["eval"], sections["tracking"]
    samples_dir = Path(samples_dir)
    SamplesCheck(vocab_dir)(samples_dir)
    train_store, val_store = SampleStore(samples_dir / "train"), val_split(samples_dir)
    if len(train_store) < config.batch_size:
        raise BertError(f"only {len(train_store)} training samples for prune.batch_size="
                        f"{config.batch_size}: lower it")
    model, tokens = load_pretrained(model_dir, vocab_dir)
    if model.config.pruned_heads:
        raise BertError(f"the model in {model_dir} is already pruned: prune the pretrained model")
    device = resolve_device(config.device)
    model.to(device)
    data = PruneData(train_store, val_store, VocabSpec.from_tokens(tokens), masking, eval_config)
    runs = DownstreamTracking(tracking_target(tracking), model_dir, "prune",
                              flatten({"prune": dataclasses.asdict(config)}))
    with runs.failing_on_error():
        outcome = run_pruning(model, data, config, train, device)
    with atomic_dir(out_dir) as staging:
        export_hf(model.cpu(), staging, vocab_dir)
    summary, details, timing = prune_report(outcome, model, config)
    files = write_report(metrics_file, summary, details)
    throughputs = timing["throughput"]
    runs.finish(files, {
        **{f"val_{key}": getattr(outcome.final, key) for key in VAL_KEYS},
        "forward_speedup": throughputs["forward_sequences_per_s"]["speedup"],
        "train_step_speedup": throughputs["train_step_sequences_per_s"]["speedup"],
    }, {**details, **timing})
    click.echo(f"prune: {_what_changed(outcome, summary, timing, config)} -> {out_dir}",
               err=True)


def _what_changed(outcome, summary: dict, timing: dict, config: PruneConfig) -> str:
    """The heads, parameters, val MLM accuracy and speed, before and after, in words."""
    heads = summary["heads_per_layer"]
    if outcome.unchanged:
        return (f"prune.fraction {config.fraction} of {summary['heads']['before']} heads "
                f"removes none: the model is written unchanged, with no recovery steps")
    before, pruned, recovered = outcome.before, outcome.pruned, outcome.recovered
    speed = timing["throughput"]["train_step_sequences_per_s"]
    noise = (f" (within noise: x{speed['low']:.2f} to x{speed['high']:.2f} over rounds "
             "timed side by side)" if speed["within_noise"] else "")
    return (
        f"heads per layer {heads['before']} -> {heads['after']}, "
        f"{summary['parameters']['before']:,} -> {summary['parameters']['after']:,} parameters; "
        f"val MLM accuracy {before.mlm_accuracy:.4f} -> {pruned.mlm_accuracy:.4f}"
        + (f" -> {recovered.mlm_accuracy:.4f} after {config.recovery_steps} recovery steps"
           if recovered else "")
        + f"; train step x{speed['speedup']:.2f}{noise}"
    )
