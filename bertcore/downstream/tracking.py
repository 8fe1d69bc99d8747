"""MLflow logging of the stages after pretraining (finetune, prune, glue): a child run of the
model's pretraining run with the stage's curves, its results (one point each), its details as
tags and both report files as artifacts; and the results in the pretraining run itself, at its
last step, named `<stage>_<result>`."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bertcore.common.digests import fingerprint_params
from bertcore.common.errors import BertError
from bertcore.common.null_tracker import NullTracker
from bertcore.common.report import track_report
from bertcore.common.tracking import Tracker, TrackingTarget
from bertcore.saved.model_run import pretraining_run

log = logging.getLogger("bert.downstream")


def child_run_name(stage: str, params: Mapping[str, Any], dvc_experiment: str | None) -> str:
    """`finetune-<DVC experiment>`, or `finetune-<6 hex digits of its params>` outside one:
    the runs of a stage under one pretraining run differ by these (and the pretraining run
    they hang under is the model's)."""
    return f"{stage}-{dvc_experiment or fingerprint_params(params)[:6]}"


class DownstreamTracking:
    """A child run of the pretraining run the model came from (a new top-level run when the
    model has no run), plus headline metrics in that pretraining run; runs that log nothing
    (`NullTracker`) with tracking off (`target` None) or a store that fails to open them."""

    def __init__(self, target: TrackingTarget | None, model_dir: str | Path, name: str,
                 params: Mapping[str, Any]):
        self.name = name
        self.parent: Tracker | NullTracker = NullTracker()
        self.run: Tracker | NullTracker = NullTracker()
        self.step = 0
        if target is None:
            return
        parent, self.step, _ = pretraining_run(target, model_dir)
        run_name = child_run_name(name, params, target.dvc_experiment)
        tags = dict(target.source)
        try:
            self.run = parent.start_child(run_name, params=params, tags=tags) if (
                parent) else Tracker.start(target.uri, target.experiment,
                                           run_name=run_name, params=params, tags=tags)
        except BertError as error:  # the results are in the metrics files all the same
            log.warning("nothing will be logged to MLflow: %s", error)
        # the pretraining run's results: a PendingRun keeps them while its store is locked
        self.parent = parent or NullTracker()

    def start_child(self, run_name: str, params: Mapping[str, Any]) -> Tracker | NullTracker:
        """A run nested under this child run (GLUE's fine-tunes under the suite's run); one
        that logs nothing when this one does not, or when the store fails to open it."""
        try:
            return self.run.start_child(run_name, params=params)
        except BertError as error:
            log.warning("a nested MLflow run could not be opened: %s", error)
            return NullTracker()

    def log_model(self, folder: str | Path, task: str, pairs: bool = False) -> None:
        """The stage's model folder (its README.md the model card) as an MLflow Model of the
        child run, `task`'s pipeline, named `model`; `pairs`: a sentence-pair classifier (it
        predicts on `text` and `text_pair`)."""
        self.run.log_transformers_model(folder, task, "model", pairs=pairs)

    def finish(self, files: tuple[Path, ...], results: Mapping[str, float],
               details: Mapping[str, Any], charts: Sequence[Path] = ()) -> None:
        """Log the report (`files`: the metrics and details files just written, and the
        per-item outcomes where the stage has them): the child run gets `results` as metrics,
        the scalars of `details` as tags and the files as artifacts; the pretraining run gets
        `results`, named `<stage>_<result>`, at its last step."""
        track_report(self.run, files, results, step=0, details=details)
        for chart in charts:
            self.run.log_artifact(chart, "plots")
        self.run.finish()
        self.parent.log_results({f"{self.name}_{k}": v for k, v in results.items()},
                                step=self.step)

    def log_train_loss(self, which: str, step: int, loss: float) -> None:
        """A fine-tune's training loss (`which`: the model trained) at its step."""
        self.run.log_metrics({f"{which}/train_loss": loss}, step=step)

    @contextlib.contextmanager
    def failing_on_error(self) -> Iterator[None]:
        """The child run ends FAILED when the block raises (an interrupt too)."""
        try:
            yield
        except BaseException:
            self.run.finish("FAILED")
            raise
