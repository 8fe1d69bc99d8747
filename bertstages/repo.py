"""Where the pipeline's things live: the repository (also under `dvc exp run --temp`) and the
commit it has checked out, its MLflow store and the DVC experiment a stage runs in."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertcore.common.tracking import TrackingConfig, TrackingTarget, resolve_uri, sqlite_uri


def repo_root(start: str | os.PathLike | None = None) -> Path:
    """The repository the pipeline runs in. `dvc exp run --temp/--queue` runs stages in a
    copy under `<repo>/.dvc/tmp/exps/...`: the real repo is the one above that copy (what is
    written inside the copy is thrown away)."""
    here = Path(start or os.environ.get("DVC_ROOT") or Path.cwd()).resolve()
    parts = here.parts
    for i in range(len(parts) - 2):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    for candidate in (here, *here.parents):
        if (candidate / ".dvc").is_dir() or (candidate / ".git").exists():
            return candidate
    return here


def experiment_name() -> str | None:
    """The DVC experiment this command runs in: `dvc exp run` sets DVC_EXP_NAME for each
    stage's command (its own random name, or `--name`); None outside one."""
    return os.environ.get("DVC_EXP_NAME") or None


def tracking_uri(config: TrackingConfig) -> str:
    """tracking.uri, else $MLFLOW_TRACKING_URI, else mlflow.db at the repo root."""
    return resolve_uri(config.uri, sqlite_uri(repo_root() / "mlflow.db"))


def tracking_target(config: TrackingConfig, stage: str,
                    params: Mapping[str, Any] | None = None) -> TrackingTarget | None:
    """Where `stage` logs: the store, its experiment, the DVC experiment's name and stage,
    its runs' source, and `params`, the sections its run records beside those it parsed;
    None with tracking.enabled false."""
    if not config.enabled:
        return None
    return TrackingTarget(tracking_uri(config), config.experiment, experiment_name(),
                          source_tags(stage), os.environ.get("DVC_STAGE") or None,
                          dict(params or {}))


def source_tags(stage: str) -> dict[str, str]:
    """MLflow's `mlflow.source.*` tags of a stage's run (its Source in the UI): the commit
    checked out, and the stage (`dvc.yaml:pretrain` under DVC, else `bert pretrain`)."""
    dvc_stage = os.environ.get("DVC_STAGE")
    tags = {"mlflow.source.name": f"dvc.yaml:{dvc_stage}" if dvc_stage else f"bert {stage}",
            "mlflow.source.type": "LOCAL"}
    try:  # the commit checked out (none outside git)
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root(), capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return tags
    commit = proc.stdout.strip() if proc.returncode == 0 else ""
    return {"mlflow.source.git.commit": commit, **tags} if commit else tags
