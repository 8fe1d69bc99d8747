"""`bert glue`: the model's GLUE score, as the field compares models. Each task of a GLUE folder
(`glue.data`, in the layout of GLUE's own distribution, or `hf:glue`) is fine-tuned
`glue.seeds` times and scored on dev with its official metrics; the GLUE score is the mean of
the tasks' medians. The model is the pipeline's (`--model`, `--vocab`) or any Hugging Face BERT
folder (`glue.model`), so Google's BERT-tiny is scored beside yours by the same code.

Writes `metrics/glue.json` (the score and each task's medians: `dvc exp show`),
`metrics/glue_details.json` (every seed, min and max, recipes, data), `metrics/glue_seeds.tsv`
(`dvc plots`: the seeds' spread), `metrics/glue/` (dev predictions beside the gold labels, and
GLUE's leaderboard files where the folder has test files) and `models/glue/` (each task's
median-seed model). In MLflow: one run of the suite under the model's pretraining run, each
fine-tune a run nested under it. With `glue.data: null` (the default: GLUE is not shipped and
is not downloaded) it says so in one line and writes its outputs empty.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bertcore.common.dotted import flatten
from bertcore.common.errors import BertError
from bertcore.common.report import write_report
from bertcore.common.tracking import TrackingConfig
from bertcore.downstream.config import GLUE_DATA_HF, GlueConfig
from bertcore.downstream.glue.tasks import GLUE_TASKS, tasks_in
from bertcore.training.config import CpuConfig
from bertstages.options import (
    file_option,
    folder_option,
    pretrained_option,
    stage_options,
    stops_at_once,
    vocab_option,
)
from bertstages.params import load_params, read_params
from bertstages.repo import tracking_target

if TYPE_CHECKING:
    from bertcore.downstream.glue.suite import GlueModel

log = logging.getLogger("bert.glue")

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"glue": GlueConfig, "cpu": CpuConfig, "tracking": TrackingConfig}
# an encoder may come without these: GLUE fine-tunes only the encoder (and the pooler, which
# a classifier from a bare encoder draws afresh, as transformers does)
HEADS = ("mlm_head.", "nsp_head.", "pooler.")
NO_DATA = "no GLUE data (glue.data is null)"


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
@stage_options
@stops_at_once
def command(model_dir, vocab_dir, metrics_file, seeds_file, predictions_dir, models_dir,
            params_file, overrides):
    """Fine-tune and score the model on GLUE's tasks (median, min and max over seeds)."""
    sections = read_params(load_params(params_file, overrides), PARAMS)
    # torch, once the params are read (cli.py)
    from bertcore.downstream.glue.suite import TaskFailure, run_glue
    from bertcore.downstream.tracking import DownstreamTracking
    from bertcore.training.hardware.cpu import pin_cpu
    from bertcore.training.hardware.devices import resolve_device

    pin_cpu(sections["cpu"])  # before torch computes
    config, tracking = sections["glue"], sections["tracking"]
    paths = OutputPaths(metrics_file, seeds_file, predictions_dir, models_dir)
    if config.data is None:
        log.warning("%s, nothing scored; set glue.data to a folder in GLUE's layout or to "
                    "hf:glue (docs/evaluation.md)", NO_DATA)
        write_outputs([], None, config, paths)
        return
    tasks = (tasks_in(config.data, config.tasks) if config.data != GLUE_DATA_HF
             else [GLUE_TASKS[key] for key in (config.tasks or GLUE_TASKS)])
    model = glue_model(config, model_dir, vocab_dir)
    # under the pretraining run of the model scored (none for another project's BERT)
    runs = DownstreamTracking(tracking_target(tracking), config.model or model_dir, "glue",
                              flatten({"glue": dataclasses.asdict(config)}))
    with runs.failing_on_error():
        outcomes = run_glue(tasks, model, config, resolve_device(config.device),
                            runs.start_child)
    metrics, details, files = write_outputs(outcomes, model, config, paths)
    runs.finish(files, {key: value for key, value in flatten(metrics).items()
                        if isinstance(value, float)}, details)
    for line in summary(outcomes, metrics, details, metrics_file):
        click.echo(line, err=True)
    failed = [o for o in outcomes if isinstance(o, TaskFailure)]
    if failed:
        raise BertError(f"glue: {len(failed)} task(s) left out ({failed[0].reason}"
                        f"{'; ...' if len(failed) > 1 else ''}); the scores of the others are "
                        f"in {metrics_file}, every reason in its details")


@dataclass(frozen=True)
class OutputPaths:
    metrics_file: str
    seeds_file: str
    predictions_dir: str
    models_dir: str


def glue_model(config: GlueConfig, model_dir: str, vocab_dir: str) -> GlueModel:
    """The encoder GLUE fine-tunes: `glue.model` (a Hugging Face BERT folder with its
    tokenizer), else the pipeline's model with its vocabulary."""
    from bertcore.data.vocab.files import load_tokenizer
    from bertcore.downstream.glue.suite import GlueModel
    from bertcore.model import hf
    from bertcore.model.tokenizer import model_tokenizer

    if config.model is None:
        model, _ = hf.load_pretrained(model_dir, vocab_dir)
        return GlueModel(model, load_tokenizer(vocab_dir), Path(vocab_dir), model_dir)
    directory = Path(config.model)
    if not directory.is_dir():
        raise BertError(f"glue.model: {directory} is not a folder: give a Hugging Face BERT "
                        "folder, or null for the pipeline's model")
    bert_config = hf.read_config(directory)
    tokenizer = model_tokenizer(directory, None, bert_config)
    model = hf.load_model(directory, strict=False, config=bert_config)
    missing = [name for name in model.missing_weights if not name.startswith(HEADS)]
    if missing:
        raise BertError(f"glue.model: {directory} has no weights for {missing[0]} (and "
                        f"{len(missing) - 1} more): is it a BERT encoder?")
    return GlueModel(model, tokenizer, directory, str(directory))


def write_outputs(outcomes, model: GlueModel | None, config: GlueConfig, paths: OutputPaths
                  ) -> tuple[dict, dict, tuple[Path, Path]]:
    """Every output, each whole or not at all (empty where nothing ran); returns the report
    and its two files."""
    from bertcore.common.atomic import atomic_dir
    from bertcore.downstream.glue.report import (
        glue_details,
        glue_metrics,
        write_models,
        write_predictions,
        write_seed_scores,
    )

    with atomic_dir(paths.predictions_dir) as staging:
        write_predictions(staging, outcomes)
    with atomic_dir(paths.models_dir) as staging:
        write_models(staging, outcomes, model)
    write_seed_scores(paths.seeds_file, outcomes)
    metrics = glue_metrics(outcomes) | ({} if model else {"status": NO_DATA})
    details = glue_details(outcomes, model.name if model else None, config.seeds)
    return metrics, details, write_report(paths.metrics_file, metrics, details)


def summary(outcomes, metrics: dict, details: dict, metrics_file: str) -> list[str]:
    """A line per task (median and spread over seeds), then the GLUE score and what it
    averaged."""
    from bertcore.downstream.glue.suite import TaskResult

    lines = []
    for result in outcomes:
        if isinstance(result, TaskResult):
            spread = details["tasks"][result.task.key]["score"]
            lines.append(f"glue {result.task.key}: {spread['median']:.1f} (min "
                         f"{spread['min']:.1f}, max {spread['max']:.1f}, "
                         f"{len(result.runs)} seeds)")
    if metrics["score"] is not None:
        averaged = details["averaged"]
        lines.append(f"glue: score {metrics['score']:.1f}, the mean of {len(averaged)} task(s) "
                     f"({', '.join(averaged)}) -> {metrics_file}")
    return lines
