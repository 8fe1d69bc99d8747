"""One side of a comparison: one run, or the same recipe pretrained with several seeds, each
a source. A side's figures are its sources' figures with the seeds stacked (`Runs.of_seeds`),
which needs every seed to hold the same figures, scored on the same items."""

from __future__ import annotations

from dataclasses import dataclass

from bertcore.common.errors import BertError
from bertcore.common.intervals import Runs
from bertcore.common.outcomes import ItemSet
from bertcore.compare.sources import Source


@dataclass(frozen=True)
class SideFigure:
    """One headline figure of a side: its per-item outcomes over the side's seeds."""

    stage: str
    name: str  # the dotted name under the stage's key in its metrics file
    set_name: str
    items: ItemSet
    runs: Runs
    higher_is_better: bool
    scale: float = 1.0  # what the metrics file multiplies the statistic by (GLUE's x100)

    @property
    def key(self) -> str:
        return f"{self.stage}.{self.name}"


@dataclass(frozen=True)
class Side:
    """A side's label, its sources (one per pretraining seed), the seed each ran with (None:
    unknown) and its figures by key (`stage.name`), in the order of its files."""

    label: str
    sources: tuple[Source, ...]
    seeds: tuple[int | None, ...]
    figures: dict[str, SideFigure]


def _figure_keys(source: Source) -> list[str]:
    return [f"{stage}.{name}" for stage, items in source.stages.items() for name in items.figures]


def _seed_figure(source: Source, key: str) -> tuple[SideFigure, str]:
    """`key`'s figure of one source, and what must agree across seeds (the items' digest,
    the statistic, the runs of the stage)."""
    stage, _, name = key.partition(".")
    stage_items = source.stages[stage]
    figure = stage_items.figures[name]
    item_set = stage_items.sets[figure.items]
    agree = f"{item_set.digest} {figure.runs.statistic} {figure.runs.shape[1:]}"
    return SideFigure(stage, name, figure.items, item_set, figure.runs,
                      figure.higher_is_better, figure.scale), agree


def make_side(label: str, sources: list[Source], seeds: list[int | None]) -> Side:
    """A side of `sources` (one per seed); one BertError when they disagree on what they
    scored: other figures, other items, another number of runs of a stage."""
    first_keys = _figure_keys(sources[0])
    for source in sources[1:]:
        keys = _figure_keys(source)
        if keys != first_keys:
            odd = sorted(set(keys) ^ set(first_keys)) or ["their order"]
            raise BertError(f"side {label}: the seeds {sources[0].name} and {source.name} hold "
                            f"other figures ({', '.join(odd[:3])}): stack runs of one recipe")
    figures = {}
    for key in first_keys:
        per_seed = [_seed_figure(source, key) for source in sources]
        for source, (_, agree) in zip(sources[1:], per_seed[1:], strict=True):
            if agree != per_seed[0][1]:
                raise BertError(f"side {label}: {key} of {source.name} was scored on other "
                                f"items or runs than {sources[0].name}'s ({per_seed[0][0].set_name}"
                                "): the seeds of a side must score the same items")
        first = per_seed[0][0]
        runs = Runs.of_seeds([figure.runs for figure, _ in per_seed])
        figures[key] = SideFigure(first.stage, first.name, first.set_name, first.items, runs,
                                  first.higher_is_better, first.scale)
    return Side(label, tuple(sources), tuple(seeds), figures)
