"""Resume or start fresh: which checkpoint a pretraining run continues, and how.

A checkpoint records fingerprints of what made it: the optimisation params (without the length
of the run), the vocabulary, the samples, the content of the model it started from (with
`model.init_from`), and the planned length. The latest checkpoint is resumed when all but the
length match. When only the length differs (`train.max_steps` or `train.epochs` changed), the
run is extended (or shortened, if it has not passed the new end yet): it resumes with the
learning-rate schedule re-planned to the new end, as transformers' Trainer does. Anything else
starts fresh, and the new run's checkpoints replace the old ones.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertcore.common.digests import changed_fingerprints, fingerprint_files, fingerprint_params
from bertcore.common.dotted import flatten
from bertcore.data.vocab.files import vocab_fingerprint
from bertcore.training.checkpoint import Checkpoint

SAMPLE_ARRAYS = ("input_ids", "offsets", "segment_b_start", "is_random_next")
LENGTH = "length"  # the fingerprint that may change without starting fresh
INIT_MODEL = "init_model"  # present only for runs that start from an existing model
PHASE1 = "phase1"  # BERT's second phase: the phase 1 it continues (bertcore.training.phases)
# How a notice names a fingerprint that changed (others by their key).
NAMES = {INIT_MODEL: "initial model (the content of model.init_from)",
         PHASE1: "phase 1 (its params, data or length)"}


def samples_fingerprint(samples_dir: str | Path) -> str:
    """The samples' fingerprint: sha256 of meta.json alone when it records the hashes of the
    arrays (`arrays_sha256`, written once by the samples stage), so a start never reads the
    arrays; for samples built before that, meta.json plus the train arrays, hashed now."""
    samples_dir = Path(samples_dir)
    meta_file = samples_dir / "meta.json"
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    if isinstance(meta, dict) and meta.get("arrays_sha256"):
        return fingerprint_files([meta_file])
    arrays = [samples_dir / "train" / f"{name}.npy" for name in SAMPLE_ARRAYS]
    return fingerprint_files([meta_file, *arrays])


def length_fingerprint(total_steps: int, max_minutes: float | None = None) -> str:
    """The configured length of a run: `1500`, or `1500, 6 min` with a time budget (the
    planned end then comes from the timing the checkpoint records)."""
    return str(total_steps) if max_minutes is None else f"{total_steps}, {max_minutes:g} min"


def run_fingerprints(resumable_params: Mapping[str, Any], vocab_dir: str | Path,
                     samples_dir: str | Path, total_steps: int,
                     init_model: str | None = None,
                     max_minutes: float | None = None) -> dict[str, str]:
    """What a checkpoint of this run records, to be compared by the next run. `init_model`:
    the content hash of the model the run starts from (`InitModel.fingerprint`), if any;
    `max_minutes`: the run's time budget, if any."""
    fingerprints = {
        "params": fingerprint_params(resumable_params),
        "vocab": vocab_fingerprint(vocab_dir),
        "samples": samples_fingerprint(samples_dir),
        LENGTH: length_fingerprint(total_steps, max_minutes),
    }
    if init_model is not None:
        fingerprints[INIT_MODEL] = init_model
    return fingerprints


@dataclass(frozen=True)
class ResumePlan:
    """The checkpoint to resume (None: start fresh) and what to tell the user."""

    checkpoint: Checkpoint | None
    notice: str | None = None  # why a checkpoint is not resumed, or how it is extended
    previous_total: int | None = None  # set when the run's length changed (re-planned)

    @property
    def extends(self) -> bool:
        return self.checkpoint is not None and self.previous_total is not None


def plan_resume(latest: Checkpoint | None, fingerprints: Mapping[str, str],
                params: Mapping[str, Any], total_steps: int) -> ResumePlan:
    """Decide from the latest intact checkpoint (`CheckpointDir.latest()`, which verifies
    every file: read it once); `params` (the optimisation params, length included) only serve
    to name what changed. `total_steps`: where this run would end if it resumed `latest` (with
    a time budget: as re-planned from its timing)."""
    if latest is None:
        return ResumePlan(None)
    changed = [k for k in changed_fingerprints(latest.fingerprints, fingerprints) if k != LENGTH]
    if changed:
        named = " and ".join(NAMES.get(name, name) for name in changed)
        return ResumePlan(None, f"checkpoint {latest.path} was made with other "
                                f"{named}{param_changes(latest.meta, params)}: "
                                "starting fresh (it will be replaced)")
    saved_total = latest.fingerprints.get(LENGTH)
    if saved_total == fingerprints[LENGTH]:
        return ResumePlan(latest)
    if not str(saved_total).split(",")[0].isdigit():  # made before runs could be extended
        return ResumePlan(None, f"checkpoint {latest.path} does not record the length of its "
                                "run: starting fresh (it will be replaced)")
    # The end it was heading for (with a time budget: as planned, when the plan was made).
    saved_total = str(latest.meta.get("total_steps", saved_total)).split(",")[0]
    what = param_changes(latest.meta, params)
    if latest.step > total_steps:
        return ResumePlan(None, f"checkpoint {latest.path} is at step {latest.step}, past the "
                                f"new end of the run{what} at step {total_steps}: starting "
                                "fresh (it will be replaced)")
    return ResumePlan(latest, f"the run's length changed{what}: resuming from step "
                              f"{latest.step} with the learning-rate schedule re-planned to end "
                              f"at step {total_steps} instead of {saved_total}",
                      previous_total=int(saved_total))


def param_changes(meta: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """` (train.learning_rate 0.001 -> 0.002, ...)` for a message, from a checkpoint's meta."""
    saved = meta.get("params")
    if not saved:
        return ""
    before, after = flatten(saved), flatten(current)
    keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if not keys:
        return ""
    shown = ", ".join(f"{k} {before.get(k)!r} -> {after.get(k)!r}" for k in keys[:5])
    return f" ({shown}{', ...' if len(keys) > 5 else ''})"
