r"""What a stage reports, in two files side by side:

- `metrics/<stage>.json`: the numbers a user compares across runs (val MLM accuracy, the
  fine-tune gain, ...), under one key, the stage's group (`{"eval": {"mlm_accuracy": ...}}`).
  dvc.yaml declares it under `metrics`, so `dvc exp show` and `dvc metrics diff` show it, its
  columns named `eval.mlm_accuracy`, `probe.builtin.cloze.p_at_1`, ...: `--keep 'probe\.'`
  selects a stage's columns (its params' too: their section has the same name);
- `metrics/<stage>_details.json`: what those numbers are read against (baselines, counts,
  settings, timings). A plain output: in git, but no columns in `dvc exp show`.

In MLflow the same split holds: results are metrics (one point each), details are tags, and
both files are uploaded as JSON artifacts under `metrics/`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertcore.common.atomic import write_json
from bertcore.common.dotted import flatten


def details_file(metrics_file: str | os.PathLike) -> Path:
    """The details file written beside `metrics_file`: metrics/eval.json ->
    metrics/eval_details.json."""
    path = Path(metrics_file)
    return path.with_name(f"{path.stem}_details{path.suffix or '.json'}")


def write_metrics(metrics_file: str | os.PathLike, group: str,
                  metrics: Mapping[str, Any]) -> None:
    """Write `metrics` under the key `group` (in their dict's order: headline first)."""
    write_json(metrics_file, {group: metrics}, sort_keys=False)


def write_report(metrics_file: str | os.PathLike, group: str, metrics: Mapping[str, Any],
                 details: Mapping[str, Any]) -> tuple[Path, Path]:
    """Write `metrics` under `group` and, beside it, `details` (both in their dicts' order:
    headline first); returns both paths."""
    files = Path(metrics_file), details_file(metrics_file)
    write_metrics(files[0], group, metrics)
    write_json(files[1], details, sort_keys=False)
    return files


def track_report(tracker: Any, files: tuple[Path, Path], results: Mapping[str, float],
                 details: Mapping[str, Any], step: int, tag_prefix: str = "") -> None:
    """Log a report into an MLflow run (a `bertcore.common.tracking.Tracker`): `results` as
    one-point metrics, the numbers and strings of `details` as tags under dotted names (lists
    and nulls stay in the JSON artifact), both files as artifacts."""
    tracker.log_results(results, step=step)
    tracker.set_tags({name: value for name, value in flatten(details, tag_prefix).items()
                      if isinstance(value, int | float | str | bool)})
    for path in files:
        tracker.log_artifact(path, "metrics")
