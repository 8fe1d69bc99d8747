"""Training checkpoints: written whole or not at all, loaded only as plain data.

A checkpoint is a folder `step-00001234/` holding
  model.safetensors  the weights (with config.json: `bertcore.model.hf.load_model` reads it)
  trainer.pt         optimizer, scaler, step, planned end and counters, plus the RNG states of
                     every process (no scheduler: the learning rate is a function of the
                     step): plain tensors, dicts, lists and numbers, so it loads with
                     `torch.load(weights_only=True)` and never executes pickled code
  meta.json          step, data position, the run's identity (fingerprints and params:
                     `bertcore.training.identity`) and the sha256 of every other file
                     (`files`); not the MLflow run, whose id is random (see `runs_file`)
  *.tsv              the training log up to this step (the stage's TSV is rebuilt from it)
It is written to a staging folder and renamed into place, so a crash mid-write leaves the
previous checkpoint as the latest. A checkpoint is resumed only when its fingerprints match
the current run's; the last `keep_last` of the current run are kept.

`latest()` returns the newest checkpoint whose files match their checksums: a damaged one
(truncated, missing or altered file) is set aside as `step-N.damaged` with a warning, never
deleted, and the one before it is tried. `lock()` keeps a second run out of the folder.
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
from collections.abc import Callable, Mapping
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
from bertcore.model.hf import save_model

log = logging.getLogger(__name__)

MODEL_FILE = "model.safetensors"
STATE_FILE = "trainer.pt"
META_FILE = "meta.json"
DAMAGED_SUFFIX = ".damaged"  # step-00000008.damaged: set aside, never pruned
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


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


class CheckpointDir:
    """The folder of checkpoints of one training run."""

    def __init__(self, root: str | os.PathLike, keep_last: int = 2):
        if keep_last < 1:
            raise ValueError("keep_last must be >= 1")
        self.root = Path(root)
        self.keep_last = keep_last
        self.pinned: set[str] = set()  # names of checkpoints never pruned (see `pin`)

    def pin(self, ckpt: Checkpoint) -> None:
        """Keep `ckpt` whatever the newer checkpoints are: phase 1's last checkpoint, which
        BERT's second phase starts from, while phase 2 writes its own."""
        self.pinned.add(ckpt.path.name)

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
        for n in range(1, 1000):
            name = f"{ckpt.path.name}{DAMAGED_SUFFIX}" + (f"-{n}" if n > 1 else "")
            if os.path.lexists(self.root / name):
                continue
            try:
                os.rename(ckpt.path, self.root / name)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    continue  # taken meanwhile
                raise BertError(f"checkpoint {ckpt.path} is damaged and cannot be set aside "
                                f"({exc.strerror}): move it away by hand") from None
            return name
        raise BertError(f"checkpoint {ckpt.path} is damaged: move it away by hand")

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
    ) -> Path:
        """Commit checkpoint `step` atomically, then prune; returns its folder.

        Refuses (BertError) to save weights that are not finite: a bad state must never
        replace a good checkpoint."""
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                raise BertError(f"refusing to checkpoint non-finite weights {name} at step {step}")
        final = self.root / checkpoint_name(step)
        with atomic_dir(final, advice="point --checkpoints elsewhere") as staging:
            save_model(model, staging)  # model.safetensors + config.json: a model dir
            torch.save(dict(state), staging / STATE_FILE)
            for name, text in (texts or {}).items():
                (staging / name).write_text(text, encoding="utf-8")
            files = {p.name: file_sha256(p) for p in sorted(staging.iterdir()) if p.is_file()}
            # meta.json last: its presence marks a complete checkpoint even without the rename
            full_meta = {**meta, "step": step, "files": files}
            (staging / META_FILE).write_text(json.dumps(full_meta, indent=2, sort_keys=True))
        self.prune(current=meta.get("fingerprints", {}))
        return final

    def prune(self, current: Mapping[str, str]) -> None:
        """Keep the newest `keep_last` checkpoints whose fingerprints are `current`; delete
        the rest (older ones, and those of other params or data, which this run replaces),
        plus staging folders left by processes that died (never a live one's). Checkpoints
        set aside as damaged are kept, and so are pinned ones."""
        mine = [c for c in self.all() if c.fingerprints == dict(current)]
        keep = {c.path for c in mine[-self.keep_last :]} | {self.root / n for n in self.pinned}
        for ckpt in self.all():
            if ckpt.path not in keep:
                shutil.rmtree(ckpt.path, ignore_errors=True)
        remove_stale_temporaries(self.root)
