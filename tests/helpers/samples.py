"""A samples folder written by hand, for the tests of what reads one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bertcore.data.samples.store import FORMAT_VERSION, META_FILE


def save_samples(split_dir: Path, samples: list, cls_id: int = 2, sep_id: int = 3) -> None:
    """A split of a samples folder written by hand: `samples` are (ids, segment_b_start,
    is_random_next) as SampleStore gives them, ids `[CLS] A [SEP] B [SEP]`; the token file
    holds each sample's A and B in turn. Writes the folder's meta.json too unless it has one."""
    split_dir.mkdir(parents=True, exist_ok=True)
    pieces, starts, lengths = [], [], []
    position = 0
    for ids, b_start, _ in samples:
        a, b = ids[1 : b_start - 1], ids[b_start:-1]
        starts.append((position, position + len(a)))
        lengths.append((len(a), len(b)))
        pieces += [a, b]
        position += len(a) + len(b)
    tokens = np.concatenate(pieces) if pieces else np.zeros(0)
    np.save(split_dir / "tokens.npy", tokens.astype(np.uint16))
    np.save(split_dir / "segment_starts.npy", np.array(starts, np.int64).reshape(-1, 2))
    np.save(split_dir / "segment_lengths.npy", np.array(lengths, np.uint16).reshape(-1, 2))
    np.save(split_dir / "is_random_next.npy", np.array([s[2] for s in samples], np.uint8))
    meta = split_dir.parent / META_FILE
    if not meta.is_file():
        meta.write_text(json.dumps({"format": FORMAT_VERSION, "dtype": "uint16", "cls_id": cls_id,
                                    "sep_id": sep_id, "tokens_dir": "."}))
