"""Fingerprints: sha256 of parameters and of files, so that a run knows what made its inputs
(checkpoints, samples, the model a run starts from, an existing vocabulary), and of source
code (the fine-tunes GLUE keeps)."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def fingerprint_params(params: Mapping[str, Any]) -> str:
    """sha256 of the parameters that define an optimisation (canonical JSON)."""
    text = json.dumps(params, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint_files(paths: Iterable[str | os.PathLike]) -> str:
    """sha256 over the names and bytes of `paths` (in the order given)."""
    digest = hashlib.sha256()
    for path in paths:
        path = Path(path)
        digest.update(path.name.encode("utf-8") + b"\0")
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def changed_fingerprints(saved: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """Names whose fingerprints differ (a name missing on one side counts as changed)."""
    return sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()



@functools.cache
def source_digest(packages: tuple[str, ...]) -> str:
    """sha256 over the Python source of `packages` (dotted names, e.g. "bertcore.model"): each
    `.py` file's path inside its package and its bytes, in path order. What a result computed
    by that code depends on, where a cache keeps results across changes of the code."""
    digest = hashlib.sha256()
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"{package} is not a package")
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{package}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
