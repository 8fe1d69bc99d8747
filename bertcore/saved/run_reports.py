"""The reports of the stages that log into a model's pretraining run (evaluate, probe): each
logged once per run, and carried into every run that wrote the weights it was made from. With
the run's recorder (`bertcore.training.run.mlflow_run`), the one other module that decides
what goes into a pretraining's MLflow run.

A report records the sha256 of the weights it scored in its details (`MODEL_KEY`), the value
the pretraining run that wrote them carries as its tag `model.sha256`. Pretraining, when it
ends, logs into its run each report already on disk that was made from the very weights it
just wrote (`carry_reports`): DVC skips a stage whose deps and outputs are unchanged (a fresh
clone retrains to the same bytes, and `evaluate`'s outputs are committed), so that stage
never logs into the new run itself. When the stage does run, the run already holding the same
report (the tag `<prefix>.report.sha256`, the report files' digest) gets nothing twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertcore.common.digests import file_sha256
from bertcore.common.null_tracker import NullTracker
from bertcore.common.outcomes import items_file
from bertcore.common.pending import PendingRun, pending_dir
from bertcore.common.report import details_file, read_report_file, result_values, track_report
from bertcore.common.run_results import kept_message
from bertcore.common.tracking import Tracker, TrackingTarget
from bertcore.saved.hf import WEIGHTS_NAME
from bertcore.saved.model_run import pretraining_run

MODEL_KEY = "model_sha256"  # in a report's details: the sha256 of the weights it scored
REPORT_TAG = "report.sha256"  # under the report's prefix: the digest of its two files


def weights_sha256(model_dir: str | Path) -> str | None:
    """The sha256 of a model folder's weights (None when it has no model.safetensors)."""
    weights = Path(model_dir) / WEIGHTS_NAME
    return file_sha256(weights) if weights.is_file() else None


def report_digest(files: tuple[Path, ...]) -> str:
    """One sha256 over a report's files (metrics, details and the per-item outcomes)."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return digest.hexdigest()


def report_run(target: TrackingTarget | None, model_dir: str | Path, out_file: str | Path,
               log: logging.Logger) -> tuple[Tracker | PendingRun | NullTracker, int]:
    """The run a stage's report of the model in `model_dir` is logged into, and its last
    step: the model's pretraining run; a `PendingRun` when its store is locked (the report
    waits in the store's pending folder); else a NullTracker. A warning on `log` (the
    stage's) says why when tracking is on and the report does not go in now."""
    run, step, why_not = pretraining_run(target, model_dir)
    if isinstance(run, PendingRun):
        log.warning("%s; %s", why_not, kept_message(pending_dir(run.uri)))
    elif why_not:  # say so rather than stay silent
        log.warning("nothing will be logged to MLflow: %s; the scores go to %s only", why_not,
                    out_file)
    return run or NullTracker(), step


def log_report_into(tracker: Any, step: int, files: tuple[Path, ...],
                    metrics: Mapping[str, Any], prefix: str) -> bool:
    """A stage's report in the model's pretraining run at its last `step`: each metric as the
    result `<prefix>_<name>`, also the run's logged model's (its page in MLflow 3), the files
    as artifacts (evaluate: `eval`, probe: `probe`), the details read there, not tagged (the
    run's tags stay those people search by). Nothing when the run holds this very report
    already (a result logged twice would be two points); returns whether it logged."""
    done_tag = (f"{prefix}.{REPORT_TAG}", report_digest(files))
    return track_report(tracker, files, result_values(metrics, f"{prefix}_"), step,
                        done_tag=done_tag, link_model=True)


def carry_reports(tracker: Any, step: int, weights: str, reports: Mapping[str, Path]
                  ) -> list[str]:
    """Log into a pretraining run (that wrote the weights of sha256 `weights`, at `step`) each
    report of `reports` (prefix -> its metrics file, the group it is written under) whose
    details say it scored those weights; returns the prefixes logged."""
    carried = []
    for prefix, metrics_file in reports.items():
        files = (Path(metrics_file), details_file(metrics_file))
        if not all(path.is_file() for path in files):
            continue
        if items_file(metrics_file).is_file():
            files += (items_file(metrics_file),)
        details = read_report_file(files[1])
        metrics = read_report_file(files[0]).get(prefix)
        if details.get(MODEL_KEY) != weights or not isinstance(metrics, dict):
            continue  # made from other weights (or written before reports said which)
        if log_report_into(tracker, step, files, metrics, prefix):
            carried.append(prefix)
    return carried
