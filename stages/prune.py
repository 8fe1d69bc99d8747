"""`bert prune`: remove the attention heads that matter least (Michel et al. 2019), optionally
pretrain the pruned model a little more, and measure what it cost and what it saved.

Reads the sections prune, masking, eval (the val metrics' batch size and masks), train (the
optimizer settings of the recovery steps) and tracking. Writes `models/pruned/` (Hugging Face
format: full shapes with the pruned heads zeroed, `pruned_heads` in config.json; bertcore
loads it back as the smaller model), `metrics/prune.json` (heads, val metrics, throughput and
parameters, before and after) and `metrics/prune_details.json` (which heads went, their
importance, the settings and timings), and logs a child run of the pretraining run in MLflow.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import click

from bertcore.atomic import atomic_dir
from bertcore.batches import PretrainingBatches, eval_batches
from bertcore.devices import resolve_device, resolve_precision
from bertcore.errors import BertError
from bertcore.evaluation import EvalConfig, EvalMetrics, evaluate
from bertcore.hf import export_hf
from bertcore.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.prune import (
    PruneConfig,
    head_importance,
    prune_by_importance,
    recover,
    throughput,
)
from bertcore.samples import SampleStore, check_vocab
from bertcore.tracking import TrackingConfig
from bertcore.train import TrainConfig
from stages.downstream import DownstreamTracking
from stages.options import (
    file_option,
    folder_option,
    pretrained_option,
    samples_option,
    stage_options,
    vocab_option,
)
from stages.params import flatten, load_params, parse_section
from stages.pretrain import load_pretrained
from stages.report import write_report

log = logging.getLogger("bert.prune")

VAL_KEYS = ("mlm_accuracy", "mlm_loss", "nsp_accuracy")


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
def command(model_dir, samples_dir, vocab_dir, out_dir, metrics_file, params_file, overrides):
    """Prune the least important attention heads of the pretrained model."""
    params = load_params(params_file, overrides)
    config = parse_section(params, "prune", PruneConfig)
    masking = parse_section(params, "masking", MaskingConfig)
    train = parse_section(params, "train", TrainConfig)
    eval_config = parse_section(params, "eval", EvalConfig)
    tracking = parse_section(params, "tracking", TrackingConfig)
    samples_dir = Path(samples_dir)
    check_vocab(samples_dir, vocab_dir)
    train_store, val_store = SampleStore(samples_dir / "train"), SampleStore(samples_dir / "val")
    if not len(val_store):
        raise BertError(f"the val split in {samples_dir} is empty: raise corpus.val_fraction")
    if len(train_store) < config.batch_size:
        raise BertError(f"only {len(train_store)} training samples for prune.batch_size="
                        f"{config.batch_size}: lower it")
    model, tokens = load_pretrained(model_dir, vocab_dir)
    if model.config.pruned_heads:
        raise BertError(f"the model in {model_dir} is already pruned: prune the pretrained model")
    device = resolve_device(config.device)
    model.to(device)
    vocab = VocabSpec.from_tokens(tokens)
    # Importance on training sequences (a seeded random subset, fixed masks); the val split
    # only measures.
    scoring = PretrainingBatches(train_store, PretrainingCollator(masking, vocab, config.seed),
                                 config.batch_size, 1, seed=config.seed)
    score_batches = list(_take(scoring, config.batches))
    val = eval_batches(val_store, PretrainingCollator(masking, vocab, seed=eval_config.seed),
                       eval_config.batch_size)
    autocast = resolve_precision("auto", device)
    seconds = Stopwatch()

    def val_metrics(m) -> EvalMetrics:
        with seconds("val_metrics"):
            return evaluate(m, val, device, autocast)

    runs = DownstreamTracking(tracking, model_dir, "prune",
                              flatten({"prune": dataclasses.asdict(config)}))
    try:
        original = copy.deepcopy(model)
        before = val_metrics(model)
        with seconds("importance_and_pruning"):
            steps = prune_by_importance(
                model, lambda m: head_importance(m, score_batches, device), config.fraction,
                config.iterative)
        pruned = val_metrics(model)
        with seconds("throughput"):
            speed = throughput({"before": original, "after": model}, score_batches[0], device,
                               config.throughput_steps)
        recovered = None
        if config.recovery_steps:
            recovery = PretrainingBatches(
                train_store, PretrainingCollator(masking, vocab, seed=config.seed + 1),
                config.batch_size, 1, seed=config.seed + 1)
            with seconds("recovery"):
                recover(model, recovery, train, config.recovery_steps,
                        config.recovery_learning_rate, device, seed=config.seed)
            recovered = val_metrics(model)
    except BaseException:
        runs.fail()
        raise
    with atomic_dir(out_dir) as staging:
        export_hf(model.cpu(), staging, vocab_dir)
    summary, details = _report(original, model, steps, before, pruned, recovered, speed,
                               score_batches[0], config, seconds.totals)
    files = write_report(metrics_file, summary, details)
    last = recovered or pruned  # the model in models/pruned
    throughputs = summary["throughput"]
    runs.finish(files, {
        **{f"val_{key}": getattr(last, key) for key in VAL_KEYS},
        "forward_speedup": throughputs["forward_sequences_per_s"]["speedup"],
        "train_step_speedup": throughputs["train_step_sequences_per_s"]["speedup"],
    }, details)
    head_counts = summary["heads_per_layer"]
    click.echo(
        f"prune: heads per layer {head_counts['before']} -> {head_counts['after']}, "
        f"{summary['parameters']['before']:,} -> {summary['parameters']['after']:,} parameters; "
        f"val MLM accuracy {before.mlm_accuracy:.4f} -> {pruned.mlm_accuracy:.4f}"
        + (f" -> {recovered.mlm_accuracy:.4f} after {config.recovery_steps} recovery steps"
           if recovered else "")
        + f"; train step x{summary['throughput']['train_step_sequences_per_s']['speedup']:.2f}"
        f" -> {out_dir}",
        err=True,
    )


class Stopwatch:
    """`with seconds("name"):` adds the block's wall time to `seconds.totals["name"]`."""

    def __init__(self):
        self.totals: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self.totals[name] = round(self.totals.get(name, 0.0) + elapsed, 1)


def _take(batches: PretrainingBatches, count: int) -> Iterator[dict]:
    """The first `count` single-micro-batch steps, over as many epochs as it takes."""
    taken, epoch = 0, 0
    while True:
        for (batch,) in batches.iterate(epoch):
            if taken == count:
                return
            yield batch
            taken += 1
        epoch += 1


def _report(original, model, steps, before, pruned, recovered, speed, batch, config,
            seconds) -> tuple[dict, dict]:
    """metrics/prune.json (what pruning cost and saved, compared across runs) and its details
    (which heads went and why, the settings, the timings): the one place both are built."""
    total = sum(original.config.heads_per_layer)
    after = sum(model.config.heads_per_layer)
    phases = {"before": before, "pruned": pruned, "recovered": recovered}
    metrics = {
        "heads": {"before": total, "after": after, "removed": total - after,
                  "removed_fraction": (total - after) / total},
        "val": {key: {phase: getattr(m, key) for phase, m in phases.items() if m is not None}
                for key in VAL_KEYS},
        "throughput": {
            kind: {"before": speed["before"][kind], "after": speed["after"][kind],
                   "speedup": speed["after"][kind] / speed["before"][kind]}
            for kind in ("forward_sequences_per_s", "train_step_sequences_per_s")
        },
        "parameters": {"before": original.num_parameters(), "after": model.num_parameters()},
        "heads_per_layer": {"before": original.config.heads_per_layer,
                            "after": model.config.heads_per_layer},
    }
    details = {
        "pruned_heads": {str(k): v for k, v in model.config.pruned_heads.items()},
        "requested_heads": steps.requested,
        "importance": steps.importance,  # per step, per layer (normalised), heads present then
        "settings": {
            "fraction": config.fraction,
            "iterative": config.iterative,
            "scored_sequences": config.batches * config.batch_size,
            "recovery_steps": config.recovery_steps,
            "throughput_batch": {"sequences": int(batch["input_ids"].shape[0]),
                                 "tokens": int(batch["attention_mask"].sum())},
        },
        "seconds": seconds,
    }
    return metrics, details
