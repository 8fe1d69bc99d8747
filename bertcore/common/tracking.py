"""MLflow, behind one small class: with `mlflow_client.py` (a client of the store, checked),
`mlflow_models.py` (a model logged with MLflow's transformers flavour) and `run_results.py` (a
stage's results logged, at once or later), the modules that import mlflow.

A `Tracker` is one MLflow run. It is opened before any training (an unreachable store is a
`BertError` then, so the user learns it in seconds, not after hours), it logs metrics with
their step, and it never kills training afterwards: if the store fails mid-run (a full disk,
a server gone), the first failed call logs one warning and the tracker goes quiet, while the
local TSV and JSON records stay complete. What MLflow and SQLAlchemy log about a failed call
(a database error comes with its whole traceback) is held back to debug level
(`common/held_logs.py`). A run whose store failed is ended FAILED at its end if the store
answers again by then; otherwise the next run opened in its experiment ends it, as it ends
any run left RUNNING by a process that has ended (killed outright): each run carries its
process in the tag `bert.process` (`_close_ended_runs`).

A SQLite store locked by another process is waited for (`mlflow_store.wait_unlocked`) before
a run is opened or searched, and again before a failed call is tried once more. A stage's
results (`log_report`, `log_results`) that the store still does not take are not lost: they
are kept in its pending folder (`common/pending.py`), which the next client of the store logs
(`flush_pending`: every stage that reaches it, and `bert mlflow-sync`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bertcore.common.errors import first_line
from bertcore.common.held_logs import logs_held
from bertcore.common.mlflow_client import store_client
from bertcore.common.mlflow_models import log_pipeline
from bertcore.common.mlflow_store import (
    STORE_LOGGERS,
    StoreLocked,
    retried_on_lock,
    sqlite_path,
    store_errors,
)
from bertcore.common.pending import RunResults, keep_pending
from bertcore.common.processes import has_ended, process_label
from bertcore.common.run_results import kept_message, log_results, run_tagged
from bertcore.common.validation import Bool, params_section, text

log = logging.getLogger(__name__)

PROCESS_TAG = "bert.process"  # the process running the run (`processes.process_label`)
CLOSED_TAG = "bert.closed"  # why a run was ended by another than its own process
NOTE_TAG = "mlflow.note.content"  # an experiment's or a run's description in MLflow's UI


@params_section
class TrackingConfig:
    """Where and how a pretrain run is recorded in MLflow."""

    # None: $MLFLOW_TRACKING_URI, else the default the stage passes
    uri: text(pattern=r"\S", allowed="null or a URI") | None = None
    experiment: text(pattern=r"\S", allowed="a non-empty name") = "bert-pretrain"
    log_checkpoints: Literal["none", "last", "all"] = "last"
    enabled: Bool = True


@dataclass(frozen=True)
class TrackingTarget:
    """Where a stage's MLflow runs go, as the edge resolved it: the store's URI, the
    experiment (`tracking.experiment`) and the DVC experiment the stage runs in (None outside
    one), which names its runs, and what else the edge knows of their surroundings."""

    uri: str
    experiment: str
    dvc_experiment: str | None = None
    source: Mapping[str, str] = field(default_factory=dict)  # mlflow.source.* tags of its runs
    dvc_stage: str | None = None  # the dvc.yaml stage running it (DVC_STAGE; None outside DVC)
    # params.yaml's sections beside those the stage parsed, which its run records with them
    # (pretrain: every section, the others as written)
    params: Mapping[str, Any] = field(default_factory=dict)


def resolve_uri(configured: str | None, default: str) -> str:
    """The tracking URI: the configured one, else $MLFLOW_TRACKING_URI, else `default`."""
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or default


def sqlite_uri(path: str | os.PathLike) -> str:
    """`sqlite:///` URI of a database file (absolute, so any working directory agrees)."""
    return f"sqlite:///{Path(path).resolve()}"


class Tracker:
    """One MLflow run. Use `Tracker.start(...)`; every logging call is safe to make.

    Through `MlflowClient`, not the fluent API: a stage holds several runs open at once (a
    child under its pretraining run, GLUE's fine-tunes under the suite's run), while the
    fluent API has one active run per thread and a process-wide tracking URI."""

    def __init__(self, client: Any, run_id: str, uri: str):
        self.client = client
        self.run_id = run_id
        self.uri = uri
        self.lost = False

    @classmethod
    def start(
        cls,
        uri: str,
        experiment: str,
        *,
        run_id: str | None = None,
        run_name: str | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        experiment_note: str | None = None,
    ) -> Tracker:
        """Open run `run_id` (a resumed run) or a new run; raise BertError if the store fails.

        `params` are logged only on a new run: MLflow forbids changing a logged param, and a
        resumed run already has them. `experiment_note`: the experiment's description, when
        it has none (its tag `mlflow.note.content`; a run's is the same tag of the run).
        """
        with store_errors(uri):
            client = store_client(uri)
            run = _resumable_run(client, run_id, uri) if run_id else None
            if run is None:
                return cls._open(client, uri,
                                 _experiment_id(client, experiment, uri, experiment_note),
                                 run_name, params, tags)
            _close_ended_runs(client, run.info.experiment_id, keep=run.info.run_id)
            client.update_run(run.info.run_id, status="RUNNING")
            client.log_batch(run.info.run_id, tags=_run_tags(tags))
        return cls(client, run.info.run_id, uri)

    @classmethod
    def _open(cls, client: Any, uri: str, experiment_id: str, run_name: str | None,
              params: Mapping[str, Any] | None, tags: Mapping[str, str] | None) -> Tracker:
        """A new run in the experiment, after closing its runs whose process has ended. The
        client's `log_batch` splits params into MLflow's batches and truncates a value over
        its limit itself."""
        from mlflow.entities import Param

        _close_ended_runs(client, experiment_id)
        run = client.create_run(experiment_id, run_name=run_name)
        client.log_batch(run.info.run_id, tags=_run_tags(tags), params=[
            Param(key, "null" if value is None else str(value))
            for key, value in (params or {}).items()])
        return cls(client, run.info.run_id, uri)

    @classmethod
    def find(cls, uri: str, tag: str, value: str) -> Tracker | None:
        """The latest active run, in any experiment of the store, whose tag `tag` is `value`
        (e.g. the run that wrote a model, by the sha256 of its weights); None when there is
        none. An unreachable store is a BertError."""
        database = sqlite_path(uri)
        if database is not None and not database.exists():
            return None  # no store yet, so no run: do not create one just to look
        with store_errors(uri):
            client = store_client(uri)
            run_id = run_tagged(client, tag, value)
        return cls(client, run_id, uri) if run_id else None

    def start_child(
        self,
        run_name: str,
        *,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Tracker:
        """A new run nested under this one, in its experiment: the `mlflow.parentRunId` tag,
        as `mlflow.start_run(nested=True)` sets it, so `mlflow ui` shows it under this run."""
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        with store_errors(self.uri):
            experiment_id = self.client.get_run(self.run_id).info.experiment_id
            return Tracker._open(self.client, self.uri, experiment_id, run_name, params,
                                 {**(tags or {}), MLFLOW_PARENT_RUN_ID: self.run_id})

    def _call(self, what: str, func, *args, **kwargs) -> bool:
        """Run one MLflow call; on the first failure warn and stop logging for this run.
        Synchronous on purpose: MLflow's async logging reports each failed batch from its
        own thread, with no way to go quiet after the first."""
        if self.lost:
            return False
        try:
            retried_on_lock(self.uri, func, *args, **kwargs)
            return True
        except Exception as exc:  # any failure of the store must not stop training
            self.lost = True
            problem = (str(exc) if isinstance(exc, StoreLocked) else
                       f"MLflow stopped answering ({what}: {first_line(exc)})")
            log.warning("%s; training goes on, the local log stays complete, nothing more is "
                        "sent to run %s", problem, self.run_id)
            return False

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key, float(value), now, int(step))
                 for key, value in metrics.items() if value is not None]
        self._call("log metrics", self.client.log_batch, self.run_id, metrics=batch)

    def log_results(self, results: Mapping[str, float], step: int) -> None:
        """A run's final numbers (a test accuracy, a speedup): metrics of one point each.
        MLflow's UI groups charts by the prefix before a '/' (sections sorted by name) and
        lists names without one last, so results carry no '/': a run's first charts stay
        its curves (train/..., val/...). Counts, baselines and settings are no metrics at
        all (they would be a page of one-point charts before the curves): tags, params or
        JSON artifacts."""
        self.log_report(RunResults(results, step))

    def log_report(self, results: RunResults) -> bool:
        """Log a stage's results (metrics of one point, the files beside them, the tag that
        says the run holds them) into this run, unless it holds them already; returns
        whether it logged. What the store does not take is kept and logged later
        (`common/pending.py`), with a warning saying where it waits."""
        grouped = sorted(key for key in results.results if "/" in key)
        if grouped:
            raise ValueError(f"result names must not contain '/': {grouped}")
        if results.done_tag and self.tags().get(results.done_tag[0]) == results.done_tag[1]:
            return False
        if self._call("log results", log_results, self.client, self.run_id, results):
            return True
        log.warning("%s", kept_message(keep_pending(self.uri, results, run_id=self.run_id)))
        return False

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Tags (numbers are shown with 6 significant digits)."""
        from mlflow.entities import RunTag

        batch = [RunTag(key, f"{value:.6g}" if isinstance(value, float) else str(value))
                 for key, value in tags.items()]
        self._call("set tags", self.client.log_batch, self.run_id, tags=batch)

    def tags(self) -> dict[str, str]:
        """The run's tags as the store has them now (none once the store has failed)."""
        found: dict[str, str] = {}
        self._call("read tags", lambda: found.update(self.client.get_run(self.run_id).data.tags))
        return found

    def log_transformers_model(self, folder: str | os.PathLike, task: str, name: str,
                               pairs: bool = False) -> bool:
        """A Hugging Face model folder (with its tokenizer and its model card, README.md) as
        an MLflow Model that predicts as `task`'s pipeline (fill-mask, text-classification),
        under `name`: registrable in the Model Registry, loaded by `mlflow.pyfunc`, served by
        `mlflow models serve` (`mlflow_models.py` says what it takes and answers). The logged
        model gets the run's `mlflow.source.*` tags (its git commit). `pairs`: a
        sentence-pair classifier, predicting on `text` and `text_pair`. Texts longer than
        the model's positions are cut to them. Nothing is downloaded: no card nor licence
        from the Hub, no requirements inferred (the installed torch and transformers are its
        requirements)."""
        source = {key: value for key, value in self.tags().items()
                  if key.startswith("mlflow.source.")}
        return self._call(f"log the model {name}", log_pipeline, self.client, self.run_id,
                          self.uri, source, Path(folder), task, name, pairs)

    def log_dataset(self, name: str, digest: str, source: str, context: str,
                    profile: Mapping[str, Any] | None = None) -> None:
        """A dataset as an input of the run (its Datasets in the UI; the model's page shows
        it beside the metrics logged with `link_model`): `name`, our `digest` of its files,
        the folder they are in (`source`), what the run did with it (`context`: training)."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(name=name, digest=digest, source_type="local",
                          source=json.dumps({"uri": source}),
                          profile=json.dumps(dict(profile)) if profile else None)
        self._call(f"log the dataset {name}", self.client.log_inputs, self.run_id,
                   [DatasetInput(dataset, [InputTag("mlflow.data.context", context)])])

    def log_artifacts(self, local_dir: str | os.PathLike, artifact_path: str) -> None:
        self._call(f"upload {artifact_path}", self.client.log_artifacts, self.run_id,
                   str(local_dir), artifact_path)

    def log_artifact(self, local_file: str | os.PathLike, artifact_path: str) -> None:
        self._call(f"upload {Path(local_file).name}", self.client.log_artifact, self.run_id,
                   str(local_file), artifact_path)

    def finish(self, status: Literal["FINISHED", "FAILED", "KILLED"] = "FINISHED") -> None:
        """End the run with `status`. A run whose store failed on the way ends FAILED (KILLED
        when interrupted): its MLflow record is incomplete. If the store still fails, one
        more try only (the next run in the experiment ends it: `_close_ended_runs`)."""
        if not self.lost:
            self._call("end run", self.client.set_terminated, self.run_id, status)
            return
        try:
            with logs_held(STORE_LOGGERS):
                self.client.set_terminated(self.run_id,
                                           "KILLED" if status == "KILLED" else "FAILED")
        except Exception as exc:
            log.debug("MLflow run %s could not be ended (%s): the next run in its "
                      "experiment ends it", self.run_id, first_line(exc))


def _resumable_run(client: Any, run_id: str, uri: str) -> Any:
    """Run `run_id`, to continue it; None, with a warning, when the store has no such run or
    it was deleted. Any other failure of the store raises: a store that cannot be read is not
    a store without the run."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        log.warning("MLflow run %s not found in %s: starting a new run", run_id, uri)
        return None
    if run.info.lifecycle_stage != "active":
        log.warning("MLflow run %s was deleted: starting a new run", run_id)
        return None
    return run


def _experiment_id(client: Any, experiment: str, uri: str, note: str | None = None) -> str:
    """The id of the experiment named `experiment`, created (or restored) when needed
    (`mlflow.set_experiment` refuses a deleted one and takes no artifact location). A SQLite
    store's artifacts go next to the database file (MLflow's default is `./mlruns` under the
    current directory, which a `dvc exp run --temp` copy throws away). `note` becomes its
    description when it has none (a user's own stays)."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        database = sqlite_path(uri)
        location = (database.parent / "mlartifacts").resolve().as_uri() if database else None
        experiment_id = client.create_experiment(experiment, location)
    else:
        experiment_id = found.experiment_id
        if found.lifecycle_stage != "active":
            client.restore_experiment(experiment_id)
    if note and (found is None or NOTE_TAG not in found.tags):
        client.set_experiment_tag(experiment_id, NOTE_TAG, note)
    return experiment_id


def _run_tags(tags: Mapping[str, str] | None) -> list:
    """A run's tags, those without a value left out, with the process that runs it."""
    from mlflow.entities import RunTag

    every = {**(tags or {}), PROCESS_TAG: process_label()}  # None without /proc: left out
    return [RunTag(key, str(value)) for key, value in every.items() if value]


def _close_ended_runs(client: Any, experiment_id: str, keep: str | None = None) -> None:
    """Best effort: end FAILED the runs of the experiment left RUNNING by a process that has
    ended (killed outright, or whose store failed until its end), but `keep`, the run about
    to be resumed. Ours because MLflow keeps such a run RUNNING for ever: it knows no process."""
    try:
        with logs_held(STORE_LOGGERS):
            running = client.search_runs([experiment_id],
                                         filter_string="attributes.status = 'RUNNING'",
                                         max_results=100)
            for run in running:
                label = run.data.tags.get(PROCESS_TAG)
                if run.info.run_id == keep or not label or not has_ended(label):
                    continue
                client.set_tag(run.info.run_id, CLOSED_TAG,
                               "ended FAILED by a later run: its process had ended")
                client.set_terminated(run.info.run_id, "FAILED")
                log.info("MLflow run %s (%s) was left RUNNING by a process that has ended: "
                         "marked FAILED", run.info.run_id, run.info.run_name)
    except Exception as exc:  # the caller's own calls will tell if the store is down
        log.debug("MLflow runs left RUNNING could not be ended: %s", first_line(exc))
