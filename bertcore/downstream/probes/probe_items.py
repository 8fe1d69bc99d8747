"""The probes' per-item outcomes (`metrics/probe_items.json`, `bertcore.common.outcomes`): for
each figure of `metrics/probe.json`, what the model got on each item the figure is the mean
of, so that the figure has its 95% interval over those items and two models probed on the same
items compare paired (`bert compare`):

- a cloze item (counted: its answer one whole-word token): 1 when the answer is among the
  model's top k, else 0 (`<probe>.p_at_1`, `<probe>.p_at_10`);
- a minimal pair: 1 when the good sentence scores the higher, 0 the lower, a tie half, as the
  accuracy counts it: by `probe.scoring` (`<probe>.accuracy`), and by each scoring
  (`<probe>.accuracy_pll`, `<probe>.accuracy_pll_word_l2r`).

Each probe's items are one set, named as its figures are (`builtin.cloze`, `minimal_pairs`),
whose digest is made of the items themselves (a cloze's masked sentence, which says where the
word was, with its answer; a pair's two sentences; each item's group, in their order) and of
what chose them (the built-in probes: `probe.seed` and `probe.builtin_sentences`): the same
val split, vocabulary and probe params give the same digest, another corpus or seed another.
A figure over no item (null in probe.json) has no set, no outcomes and no interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bertcore.common.outcomes import ItemSet, StageItems, items_digest, one_run
from bertcore.downstream.probes.cloze import TOP_K, ScoredCloze, counted, hits
from bertcore.downstream.probes.minimal_pairs import ScoredPair, outcomes
from bertcore.downstream.probes.pll import SCORINGS

PRECISIONS = (("p_at_1", 1), ("p_at_10", TOP_K))


def add_cloze(items: StageItems, probe: str, scored: Sequence[ScoredCloze], unit: str,
              chosen_by: Mapping[str, Any] | None = None) -> None:
    """The counted items of `scored` as the set `probe` of `items`, and the outcomes of its
    figures `<probe>.p_at_1` and `<probe>.p_at_10`; nothing when no item is counted."""
    kept = counted(scored)
    if not kept:
        return
    rows = [[s.item.text, s.item.answer, s.item.group] for s in kept]
    items.sets[probe] = ItemSet(items_digest(probe, dict(chosen_by or {}), rows), len(kept),
                                unit)
    for key, k in PRECISIONS:
        items.figures[f"{probe}.{key}"] = one_run("mean", probe,
                                                  x=np.asarray(hits(kept, k), dtype=np.int8))


def add_pairs(items: StageItems, probe: str, scored: Sequence[ScoredPair], unit: str,
              scoring: str, chosen_by: Mapping[str, Any] | None = None) -> None:
    """The pairs of `scored` as the set `probe` of `items`, and the outcomes of its figures
    `<probe>.accuracy` (by `scoring`) and `<probe>.accuracy_<scoring>` (by each scoring the
    pairs have); nothing when there is no pair."""
    if not scored:
        return
    rows = [[s.pair.good, s.pair.bad, s.pair.group] for s in scored]
    items.sets[probe] = ItemSet(items_digest(probe, dict(chosen_by or {}), rows), len(scored),
                                unit)
    figures = {"accuracy": scoring, **{f"accuracy_{name}": name for name in SCORINGS
                                        if all(s.scores(name) is not None for s in scored)}}
    for figure, name in figures.items():
        column = _column(outcomes([s.scores(name) for s in scored]))
        items.figures[f"{probe}.{figure}"] = one_run("mean", probe, x=column)


def _column(values: list[float]) -> np.ndarray:
    """0/1 as integers; floats only where a tie made a half."""
    column = np.asarray(values, dtype=np.float64)
    return column.astype(np.int8) if np.all(column == np.round(column)) else column
