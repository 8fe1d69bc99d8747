"""What the GLUE stage writes of a suite's outcome: metrics/glue.json (the GLUE score and
each task's medians: `dvc exp show` columns, each with its 95% interval over seeds and dev
examples where it has one), its details (every seed, min and max, the intervals, the recipes
tried, the data, the tasks that failed), each seed's prediction on each dev example
(metrics/glue_items.json: `outcomes`), a TSV of every seed's score (`dvc plots`), each task's
dev predictions and leaderboard files, and the median seed's model per task.

Scores are GLUE's scale, x100, as the papers and the leaderboard print them. `score_glue` is
the whole stage: the suite run, every output written, the report logged. The outputs are
replaced together, once all of them are staged, and only by a run that scored a task: a run
that stops (every task left out, a task diverging, a signal) leaves the last good run's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

from bertcore.common.atomic import atomic_dir, atomic_file, dump_json, require_own_folder
from bertcore.common.charts import Series, write_chart
from bertcore.common.devices import resolve_device
from bertcore.common.dotted import flatten
from bertcore.common.errors import BertError
from bertcore.common.intervals import Estimate
from bertcore.common.outcomes import items_file, items_text
from bertcore.common.report import details_file, with_items
from bertcore.common.together import outputs_together
from bertcore.common.tracking import TrackingTarget
from bertcore.downstream.cards import glue_task_facts
from bertcore.downstream.glue.config import GLUE_DATA_HF, GLUE_JOB_MODULE, GlueConfig
from bertcore.downstream.glue.inputs import glue_model
from bertcore.downstream.glue.metrics import glue_score
from bertcore.downstream.glue.outcomes import glue_items, no_interval
from bertcore.downstream.glue.predictions import write_dev_predictions, write_submission
from bertcore.downstream.glue.records import FinishedRuns
from bertcore.downstream.glue.suite import Suite, TaskFailure, TaskResult, run_glue
from bertcore.downstream.glue.tasks import GLUE_TASKS, tasks_in
from bertcore.downstream.tasks import require_fits
from bertcore.downstream.tracking import DownstreamTracking
from bertcore.downstream.workers import fine_tune_workers, start_fine_tune_workers
from bertcore.saved.card import CardFacts, write_card
from bertcore.saved.card_meta import CardMeta
from bertcore.saved.run_reports import MODEL_KEY, weights_sha256

log = logging.getLogger("bert.glue")  # the stage's name, as its warnings have always said

Outcome = TaskResult | TaskFailure
SEEDS_HEADER = ("task", "seed", "score")
NO_DATA = "no GLUE data (glue.data is null)"
SUBMISSION = "submission"  # GLUE's leaderboard files, in the predictions folder
# what the stage writes in its folders: any earlier output of its own is one of these
PREDICTIONS_LAYOUT = [*(f"{task.key}_{name}.tsv" for task in GLUE_TASKS.values()
                        for name in task.dev), SUBMISSION]
MODELS_LAYOUT = [task.folder for task in GLUE_TASKS.values()]


def glue_report(outcomes: Sequence[Outcome], results: Sequence[TaskResult],
                model_name: str | None, seeds: int) -> tuple[dict, dict]:
    """metrics/glue.json: the GLUE score of the tasks' medians (null when no task ran) and per
    task the median of its score and of each metric, x100; and its details: what the medians
    are read against."""
    medians = {r.task.key: r.spread().median for r in results}
    score, averaged = glue_score(medians) if medians else (None, [])
    metrics: dict = {"score": None if score is None else 100 * score}
    for result in results:
        metrics[result.task.key] = {"score": 100 * medians[result.task.key]} | {
            column: 100 * result.spread(name, metric).median
            for column, name, metric in result.task.columns()}
    return metrics, {
        "model": model_name,
        "averaged": averaged,  # the tasks the GLUE score is the mean of
        "seeds": seeds,
        "tasks": {r.task.key: _task_details(r) for r in results},
        "failed": {o.task.key: o.reason for o in outcomes if isinstance(o, TaskFailure)},
    }


def _task_details(result: TaskResult) -> dict:
    chosen = result.runs[0].recipe
    return {
        "score": _scaled(result.spread()),
        "metrics": {column: _scaled(result.spread(name, metric))
                    for column, name, metric in result.task.columns()},
        "recipe": {key: value for key, value in dataclasses.asdict(chosen).items()
                   if key != "seed"},
        "seeds": [run.recipe.seed for run in result.runs],
        "steps": result.runs[0].steps,
        "tried": [{"learning_rate": recipe.learning_rate, "batch_size": recipe.batch_size,
                   "median_score": 100 * median} for recipe, median in result.tried],
        "train_examples": len(result.data.train),
        "dev_examples": {name: len(rows) for name, rows in result.data.dev.items()},
        "truncated": result.runs[0].truncated,  # train and dev examples cut to max_seq_length
        "skipped_rows": result.data.skipped,  # per file: rows that do not parse
    } | ({"no_submission": result.data.unsubmitted} if result.data.unsubmitted else {})


def _scaled(spread) -> dict:
    return {"median": 100 * spread.median, "min": 100 * spread.min, "max": 100 * spread.max,
            "values": [100 * v for v in spread.values]}


def seeds_chart(seeds_file: str | Path) -> Path:
    """The PNG beside the seeds' TSV: metrics/glue_seeds.tsv -> metrics/glue_seeds.png."""
    return Path(seeds_file).with_suffix(".png")


def write_seeds_chart(handle: BinaryIO, seeds_file: str | Path,
                      results: Sequence[TaskResult]) -> None:
    """Every fine-tune's score, one column of points per task (empty without GLUE data), into
    `handle`: the PNG beside `seeds_file` being staged."""
    write_chart(seeds_chart(seeds_file), "GLUE dev score of each seed, per task",
                "task (in the legend's order)", "score (x100)",
                [Series(result.task.key, [i] * len(result.runs),
                        [100 * run.score for run in result.runs], points=True)
                 for i, result in enumerate(results)], into=handle)


def write_seed_scores(handle, results: Sequence[TaskResult]) -> None:
    """One row per fine-tune (task, seed, score x100) for `dvc plots`: the seeds' spread."""
    rows = ["\t".join(SEEDS_HEADER)] + [
        f"{result.task.key}\t{run.recipe.seed}\t{100 * run.score:.4f}"
        for result in results for run in result.runs]
    handle.write("\n".join(rows) + "\n")


def write_predictions(folder: Path, results: Sequence[TaskResult]) -> None:
    """Into a new folder: `<task>_<evaluation>.tsv`, the median seed's dev predictions beside
    the gold labels, and `submission/`, GLUE's leaderboard files of the tasks that have test
    files."""
    folder.mkdir(parents=True, exist_ok=True)
    for result in results:
        run, data = result.median_run(), result.data
        for name, rows in data.dev.items():
            write_dev_predictions(folder / f"{result.task.key}_{name}.tsv", result.task, rows,
                                  run.dev_predictions[name])
        for name, rows in data.test.items():
            (folder / SUBMISSION).mkdir(exist_ok=True)
            write_submission(folder / SUBMISSION, result.task, name,
                             run.test_predictions[name], [row.index for row in rows])


def write_models(folder: Path, results: Sequence[TaskResult],
                 cards: Callable[[TaskResult], CardFacts]) -> None:
    """Into a new folder, per task, the median seed's model in Hugging Face's format
    (`BertForSequenceClassification`; STS-B's with `problem_type: regression`), from its
    record (hard links where the disk allows, so that it is stored once), with its model card
    (`cards`)."""
    folder.mkdir(parents=True, exist_ok=True)
    for result in results:
        shutil.copytree(result.median_run().model_dir, folder / result.task.folder,
                        copy_function=_link_or_copy)
        write_card(folder / result.task.folder, cards(result))


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another disk, or links refused
        shutil.copy2(source, target)


@dataclass(frozen=True)
class GluePaths:
    """What the glue stage reads and writes."""

    model_dir: str  # the pretrained model, with
    vocab_dir: str  # its vocabulary (unless `glue.model` names another BERT folder)
    metrics_file: str  # the GLUE score and each task's medians; every seed's beside it
    seeds_file: str  # every fine-tune's score (TSV)
    predictions_dir: str  # dev predictions beside the gold labels, leaderboard files
    models_dir: str  # each task's median-seed model
    runs_dir: str  # every fine-tune as it finishes, which a rerun reuses


@dataclass(frozen=True)
class GlueOutcome:
    """What the glue stage did: each task's result or failure, the report and its files."""

    outcomes: list[Outcome]
    metrics: dict
    details: dict
    metrics_file: str
    estimates: dict[str, Estimate] = dataclasses.field(default_factory=dict)

    def summary(self) -> list[str]:
        """A line per task (median and spread over seeds, and the median's 95% interval
        where it has one), then the GLUE score and what it averaged."""
        lines = []
        for result in self.outcomes:
            if isinstance(result, TaskResult):
                key = result.task.key
                spread = self.details["tasks"][key]["score"]
                found = self.estimates.get(f"{key}.score")
                median = (f"{found.text()} (95% interval over seeds and dev examples;"
                          if found else f"{spread['median']:.1f} (")
                lines.append(f"glue {key}: {median} min {spread['min']:.1f}, max "
                             f"{spread['max']:.1f}, {len(result.runs)} seeds)")
        if self.metrics["score"] is not None:
            averaged = self.details["averaged"]
            lines.append(f"glue: score {self.metrics['score']:.1f}, the mean of "
                         f"{len(averaged)} task(s) ({', '.join(averaged)}) -> "
                         f"{self.metrics_file}")
        return lines

    def raise_for_failed_tasks(self) -> None:
        """A task left out fails the stage, once the others' scores are written."""
        failed = [o for o in self.outcomes if isinstance(o, TaskFailure)]
        if failed:
            raise BertError(f"glue: {len(failed)} task(s) left out ({failed[0].reason}"
                            f"{'; ...' if len(failed) > 1 else ''}); the scores of the others "
                            f"are in {self.metrics_file}, every reason in its details")


def score_glue(config: GlueConfig, paths: GluePaths, target: TrackingTarget | None,
               meta: CardMeta | None = None) -> GlueOutcome:
    """The glue stage: each task fine-tuned `glue.seeds` times and scored, every output
    written (empty with `glue.data` null), the report logged (a run under the model's
    pretraining run, each fine-tune nested in it; none when `target` is None); `meta`: what
    the models' cards say of the model they were made from."""
    if config.data is None:
        log.warning("%s, nothing scored; set glue.data to a folder in GLUE's layout or to "
                    "hf:glue (docs/evaluation.md)", NO_DATA)
        return write_glue_outputs([], None, config, paths, meta)[0]
    # glue.tasks (all when null) of the folder glue.data, or of hf:glue
    tasks = ([GLUE_TASKS[key] for key in (config.tasks or GLUE_TASKS)]
             if config.data == GLUE_DATA_HF else tasks_in(config.data, config.tasks))
    for folder, layout in ((paths.predictions_dir, PREDICTIONS_LAYOUT),
                           (paths.models_dir, MODELS_LAYOUT)):  # before hours of fine-tuning
        require_own_folder(folder, layout)
    device = resolve_device(config.device, setting="glue.device")
    workers = fine_tune_workers(config.workers, "glue.workers", device)
    start_fine_tune_workers(workers, GLUE_JOB_MODULE)  # their imports meanwhile
    model = glue_model(config, paths.model_dir, paths.vocab_dir)
    require_fits("glue", config.max_seq_length, model.encoder.config.max_position_embeddings)
    finished = FinishedRuns(paths.runs_dir)
    # under the pretraining run of the model scored (none for another project's BERT)
    runs = DownstreamTracking(target, config.model or paths.model_dir, "glue",
                              flatten({"glue": dataclasses.asdict(config)}))
    with runs.failing_on_error():
        suite = Suite(model, config, device, runs.start_child, finished, workers=workers)
        outcomes = run_glue(tasks, suite)
        failed = [o for o in outcomes if isinstance(o, TaskFailure)]
        if len(failed) == len(outcomes):  # the last good run's outputs stay as they are
            raise BertError(f"glue: every task left out ({failed[0].reason}"
                            f"{'; ...' if len(failed) > 1 else ''}); nothing was written, the "
                            "outputs of the last run are as they were")
        outcome, files = write_glue_outputs(outcomes, model.name, config, paths, meta)
    finished.drop_models_except([o.median_run() for o in outcomes
                                 if isinstance(o, TaskResult)])
    runs.finish(files, tracked_results(outcome.metrics), outcome.details,
                charts=[path for path in [seeds_chart(paths.seeds_file)] if path.is_file()])
    return outcome


def tracked_results(metrics: dict) -> dict[str, float]:
    """The numbers of glue.json as MLflow results under their dotted names, and each interval's
    ends as `<name>_ci95_low` and `<name>_ci95_high`."""
    results = {}
    for name, value in flatten(metrics).items():
        if isinstance(value, float):
            results[name] = value
        elif name.endswith("_ci95") and isinstance(value, list):
            results[f"{name}_low"], results[f"{name}_high"] = value
    return results


def write_glue_outputs(outcomes: Sequence[Outcome], model_name: str | None, config: GlueConfig,
                       paths: GluePaths, meta: CardMeta | None = None
                       ) -> tuple[GlueOutcome, tuple[Path, Path, Path]]:
    """Every output, each staged whole (empty where nothing ran), then all put in place
    together: a failure before the last is staged replaces none. The outcome and the
    report's three files (metrics, details, per-item outcomes)."""
    results = [o for o in outcomes if isinstance(o, TaskResult)]
    metrics, details = glue_report(outcomes, results, model_name, config.seeds)
    metrics |= {} if model_name else {"status": NO_DATA}
    if model_name is not None:
        details[MODEL_KEY] = weights_sha256(Path(model_name).expanduser())
    items, missing = glue_items(results, config.max_seq_length)
    metrics, details, estimates = with_items(metrics, details, items)
    details["intervals"] |= no_interval(results, missing)
    reproduce = {"glue": asdict(config)}  # the card leaves out the workers
    files = (Path(paths.metrics_file), details_file(paths.metrics_file),
             items_file(paths.metrics_file))
    with outputs_together() as outputs:  # all replaced at its end, signals held
        for path, report in zip(files[:2], ({"glue": metrics}, details), strict=True):
            dump_json(outputs.enter_context(atomic_file(path, "w", encoding="utf-8")), report,
                      sort_keys=False)
        outputs.enter_context(atomic_file(files[2], "w", encoding="utf-8")).write(
            items_text(items))
        write_seed_scores(outputs.enter_context(atomic_file(paths.seeds_file, "w")), results)
        write_seeds_chart(outputs.enter_context(atomic_file(seeds_chart(paths.seeds_file), "wb")),
                          paths.seeds_file, results)
        write_predictions(outputs.enter_context(
            atomic_dir(paths.predictions_dir, layout=PREDICTIONS_LAYOUT)), results)
        write_models(outputs.enter_context(atomic_dir(paths.models_dir, layout=MODELS_LAYOUT)),
                     results,
                     lambda result: glue_task_facts(
                         str(Path(paths.models_dir) / result.task.folder), result.task.key,
                         metrics, details, reproduce, meta))
    return GlueOutcome(list(outcomes), metrics, details, paths.metrics_file, estimates), files
