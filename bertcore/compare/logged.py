"""The comparison as an MLflow run of its own: tagged with each side's label and sources
(folders, commits, run ids), each side's difference to A and its interval's ends as metrics
(`B-A.eval.mlm_accuracy`, `..._ci95_low`, `..._ci95_high`), and the markdown and JSON as
artifacts under `compare/`."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from bertcore.common.tracking import Tracker
from bertcore.compare.comparison import Comparison
from bertcore.compare.files import write_comparison_json, write_comparison_markdown
from bertcore.compare.tables import letter

ARTIFACTS = "compare"


def comparison_tags(comparison: Comparison) -> dict[str, str]:
    tags = {}
    for i, side in enumerate(comparison.sides):
        tags[f"compare.{letter(i)}.label"] = side.label
        tags[f"compare.{letter(i)}.sources"] = ",".join(
            f"{s.kind}:{s.resolved}" for s in side.sources)
        tags[f"compare.{letter(i)}.seeds"] = ",".join(
            "?" if seed is None else str(seed) for seed in side.seeds)
    return tags


def comparison_metrics(comparison: Comparison) -> dict[str, float]:
    """Each later side's difference to A with its interval's ends: `B-A.<stage>.<figure>`."""
    metrics = {}
    for row in comparison.rows:
        for i, delta in enumerate(row.deltas, start=1):
            name = f"{letter(i)}-A.{row.key}"
            metrics[name] = delta.estimate.value
            metrics[f"{name}_ci95_low"] = delta.estimate.low
            metrics[f"{name}_ci95_high"] = delta.estimate.high
    return metrics


def log_comparison(uri: str, experiment: str, comparison: Comparison,
                   source: Mapping[str, str] | None = None) -> str:
    """Log `comparison` as a new run in `experiment` of the store `uri`; its run id."""
    labels = [side.label for side in comparison.sides]
    tracker = Tracker.start(uri, experiment, run_name=" vs ".join(labels),
                            tags={**(source or {}), **comparison_tags(comparison)})
    tracker.log_results(comparison_metrics(comparison), step=0)
    with tempfile.TemporaryDirectory(prefix="bert-compare-") as tmp:
        for path in (write_comparison_markdown(Path(tmp) / "comparison.md", comparison),
                     write_comparison_json(Path(tmp) / "comparison.json", comparison)):
            tracker.log_artifact(path, ARTIFACTS)
    tracker.finish()
    return tracker.run_id
