"""Nested settings and reports under dotted names: `{"train": {"batch_size": 32}}` ->
`{"train.batch_size": 32}`, the names of params.yaml, `--set`, MLflow params and tags."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every leaf of `values` (lists included, as one leaf) under its dotted name."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat
