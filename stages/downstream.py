"""What `finetune` and `prune` share: the pretrained model's run record, and MLflow logging
beside the pretraining run: a child run with the stage's curves, its results (one point each),
its details as tags and both report files as artifacts; and the results in the pretraining run
itself, at its last step, named `<stage>_<result>`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertcore.common.tracking import Tracker, TrackingConfig
from bertcore.training.pretrain import RUN_INFO
from stages.repo import tracking_uri
from stages.report import track_report


def run_info(model_dir: str | Path) -> dict[str, Any]:
    """training.json of a model folder (the MLflow run and step that made it); {} if absent."""
    path = Path(model_dir) / RUN_INFO
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


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

    def finish(self, files: tuple[Path, Path], results: Mapping[str, float],
               details: Mapping[str, Any]) -> None:
        """Log the report (`files`: the metrics and details files just written): the child run
        gets `results` as metrics, the scalars of `details` as tags and both files as
        artifacts; the pretraining run gets `results`, named `<stage>_<result>`, at its last
        step."""
        if self.run:
            track_report(self.run, files, results, details, step=0)
            self.run.finish()
        if self.parent:
            self.parent.log_results({f"{self.name}_{k}": v for k, v in results.items()},
                                    step=self.step)

    def fail(self) -> None:
        if self.run:
            self.run.finish("FAILED")
