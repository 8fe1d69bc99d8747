"""The pretraining curves as PNG charts beside their TSV files (`common/charts.py`): the train
losses and accuracies with the val points of each periodic evaluation, and the built-in
probes at each evaluation. Written with the metrics at the end of a run, logged to its MLflow
run, embedded by `dvc plots show`."""

from __future__ import annotations

from pathlib import Path

from bertcore.common.charts import Series, read_columns, write_chart

CHARTS = ("loss", "accuracy", "probes")
PROBES = ("cloze_p_at_1", "cloze_p_at_10", "swapped_pairs", "replaced_pairs")


def chart_paths(log_file: str | Path) -> dict[str, Path]:
    """Where the charts go: beside the train log (metrics/pretrain_loss.png, ...)."""
    return {name: Path(log_file).parent / f"pretrain_{name}.png" for name in CHARTS}


def write_pretrain_charts(log_file: str | Path, eval_log_file: str | Path) -> list[Path]:
    """The three charts from the two logs; returns those written."""
    heads = ("mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy")
    train = read_columns(log_file, ("step", *heads))
    val = read_columns(eval_log_file, ("step", *heads, *PROBES))
    paths = chart_paths(log_file)
    written = [write_chart(paths[kind], f"pretraining: {kind} (lines: train, points: val)",
                           "optimizer step", kind,
                           [*(Series(f"train {name}", train["step"], train[name])
                              for name in heads if name.endswith(kind)),
                            *(Series(f"val {name}", val["step"], val[name], points=True)
                              for name in heads if name.endswith(kind))])
               for kind in ("loss", "accuracy")]
    written.append(write_chart(paths["probes"], "built-in probes at each evaluation (val)",
                               "optimizer step", "accuracy / P@k",
                               [Series(name, val["step"], val[name], markers=True)
                                for name in PROBES]))
    return [path for path in written if path is not None]
