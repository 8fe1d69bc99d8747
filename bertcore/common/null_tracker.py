"""A run that logs nothing, for where nothing is tracked (tracking off, or a store that could
not open a run): the same calls as `bertcore.common.tracking.Tracker`, so the code that logs
never asks whether it is tracked."""

from __future__ import annotations

from typing import Any


class NullTracker:
    run_id = None  # no MLflow run (a Tracker's is its run's id)

    def start_child(self, run_name: str, **kwargs: Any) -> NullTracker:
        return self

    def tags(self) -> dict[str, str]:
        return {}

    def log_transformers_model(self, *args: Any, **kwargs: Any) -> bool:
        return False  # no model logged

    def log_report(self, *args: Any, **kwargs: Any) -> bool:
        return False  # nothing logged

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        """Every other call of a Tracker: nothing to log, nothing to end."""

    log_metrics = log_results = set_tags = log_artifacts = log_artifact = finish = _nothing
