"""What `finetune` and `prune` share: the pretrained model's run record, and MLflow logging
beside the pretraining run (a child run with the results and the whole metrics file as an
artifact, the headline numbers in the pretraining run itself, at its last step)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bertcore.atomic import write_json
from bertcore.pretraining import RUN_INFO
from bertcore.tracking import Tracker, TrackingConfig
from stages.pretrain import tracking_uri


def run_info(model_dir: str | Path) -> dict[str, Any]:
    """training.json of a model folder (the MLflow run and step that made it); {} if absent."""
    path = Path(model_dir) / RUN_INFO
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def metric_names(values: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Nested numbers as flat MLflow metric names: {"a": {"b": 1}} -> {"a/b": 1.0}; lists and
    strings are left out."""
    flat: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(metric_names(value, f"{name}/"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            flat[name] = float(value)
    return flat


class DownstreamTracking:
    """A child run of the pretraining run the model came from (a new top-level run when the
    model has no run), plus headline metrics in that pretraining run."""

    def __init__(self, tracking: TrackingConfig, model_dir: str | Path, name: str,
                 params: Mapping[str, Any]):
        self.name = name
        self.parent: Tracker | None = None
        self.run: Tracker | None = None
        self.step = 0
        if not tracking.enabled:
            return
        uri = tracking_uri(tracking)
        info = run_info(model_dir)
        self.step = int(info.get("step", 0))
        if info.get("mlflow_run_id"):
            self.parent = Tracker.attach(uri, info["mlflow_run_id"])
        if self.parent is not None:
            self.run = self.parent.start_child(name, params=params)
        else:
            self.run = Tracker.start(uri, tracking.experiment, run_name=name, params=params)

    def log_curve(self, name: str, value: float, step: int) -> None:
        if self.run:
            self.run.log_metrics({name: value}, step=step)

    def finish(self, summary: Mapping[str, Any], results: Sequence[str],
               headline: Mapping[str, float]) -> None:
        """The child run gets the numbers of `summary[results]` as metrics and the whole
        summary as a JSON artifact (counts and settings are no charts); the pretraining run
        gets `headline`, at its last step."""
        if self.run:
            numbers = metric_names({key: summary[key] for key in results})
            self.run.log_metrics({**numbers, **headline}, step=0)
            with tempfile.TemporaryDirectory() as tmp:
                write_json(Path(tmp) / f"{self.name}.json", summary, sort_keys=False)
                self.run.log_artifacts(tmp, "metrics")
            self.run.finish()
        if self.parent:
            self.parent.log_metrics(headline, step=self.step)

    def fail(self) -> None:
        if self.run:
            self.run.finish("FAILED")
