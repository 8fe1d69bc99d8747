"""What makes two pretraining runs the same run: the identity every checkpoint records.

A phase-1 checkpoint records fingerprints of what made it: the optimisation params without the
run's length (`params`), the vocabulary, the samples, the content of the model it started from
(`init_model`, with `model.init_from`) and the configured length (`length`); beside them the
optimisation params in full, only to name what changed. A checkpoint of BERT's second phase
records the phase 1 it continues (all of phase 1's fingerprints, length included, hashed), the
vocabulary, phase 2's own params and samples and its length; its params are phase 1's plus the
`phase2` section, and its meta.json says `"phase": 2`.

Which checkpoint is resumed, extended or replaced is `bertcore.training.checkpoints.resume`'s.
The checkpoints of one phase that differ at most in their length are one line
(`RunIdentity.continues`): a run extends the line it continues.
`RunIdentity` is that identity for one phase, built here alone (`phase1_identity`,
`phase2_identity`), and meta.json is built from it. It holds fingerprints, not the length
itself: where a phase is planned to end is the run's plan's (`bertcore.training.run.plan`), and
a checkpoint records it beside its position (`Checkpoint.planned_end`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertcore.common.digests import changed_fingerprints, fingerprint_params
from bertcore.common.dotted import flatten
from bertcore.common.errors import yaml_text
from bertcore.data.samples.store import samples_fingerprint
from bertcore.data.vocab.files import vocab_fingerprint
from bertcore.training.checkpoints.checkpoint import Checkpoint

if TYPE_CHECKING:
    from bertcore.training.config import Phase2Config, PretrainConfig, TrainConfig

LENGTH = "length"  # the fingerprint that may change without starting fresh
INIT_MODEL = "init_model"  # present only for runs that start from an existing model
PHASE1 = "phase1"  # BERT's second phase: the phase 1 it continues
PHASE_KEY = "phase"  # in a phase-2 checkpoint's meta.json: 2 (phase 1's have no such key)
# How a notice names a fingerprint that changed (others by their key).
NAMES = {INIT_MODEL: "initial model (the content of model.init_from)",
         PHASE1: "phase 1 (its params, data or length)"}

# Fields of `train` that do not change the optimisation: neither recorded nor fingerprinted, so
# a checkpoint made with other values of these is still resumed.
TRAIN_BOOKKEEPING = ("device", "log_every", "eval_every", "checkpoint_every", "keep_last",
                     "keep_replaced", "max_nonfinite_steps", "num_workers", "nproc_per_node",
                     "max_restarts")
# Fields of `train` that set the run's length: recorded, not fingerprinted (see LENGTH).
TRAIN_LENGTH = ("max_steps", "epochs", "max_minutes")
# Fields of `train` left out of a run with BERT's linear schedule (the default): see _bookkeeping.
LINEAR_SCHEDULE = ("schedule", "decay_fraction")


@dataclass(frozen=True)
class RunIdentity:
    """What a checkpoint of one phase must share with this run to be resumed (all of
    `fingerprints`), or extended (all but the length); `params` name what changed in a
    notice."""

    phase: int  # 1, or 2 for BERT's second phase
    fingerprints: dict[str, str]
    params: dict[str, Any]  # the optimisation params, length included

    def meta(self, world_size: int) -> dict[str, Any]:
        """What each checkpoint of the phase records besides its position (meta.json)."""
        meta = {"fingerprints": self.fingerprints, "params": self.params,
                "world_size": world_size}
        if self.phase == 2:
            meta[PHASE_KEY] = 2
        return meta

    def made(self, checkpoint: Checkpoint) -> bool:
        """Whether `checkpoint` is of this very phase: all fingerprints, length included."""
        return checkpoint.fingerprints == self.fingerprints

    def changed(self, checkpoint: Checkpoint) -> list[str]:
        """The fingerprints of `checkpoint` that differ from this run's, its length aside."""
        found = changed_fingerprints(checkpoint.fingerprints, self.fingerprints)
        return [name for name in found if name != LENGTH]

    def continues(self, checkpoint: Checkpoint) -> bool:
        """Whether `checkpoint` is of this phase's line: made in this phase with its
        fingerprints, the length aside (a run resumes or extends it)."""
        return phase_of(checkpoint) == self.phase and not self.changed(checkpoint)

    def param_changes(self, checkpoint: Checkpoint) -> str:
        """` (train.learning_rate 0.001 -> 0.002, ...)`: how this run's params differ from
        those `checkpoint` recorded, for a message ("" when it names none)."""
        saved = checkpoint.meta.get("params")
        if not saved:
            return ""
        before, after = flatten(saved), flatten(self.params)
        keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        if not keys:
            return ""
        shown = ", ".join(f"{k} {yaml_text(before.get(k))} -> {yaml_text(after.get(k))}"
                          for k in keys[:5])
        return f" ({shown}{', ...' if len(keys) > 5 else ''})"


def phase_of(checkpoint: Checkpoint) -> int:
    """The phase that made `checkpoint`: 1, or 2 for BERT's second phase."""
    return int(checkpoint.meta.get(PHASE_KEY, 1))


def in_phase1(checkpoint: Checkpoint) -> bool:
    return phase_of(checkpoint) == 1


def after_phase1(checkpoint: Checkpoint, phase1: RunIdentity) -> bool:
    """Whether `checkpoint` is of a phase 2 that went on from this very phase 1 (its params,
    data and length)."""
    return (phase_of(checkpoint) == 2
            and checkpoint.fingerprints.get(PHASE1) == fingerprint_params(phase1.fingerprints))


def phase1_identity(config: PretrainConfig, vocab_dir: str | Path, samples_dir: str | Path,
                    steps: int, init_model: str | None = None) -> RunIdentity:
    """Phase 1's identity (a run without phase 2 is phase 1 alone): `steps`, the length its
    params configure, is fingerprinted with the time budget; `init_model`: the content hash
    of the model it starts from (`InitModel.fingerprint`)."""
    fingerprints = {
        "params": fingerprint_params(resumable_params(config)),
        "vocab": vocab_fingerprint(vocab_dir),
        "samples": samples_fingerprint(samples_dir),
        LENGTH: length_fingerprint(steps, config.train.max_minutes),
    }
    if init_model is not None:
        fingerprints[INIT_MODEL] = init_model
    return RunIdentity(1, fingerprints, optimisation_params(config))


def phase2_identity(phase1: RunIdentity, config: Phase2Config, samples_dir: str | Path
                    ) -> RunIdentity:
    """The identity of BERT's second phase after `phase1`, on the samples in `samples_dir`
    (its length: `config.max_steps`, fingerprinted)."""
    params = _without(dataclasses.asdict(config), ("enabled",))
    fingerprints = {
        PHASE1: fingerprint_params(phase1.fingerprints),
        "vocab": phase1.fingerprints["vocab"],  # read by `bert fill-mask`
        "params": fingerprint_params(_without(params, ("max_steps",))),
        "samples": samples_fingerprint(samples_dir),
        LENGTH: str(config.max_steps),
    }
    return RunIdentity(2, fingerprints, {**phase1.params, "phase2": params})


def run_name(model: str, phases: Sequence[RunIdentity], steps: Sequence[int],
             max_minutes: float | None = None) -> str:
    """A run's name in a list of runs, from what makes it: `model` (its preset, or the folder
    it starts from), its length (`steps` of each phase as planned: `1500steps`;
    `1500+500steps` with phase 2; `-30min` with a time budget) and 6 hex digits of the rest of
    its identity (params, data, initial model), so that two runs share a name only when they
    are the same run, or one extends the other."""
    length = "+".join(str(count) for count in steps) + "steps"
    if max_minutes is not None:
        length += f"-{max_minutes:g}min"
    rest = [{key: value for key, value in phase.fingerprints.items()
             if key not in (LENGTH, PHASE1)} for phase in phases]
    return f"{model}-{length}-{fingerprint_params({'phases': rest})[:6]}"


def optimisation_params(config: PretrainConfig) -> dict[str, Any]:
    """What defines the optimisation of phase 1 (recorded): the resolved params (a recipe's
    values merged in by the edge). Not `model.init_from`, a path: the content of the model
    there is fingerprinted (INIT_MODEL)."""
    return {"model": _without(dataclasses.asdict(config.model), ("init_from",)),
            "masking": dataclasses.asdict(config.masking),
            "train": _without(dataclasses.asdict(config.train), _bookkeeping(config.train))}


def _bookkeeping(train: TrainConfig) -> tuple[str, ...]:
    """TRAIN_BOOKKEEPING, and BERT's linear schedule's unused keys: a linear run is recorded
    as it was before `train.schedule` existed, so a checkpoint made then is still resumed."""
    return TRAIN_BOOKKEEPING + (LINEAR_SCHEDULE if train.schedule == "linear" else ())


def resumable_params(config: PretrainConfig) -> dict[str, Any]:
    """What a phase-1 checkpoint must share to be resumed (fingerprinted): the optimisation
    without its length, since a run can be extended."""
    params = optimisation_params(config)
    train = _without(params["train"], TRAIN_LENGTH)
    # fullgraph compiles the same graph as true, it only refuses graph breaks: a run may
    # switch between the two and resume
    train["compile"] = bool(train["compile"])
    return {**params, "train": train}


def _without(values: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in names}


def length_fingerprint(configured: int, max_minutes: float | None = None) -> str:
    """The configured length of a run: `1500`, or `1500, 6 min` with a time budget (the
    planned end then comes from the timing the checkpoint records). Never read back: a
    checkpoint records its planned end as a number (`Checkpoint.planned_end`)."""
    return str(configured) if max_minutes is None else f"{configured}, {max_minutes:g} min"
