"""`bert glue`: the model's GLUE score, as the field compares models. Each task of a GLUE folder
(`glue.data`, in the layout of GLUE's own distribution, or `hf:glue`) is fine-tuned
`glue.seeds` times and scored on dev with its official metrics; the GLUE score is the mean of
the tasks' medians. The model is the pipeline's (`--model`, `--vocab`) or any Hugging Face BERT
folder (`glue.model`), so Google's BERT-tiny is scored beside yours by the same code.

Writes `metrics/glue.json` (the score and each task's medians: `dvc exp show`, with their
95% intervals over seeds and dev examples), `metrics/glue_details.json` (every seed, min and
max, the intervals, recipes, data), `metrics/glue_items.json` (every seed's prediction of every
dev example: the intervals' items), `metrics/glue_seeds.tsv`
(`dvc plots`: the seeds' spread), `metrics/glue/` (dev predictions beside the gold labels, and
GLUE's leaderboard files where the folder has test files) and `models/glue/` (each task's
median-seed model), all replaced together by a run that scored a task. Each fine-tune is saved
in `models/glue_runs/` as it finishes: a rerun (after a kill, a failure, a task added) reuses
those of the same model, data and recipe. The fine-tunes run `glue.workers` at once, each in a
worker process: the outputs are the same bytes whatever the count. In MLflow: one run of the
suite under the model's pretraining run, each fine-tune a run nested under it. With
`glue.data: null` (the default: GLUE is not shipped and is not downloaded) it says so in one
line and writes its outputs empty.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import click

from bertcore.common.config import CpuConfig
from bertcore.common.tracking import TrackingConfig
from bertcore.data.corpus.config import CorpusSource
from bertcore.downstream.glue.config import GLUE_JOB_MODULE, GlueConfig
from bertcore.downstream.worker_server import start_worker_server
from bertcore.saved.config import CardConfig
from bertstages.apart import keep_outputs_apart
from bertstages.options import (
    KEPT_WHEN_STOPPED,
    file_option,
    folder_option,
    pretrained_option,
    stage_options,
    vocab_option,
)
from bertstages.params import Keys, load_params, read_params
from bertstages.repo import tracking_target

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
# (card, corpus.source: what its models' cards say of the model they were made from)
PARAMS = {"glue": GlueConfig, "cpu": CpuConfig, "tracking": TrackingConfig,
          "card": CardConfig, "corpus": Keys(CorpusSource)}


@click.command()
@pretrained_option
@vocab_option
@file_option("--metrics", "metrics_file", "metrics/glue.json",
             "The GLUE score and each task's medians (dvc metrics); every seed, the recipes "
             "and the data go beside it, in NAME_details.json.")
@file_option("--seeds", "seeds_file", "metrics/glue_seeds.tsv",
             "Every fine-tune's score (dvc plots: the spread over seeds).")
@folder_option("--predictions", "predictions_dir", "metrics/glue",
               "Dev predictions beside the gold labels; submission/: GLUE's leaderboard files.")
@folder_option("--out", "models_dir", "models/glue",
               "Each task's median-seed model (Hugging Face format).")
@folder_option("--runs", "runs_dir", "models/glue_runs",
               "Each fine-tune, saved as it finishes: a rerun reuses those of the same model, "
               "data and recipe.")
@stage_options
def command(model_dir, vocab_dir, metrics_file, seeds_file, predictions_dir, models_dir,
            runs_dir, params_file, overrides):
    """Fine-tune and score the model on GLUE's tasks (median, min and max over seeds)."""
    sections = read_params(load_params(params_file, overrides, PARAMS), PARAMS)
    config = sections["glue"]
    keep_outputs_apart({"glue.data": config.data, "glue.model": config.model})
    click.get_current_context().meta[KEPT_WHEN_STOPPED] = partial(saved_fine_tunes, runs_dir)
    if config.data is not None:  # its imports while this process imports torch and the suite
        start_worker_server(config, sections["cpu"], GLUE_JOB_MODULE)
    # torch, once the params are read (cli.py)
    from bertcore.common.cpu import pin_cpu

    pin_cpu(sections["cpu"])  # before torch computes
    from bertcore.downstream.glue.report import GluePaths, score_glue
    from bertcore.saved.card_meta import card_meta

    paths = GluePaths(model_dir, vocab_dir, metrics_file, seeds_file, predictions_dir,
                      models_dir, runs_dir)
    outcome = score_glue(sections["glue"], paths, tracking_target(sections["tracking"], "glue"),
                         card_meta(sections["card"], sections["corpus"].source))
    for line in outcome.summary():
        click.echo(line, err=True)
    outcome.raise_for_failed_tasks()


def saved_fine_tunes(runs_dir: str) -> str | None:
    """What a suite stopped midway leaves: the fine-tunes saved in `runs_dir`, which a rerun
    reuses (None when there are none)."""
    # not a staging folder (`.NAME.tmp-...`) that a worker ended while saving left behind
    count = len([path for path in Path(runs_dir).glob("*/record.json")
                 if not path.parent.name.startswith(".")])
    if not count:
        return None
    return (f"{count} finished fine-tune{'s stay' if count > 1 else ' stays'} in {runs_dir}: "
            "`bert glue` run again reuses the ones of this model, data and recipe")
