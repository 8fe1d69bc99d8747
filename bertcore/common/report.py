r"""What a stage reports, in two files side by side:

- `metrics/<stage>.json`: the numbers a user compares across runs (val MLM accuracy, the
  fine-tune gain, ...), under one key, the stage's group (`{"eval": {"mlm_accuracy": ...}}`).
  dvc.yaml declares it under `metrics`, so `dvc exp show` and `dvc metrics diff` show it, its
  columns named `eval.mlm_accuracy`, `probe.builtin.cloze.p_at_1`, ...: `--keep 'probe\.'`
  selects a stage's columns (its params' too: their section has the same name);
- `metrics/<stage>_details.json`: what those numbers are read against (baselines, counts,
  settings, timings). A plain output: in git, but no columns in `dvc exp show`.

- `metrics/<stage>_items.json`: what the model got on each item behind those numbers
  (`bertcore.common.outcomes`), from which each figure has its 95% interval: in the metrics
  file as `<name>_ci95: [low, high]` beside the figure, which is rounded to the precision the
  interval supports. DVC shows no list in `dvc exp show` or `dvc metrics diff`, so the
  intervals add no column there; `bert compare` shows them, and the interval of a difference.

In MLflow the same split holds: results are metrics (one point each; an interval's ends as
`<name>_ci95_low` and `_high`) and the files are uploaded as JSON artifacts under `metrics/`;
the details are read there (a stage's own run, a child run, has them as tags too: the
pretraining run keeps its tags to those people search by).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertcore.common.atomic import atomic_file, dump_json, write_json
from bertcore.common.dotted import flatten
from bertcore.common.errors import BertError
from bertcore.common.together import outputs_together

CONFLICT_MARKERS = ("<<<<<<< ", "=======", ">>>>>>> ")  # git's, at the start of a line

if TYPE_CHECKING:  # numpy and scipy behind them: imported where a report has items
    from bertcore.common.intervals import Estimate
    from bertcore.common.outcomes import StageItems


def read_report_file(path: str | os.PathLike) -> dict[str, Any]:
    """A report as a stage wrote it (metrics/<stage>.json, its details): a JSON object. What
    a merge of experiments or a cut copy leaves instead is a BertError naming the file."""
    path = Path(path)
    restore = (f"rerun the stage that writes it, or restore it (`git checkout -- {path}`, "
               "`dvc checkout`)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BertError(f"{path} is not UTF-8 text, so no report: {restore}") from None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(CONFLICT_MARKERS):
            raise BertError(f"{path}:{number} holds git's merge-conflict markers: resolve the "
                            f"conflict (keep one side: `git checkout --theirs {path}` or "
                            "--ours), or rerun the stage that writes it")
    try:
        data = json.loads(text)
    except ValueError as error:
        where = f":{error.lineno}" if isinstance(error, json.JSONDecodeError) else ""
        raise BertError(f"{path}{where} is not valid JSON (cut short or damaged): "
                        f"{restore}") from None
    if not isinstance(data, dict):
        raise BertError(f"{path} holds a JSON {type(data).__name__}, not the object a stage's "
                        f"report is: {restore}")
    return data


def details_file(metrics_file: str | os.PathLike) -> Path:
    """The details file written beside `metrics_file`: metrics/eval.json ->
    metrics/eval_details.json."""
    path = Path(metrics_file)
    return path.with_name(f"{path.stem}_details{path.suffix or '.json'}")


def write_metrics(metrics_file: str | os.PathLike, group: str,
                  metrics: Mapping[str, Any]) -> None:
    """Write `metrics` under the key `group` (in their dict's order: headline first)."""
    write_json(metrics_file, {group: metrics}, sort_keys=False)


def write_report(metrics_file: str | os.PathLike, group: str, metrics: Mapping[str, Any],
                 details: Mapping[str, Any], items: StageItems | None = None
                 ) -> tuple[Path, ...]:
    """Write `metrics` under `group` and, beside it, `details` (both in their dicts' order:
    headline first) and the per-item outcomes `items`, if any, replaced together
    (`together`); returns the paths."""
    files = [Path(metrics_file), details_file(metrics_file)]
    with outputs_together() as outputs:  # the three replaced together, signals held
        for path, report in zip(files, ({group: metrics}, details), strict=True):
            dump_json(outputs.enter_context(atomic_file(path, "w", encoding="utf-8")), report,
                      sort_keys=False)
        if items is not None:
            from bertcore.common.outcomes import items_file, items_text

            files.append(items_file(metrics_file))
            outputs.enter_context(atomic_file(files[-1])).write(items_text(items))
    return tuple(files)


def with_items(metrics: Mapping[str, Any], details: Mapping[str, Any], items: StageItems
               ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Estimate]]:
    """The report of figures measured item by item: `metrics` with each figure's interval
    (`with_intervals`), `details` with `intervals` (each figure's interval as text, over how
    many items and runs), and the estimates, for the summary's lines."""
    from bertcore.common.intervals import CONFIDENCE

    estimates = items.estimates()
    described = {"confidence": CONFIDENCE}
    for name, figure in items.figures.items():
        n_items = items.sets[figure.items].items
        runs = len(figure.run_labels)
        described[name] = (f"{estimates[name].text()} over {n_items} "
                           f"{items.sets[figure.items].unit}s"
                           + (f" and {runs} runs" if runs > 1 else ""))
    return (with_intervals(metrics, estimates), {**details, "intervals": described},
            estimates)


def track_report(tracker: Any, files: tuple[Path, ...], results: Mapping[str, float],
                 step: int, *, details: Mapping[str, Any] | None = None,
                 done_tag: tuple[str, str] | None = None, link_model: bool = False) -> bool:
    """Log a report into an MLflow run (a `bertcore.common.tracking.Tracker`): `results` as
    one-point metrics (with `link_model`, the run's logged model's too), the files (the
    details among them) as artifacts under `metrics/`, then `done_tag`; what the store does
    not take waits in its pending folder (`common/pending.py`). A stage's own run (a child
    run) also gets the numbers and strings of `details` as tags under dotted names. Returns
    whether the report was logged now."""
    from bertcore.common.pending import RunResults

    if details:
        tracker.set_tags({name: value for name, value in flatten(details).items()
                          if isinstance(value, int | float | str | bool)})
    return tracker.log_report(RunResults(results, step, tuple(files), "metrics", done_tag,
                                         link_model))


def with_intervals(metrics: Mapping[str, Any], estimates: Mapping[str, Any]) -> dict[str, Any]:
    """`metrics` (nested, headline first) with each figure named in `estimates` (dotted names
    under the group -> `intervals.Estimate`) rounded to the precision its interval supports,
    and its 95% interval beside it as `<name>_ci95: [low, high]`."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        inner = {name[len(key) + 1:]: e for name, e in estimates.items()
                 if name.startswith(key + ".")}
        if isinstance(value, Mapping):
            out[key] = with_intervals(value, inner)
        elif key in estimates and isinstance(value, int | float):
            found = estimates[key]
            out[key] = round(value, found.decimals)
            out[f"{key}_ci95"] = found.interval()
        else:
            out[key] = value
    return out


def result_values(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of `metrics` as MLflow results: dotted names joined by `_` after `prefix`,
    and each `_ci95` interval's ends as `<name>_ci95_low` and `<name>_ci95_high`."""
    results = {}
    for name, value in flatten(metrics).items():
        key = f"{prefix}{name}".replace(".", "_")
        if isinstance(value, int | float) and not isinstance(value, bool):
            results[key] = value
        elif name.endswith("_ci95") and isinstance(value, list) and len(value) == 2:
            results[f"{key}_low"], results[f"{key}_high"] = value
    return results
