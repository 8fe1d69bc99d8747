"""Labelled files of a fine-tuning task, as a user gives them."""

from __future__ import annotations

import json
from pathlib import Path


def write_jsonl(path: Path, rows: list) -> Path:
    """`rows` as a JSON Lines file, one record a line."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
