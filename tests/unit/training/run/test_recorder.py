"""The pretraining run's recorder where nothing is tracked: a `NullRecorder` that says why
(tracking off, no store given, a process other than rank 0), takes every call a tracked
run's recorder takes, and opens no store."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bertcore.common.tracking import TrackingConfig, TrackingTarget, sqlite_uri
from bertcore.training.run.mlflow_run import NullRecorder, PretrainRecorder


def _plan(enabled: bool, rank: int, world_size: int) -> SimpleNamespace:
    """What the recorder reads of a plan before it opens a run."""
    return SimpleNamespace(config=SimpleNamespace(tracking=TrackingConfig(enabled=enabled)),
                           dist=SimpleNamespace(is_main=rank == 0, rank=rank,
                                                world_size=world_size))


@pytest.mark.parametrize("enabled, rank, given, reason", [
    (False, 0, True, "tracking.enabled is false"),
    (True, 0, False, "no MLflow store was given to record it in"),
    (True, 1, True, "process 1 of 2: rank 0 records the run"),
    (False, 1, False, "process 1 of 2: rank 0 records the run"),
])
def test_an_untracked_run_says_why_and_opens_no_store(tmp_path, enabled, rank, given, reason):
    store = tmp_path / "mlflow.db"
    target = TrackingTarget(sqlite_uri(store), "untracked") if given else None
    recorder = PretrainRecorder.start(_plan(enabled, rank, world_size=2), target)
    assert isinstance(recorder, NullRecorder)
    assert recorder.reason == reason
    # every call of a run, from its first phase to its end, taken and dropped
    recorder.on_phase(1)
    recorder.log_train({"step": 1, "epoch": 0.1, "loss": 2.5}, tokens_per_s=1000.0)
    recorder.log_eval(1, {"mlm_loss": 2.0})
    recorder.on_checkpoint(tmp_path / "step-00000001")
    recorder.finish(SimpleNamespace(steps=1), model=None, step=1)
    recorder.fail(KeyboardInterrupt())
    assert not store.exists() and not (tmp_path / "mlartifacts").exists()
