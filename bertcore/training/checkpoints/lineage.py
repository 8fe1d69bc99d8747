"""Which checkpoints in the folder a pretraining run goes on with, leaves alone or replaces.

A run goes on with one line of checkpoints (`RunLine`): phase 1's of its params and data, of
any length (a run extends the ones before it), and, with BERT's second phase on, phase 2's
after this very phase 1, of its params, of any length. `keep_last` rotates among them and
never takes a finished one, the last of a run or phase that reached its end
(`CheckpointDir.prune`). With phase 2 off, phase 2's checkpoints after this very phase 1 are
left where they are, for when it is turned on again. Every other checkpoint is one the run
replaces (`RunLine.keeps`): of other params, data or phase 1, or of its line where the run
starts that phase fresh (shortened below them: the learning-rate schedule depends on the
length, so a shorter run cannot be cut from a longer one). Those are set aside before the run
trains, or deleted with `train.keep_replaced: false`, and one line says which, before
(`replacing_notice`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertcore.training.checkpoints.checkpoint import REPLACED_DIR, Checkpoint
from bertcore.training.checkpoints.identity import RunIdentity, after_phase1, in_phase1

SHOWN = 4  # names of checkpoints a line shows before "..."


@dataclass(frozen=True)
class RunLine:
    """The line of checkpoints a run goes on with (called: whether `checkpoint` is of it)."""

    phase1: RunIdentity
    phase2: RunIdentity | None = None  # BERT's second phase, when it is on

    def __call__(self, checkpoint: Checkpoint) -> bool:
        return self.phase1.continues(checkpoint) or (
            self.phase2 is not None and self.phase2.continues(checkpoint))

    def keeps(self, checkpoint: Checkpoint, continued: int) -> bool:
        """Whether the run keeps `checkpoint` where it is. `continued`: the phases whose line
        the run goes on from a checkpoint of (0: it starts fresh; 1: phase 1's; 2: both)."""
        if in_phase1(checkpoint):
            return continued >= 1 and self.phase1.continues(checkpoint)
        if self.phase2 is None:
            return self.left_for_phase2(checkpoint)
        return continued == 2 and self.phase2.continues(checkpoint)

    def left_for_phase2(self, checkpoint: Checkpoint) -> bool:
        """Whether `checkpoint` is phase 2's after this very phase 1 while phase 2 is off."""
        return self.phase2 is None and after_phase1(checkpoint, self.phase1)


def names(checkpoints: Sequence[Checkpoint] | Sequence[str]) -> str:
    """`step-00000004, step-00000008`, the first SHOWN of them."""
    shown = [c if isinstance(c, str) else c.path.name for c in checkpoints]
    more = f", ... ({len(shown)} in all)" if len(shown) > SHOWN else ""
    return ", ".join(shown[:SHOWN]) + more


def replacing_notice(replaced: Sequence[Checkpoint], root: Path, keep: bool,
                     set_aside_before: Sequence[str]) -> str:
    """The line that says, before it happens, what becomes of the checkpoints a run replaces:
    set aside in `root`/replaced (`keep`) instead of `set_aside_before`, or deleted."""
    what = f"this run replaces checkpoints {names(replaced)} in {root}"
    if not keep:
        return f"{what}: deleting them (train.keep_replaced: false)"
    aside = root / REPLACED_DIR
    instead = (f" (instead of {names(set_aside_before)} set aside there before, deleted now)"
               if set_aside_before else "")
    return (f"{what}: setting them aside in {aside}{instead}, never resumed from there; "
            "delete that folder when you no longer want them (train.keep_replaced: false "
            "deletes replaced checkpoints instead)")


def left_notice(left: Sequence[Checkpoint], phase1_end: int, out: Path) -> str:
    """The line that says phase 2 is off: phase 1's model, at its end `phase1_end`, is the
    result, and phase 2's checkpoints stay."""
    return (f"phase 2 is off: the run ends with phase 1 at step {phase1_end}, whose "
            f"model goes to {out}; phase 2's checkpoints after it ({names(left)}) stay where "
            "they are, for phase2.enabled: true")
