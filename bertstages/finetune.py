"""`bert finetune`: does the pretraining help a task? Fine-tunes the pretrained encoder as a
sequence classifier (or, `finetune.task`, a regressor as STS-B's) and, as a control, the same
architecture from random initialisation with the same budget; reports accuracy and macro-F1
(Pearson and Spearman) on the test split for both, once per seed (`finetune.seeds`): the
medians, with their 95% intervals over seeds and test items.

Reads the `finetune` and `tracking` sections. Writes `metrics/finetune.json` (both models'
test scores and the gain), `metrics/finetune_details.json` (each seed's, their spread, the
baselines, the data and the training), `metrics/finetune_items.json` (each seed's predictions
per test example) and `models/finetuned/` (the median seed's fine-tuned pretrained model,
loadable by transformers' `BertForSequenceClassification`), and logs a child run of the
pretraining run in MLflow. The fine-tunes run `finetune.workers` at once, each in a worker
process: the outputs are the same bytes whatever the count.
"""

from __future__ import annotations

import click

from bertcore.common.config import CpuConfig
from bertcore.common.tracking import TrackingConfig
from bertcore.data.corpus.config import CorpusSource
from bertcore.data.corpus.splits import split_file
from bertcore.downstream.config import FINETUNE_JOB_MODULE, FinetuneConfig
from bertcore.downstream.worker_server import start_worker_server
from bertcore.saved.config import CardConfig
from bertstages.apart import keep_outputs_apart
from bertstages.options import (
    corpus_option,
    file_option,
    folder_option,
    pretrained_option,
    stage_options,
    vocab_option,
)
from bertstages.params import Keys, load_params, read_params
from bertstages.repo import tracking_target

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
# (card, corpus.source: what its model card says of the model it was made from)
PARAMS = {"finetune": FinetuneConfig, "cpu": CpuConfig, "tracking": TrackingConfig,
          "card": CardConfig, "corpus": Keys(CorpusSource)}


@click.command()
@pretrained_option
@vocab_option
@corpus_option
@folder_option("--out", "out_dir", "models/finetuned",
               "Where the fine-tuned model goes (Hugging Face format).")
@file_option("--metrics", "metrics_file", "metrics/finetune.json",
             "Test scores of the pretrained and the scratch model (dvc metrics); each seed's, "
             "the baselines, data and training go beside it, in NAME_details.json, and each "
             "test example's predictions in NAME_items.json.")
@stage_options
def command(model_dir, vocab_dir, corpus_dir, out_dir, metrics_file, params_file, overrides):
    """Fine-tune the pretrained model on a classification or regression task, against a
    scratch control."""
    sections = read_params(load_params(params_file, overrides, PARAMS), PARAMS)
    config = sections["finetune"]
    keep_outputs_apart({"finetune.data": config.data, "finetune.test_data": config.test_data})
    # its imports while this process imports torch and the rest
    start_worker_server(config, sections["cpu"], FINETUNE_JOB_MODULE)
    # torch, once the params are read (cli.py)
    from bertcore.common.cpu import pin_cpu

    pin_cpu(sections["cpu"])  # before torch computes
    from bertcore.downstream.finetune import FinetunePaths, run_finetune
    from bertcore.saved.card_meta import card_meta

    paths = FinetunePaths(model_dir, vocab_dir, split_file(corpus_dir, "val"), out_dir,
                          metrics_file)
    target = tracking_target(sections["tracking"], "finetune")
    outcome = run_finetune(sections["finetune"], paths, target,
                           card_meta(sections["card"], sections["corpus"].source))
    click.echo(f"{outcome.summary()} -> {out_dir}", err=True)
