"""A path a stage reads because of a param (corpus.source, vocab.source, model.init_from,
finetune.data, glue.data, probe.cloze, ...) is no DVC dep by itself: `dvc repro` reruns the
stage when the param's value changes, not when the files behind it do. Under `dvc repro`, say
so when dvc.yaml does not list the path."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml

log = logging.getLogger(__name__)


def warn_unless_a_dep(param: str, value: str, paths: list[Path] | None = None) -> None:
    """Warn when the running DVC stage reads `paths` (default: `value`), given by `param`, but
    its deps in dvc.yaml do not cover them all (the path itself or a folder above it).
    Outside `dvc repro`, or for paths that do not exist, nothing is said."""
    stage, root = os.environ.get("DVC_STAGE"), os.environ.get("DVC_ROOT")
    targets = [Path(p).expanduser() for p in (paths or [value])]
    if not stage or not root or not all(t.exists() for t in targets):
        return
    try:
        dvc_yaml = yaml.safe_load((Path(root) / "dvc.yaml").read_text(encoding="utf-8"))
        deps = dvc_yaml["stages"][stage.rpartition(":")[2]].get("deps") or []
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return
    covered = [(Path(root) / dep).resolve() for dep in deps if isinstance(dep, str)]
    for target in (t.resolve() for t in targets):
        if not any(dep == target or dep in target.parents for dep in covered):
            log.warning("%s %s is not among the deps of the %s stage in dvc.yaml: dvc repro "
                        "will not rerun it when these files change; add it there", param,
                        value, stage)
            return
