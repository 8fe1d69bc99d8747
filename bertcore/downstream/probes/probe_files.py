"""The user's probe files: JSON Lines, one object per line (blank lines skipped), given as a
file or a folder of `*.jsonl` files. Whatever is wrong is one BertError naming the file, the
line and what was expected."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bertcore.common.errors import BertError


def probe_files(path: str | Path, key: str) -> list[Path]:
    """The files of `probe.<key>`: the file itself, or the folder's *.jsonl in name order."""
    path = Path(path).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.glob("*.jsonl") if p.is_file())
        if not files:
            raise BertError(f"probe.{key}: the folder {path} holds no .jsonl file: give a "
                            "JSON Lines file or a folder of them")
        return files
    if not path.is_file():
        raise BertError(f"probe.{key}: {path} does not exist: give a JSON Lines file or a "
                        "folder of them, or null for the built-in probes only")
    return [path]


def records(path: Path, expected: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of `path` (UTF-8, with or without a
    byte-order mark); a file with none is an error, as is a line that is not a JSON object."""
    found = False
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:  # a byte-order mark (Windows editors write one) starts no record
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise BertError(f"{path} line {number} is not UTF-8: expected {expected}"
                                ) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise BertError(f"{path} line {number} is not JSON: expected {expected}"
                                ) from None
            if not isinstance(record, dict):
                raise BertError(f"{path} line {number} is not a JSON object: expected "
                                f"{expected}")
            found = True
            yield number, record
    if not found:
        raise BertError(f"{path} is empty: expected {expected}")


def text_field(record: dict[str, Any], field: str, path: Path, number: int,
               expected: str) -> str:
    """`record[field]`, a string that is not blank, or a BertError naming the line."""
    value = record.get(field)
    if not isinstance(value, str) or not value.strip():
        what = "has no" if field not in record else "has no text in"
        raise BertError(f"{path} line {number} {what} {field!r}: expected {expected}")
    return value


def group_of(record: dict[str, Any], field: str, path: Path) -> str:
    """The record's group: its `field` (BLiMP's UID, LAMA's predicate_id) when it has one,
    else the file's name without .jsonl."""
    value = record.get(field)
    return str(value) if isinstance(value, str | int) and str(value).strip() else path.stem
