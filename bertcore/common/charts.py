"""PNG charts of a stage's curves (matplotlib's Agg backend: no display, no network), the same
bytes for the same numbers: no date or version in the file. `dvc plots show` embeds them in
its HTML as they are (its own charts load their script from the web: blank offline), and the
stages log them to MLflow beside the curves."""

from __future__ import annotations

import contextlib
import csv
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bertcore.common.atomic import atomic_file

log = logging.getLogger(__name__)

SIZE = (7.0, 4.0)  # inches, at 100 dpi: 700 x 400 pixels


@dataclass(frozen=True)
class Series:
    """One line (or, `points`, markers only) of a chart; `markers`: a line with a marker at
    each point (a curve of few measurements). A line's point with no finite neighbour (the
    one point of a run with one evaluation, or one between gaps) has a marker all the same:
    a line through one point draws nothing."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    points: bool = False
    markers: bool = False


def isolated(y: Sequence[float]) -> list[bool]:
    """Which of the values are finite with no finite neighbour: points no line reaches."""
    finite = [value == value and abs(value) != float("inf") for value in y]
    return [here and not (i > 0 and finite[i - 1]) and not (i + 1 < len(y) and finite[i + 1])
            for i, here in enumerate(finite)]


def write_chart(path: str | Path, title: str, xlabel: str, ylabel: str,
                series: Sequence[Series], into: BinaryIO | None = None) -> Path | None:
    """One chart of `series` as a PNG at `path` (or into the open file `into`, an output being
    staged, which `path` names); None, with a warning, when matplotlib is not installed (the
    curves stay in their TSV files)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError:
        log.warning("matplotlib is not installed: no chart %s (pip install matplotlib)", path)
        return None
    figure = Figure(figsize=SIZE, dpi=100)
    axes = figure.add_subplot()
    for line in series:
        if line.x:
            _draw(axes, line)
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
    axes.grid(alpha=0.3)
    if any(line.x for line in series):
        axes.legend(fontsize="small")
    figure.tight_layout()
    path = Path(path)
    with contextlib.nullcontext(into) if into else atomic_file(path, "wb") as handle:
        figure.savefig(handle, format="png", metadata={"Software": None})
    return path


def _draw(axes, line: Series) -> None:
    """One series: markers, a line, or a line with markers where it has them."""
    if line.points or line.markers:
        axes.plot(line.x, line.y, "o" if line.points else "-o", label=line.label, markersize=4)
        return
    (drawn,) = axes.plot(line.x, line.y, "-", label=line.label)
    alone = [i for i, lonely in enumerate(isolated(line.y)) if lonely]
    if alone:
        axes.plot([line.x[i] for i in alone], [line.y[i] for i in alone], "o", markersize=4,
                  color=drawn.get_color())


def read_columns(tsv: str | Path, columns: Sequence[str]) -> Mapping[str, list[float]]:
    """The numeric columns of a TSV with a header row (an empty cell is no point)."""
    rows = []
    if Path(tsv).is_file():
        with open(tsv, encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return {name: [float(row[name]) if row.get(name) else float("nan") for row in rows]
            for name in columns}
