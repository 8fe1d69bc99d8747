"""Resume or start fresh: which checkpoint a pretraining run continues, and how.

The latest checkpoint is resumed when it shares this run's identity (`bertcore.training
.identity.RunIdentity`: the fingerprints of the params, vocabulary, samples, initial model and
length). When only the length differs (`train.max_steps` or `train.epochs` changed), the run is
extended (or shortened, if it has not passed the new end yet): it resumes with the
learning-rate schedule re-planned to the new end, as transformers' Trainer does. Anything else
starts fresh, and the new run replaces the old checkpoints (set aside before it trains:
`bertcore.training.checkpoints.lineage`).
"""

from __future__ import annotations

from dataclasses import dataclass

from bertcore.training.checkpoints.checkpoint import Checkpoint
from bertcore.training.checkpoints.identity import NAMES, RunIdentity


@dataclass(frozen=True)
class ResumePlan:
    """The checkpoint to resume (None: start fresh) and what to tell the user."""

    checkpoint: Checkpoint | None
    notice: str | None = None  # why a checkpoint is not resumed, or how it is extended
    previous_total: int | None = None  # set when the run's length changed (re-planned)

    @property
    def extends(self) -> bool:
        return self.checkpoint is not None and self.previous_total is not None


def plan_resume(latest: Checkpoint | None, identity: RunIdentity, end: int) -> ResumePlan:
    """Decide from the latest intact checkpoint (`CheckpointDir.latest()`, which verifies
    every file: read it once). `end`: the step this run would end at if it resumed `latest`
    (with a time budget: as re-planned from its timing)."""
    if latest is None:
        return ResumePlan(None)
    changed = identity.changed(latest)
    if changed:
        named = " and ".join(NAMES.get(name, name) for name in changed)
        return ResumePlan(None, f"checkpoint {latest.path} was made with other "
                                f"{named}{identity.param_changes(latest)}: "
                                "starting fresh")
    if identity.made(latest):  # nothing changed, its length included
        return ResumePlan(latest)
    # The end it was heading for (with a time budget: as planned, when the plan was made).
    saved_total = latest.planned_end
    what = identity.param_changes(latest)
    if latest.step > end:
        return ResumePlan(None, f"checkpoint {latest.path} is at step {latest.step}, past the "
                                f"new end of the run{what} at step {end}: starting "
                                "fresh (a shorter run cannot go on from a longer one's "
                                "learning-rate schedule)")
    return ResumePlan(latest, f"the run's length changed{what}: resuming from step "
                              f"{latest.step} with the learning-rate schedule re-planned to end "
                              f"at step {end} instead of {saved_total}",
                      previous_total=saved_total)
