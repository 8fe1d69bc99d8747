"""What `evaluate`, `finetune` and `prune` share: the pretraining run of the model; and for the
last two, MLflow logging beside it: a child run with the stage's curves, its results (one point
each), its details as tags and both report files as artifacts; and the results in the
pretraining run itself, at its last step, named `<stage>_<result>`."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bertcore.common.digests import file_sha256, fingerprint_params
from bertcore.common.errors import BertError
from bertcore.common.null_tracker import NullTracker
from bertcore.common.tracking import Tracker, TrackingConfig
from bertcore.model.hf import WEIGHTS_NAME
from bertcore.training.run.mlflow_run import MODEL_TAG
from bertcore.training.run.pretrain import RUN_INFO
from bertstages.repo import experiment_name, tracking_uri
from bertstages.report import track_report

log = logging.getLogger("bert.downstream")


def pretraining_run(tracking: TrackingConfig, model_dir: str | Path
                    ) -> tuple[Tracker | None, int, str]:
    """The MLflow run that wrote the model in `model_dir` (found by the sha256 of its weights,
    which that run carries as a tag), the step it ended at, and, when there is no run to log
    into, why. With tracking.enabled false: (None, step, "")."""
    path = Path(model_dir) / RUN_INFO
    step = int(json.loads(path.read_text(encoding="utf-8")).get("step", 0)) if path.is_file() else 0
    if not tracking.enabled:
        return None, step, ""
    weights = Path(model_dir) / WEIGHTS_NAME
    try:
        run = Tracker.find(tracking_uri(tracking), MODEL_TAG, file_sha256(weights)) if (
            weights.is_file()) else None
    except BertError as error:  # after training, a store that is down costs only the mirror
        return None, step, str(error)
    if run is None:
        return None, step, (f"no MLflow run in {tracking_uri(tracking)} wrote the weights in "
                            f"{model_dir} (tag {MODEL_TAG}): they were not trained by `bert "
                            "pretrain` with tracking on, or that run was deleted")
    return run, step, ""


def child_run_name(stage: str, params: Mapping[str, Any]) -> str:
    """`finetune-<DVC experiment>`, or `finetune-<6 hex digits of its params>` outside one:
    the runs of a stage under one pretraining run differ by these (and the pretraining run
    they hang under is the model's)."""
    return f"{stage}-{experiment_name() or fingerprint_params(params)[:6]}"


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
        self.parent, self.step, _ = pretraining_run(tracking, model_dir)
        run_name = child_run_name(name, params)
        try:
            self.run = self.parent.start_child(run_name, params=params) if self.parent else (
                Tracker.start(tracking_uri(tracking), tracking.experiment, run_name=run_name,
                              params=params))
        except BertError as error:  # the results are in the metrics files all the same
            log.warning("nothing will be logged to MLflow: %s", error)
            self.parent = None

    def start_child(self, run_name: str, params: Mapping[str, Any]) -> Tracker | NullTracker:
        """A run nested under this child run (GLUE's fine-tunes under the suite's run); one
        that logs nothing when this one does not, or when the store fails to open it."""
        if self.run is None:
            return NullTracker()
        try:
            return self.run.start_child(run_name, params=params)
        except BertError as error:
            log.warning("a nested MLflow run could not be opened: %s", error)
            return NullTracker()

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

    @contextlib.contextmanager
    def failing_on_error(self) -> Iterator[None]:
        """The child run ends FAILED when the block raises (an interrupt too)."""
        try:
            yield
        except BaseException:
            self.fail()
            raise
