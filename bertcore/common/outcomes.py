"""Per-item outcomes: what a model got on each item a stage scored, saved beside the stage's
metrics (`metrics/<stage>_items.json`, in git, so in every experiment's commit, and in the
MLflow run), so that every headline figure has its interval (`bertcore.common.intervals`) and
two models scored on the same items compare paired (`bert compare`). This module is the
format's one owner: its writer and its reader.

```
{"format": "bert-items/1", "stage": "eval",
 "sets": {"val": {"digest": "<sha256 of what makes the items>", "items": 1172,
                  "unit": "val pair, masks of eval.seed"}},
 "figures": {"mlm_accuracy": {"set": "val", "statistic": "ratio", "better": "higher",
                              "over_runs": "mean", "runs": ["42"],
                              "columns": {"num": [[3, 5, ...]], "den": [[8, 7, ...]]}}}}
```

- A figure's name is its dotted path under the stage's key in `metrics/<stage>.json`
  (`builtin.cloze.p_at_1`, `gain.accuracy`).
- A set's `digest` names its items: the same digest on two sides means item i of one is item i
  of the other (the same val pairs with the same masks, the same probe items, the same test
  split). A comparison pairs items only then.
- Each column holds one list per run of the stage (`runs`: fine-tune seeds; one run
  elsewhere), each with one value per item; `statistic` (`intervals.STATISTICS`) turns the
  columns into the figure, `over_runs` combines the runs, and `scale` (absent: 1) is what the
  metrics file multiplies it by (GLUE's figures are x100).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertcore.common.atomic import atomic_file
from bertcore.common.errors import BertError
from bertcore.common.intervals import STATISTICS, Estimate, Runs, estimate

FORMAT = "bert-items/1"


def items_file(metrics_file: str | os.PathLike) -> Path:
    """Where the outcomes of `metrics_file`'s figures go: metrics/eval.json ->
    metrics/eval_items.json."""
    path = Path(metrics_file)
    return path.with_name(f"{path.stem}_items{path.suffix or '.json'}")


def items_digest(*parts: Any) -> str:
    """The identity of a set of items: sha256 over what makes them (canonical JSON)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ItemSet:
    """Items scored: their identity, their number and what one item is."""

    digest: str
    items: int
    unit: str


@dataclass(frozen=True)
class Figure:
    """One headline figure's per-item outcomes, on the items of set `items`."""

    items: str
    runs: Runs
    higher_is_better: bool = True
    run_labels: tuple[str, ...] = ("1",)
    scale: float = 1.0  # the metrics file reports the statistic times this (GLUE's x100)

    def estimate(self) -> Estimate:
        return estimate(self.runs).scaled(self.scale)


@dataclass
class StageItems:
    """What one stage scored, item by item."""

    stage: str
    sets: dict[str, ItemSet] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)

    def estimates(self) -> dict[str, Estimate]:
        """Each figure with its 95% interval."""
        return {name: figure.estimate() for name, figure in self.figures.items()}


def _plain(column: np.ndarray) -> list:
    """A column as JSON: integers as integers, floats to 7 significant digits (a loss per
    sequence; the intervals need no more)."""
    if np.issubdtype(column.dtype, np.integer) or np.issubdtype(column.dtype, np.bool_):
        return column.astype(np.int64).tolist()
    return [[float(f"{v:.7g}") for v in run] for run in column.tolist()]


def write_items(path: str | os.PathLike, items: StageItems) -> Path:
    """Write `items` whole (`items_text`)."""
    with atomic_file(path) as handle:
        handle.write(items_text(items))
    return Path(path)


def items_text(items: StageItems) -> str:
    """The file of `items`: the structure indented, each column on one line."""
    columns: list[str] = []

    def placeholder(column: np.ndarray) -> str:
        columns.append(json.dumps(_plain(column[0]), separators=(",", ":")))
        return f"@column{len(columns) - 1}@"

    figures = {
        name: {"set": figure.items, "statistic": figure.runs.statistic,
               "better": "higher" if figure.higher_is_better else "lower",
               "over_runs": figure.runs.over_runs, "runs": list(figure.run_labels),
               **({"scale": figure.scale} if figure.scale != 1 else {}),
               "columns": {key: placeholder(column)
                           for key, column in figure.runs.columns.items()}}
        for name, figure in items.figures.items()
    }
    data = {"format": FORMAT, "stage": items.stage,
            "sets": {name: vars(s) for name, s in items.sets.items()}, "figures": figures}
    text = json.dumps(data, indent=1, sort_keys=False)
    for i, column in enumerate(columns):
        text = text.replace(f'"@column{i}@"', column, 1)
    return text + "\n"


def read_items(path: str | os.PathLike) -> StageItems:
    """The outcomes in `path`; a file of another format, or damaged, is one line."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BertError(f"cannot read the per-item outcomes {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BertError(f"{path} is not a per-item outcomes file of format {FORMAT}: "
                        "rerun the stage that wrote it")
    try:
        return _parsed(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise BertError(f"{path} is damaged ({exc!r}): rerun the stage that wrote it") from None


def _parsed(data: Mapping[str, Any]) -> StageItems:
    sets = {name: ItemSet(s["digest"], int(s["items"]), s["unit"])
            for name, s in data["sets"].items()}
    figures = {}
    for name, f in data["figures"].items():
        if f["statistic"] not in STATISTICS or f["set"] not in sets:
            raise ValueError(f"figure {name}: statistic {f['statistic']!r}, set {f['set']!r}")
        columns = {key: np.asarray(runs)[None] for key, runs in f["columns"].items()}
        figures[name] = Figure(f["set"], Runs(f["statistic"], columns, f["over_runs"]),
                               f["better"] == "higher", tuple(f["runs"]),
                               float(f.get("scale", 1.0)))
    return StageItems(data["stage"], sets, figures)


def one_run(statistic: str, items: str, higher_is_better: bool = True,
            **columns: Iterable) -> Figure:
    """A figure of one run: each column one value per item (an array, or any iterable)."""
    arrays = {k: v if isinstance(v, np.ndarray) else np.asarray(list(v))
              for k, v in columns.items()}
    return Figure(items, Runs.of_one(statistic, **arrays), higher_is_better)
