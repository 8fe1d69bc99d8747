"""The pretraining run of a model: found by the sha256 of its weights, which the run that
wrote them carries as the tag `model.sha256` (`MODEL_TAG`), so that evaluate, probe and the
downstream stages log beside it (evaluate and probe: `run_reports.py`)."""

from __future__ import annotations

import json
from pathlib import Path

from bertcore.common.digests import file_sha256
from bertcore.common.errors import BertError
from bertcore.common.mlflow_store import StoreLocked
from bertcore.common.pending import PendingRun
from bertcore.common.tracking import Tracker, TrackingTarget
from bertcore.saved.hf import WEIGHTS_NAME
from bertcore.saved.pretrained import RUN_INFO

MODEL_TAG = "model.sha256"  # set by pretraining's MLflow run (training/run/mlflow_run.py)


def pretraining_run(target: TrackingTarget | None, model_dir: str | Path
                    ) -> tuple[Tracker | PendingRun | None, int, str]:
    """The MLflow run that wrote the model in `model_dir`, the step it ended at, and, when
    there is no run to log into, why. With tracking off (`target` None): (None, step, "").
    A store locked for longer than the wait gives a `PendingRun`, which keeps the results
    for that run until the store takes them, and why."""
    path = Path(model_dir) / RUN_INFO
    step = int(json.loads(path.read_text(encoding="utf-8")).get("step", 0)) if path.is_file() else 0
    if target is None:
        return None, step, ""
    weights = Path(model_dir) / WEIGHTS_NAME
    if not weights.is_file():
        return None, step, _no_run(target, model_dir)
    sha256 = file_sha256(weights)
    try:
        run = Tracker.find(target.uri, MODEL_TAG, sha256)
    except StoreLocked as error:  # the results wait for the store (`common/pending.py`)
        return PendingRun(target.uri, MODEL_TAG, sha256, error), step, str(error)
    except BertError as error:  # after training, a store that is down costs only the mirror
        return None, step, str(error)
    return run, step, "" if run else _no_run(target, model_dir)


def _no_run(target: TrackingTarget, model_dir: str | Path) -> str:
    return (f"no MLflow run in {target.uri} wrote the weights in {model_dir} (tag "
            f"{MODEL_TAG}): they were not trained by `bert pretrain` with tracking on, or "
            "that run was deleted")

