"""How long a phase of pretraining runs: one value, made once when the run is planned.

A phase starts after `start` optimizer steps (0 for phase 1; phase 2 numbers its steps on from
phase 1's end), ends at `configured` as the params say (`max_steps`, or `epochs` over its
batches), and is planned to end at `planned`: the configured end, or the earlier one a time
budget plans (`bertcore.training.loop.budget`), which returns a new RunLength. The learning-rate
schedule runs from `start` to `planned`, and every checkpoint records `planned`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bertcore.training.config import TrainConfig


@dataclass(frozen=True)
class RunLength:
    """Steps are numbered over the whole run: the phase trains steps start+1 .. planned."""

    start: int  # optimizer steps done before the phase
    configured: int  # the step the params end it at
    planned: int  # the step it is planned to end at (a time budget may plan it earlier)

    @classmethod
    def configured_by(cls, train: TrainConfig, steps_per_epoch: int, start: int = 0
                      ) -> RunLength:
        """The length `train` sets (`max_steps`, or `epochs` of `steps_per_epoch`), after
        `start` steps, planned as configured."""
        end = start + train.total_steps(steps_per_epoch)
        return cls(start, end, end)

    def planned_at(self, end: int) -> RunLength:
        """This length with its planned end at `end`."""
        return dataclasses.replace(self, planned=end)
