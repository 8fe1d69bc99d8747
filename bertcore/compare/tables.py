"""The comparison as text for a terminal of `WIDTH` columns. Two sides: per figure A, B and
B - A, each with its 95% interval, and the verdict, grouped by the items behind them (seeds x
items, paired or not). More sides: one grid of figures by sides, each cell the value with its
interval, marked where it differs from the first side's beyond noise; wrapped into several
grids when the sides do not fit."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from itertools import groupby

from bertcore.common.intervals import Estimate
from bertcore.compare.comparison import Comparison, Row

WIDTH = 120
GAP = "  "
MARKS = {"B better": "▲", "B worse": "▼", "within noise": " "}
LEGEND = ("95% intervals: the bootstrap over items (and seeds, and runs of a stage); a "
          "difference pairs the items scored on both sides, and the seeds when both ran the "
          "same ones.")


def letter(index: int) -> str:
    """A side's letter: A, B, ..., Z, then S27, S28, ..."""
    return chr(ord("A") + index) if index < 26 else f"S{index + 1}"


def abbreviate(name: str, width: int) -> str:
    """`name` in `width` columns: its leading dotted parts cut to their initial, one by one
    (builtin.cloze.p_at_1 -> b.cloze.p_at_1), then cut with an ellipsis."""
    parts = name.split(".")
    for i in range(len(parts) - 1):
        if len(".".join(parts)) <= width:
            break
        parts[i] = parts[i][:1]
    text = ".".join(parts)
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def in_set(row: Row) -> str:
    """The figure's name under its set's heading: `builtin.cloze.p_at_1` under
    `builtin.cloze` is `p_at_1`."""
    return row.name.removeprefix(row.set_name + ".")


def compact(estimate: Estimate) -> str:
    """`0.261 [0.255,0.267]`: the value and its interval, to the precision it supports."""
    d = estimate.decimals
    return f"{estimate.value:.{d}f} [{estimate.low:.{d}f},{estimate.high:.{d}f}]"


def behind(row: Row, index: int = 1) -> str:
    """What the difference of side `index` to the reference rests on: `3 × 1172 paired`."""
    a, b, delta = row.cells[0], row.cells[index], row.deltas[index - 1]
    seeds = f"{a.seeds}" if a.seeds == b.seeds else f"{a.seeds}|{b.seeds}"
    items = f"{a.items}" if a.items == b.items else f"{a.items}|{b.items}"
    pairing = "paired" if delta.paired else "unpaired"
    if delta.same_seeds and a.seeds > 1:
        pairing += ", seeds paired"
    return f"{seeds} × {items} {pairing}"


def sides_lines(comparison: Comparison) -> list[str]:
    """One line (wrapped) per side: its letter, label and sources."""
    lines = []
    for i, side in enumerate(comparison.sides):
        sources = ", ".join(f"{s.name} ({s.describe()})" for s in side.sources)
        if len(side.sources) == 1 and side.sources[0].name == side.label:
            text = f"{letter(i)} = {side.label} ({side.sources[0].describe()})"
        else:
            seeds = f"{len(side.sources)} seeds: " if len(side.sources) > 1 else ""
            text = f"{letter(i)} = {side.label}: {seeds}{sources}"
        lines += textwrap.wrap(text, WIDTH, subsequent_indent="    ", break_on_hyphens=False)
    return lines


def _notes(comparison: Comparison) -> list[str]:
    """The notes, one line each (a long label may take it past WIDTH), after a blank line."""
    return ["", *comparison.notes] if comparison.notes else []


def _columns(rows: Sequence[Sequence[str]], first_max: int) -> list[str]:
    """Rows of cells aligned in columns; the first column cut to fit WIDTH (or `first_max`)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    room = WIDTH - sum(widths[1:]) - len(GAP) * (len(widths) - 1)
    widths[0] = max(8, min(widths[0], first_max, room))
    lines = []
    for r in rows:
        cells = [abbreviate(r[0], widths[0]).ljust(widths[0])]
        cells += [c.ljust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        lines.append(GAP.join(cells).rstrip())
    return lines


def two_sides(comparison: Comparison) -> list[str]:
    """A, B, B - A and the verdict per figure, grouped by stage and items."""
    lines = sides_lines(comparison)
    groups = groupby(comparison.rows, key=lambda r: (r.stage, r.set_name, behind(r)))
    for (stage, set_name, rested_on), rows in groups:
        table = [["  figure", "A", "B", "B − A", "verdict"]]
        for row in rows:
            delta = row.deltas[0]
            table.append(["  " + in_set(row), row.cells[0].estimate.text(),
                          row.cells[1].estimate.text(), delta.estimate.text(signed=True),
                          delta.verdict])
        lines += ["", f"{stage} · {set_name}: {rested_on} (seeds × items)"]
        lines += _columns(table, WIDTH)
    return [*lines, "", *textwrap.wrap(LEGEND, WIDTH), *_notes(comparison)]


def _grid(comparison: Comparison, sides: list[int]) -> list[str]:
    header = ["figure"] + [f"{letter(i)} {comparison.sides[i].label}" for i in sides]
    table = [header]
    for row in comparison.rows:
        cells = [row.key]
        for i in sides:
            mark = MARKS[row.deltas[i - 1].verdict] if i else " "
            cells.append(compact(row.cells[i].estimate) + mark)
        table.append(cells)
    widths = [max(len(compact(r.cells[i].estimate)) + 1 for r in comparison.rows)
              for i in sides]
    table[0] = [table[0][0]] + [abbreviate(h, w) for h, w in zip(header[1:], widths,
                                                                 strict=True)]
    return _columns(table, 32)


def _chunks(comparison: Comparison, figure_width: int) -> list[list[int]]:
    """The other sides in groups that fit beside the figures and the reference."""
    def width(i: int) -> int:
        return len(GAP) + max(len(compact(r.cells[i].estimate)) + 1 for r in comparison.rows)

    chunks, used = [[0]], figure_width + width(0)
    for i in range(1, len(comparison.sides)):
        if len(chunks[-1]) > 1 and used + width(i) > WIDTH:
            chunks.append([0])
            used = figure_width + width(0)
        chunks[-1].append(i)
        used += width(i)
    return chunks


def many_sides(comparison: Comparison) -> list[str]:
    """A grid of figures by sides, A the reference, wrapped to fit WIDTH."""
    figure_width = min(32, max(len(r.key) for r in comparison.rows))
    lines = sides_lines(comparison)
    for chunk in _chunks(comparison, figure_width):
        lines += ["", *_grid(comparison, chunk)]
    legend = (f"▲ better than A, ▼ worse, beyond noise (the 95% interval of the difference "
              f"excludes 0). {LEGEND}")
    return [*lines, "", *textwrap.wrap(legend, WIDTH), *_notes(comparison)]


def table(comparison: Comparison) -> list[str]:
    """The comparison's lines for the terminal."""
    return two_sides(comparison) if len(comparison.sides) == 2 else many_sides(comparison)
