"""Training checkpoints: written whole or not at all, loaded only as plain data.

A checkpoint is a folder `step-00001234/` holding
  model.safetensors  the weights (with config.json: `bertcore.saved.hf.load_model` reads it)
  trainer.pt         optimizer, scaler, step, planned end and counters, plus the RNG states of
                     every process (no scheduler: the learning rate is a function of the
                     step): plain tensors, dicts, lists and numbers, so it loads with
                     `torch.load(weights_only=True)` and never executes pickled code
  meta.json          step, data position, the run's identity (fingerprints and params:
                     `bertcore.training.checkpoints.identity`) and the sha256 of every other file
                     (`files`); not the MLflow run, whose id is random (see `runs_file`)
  *.tsv              the training log up to this step (the stage's TSV is rebuilt from it)
It is written to a staging folder and renamed into place, so a crash mid-write leaves the
previous checkpoint as the latest. A checkpoint is resumed only when its fingerprints match
the current run's. `keep_last` rotates among the checkpoints of the run's line (`line`: the
run's own and those it extends) and never takes a finished one, the last of a run or phase that
reached its planned end: a later run may go on from it, or the user come back to it.

`latest()` returns the newest checkpoint whose files match their checksums: a damaged one
(truncated, missing or altered file) is set aside as `step-N.damaged` with a warning, never
deleted, and the one before it is tried. The checkpoints a run replaces (other params, or a
run shortened below them) are set aside before it trains, into `replaced/` (`set_aside`),
instead of those set aside there before; only the folder's own `step-N` count for resuming.
`lock()` keeps a second run out of the folder.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import random
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model

from bertcore.common.atomic import atomic_dir, remove_stale_temporaries, write_json
from bertcore.common.digests import file_sha256
from bertcore.common.errors import BertError
from bertcore.common.lock import folder_lock
from bertcore.saved.hf import save_model
from bertcore.saved.pretrained import META_FILE

log = logging.getLogger(__name__)

MODEL_FILE = "model.safetensors"
STATE_FILE = "trainer.pt"
DAMAGED_SUFFIX = ".damaged"  # step-00000008.damaged: set aside, never pruned
REPLACED_DIR = "replaced"  # the checkpoints the latest fresh run replaced, set aside
_INCOMING = f".{REPLACED_DIR}.incoming"  # filled first, then renamed to REPLACED_DIR whole
_NAME = re.compile(r"^step-(\d+)$")


# --------------------------------------------------------------------------------- RNG state
def capture_rng_state() -> dict[str, Any]:
    """Every RNG this process uses, as tensors and numbers (weights_only-loadable)."""
    version, internal, gauss_next = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": {
            "version": int(version),
            "state": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": [],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Undo `capture_rng_state`: the next random numbers are those the saved run drew next."""
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss_next"]))
    npy = state["numpy"]
    keys = npy["keys"].numpy().astype(np.uint32)
    np.random.set_state((npy["name"], keys, npy["pos"], npy["has_gauss"], npy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
        else:
            log.warning("checkpoint has CUDA RNG states of %d devices; not restored", len(cuda))


# ------------------------------------------------------------------------------ checkpoints
@dataclass(frozen=True)
class Checkpoint:
    """A committed checkpoint folder and its meta.json."""

    path: Path
    step: int
    meta: dict

    @property
    def fingerprints(self) -> dict[str, str]:
        return dict(self.meta.get("fingerprints", {}))

    @property
    def planned_end(self) -> int | None:
        """The step the run (the phase) that wrote it was planned to end at."""
        end = self.meta.get("total_steps")
        return end if isinstance(end, int) else None

    @property
    def finished(self) -> bool:
        """Whether it is the last checkpoint of a run (of a phase) that reached its planned
        end, rather than one on the way or of an interrupted run."""
        return self.step == self.planned_end

    def load_state(self) -> dict[str, Any]:
        """trainer.pt, as plain data (weights_only)."""
        return torch.load(self.path / STATE_FILE, map_location="cpu", weights_only=True)

    def load_model(self, model: torch.nn.Module) -> None:
        """Copy the saved weights into `model` (same architecture; any device)."""
        try:
            missing, unexpected = load_model(model, self.path / MODEL_FILE, strict=False)
        except RuntimeError as exc:  # shapes differ
            missing, unexpected = [str(exc).strip().splitlines()[-1].strip()], []
        if missing or unexpected:
            raise BertError(
                f"checkpoint {self.path} does not fit the model (missing "
                f"{sorted(missing)[:2]}, unexpected {sorted(unexpected)[:2]}): delete it or "
                "restore the params it was made with"
            )

    def read_text(self, name: str) -> str | None:
        path = self.path / name
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def damage(self) -> str | None:
        """What is wrong with the files of this checkpoint, or None when they are intact."""
        expected = self.meta.get("files")
        if not expected:
            return f"{META_FILE} lists no files"
        for name, checksum in sorted(expected.items()):
            try:
                if file_sha256(self.path / name) != checksum:
                    return f"{name} does not match its checksum"
            except FileNotFoundError:
                return f"{name} is missing"
            except OSError as exc:
                return f"{name} is unreadable ({exc.strerror or exc})"
        return None


def _interned(value: Any) -> Any:
    """`value` with every string interned: pickle writes a string once per object, so keys
    read back from a checkpoint (new objects) would give other bytes than the literals of a
    fresh run; interned, trainer.pt depends on its values alone."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {_interned(k): _interned(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_interned(v) for v in value)
    return value


class CheckpointDir:
    """The folder of checkpoints of one training run."""

    def __init__(self, root: str | os.PathLike, keep_last: int = 2):
        self.root = Path(root)
        self.keep_last = keep_last

    def all(self) -> list[Checkpoint]:
        """Committed checkpoints, oldest first (a folder without meta.json is not one)."""
        found = []
        if not self.root.is_dir():
            return found
        for path in self.root.iterdir():
            match = _NAME.match(path.name)
            if not match or not (path / META_FILE).is_file():
                continue
            try:
                meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                log.warning("ignoring checkpoint %s: unreadable %s", path, META_FILE)
                continue
            found.append(Checkpoint(path, int(match.group(1)), meta))
        return sorted(found, key=lambda c: c.step)

    def latest(self, where: Callable[[Checkpoint], bool] | None = None) -> Checkpoint | None:
        """The newest intact checkpoint (of those `where` accepts). Damaged ones on the way are
        set aside (renamed `step-N.damaged`), each with one warning; None when no intact one
        is left."""
        damaged: list[tuple[Checkpoint, str, str]] = []
        found = None
        for ckpt in reversed(self.all()):
            if where is not None and not where(ckpt):
                continue
            problem = ckpt.damage()
            if problem is None:
                found = ckpt
                break
            aside = self._set_aside(ckpt)
            if aside is not None:  # None: another process of this run set it aside
                damaged.append((ckpt, problem, aside))
        for ckpt, problem, aside in damaged:
            then = f"falling back to {found.path.name}" if found else "no intact one is left"
            log.warning("checkpoint %s is damaged (%s): set aside as %s; %s", ckpt.path,
                        problem, aside, then)
        return found

    def _set_aside(self, ckpt: Checkpoint) -> str | None:
        """Rename a damaged checkpoint out of the way (keeping it for inspection)."""
        while True:
            target = _free_name(self.root, ckpt.path.name + DAMAGED_SUFFIX)
            try:
                os.rename(ckpt.path, target)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    continue  # taken meanwhile
                raise BertError(f"checkpoint {ckpt.path} is damaged and cannot be set aside "
                                f"({exc.strerror}): move it away by hand") from None
            return target.name

    @property
    def runs_file(self) -> Path:
        """`.<folder>.runs.json` beside the folder, like its lock: which MLflow run wrote each
        checkpoint. Not inside the checkpoints, so that the same params and data give the same
        bytes there (an MLflow run id is random)."""
        return self.root.parent / f".{self.root.name}.runs.json"

    def _recorded_runs(self) -> dict[str, str]:
        """Checkpoint name -> MLflow run id, as recorded ({} when the file is missing or
        unreadable)."""
        try:
            runs = json.loads(self.runs_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return runs if isinstance(runs, dict) else {}

    def run_id(self, ckpt: Checkpoint) -> str | None:
        """The MLflow run that wrote `ckpt`; None when none is recorded."""
        return self._recorded_runs().get(ckpt.path.name)

    def record_run(self, path: Path, run_id: str) -> None:
        """Note that MLflow run `run_id` wrote checkpoint `path` (entries of checkpoints
        that are gone are dropped)."""
        runs = {name: run for name, run in self._recorded_runs().items()
                if (self.root / name).is_dir()}
        write_json(self.runs_file, {**runs, path.name: run_id})

    def lock(self, enabled: bool = True):
        """A context that keeps other runs out of this folder while it lasts (a second run
        fails at once, naming the holder). `enabled=False`: a no-op, for the processes of a
        distributed run other than rank 0, which holds it for all of them."""
        if not enabled:
            return contextlib.nullcontext()
        return folder_lock(self.root, "wait for that run to finish, or give this one "
                                      "another checkpoint folder (--checkpoints)")

    def save(
        self,
        step: int,
        model: torch.nn.Module,
        state: Mapping[str, Any],
        meta: Mapping[str, Any],
        texts: Mapping[str, str] | None = None,
        line: Callable[[Checkpoint], bool] | None = None,
    ) -> Path:
        """Commit checkpoint `step` atomically, then prune (`line`: see `prune`); returns its
        folder.

        Refuses (BertError) to save weights that are not finite: a bad state must never
        replace a good checkpoint."""
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                raise BertError(f"refusing to checkpoint non-finite weights {name} at step {step}")
        final = self.root / f"step-{step:08d}"
        with atomic_dir(final, advice="point --checkpoints elsewhere") as staging:
            save_model(model, staging)  # model.safetensors + config.json: a model dir
            torch.save(_interned(dict(state)), staging / STATE_FILE)
            for name, text in (texts or {}).items():
                (staging / name).write_text(text, encoding="utf-8")
            files = {p.name: file_sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
            # meta.json last: its presence marks a complete checkpoint even without the rename
            full_meta = {**meta, "step": step, "files": files}
            (staging / META_FILE).write_text(json.dumps(full_meta, indent=2, sort_keys=True))
        self.prune(current=meta.get("fingerprints", {}), line=line)
        return final

    def prune(self, current: Mapping[str, str],
              line: Callable[[Checkpoint], bool] | None = None) -> None:
        """Rotate the checkpoints of the run's line (`line(checkpoint)`: whether it is of the
        line of the run writing here; without one, those whose fingerprints are `current`):
        keep the newest `keep_last` and every finished one, and
        delete the others of the line, plus staging folders left by processes that died
        (never a live one's). Checkpoints of other lines are left alone (a run sets aside the
        ones it replaces before it trains), and so are those set aside."""
        line = line or (lambda ckpt: ckpt.fingerprints == dict(current))
        mine = [c for c in self.all() if line(c)]
        for ckpt in mine[: -self.keep_last]:
            if not ckpt.finished:
                shutil.rmtree(ckpt.path, ignore_errors=True)
        remove_stale_temporaries(self.root)

    # --------------------------------------------------------------- replaced checkpoints
    @property
    def replaced_dir(self) -> Path:
        return self.root / REPLACED_DIR

    def set_aside_before(self) -> list[str]:
        """The names of the checkpoints set aside in `replaced/` by an earlier run (which the
        next `set_aside` deletes)."""
        folder = self.replaced_dir
        return sorted(entry.name for entry in folder.iterdir()) if folder.is_dir() else []

    def set_aside(self, replaced: Sequence[Checkpoint]) -> None:
        """Move `replaced`, the checkpoints a new run replaces, into `replaced/`, instead of
        those set aside there before (deleted). They go into a folder of their own first,
        which then takes the place of `replaced/` whole: a run killed on the way leaves them
        there, and the next one adds its own to them."""
        incoming = self.root / _INCOMING
        incoming.mkdir(exist_ok=True)
        for ckpt in replaced:
            os.rename(ckpt.path, _free_name(incoming, ckpt.path.name))
        if self.replaced_dir.exists():
            shutil.rmtree(self.replaced_dir)
        os.rename(incoming, self.replaced_dir)

    def delete(self, replaced: Sequence[Checkpoint]) -> None:
        """Delete `replaced` (train.keep_replaced: false)."""
        for ckpt in replaced:
            shutil.rmtree(ckpt.path, ignore_errors=True)


def _free_name(folder: Path, name: str) -> Path:
    """`folder/name`, or `folder/name-2`, ... when that is taken."""
    path, n = folder / name, 1
    while os.path.lexists(path):
        n += 1
        path = folder / f"{name}-{n}"
    return path
