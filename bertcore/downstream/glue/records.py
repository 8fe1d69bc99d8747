"""The fine-tunes of a GLUE suite, each on disk as soon as it finishes, so that a suite that
stops midway (out of memory, Ctrl-C, a task that diverges) resumes where it stopped, the way
pretraining resumes from its checkpoints, and no model is held in memory beyond its fine-tune.

One folder per fine-tune, named `<task>-lr<rate>-bs<batch>-seed<seed>-<16 hex>`, the hex
digits those of its key: sha256 of what determines its result (the model's weights, its
tokenizer, the task's examples as read, the recipe with its seed, the maximum length, the
device kind, and the code that fine-tunes: `suite.fine_tuning_code`). It holds
`record.json` (the dev metrics, the score, the steps, the truncations), `predictions.npz`
(dev predictions) and `model/` (the fine-tuned model in Hugging Face's format) until its
task has chosen its median seed: then only the median's is kept, the one models/glue is
written from and the test files are predicted with (the other seeds' test predictions are
never written, so they are not made). record.json holds the sha256 of every other file: a
record whose files do not match (a model cut short), or that cannot be read, or whose
predictions do not cover the task's dev rows, is said in one line and fine-tuned again.

A record is written by whichever process fine-tuned it (a worker of the suite's pool), each
into a folder of its own name: records never share a file.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertcore.common.atomic import atomic_dir, write_json
from bertcore.common.digests import file_sha256, fingerprint_params
from bertcore.downstream.config import Recipe

log = logging.getLogger(__name__)

RECORD = "record.json"
PREDICTIONS = "predictions.npz"
MODEL = "model"
DROPPED = f".{MODEL}.dropped"  # a model on its way out (`_remove_folder`)
# a record of another format is not read (1: without its files' digests; 2: with every
# seed's test predictions)
FORMAT = 3
# `FinishedRuns.name`'s: `fine_tune_name`-<16 hex>
RECORD_NAME = re.compile(r"[a-z0-9]+-lr[^/]+-bs\d+-seed-?\d+-[0-9a-f]{16}")


def fine_tune_name(task_key: str, recipe: Recipe) -> str:
    """A fine-tune's name, its MLflow run's: `<task>-lr<rate>-bs<batch>-seed<seed>`; its
    record's folder adds the digits of its key (`FinishedRuns.name`)."""
    return f"{task_key}-lr{recipe.learning_rate:g}-bs{recipe.batch_size}-seed{recipe.seed}"


@dataclass(eq=False)  # its arrays have no truth value: runs compare by identity
class SeedRun:
    """One fine-tune: its recipe (seed included), dev metrics per evaluation, GLUE's score of
    the task, its predictions by evaluation (dev; test only once its task chose it as the
    median: `suite.predict_test`), and its record's folder (where its model is, while kept)."""

    recipe: Recipe
    metrics: dict[str, dict[str, float]]
    score: float
    steps: int
    truncated: int
    dev_predictions: dict[str, np.ndarray]
    test_predictions: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    folder: Path | None = None

    @property
    def model_dir(self) -> Path | None:
        """The fine-tuned model, or None once dropped (its task chose another seed)."""
        if self.folder is None or not (self.folder / MODEL).is_dir():
            return None
        return self.folder / MODEL


class FinishedRuns:
    """The folder of finished fine-tunes: find one by what determines it, save one, drop the
    models no longer needed. `reused` counts the fine-tunes found."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.reused = 0

    def name(self, task_key: str, recipe: Recipe, identity: dict) -> str:
        """The folder name of a fine-tune of `task_key` with `recipe` on the inputs that
        `identity` (digests and settings) stands for."""
        key = fingerprint_params({"format": FORMAT, "task": task_key,
                                  "recipe": dataclasses.asdict(recipe), **identity})
        return f"{fine_tune_name(task_key, recipe)}-{key[:16]}"

    def find(self, name: str, rows: Mapping[str, int]) -> SeedRun | None:
        """The fine-tune saved under `name`, with its predictions of the `rows` of each dev
        evaluation ({name: count}); None when there is none, or when it is damaged or cannot
        be read (said in one line: it is then done again)."""
        folder = self.folder / name
        if not (folder / RECORD).is_file():
            return None
        try:
            run = _read_record(folder, rows)
        except Exception as error:  # whatever a damaged file raises (BadZipFile, EOFError)
            log.warning("glue: the saved fine-tune %s is damaged or unreadable (%s): "
                        "fine-tuning it again", folder, str(error) or type(error).__name__)
            return None
        self.reused += 1
        return run

    def save(self, name: str, run: SeedRun, write_model) -> SeedRun:
        """Save `run` whole under `name` (`write_model(folder)` writes its model); the run
        with its folder."""
        final = self.folder / name
        with atomic_dir(final, advice="free space or point --runs elsewhere",
                        layout=[DROPPED], output=False) as staging:
            write_model(staging / MODEL)
            np.savez(staging / PREDICTIONS,
                     **{f"dev.{k}": v for k, v in run.dev_predictions.items()})
            write_json(staging / RECORD, {
                "format": FORMAT, "recipe": dataclasses.asdict(run.recipe),
                "metrics": run.metrics, "score": run.score, "steps": run.steps,
                "truncated": run.truncated, "files": _file_digests(staging)}, sort_keys=False)
        return dataclasses.replace(run, folder=final)

    def drop_models_except(self, kept: list[SeedRun], among: list[SeedRun] | None = None
                           ) -> None:
        """Drop the models of the runs `among` that are not `kept` (their scores stay); with
        no `among`, once a suite's outputs are written, those of every other record of the
        folder (`is_record`; a rerun that needs one fine-tunes that seed again)."""
        keep = {run.folder for run in kept}
        if among is not None:
            folders = [run.folder for run in among if run.folder is not None]
        else:  # the folder's records alone: whatever else a user keeps there is not ours
            folders = [folder for folder in self.folder.iterdir() if is_record(folder)
                       ] if self.folder.is_dir() else []
        for folder in folders:
            if folder not in keep and (folder / MODEL).is_dir():
                _remove_folder(folder / MODEL)


def _file_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file of a record (the model's, the predictions), by relative path."""
    return {path.relative_to(folder).as_posix(): file_sha256(path)
            for path in sorted(folder.rglob("*")) if path.is_file()}


def _read_record(folder: Path, rows: Mapping[str, int]) -> SeedRun:
    """The fine-tune saved in `folder`, once each of its files matches its digest (a model
    dropped on purpose aside) and its dev predictions cover `rows`; else an exception saying
    what is wrong."""
    record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError(f"{RECORD} is not of format {FORMAT}")
    for relative, digest in record["files"].items():
        dropped = relative.startswith(f"{MODEL}/") and not (folder / MODEL).is_dir()
        if not dropped and file_sha256(folder / relative) != digest:
            raise ValueError(f"{relative} does not match its digest")
    with np.load(folder / PREDICTIONS, allow_pickle=False) as arrays:
        predictions = {key: arrays[key] for key in arrays.files}
    dev = _by_evaluation(predictions, "dev")
    found = {key: len(value) for key, value in dev.items()}
    if found != dict(rows):
        raise ValueError(f"its dev predictions are {found or 'none'}, not {dict(rows)}")
    return SeedRun(Recipe(**record["recipe"]), record["metrics"], record["score"],
                   record["steps"], record["truncated"], dev, folder=folder)


def is_record(folder: Path) -> bool:
    """Whether `folder` is a fine-tune saved by `FinishedRuns.save`: named as it names them,
    holding a record.json of a format it writes."""
    if not RECORD_NAME.fullmatch(folder.name) or not (folder / RECORD).is_file():
        return False
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and isinstance(record.get("format"), int)


def _by_evaluation(predictions: dict[str, np.ndarray], split: str) -> dict[str, np.ndarray]:
    return {key.removeprefix(f"{split}."): value for key, value in predictions.items()
            if key.startswith(f"{split}.")}


def _remove_folder(folder: Path) -> None:
    """Out of sight first (a rename), then removed: a process killed half-way never leaves
    a partial model where a whole one is looked for."""
    gone = folder.with_name(DROPPED)
    shutil.rmtree(gone, ignore_errors=True)
    os.replace(folder, gone)
    shutil.rmtree(gone, ignore_errors=True)
