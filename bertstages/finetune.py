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

from bertcore.common.atomic import atomic_dir
from bertcore.common.dotted import flatten
from bertcore.common.errors import BertError
from bertcore.common.tracking import TrackingConfig
from bertcore.data.vocab.files import load_tokenizer
from bertcore.downstream.builtin_tasks import BUILTIN_TASKS, builtin_task
from bertcore.downstream.finetune import FinetuneConfig, finetune_report, run_comparison
from bertcore.downstream.tasks import encode_examples, label_names, read_examples, split_examples
from bertcore.model.hf import export_hf_classifier
from bertcore.training.cpu import CpuConfig, pin_cpu
from bertcore.training.devices import resolve_device
from bertstages.downstream import DownstreamTracking
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
    pin_cpu(sections["cpu"])  # before torch computes
    config, tracking = sections["finetune"], sections["tracking"]

    # The data first: its mistakes are found in a second, before anything slow.
    if config.data in BUILTIN_TASKS:
        if config.test_data:
            raise BertError(f"finetune.test_data is for a file of your own; {config.data} "
                            "makes its own test split (set it to null)")
        train, test = builtin_task(config.data, Path(corpus_dir) / "val.txt",
                                   config.test_fraction, config.seed)
        task, description = config.data, BUILTIN_TASKS[config.data].description
    else:
        fields = (config.text_field, config.text_pair_field, config.label_field)
        examples = read_examples(config.data, *fields)
        if config.test_data:
            train, test = examples, read_examples(config.test_data, *fields)
        else:
            train, test = split_examples(examples, config.test_fraction, config.seed)
        task, description = Path(config.data).name, config.data
    labels = label_names(train, test)

    model, _ = load_pretrained(model_dir, vocab_dir)
    positions = model.config.max_position_embeddings
    if config.max_seq_length > positions:
        raise BertError(f"finetune.max_seq_length={config.max_seq_length} is longer than the "
                        f"model's max_position_embeddings={positions}: lower it")
    tokenizer = load_tokenizer(vocab_dir)
    pad_id = tokenizer.token_to_id("[PAD]")
    encoded_train = encode_examples(train, tokenizer, labels, config.max_seq_length)
    encoded_test = encode_examples(test, tokenizer, labels, config.max_seq_length)
    device = resolve_device(config.device)

    runs = DownstreamTracking(tracking, model_dir, "finetune",
                              flatten({"finetune": dataclasses.asdict(config)}))
    try:
        result = run_comparison(
            model, labels, encoded_train, encoded_test, config, device, pad_id,
            on_log=lambda which, step, loss: runs.log_curve(f"{which}/train_loss", loss, step),
        )
    except BaseException:
        runs.fail()
        raise
    with atomic_dir(out_dir) as staging:
        export_hf_classifier(result.pretrained.model, staging, vocab_dir)
    metrics, details = finetune_report(task, description, result, labels, encoded_train,
                                       encoded_test, config)
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
