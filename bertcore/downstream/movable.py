"""The words a built-in task or probe may replace or swap (`builtin_tasks.py`,
`probes/builtin.py`): lower-case alphabetic, not the first, in a sentence short enough never to
be truncated. So capitals and punctuation give nothing away. Below both the fine-tuning and
the probes, so that neither imports the other for it."""

from __future__ import annotations

from collections.abc import Sequence

MIN_WORDS, MAX_WORDS = 5, 40  # sentences short enough never to be truncated


def movable_positions(words: Sequence[str]) -> list[int]:
    """Positions of the words a task may replace or swap: lower-case alphabetic, not the first;
    none in a sentence of fewer than MIN_WORDS or more than MAX_WORDS words."""
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return []
    return [i for i, w in enumerate(words) if i > 0 and w.isalpha() and w.islower()]
