"""The learning-rate schedule of BERT: linear warmup, then linear decay to zero at the end.

The rate of a step is a function of the step number and the planned end alone, so a resumed
run whose end moved (`train.max_steps` or `train.epochs` raised) simply follows the new line
from where it stands, as transformers' Trainer does.
"""

from __future__ import annotations


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """LR multiplier at `step` (0-based): 0 → 1 over the warmup, then 1 → 0 at `total_steps`
    (the schedule of BERT and of transformers' get_linear_schedule_with_warmup)."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def learning_rate(peak: float, step: int, warmup_steps: int, total_steps: int) -> float:
    """The learning rate of optimizer step `step` (0-based)."""
    return peak * linear_warmup_decay(step, warmup_steps, total_steps)
