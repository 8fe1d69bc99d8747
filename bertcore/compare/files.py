"""The comparison as files: markdown (the tables, for a pull request or a report) and JSON
(every number unrounded, the items' digests, each source resolved to its folder, commit or
MLflow run: what a script reads back)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bertcore.common.atomic import atomic_file, write_json
from bertcore.common.intervals import CONFIDENCE
from bertcore.compare.comparison import Comparison, Row
from bertcore.compare.tables import MARKS, behind, compact, letter

FORMAT = "bert-compare/1"


def _sides(comparison: Comparison) -> list[dict[str, Any]]:
    return [{"key": letter(i), "label": side.label, "seeds": list(side.seeds),
             "sources": [{"name": s.name, "kind": s.kind, "resolved": s.resolved,
                          "commit": s.commit} for s in side.sources]}
            for i, side in enumerate(comparison.sides)]


def _figure(row: Row) -> dict[str, Any]:
    sides = {letter(i): {**asdict(cell.estimate), "seeds": cell.seeds, "items": cell.items,
                         "digest": cell.digest} for i, cell in enumerate(row.cells)}
    differences = {letter(i + 1): {**asdict(delta.estimate), "verdict": delta.verdict,
                                   "paired": delta.paired, "same_seeds": delta.same_seeds}
                   for i, delta in enumerate(row.deltas)}
    return {"stage": row.stage, "figure": row.name, "set": row.set_name,
            "higher_is_better": row.higher_is_better, "sides": sides,
            "differences": differences}


def comparison_data(comparison: Comparison) -> dict[str, Any]:
    """The comparison as plain data: differences are each side's minus A's."""
    return {"format": FORMAT, "confidence": CONFIDENCE, "sides": _sides(comparison),
            "figures": [_figure(row) for row in comparison.rows],
            "notes": list(comparison.notes)}


def write_comparison_json(path: str | os.PathLike, comparison: Comparison) -> Path:
    write_json(path, comparison_data(comparison), sort_keys=False)
    return Path(path)


def _markdown_rows(comparison: Comparison) -> list[str]:
    if len(comparison.sides) == 2:
        lines = ["| figure | A | B | B − A | verdict | seeds × items |",
                 "| --- | --- | --- | --- | --- | --- |"]
        for row in comparison.rows:
            delta = row.deltas[0]
            lines.append(f"| {row.key} | {row.cells[0].estimate.text()} | "
                         f"{row.cells[1].estimate.text()} | {delta.estimate.text(signed=True)} | "
                         f"{delta.verdict} | {behind(row)} |")
        return lines
    keys = [letter(i) for i in range(len(comparison.sides))]
    lines = ["| figure | " + " | ".join(keys) + " |", "| --- |" + " --- |" * len(keys)]
    for row in comparison.rows:
        cells = [compact(row.cells[0].estimate)] + [
            f"{compact(cell.estimate)} {MARKS[delta.verdict]}".rstrip()
            for cell, delta in zip(row.cells[1:], row.deltas, strict=True)]
        lines.append(f"| {row.key} | " + " | ".join(cells) + " |")
    return lines


def comparison_markdown(comparison: Comparison) -> str:
    sides = [f"- **{letter(i)}** = {side.label}: " + ", ".join(
        f"`{s.name}` ({s.describe()})" for s in side.sources)
        for i, side in enumerate(comparison.sides)]
    legend = ("95% intervals by the bootstrap over the items (and seeds, and a stage's runs); "
              "a difference pairs the items both sides scored, and the seeds both ran.")
    if len(comparison.sides) > 2:
        legend = "▲ better than A, ▼ worse, beyond noise. " + legend
    notes = [f"- {note}" for note in comparison.notes]
    return "\n".join(["## bert compare", "", *sides, "", *_markdown_rows(comparison), "",
                      legend, *(["", *notes] if notes else [])]) + "\n"


def write_comparison_markdown(path: str | os.PathLike, comparison: Comparison) -> Path:
    with atomic_file(path, "w", encoding="utf-8") as handle:
        handle.write(comparison_markdown(comparison))
    return Path(path)
