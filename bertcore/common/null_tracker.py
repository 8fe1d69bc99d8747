"""A run that logs nothing, for where nothing is tracked (tracking off, or a store that could
not open a run): the same calls as `bertcore.common.tracking.Tracker`, so the code that logs
never asks whether it is tracked."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


class NullTracker:
    run_id = None  # no MLflow run (a Tracker's is its run's id)

    def start_child(self, run_name: str, **kwargs: Any) -> NullTracker:
        return self

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def log_results(self, results: Mapping[str, float], step: int) -> None:
        pass

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        pass

    def tags(self) -> dict[str, str]:
        return {}

    def log_transformers_model(self, folder: str | os.PathLike, task: str, name: str,
                               card: str | None = None) -> bool:
        return False

    def log_artifacts(self, local_dir: str | os.PathLike, artifact_path: str) -> None:
        pass

    def log_artifact(self, local_file: str | os.PathLike, artifact_path: str) -> None:
        pass

    def finish(self, status: str = "FINISHED") -> None:
        pass
