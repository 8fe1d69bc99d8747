"""Where one run's per-item outcomes come from, tried in this order: a folder holding
`*_items.json` (a `metrics/` folder, or a folder holding `metrics/`), an MLflow run
(`mlflow:<run id>`: its artifacts under `metrics/`), a DVC experiment or a git revision of the
repository (its commit's `metrics/*_items.json`). Each comes with the params it ran with, as
far as they can be read (the `params.yaml` beside the folder or in the commit; the MLflow
run's params), so that the edge can tell which pretraining seed it is."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.common.mlflow_client import download_run
from bertcore.common.outcomes import StageItems, read_items
from bertcore.compare import revisions

STAGE_ORDER = ("eval", "probe", "finetune", "prune", "glue")  # the rest after, by name
ITEMS_SUFFIX = "_items.json"
METRICS = "metrics"
MLFLOW_PREFIX = "mlflow:"


@dataclass(frozen=True)
class Source:
    """One run's outcomes, stage by stage, and where they were found: `kind` is folder,
    mlflow or git; `resolved` the absolute folder, the run id or the commit."""

    name: str
    kind: str
    resolved: str
    stages: dict[str, StageItems]
    params_yaml: str | None = None  # the params.yaml of the folder's repo or of the commit
    run_params: Mapping[str, str] = field(default_factory=dict)  # an MLflow run's
    commit: str | None = None  # the commit (of an MLflow run: its mlflow.source.git.commit)

    def describe(self) -> str:
        """`git 1a2b3c4d`, `mlflow 0123abcd`, `folder` (its name is the path typed; the JSON
        holds it resolved)."""
        return self.kind if self.kind == "folder" else f"{self.kind} {self.resolved[:8]}"


def resolve_source(text: str, repo: Path | None, tracking_uri: str) -> Source:
    """The source `text` names (see the module's docstring); one BertError naming what was
    tried when it names none."""
    found = _folder_source(text)
    if found is None and text.startswith(MLFLOW_PREFIX):
        return _mlflow_source(text, tracking_uri)
    if found is None and repo is not None:
        found = _git_source(text, repo)
    if found is None:
        where = f"of the repository {repo}" if repo is not None else "(no git repository here)"
        raise BertError(f"{text!r} is no folder holding *{ITEMS_SUFFIX} (nor one holding "
                        f"{METRICS}/), no {MLFLOW_PREFIX}<run id>, and no DVC experiment or "
                        f"git revision {where}")
    return found


def _read_stages(files: list[Path]) -> dict[str, StageItems]:
    """Each file's outcomes by stage, the stages in STAGE_ORDER, then the others by name."""
    stages: dict[str, StageItems] = {}
    for path in sorted(files):
        items = read_items(path)
        if items.stage in stages:
            raise BertError(f"two outcomes files of the stage {items.stage} in {path.parent}: "
                            "keep one")
        stages[items.stage] = items

    def rank(stage: str) -> tuple[int, str]:
        return (STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER), stage)

    return {stage: stages[stage] for stage in sorted(stages, key=rank)}


def _folder_source(text: str) -> Source | None:
    folder = Path(text)
    for metrics, repo in ((folder, folder.parent), (folder / METRICS, folder)):
        files = sorted(metrics.glob(f"*{ITEMS_SUFFIX}")) if metrics.is_dir() else []
        if files:
            params = repo / "params.yaml"
            return Source(text, "folder", str(metrics.resolve()), _read_stages(files),
                          params.read_text(encoding="utf-8") if params.is_file() else None)
    return None


def _mlflow_source(text: str, tracking_uri: str) -> Source:
    run_id = text[len(MLFLOW_PREFIX):]
    with tempfile.TemporaryDirectory(prefix="bert-compare-") as tmp:
        record = download_run(tracking_uri, run_id, METRICS, tmp) if run_id else None
        if record is None:
            raise BertError(f"{text}: the MLflow store {tracking_uri} has no run {run_id!r} "
                            "(pass --tracking-uri, or set MLFLOW_TRACKING_URI)")
        files = sorted((Path(tmp) / METRICS).glob(f"*{ITEMS_SUFFIX}"))
        if not files:
            raise BertError(f"{text}: the run has no {METRICS}/*{ITEMS_SUFFIX} among its "
                            "artifacts; rerun its stages with this version of bert")
        stages = _read_stages(files)
    return Source(text, "mlflow", run_id, stages, None, record.params,
                  record.tags.get("mlflow.source.git.commit"))


def _git_source(text: str, repo: Path) -> Source | None:
    commit = revisions.experiment_commit(repo, text) or revisions.commit_of(repo, text)
    if commit is None:
        return None
    paths = revisions.files_at(repo, commit, METRICS, ITEMS_SUFFIX)
    if not paths:
        raise BertError(f"{text} (commit {commit[:7]}) has no {METRICS}/*{ITEMS_SUFFIX}: its "
                        "stages ran before bert saved per-item outcomes; rerun them")
    with tempfile.TemporaryDirectory(prefix="bert-compare-") as tmp:
        stages = _read_stages(revisions.copy_at(repo, commit, paths, tmp))
    return Source(text, "git", commit, stages, revisions.file_at(repo, commit, "params.yaml"),
                  commit=commit)
