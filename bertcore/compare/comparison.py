"""The comparison itself: every figure that every side has, each side's value with its 95%
interval, and each later side's difference to the first (the reference) with its interval
and verdict. Items are paired where both sides scored the same items (the same digest), and
pretraining seeds where both sides ran the same seeds (`same_seeds`)."""

from __future__ import annotations

from dataclasses import dataclass

from bertcore.common.errors import BertError
from bertcore.common.intervals import Estimate, difference, estimate, verdict
from bertcore.compare.sides import Side, SideFigure


@dataclass(frozen=True)
class Cell:
    """One side's figure: its value and interval, over how many seeds and items."""

    estimate: Estimate
    seeds: int
    items: int
    digest: str


@dataclass(frozen=True)
class Delta:
    """A side's figure minus the reference's, its interval, the verdict and how it was
    resampled."""

    estimate: Estimate
    verdict: str
    paired: bool
    same_seeds: bool


@dataclass(frozen=True)
class Row:
    """One figure across the sides: a cell per side, a delta per side after the first."""

    stage: str
    name: str
    set_name: str
    higher_is_better: bool
    cells: tuple[Cell, ...]
    deltas: tuple[Delta, ...]

    @property
    def key(self) -> str:
        return f"{self.stage}.{self.name}"


@dataclass(frozen=True)
class Comparison:
    sides: tuple[Side, ...]
    rows: tuple[Row, ...]
    notes: tuple[str, ...]  # what the reader must know: items unpaired, figures left out


def same_seeds(a: Side, b: Side) -> bool:
    """Both sides ran the same pretraining seeds, in the same order (each known)."""
    return len(a.seeds) == len(b.seeds) and None not in a.seeds and a.seeds == b.seeds


def _cell(figure: SideFigure) -> Cell:
    seeds, _, items = figure.runs.shape
    return Cell(estimate(figure.runs).scaled(figure.scale), seeds, items, figure.items.digest)


def _delta(a: SideFigure, b: SideFigure, seeds_paired: bool) -> Delta:
    paired = a.items.digest == b.items.digest
    diff = difference(a.runs, b.runs, same_items=paired, same_seeds=seeds_paired).scaled(
        a.scale)
    return Delta(diff, verdict(diff, a.higher_is_better), paired, seeds_paired)


def _unpaired_notes(sides: tuple[Side, ...], keys: list[str], paired_only: bool) -> list[str]:
    """One line per side and set whose items differ from the reference's; with `paired_only`
    the first is a BertError."""
    notes = []
    reference = sides[0]
    for side in sides[1:]:
        for key in keys:
            a, b = reference.figures[key], side.figures[key]
            line = (f"{a.stage} {a.set_name}: {side.label}'s items differ from "
                    f"{reference.label}'s (digest {b.items.digest[:8]} ≠ {a.items.digest[:8]}: "
                    "other data, vocabulary or item seed)")
            if a.items.digest == b.items.digest or any(n.startswith(line) for n in notes):
                continue
            if paired_only:
                raise BertError(f"{line}: --paired-only compares only the same items")
            notes.append(f"{line}: compared unpaired")
    return notes


def compare(sides: list[Side], paired_only: bool = False) -> Comparison:
    """The figures every side has, in the reference's order, with their intervals and each
    side's difference to the reference (`sides[0]`)."""
    if len(sides) < 2:
        raise BertError("bert compare needs two sides or more")
    reference = sides[0]
    keys = [key for key in reference.figures if all(key in side.figures for side in sides)]
    if not keys:
        raise BertError(f"the sides have no figure in common ({', '.join(s.label for s in sides)}"
                        "): compare runs of the same stages")
    notes = _unpaired_notes(tuple(sides), keys, paired_only)
    left_out = sorted({key for side in sides for key in side.figures} - set(keys))
    if left_out:
        notes.append(f"not on every side, left out: {', '.join(left_out)}")
    rows = []
    for key in keys:
        figures = [side.figures[key] for side in sides]
        deltas = tuple(_delta(figures[0], figure, same_seeds(reference, side))
                       for side, figure in zip(sides[1:], figures[1:], strict=True))
        first = figures[0]
        rows.append(Row(first.stage, first.name, first.set_name, first.higher_is_better,
                        tuple(_cell(figure) for figure in figures), deltas))
    return Comparison(tuple(sides), tuple(rows), tuple(notes))
