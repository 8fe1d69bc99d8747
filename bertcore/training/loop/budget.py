"""A wall-clock budget for pretraining (`train.max_minutes`), planned as Cramming plans it.

The run times its first steps, then, once, at an early "plan step" P, fixes how many steps fit
into the budget: total = min(configured total, P + the steps the time left pays for). The
learning-rate schedule is a function of (step, planned end) and, during the warmup, of the step
alone (`bertcore.common.schedule`); P is never past the warmup, so every step runs at the
rate it would have in a run with `max_steps=<planned total>` and no budget: that rerun is the
same run, bit for bit. (With warmup_steps 0 the one step before the plan runs at the peak rate
whatever the end, so this holds too.)

- P = min(20, max(1, warmup_steps)); the steps after the first are timed (the first allocates
  and compiles); with P = 1 the first step itself is timed, which plans conservatively.
- The plan leaves time for the periodic evaluations (forward passes only: an evaluation of N
  sequences is costed as N / (3 x batch_size) training steps) and a reserve of 5% of the
  budget for checkpoints, the final save and noise.
- The timing is part of the run's state (checkpoint meta): a resumed run's plan
  (`bertcore.training.run.plan`) re-plans from it, with the current params, instead of
  measuring again, so it keeps its planned end; a changed `max_minutes` (or `max_steps`)
  re-plans that end from the same timing, as an extension.
- The budget counts the training loop (steps, evaluations, checkpoints), not the setup before
  it or the export after it.

`BudgetPlanner` does this for one `Trainer.train()` call (`bertcore.training.loop.trainer`) of
a run without a timing: the loop asks it after every step, and it answers once, at the plan
step, with the step the run is planned to end at, from the steps it timed up to there.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from bertcore.training.checkpoints.checkpoint import Checkpoint

PROBE_STEPS = 20  # the plan step, at most (and the steps timed after a late start)
RESERVE = 0.05  # share of the budget kept for checkpoints, the final save and noise
EVAL_COST = 1 / 3  # an evaluated sequence costs this much of a trained one (forward only)


@dataclass(frozen=True)
class StepTiming:
    """What the first steps measured: the plan's only input from the clock."""

    plan_step: int  # the plan was made after this step
    elapsed_s: float  # seconds of training up to the end of plan_step
    step_s: float  # seconds per optimizer step
    timed_from: int  # steps timed_from..plan_step were timed (1-based)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> StepTiming | None:
        if not values:
            return None
        try:
            return cls(int(values["plan_step"]), float(values["elapsed_s"]),
                       float(values["step_s"]), int(values["timed_from"]))
        except (KeyError, TypeError, ValueError):
            return None


def planned_steps(configured: int, budget_s: float, timing: StepTiming, eval_s: float = 0.0,
                  eval_every: int = 0, reserve: float = RESERVE) -> int:
    """The total steps of a run with `budget_s` seconds, from `timing`: the configured total
    or fewer, never fewer than the steps already run at the plan. `eval_s`: the estimated
    seconds of one evaluation (one runs every `eval_every` steps, 0: none, and one at the
    end)."""
    left = budget_s * (1 - reserve) - timing.elapsed_s - eval_s
    per_step = timing.step_s + (eval_s / eval_every if eval_every else 0.0)
    more = math.floor(left / per_step) if left > 0 and per_step > 0 else 0
    if per_step <= 0 and left > 0:  # an instant clock: nothing binds
        more = configured
    return max(timing.plan_step, min(configured, timing.plan_step + more))


@dataclass(frozen=True)
class TimeBudget:
    """`train.max_minutes` and what the plan needs to know of the run besides the timing."""

    minutes: float
    warmup_steps: int
    batch_size: int  # sequences per optimizer step (global)
    eval_every: int = 0
    eval_sequences: int = 0  # sequences of one periodic evaluation (0: no evaluation)
    clock: Callable[[], float] = time.perf_counter

    @property
    def seconds(self) -> float:
        return self.minutes * 60.0

    def plan_step(self, start_step: int) -> int:
        """The step after which a run that starts (or resumes) at `start_step` without a
        timing plans: within the warmup; a late start (a budget set on a run past it)
        times PROBE_STEPS steps first."""
        early = min(PROBE_STEPS, max(1, self.warmup_steps))
        return early if start_step < early else start_step + PROBE_STEPS

    def eval_seconds(self, step_s: float) -> float:
        return step_s * EVAL_COST * self.eval_sequences / max(1, self.batch_size)

    def planned_end(self, configured: int, timing: StepTiming) -> int:
        """The step a run configured to end at `configured` is planned to end at from
        `timing`: that one or earlier."""
        return planned_steps(configured, self.seconds, timing, self.eval_seconds(timing.step_s),
                             self.eval_every)


def recorded_timing(checkpoint: Checkpoint) -> StepTiming | None:
    """What a time budget planned from, as `checkpoint` recorded it (None: no budget)."""
    return StepTiming.from_dict(checkpoint.meta.get("step_timing"))


class BudgetPlanner:
    """The planned end of one training run (one `Trainer.train()`) under a time budget that
    has no timing yet: from its own first steps, timed up to the plan step
    (`TimeBudget.plan_step`), once, there. Every process plans from rank 0's timing, so all
    of them end at the same step. (A run that resumes with a timing has its end planned from
    it before it starts: `TimeBudget.planned_end`.)"""

    def __init__(self, budget: TimeBudget, configured: int, start_step: int, *,
                 synchronize: Callable[[], None], broadcast: Callable[[Any], Any]):
        """`configured`: the step the params end the run at; `start_step`: the step the run
        starts (or resumes) at; `synchronize()` waits for the device; `broadcast(obj)` returns
        rank 0's `obj` on every process."""
        self.budget, self.configured = budget, configured
        self.timing: StepTiming | None = None  # what the plan is made from, at the plan step
        self.synchronize, self.broadcast = synchronize, broadcast
        self.start_step = start_step
        self.plan_step = budget.plan_step(start_step)
        # Time from the end of the first step of this call, unless that leaves nothing.
        self.timed_from = start_step + 2 if self.plan_step - start_step >= 2 else start_step + 1
        # Timed only when a plan could shorten the run (one that ends by then is never timed).
        self.timing_steps = self.plan_step < configured
        self.started = self.mark = budget.clock()

    @property
    def end(self) -> int:
        """The step the run is planned to end at so far: as configured until the plan."""
        if self.timing is None:
            return self.configured
        return self.budget.planned_end(self.configured, self.timing)

    def after_step(self, step: int) -> int | None:
        """Called after every step: the planned end after the plan step, else None.
        Waits for the device only on the steps whose end the clock is read after."""
        if not self.timing_steps or not (
                step == self.plan_step or step == self.timed_from - 1 > self.start_step):
            return None
        self.synchronize()
        now = self.budget.clock()
        if step < self.plan_step:  # the timing starts
            self.mark = now
            return None
        self.timing_steps = False  # the plan is made once
        step_s = (now - self.mark) / (self.plan_step - self.timed_from + 1)
        # Steps before this call (a resumed run) are counted at the measured speed.
        elapsed = now - self.started + self.start_step * step_s
        timing = StepTiming(self.plan_step, elapsed, step_s, self.timed_from)
        self.timing = StepTiming.from_dict(self.broadcast(timing.to_dict()))
        return self.end

    def announcement(self) -> tuple[int, str]:
        """The log level and line of the plan just made: a warning when the budget fits no
        step after the plan step (of fewer than configured)."""
        timing, total, configured = self.timing, self.end, self.configured
        line = (f"time budget {self.budget.minutes:g} min: {timing.step_s:.3g} s/step over "
                f"steps {timing.timed_from}-{timing.plan_step} -> {total} of {configured} "
                "steps planned")
        stops = total == timing.plan_step < configured
        if stops:
            line += (f"; the budget does not fit more than the {total} steps run before the "
                     "plan: stopping there (raise train.max_minutes)")
        return (logging.WARNING if stops else logging.INFO), line
