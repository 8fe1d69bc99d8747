"""The learning-rate schedules, a multiplier of the peak rate: pretraining's (`train.schedule`)
and, `linear` alone, fine-tuning's:

- `linear` (BERT's): linear warmup, then linear decay to zero at the end;
- `wsd` (warmup-stable-decay, as MiniCPM, Hu et al. 2024): linear warmup, the peak held, then
  linear decay to zero over the last `decay_fraction` of the steps. Held high past the first
  few hundred steps, the rate carries the model off the frequency plateau on prose
  (docs/recipe.md), where BERT's would already have lowered it.

The rate of a step is a function of the step number and the planned end alone, so a resumed
run whose end moved (`train.max_steps` or `train.epochs` raised) simply follows the new line
from where it stands, as transformers' Trainer does. `StepSchedule` is that function for one
phase of pretraining (nanoGPT's `get_lr(it)`): built once from the run's plan, called by the
training loop with the step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

# train.schedule, after the warmup: BERT's linear decay, or warmup-stable-decay
Schedule = Literal["linear", "wsd"]


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """LR multiplier at `step` (0-based): 0 → 1 over the warmup, then 1 → 0 at `total_steps`
    (the schedule of BERT and of transformers' get_linear_schedule_with_warmup)."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def warmup_stable_decay(step: int, warmup_steps: int, total_steps: int,
                        decay_fraction: float) -> float:
    """LR multiplier at `step` (0-based): 0 → 1 over the warmup, 1 until the last
    `decay_fraction` of `total_steps` (never before the warmup's end), then 1 → 0 at
    `total_steps`."""
    decay_start = max(warmup_steps, total_steps - round(decay_fraction * total_steps))
    if step < decay_start:
        return linear_warmup_decay(step, warmup_steps, total_steps) if step < warmup_steps \
            else 1.0
    return linear_warmup_decay(step, decay_start, total_steps)


def learning_rate(peak: float, step: int, warmup_steps: int, total_steps: int,
                  schedule: Schedule = "linear", decay_fraction: float = 0.2) -> float:
    """The learning rate of optimizer step `step` (0-based) on `schedule`."""
    if schedule == "wsd":
        return peak * warmup_stable_decay(step, warmup_steps, total_steps, decay_fraction)
    return peak * linear_warmup_decay(step, warmup_steps, total_steps)


@dataclass(frozen=True)
class StepSchedule:
    """The learning rate of each optimizer step of a phase that trains steps start+1 .. end
    (numbered over the whole run): called with the step (0-based: the steps done before it)."""

    peak: float
    warmup_steps: int
    start: int  # optimizer steps done before the phase
    end: int  # the step the phase is planned to end at
    schedule: Schedule = "linear"
    decay_fraction: float = 0.2

    def __call__(self, step: int) -> float:
        return learning_rate(self.peak, step - self.start, self.warmup_steps,
                             self.end - self.start, self.schedule, self.decay_fraction)

    def ending_at(self, end: int) -> StepSchedule:
        """This schedule re-planned to end at `end` (a time budget's plan, an extension)."""
        return dataclasses.replace(self, end=end)
