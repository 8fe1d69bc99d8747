"""`bert finetune`: does the pretraining help a task? Fine-tunes the pretrained encoder as a
sequence classifier and, as a control, the same architecture from random initialisation with
the same budget; reports accuracy and macro-F1 on the test split for both.

Reads the `finetune` and `tracking` sections. Writes `metrics/finetune.json` (both models'
test scores and the gain), `metrics/finetune_details.json` (the majority-class baseline, the
data and the training) and `models/finetuned/` (the fine-tuned pretrained model, loadable by
transformers' `BertForSequenceClassification`), and logs a child run of the pretraining run
in MLflow.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import click

from bertcore.common.dotted import flatten
from bertcore.common.tracking import TrackingConfig
from bertcore.downstream.config import FinetuneConfig
from bertcore.training.config import CpuConfig
from bertstages.options import (
    corpus_option,
    file_option,
    folder_option,
    pretrained_option,
    stage_options,
    stops_at_once,
    vocab_option,
)
from bertstages.params import load_params, read_params
from bertstages.repo import load_pretrained
from bertstages.report import write_report

log = logging.getLogger("bert.finetune")


# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"finetune": FinetuneConfig, "cpu": CpuConfig, "tracking": TrackingConfig}


@click.command()
@pretrained_option
@vocab_option
@corpus_option
@folder_option("--out", "out_dir", "models/finetuned",
               "Where the fine-tuned model goes (Hugging Face format).")
@file_option("--metrics", "metrics_file", "metrics/finetune.json",
             "Test scores of the pretrained and the scratch model (dvc metrics); the baseline, "
             "data and training go beside it, in NAME_details.json.")
@stage_options
@stops_at_once
def command(model_dir, vocab_dir, corpus_dir, out_dir, metrics_file, params_file, overrides):
    """Fine-tune the pretrained model on a classification task, against a scratch control."""
    sections = read_params(load_params(params_file, overrides), PARAMS)
    # torch, once the params are read (cli.py)
    from bertcore.common.atomic import atomic_dir
    from bertcore.data.vocab.files import load_tokenizer
    from bertcore.downstream.finetune import finetune_report, finetune_task, run_comparison
    from bertcore.model.hf import export_hf_classifier
    from bertcore.training.hardware.cpu import pin_cpu
    from bertcore.training.hardware.devices import resolve_device
    from bertstages.downstream import DownstreamTracking

    pin_cpu(sections["cpu"])  # before torch computes
    config, tracking = sections["finetune"], sections["tracking"]
    model, _ = load_pretrained(model_dir, vocab_dir)
    tokenizer = load_tokenizer(vocab_dir)
    task = finetune_task(config, Path(corpus_dir) / "val.txt", tokenizer,
                         model.config.max_position_embeddings)
    recipe = config.recipe(model.config.hidden_size)

    runs = DownstreamTracking(tracking, model_dir, "finetune",
                              flatten({"finetune": dataclasses.asdict(config)}))
    with runs.failing_on_error():
        result = run_comparison(
            model, task, recipe, resolve_device(config.device), tokenizer.token_to_id("[PAD]"),
            on_log=lambda which, step, loss: runs.log_curve(f"{which}/train_loss", loss, step),
        )
    with atomic_dir(out_dir) as staging:
        export_hf_classifier(result.pretrained.model, staging, vocab_dir)
    metrics, details = finetune_report(task, result, recipe, config.max_seq_length)
    files = write_report(metrics_file, metrics, details)
    runs.finish(files, {f"{which}_{key}": value for which in ("pretrained", "scratch", "gain")
                        for key, value in metrics[which].items()}, details)
    gain = result.gain()
    click.echo(
        f"finetune: test accuracy {result.pretrained.test.accuracy:.4f} pretrained vs "
        f"{result.scratch.test.accuracy:.4f} from scratch ({gain['accuracy']:+.4f}; bag of words "
        f"{result.bag_of_words.accuracy:.4f}, majority class {result.majority.accuracy:.4f}), "
        f"macro-F1 {result.pretrained.test.macro_f1:.4f} vs {result.scratch.test.macro_f1:.4f} "
        f"-> {out_dir}",
        err=True,
    )
