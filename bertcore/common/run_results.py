"""A stage's results logged into its MLflow run: at once (`log_results`, what
`Tracker.log_report` calls), or, when the store did not take them, kept in its pending folder
(`common/pending.py`) and logged by the next client of the store (`flush_pending`: every
stage that reaches it, and `bert mlflow-sync`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bertcore.common.errors import first_line
from bertcore.common.mlflow_store import retried_on_lock
from bertcore.common.pending import (
    PendingRecord,
    RunResults,
    drop_record,
    pending_dir,
    pending_records,
)

log = logging.getLogger(__name__)


def log_results(client: Any, run_id: str, results: RunResults) -> None:
    """`Tracker.log_report`'s calls: the metrics (linked to the run's latest logged model and
    its training data with `link_model`), the files, then the tag that says they are there."""
    from mlflow.entities import Metric

    model_id, dataset = _model_and_dataset(client, run_id) if results.link_model else (
        None, None)
    client.log_batch(run_id, metrics=[
        Metric(key, float(value), results.timestamp_ms, results.step, model_id=model_id,
               dataset_name=dataset and dataset.name, dataset_digest=dataset and dataset.digest)
        for key, value in results.results.items() if value is not None])
    for path in results.files:
        client.log_artifact(run_id, str(path), results.artifact_path)
    if results.done_tag:
        client.set_tag(run_id, *results.done_tag)


def _model_and_dataset(client: Any, run_id: str) -> tuple[str | None, Any]:
    """The latest model logged by run `run_id` (None: none yet) and the dataset it was
    trained on (its run's input of context `training`; None: none logged)."""
    run = client.get_run(run_id)
    models = client.search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{run_id}'",
        order_by=[{"field_name": "creation_timestamp", "ascending": False}], max_results=1)
    training = [found.dataset for found in run.inputs.dataset_inputs
                if any(tag.key == "mlflow.data.context" and tag.value == "training"
                       for tag in found.tags)]
    return (models[0].model_id if models else None), (training[0] if training else None)


def kept_message(folder: Path) -> str:
    """What a user reads when results wait in the pending folder."""
    return (f"the results are kept in {folder} and logged into the run by the next stage that "
            "reaches the store, or by `bert mlflow-sync`")


def flush_pending(client: Any, uri: str) -> list[PendingRecord]:
    """Log the results the store did not take before (`common/pending.py`), oldest first;
    returns the records logged. Best effort: a record whose run is gone is dropped (said at
    info level), and the first that still fails stops the flush, the rest kept for later."""
    done = []
    for record in pending_records(uri):
        try:
            run_id = record.run_id or run_tagged(client, *record.run_tag)
            if run_id is None:
                log.info("MLflow: no run of %s is tagged %s = %s: the results kept in %s are "
                         "dropped", uri, *record.run_tag, record.folder)
            elif not record.results.done_tag or client.get_run(run_id).data.tags.get(
                    record.results.done_tag[0]) != record.results.done_tag[1]:
                retried_on_lock(uri, log_results, client, run_id, record.results)
        except Exception as exc:
            log.warning("MLflow: the results kept in %s stay there: %s", record.folder,
                      first_line(exc))
            break
        drop_record(record)
        done.append(record)
    if done:
        log.info("MLflow: logged %d pending result(s) kept in %s", len(done), pending_dir(uri))
    return done


def run_tagged(client: Any, tag: str, value: str) -> str | None:
    """The id of the latest active run of the store whose tag `tag` is `value`."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, filter_string=f"tags.`{tag}` = '{value}'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None
