"""Whether a run ended on the frequency plateau, by the built-in probes' own measure
(`bertcore.downstream.probes.during_pretraining` scores them at each periodic evaluation):

- its held-out cloze P@1 is no better than the word-frequency guess's on the same items: it
  predicts a masked word from word counts; or
- its swapped pairs (a sentence against itself with two neighbouring words swapped) are near
  chance: 0.5 lies within their 95% Wilson interval, so it does not know word order.

A model there has learnt little that a task can use (docs/recipe.md): the pretrain summary and
the model card say so in one line, with what to try.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

# The probe figures read (keys of `PretrainingProbes`' result; the last two not logged)
CLOZE, SWAPPED = "cloze_p_at_1", "swapped_pairs"
CLOZE_FREQUENCY, SWAPPED_PAIRS = "cloze_frequency_p_at_1", "swapped_pairs_n"
Z95 = 1.959964  # the normal quantile of a two-sided 95% interval
TRY = ("try more steps (train.max_steps), the peak learning rate held longer "
       "(train.schedule: wsd) or the recipe (model.recipe: tiny); docs/recipe.md")


def wilson_interval(accuracy: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `accuracy` of `n` trials."""
    centre = (accuracy + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(accuracy * (1 - accuracy) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def plateau_notice(probes: Mapping[str, float | None], step: int) -> str | None:
    """One line when the probe figures of the model at `step` say it is on the frequency
    plateau (what shows it, and what to try); None when they do not, or are missing."""
    signs = []
    cloze, frequency = probes.get(CLOZE), probes.get(CLOZE_FREQUENCY)
    if cloze is not None and frequency is not None and cloze <= frequency:
        signs.append(f"its cloze P@1 {cloze:.3f} is no better than the word-frequency "
                     f"guess's {frequency:.3f}")
    swapped, pairs = probes.get(SWAPPED), probes.get(SWAPPED_PAIRS)
    if swapped is not None and pairs:
        low, high = wilson_interval(swapped, int(pairs))
        if low <= 0.5 <= high:
            signs.append(f"its swapped pairs {swapped:.3f} [{low:.3f}, {high:.3f}] are at "
                         "chance (0.5): it does not know word order")
    if not signs:
        return None
    return (f"the model ends on the frequency plateau at step {step}: "
            + " and ".join(signs) + f"; {TRY}")
