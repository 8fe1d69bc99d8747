"""A samples folder checked against its meta.json before pretraining, evaluation or pruning
read it, once per command (`SamplesCheck`): each split's .npy headers against the dtypes and
shapes meta.json implies, its values (NSP labels in {0, 1}, every segment inside tokens.npy and
within max_seq_length, every token id inside the vocabulary), its bytes against
`arrays_sha256` (the fingerprint checkpoints record), and `cls_id`/`sep_id` against the
vocabulary whose fingerprint it records. Without it, a folder changed after `bert samples`
wrote it trains on wrong data without a word, or stops with a traceback from numpy or torch.

It reads every byte of the arrays once more (docs/scale.md: the cost per GB,
benchmarks/verify_samples.py); the samples themselves are then read by memory map
(`SampleStore`), which checks nothing a training step would pay for.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from bertcore.common.errors import BertError
from bertcore.data.corpus.splits import SPLITS
from bertcore.data.samples.store import (
    PAIR_ARRAYS,
    TOKENS,
    arrays_sha256,
    check_vocab,
    file_part,
    split_files,
)
from bertcore.data.vocab.files import read_vocab

REBUILD = "rebuild it with `dvc repro samples --force` or `bert samples`"
CHUNK_BYTES = 16 << 20  # values are checked a chunk at a time: memory stays flat


def damaged(samples_dir: Path, problem: str) -> BertError:
    """The one line of a samples folder that is not what its meta.json says."""
    return BertError(f"the samples folder {samples_dir} is damaged: {problem}; {REBUILD}")


class SamplesCheck:
    """Checks samples folders against their meta.json and the vocabulary in `vocab_dir`. The
    token file that phase 2's samples share with phase 1's is read once per check."""

    def __init__(self, vocab_dir: str | Path):
        self.vocab_dir = Path(vocab_dir)
        self.tokens = read_vocab(vocab_dir)
        self._checked_tokens: dict[Path, tuple[bytes, bytes]] = {}  # path -> file_part

    def __call__(self, samples_dir: str | Path) -> dict:
        """meta.json of `samples_dir`, once the folder matches it; else BertError."""
        samples_dir = Path(samples_dir)
        meta = check_vocab(samples_dir, self.vocab_dir)
        check_meta(samples_dir, meta)
        self._check_specials(samples_dir, meta)
        for split in SPLITS:
            self._check_split(samples_dir, meta, split)
        return meta

    def _check_specials(self, samples_dir: Path, meta: dict) -> None:
        for key, token in (("cls_id", "[CLS]"), ("sep_id", "[SEP]")):
            expected = self.tokens.index(token) if token in self.tokens else None
            if meta.get(key) != expected:
                raise damaged(samples_dir, f"meta.json has {key} {meta.get(key)!r}, but "
                                           f"{token} is id {expected} of {self.vocab_dir}")

    def _check_split(self, samples_dir: Path, meta: dict, split: str) -> None:
        stats, recorded = meta[split], meta["arrays_sha256"][split]
        paths = {name: Path(os.path.normpath(path))  # phase2/../train/tokens.npy: train/...
                 for name, path in split_files(samples_dir / split, meta).items()}
        tokens = open_array(samples_dir, paths[TOKENS], np.dtype(meta["dtype"]),
                            (stats["corpus_tokens"],))
        pairs = {name: open_array(samples_dir, paths[name], dtype,
                                  (stats["count"],) if columns == 1 else (stats["count"], columns))
                 for name, (dtype, columns) in PAIR_ARRAYS.items()}
        parts = {TOKENS: self._check_tokens(samples_dir, paths[TOKENS], tokens)}
        check_pairs(samples_dir, paths, pairs, len(tokens), meta["max_seq_length"])
        parts.update({name: file_part(paths[name]) for name in PAIR_ARRAYS})
        if arrays_sha256(parts) != recorded:
            files = ", ".join(path.name for path in paths.values())
            raise damaged(samples_dir, f"the {split} arrays ({files}) differ from what "
                                       "meta.json's arrays_sha256 records of them")

    def _check_tokens(self, samples_dir: Path, path: Path, tokens: np.ndarray
                      ) -> tuple[bytes, bytes]:
        """Every id inside the vocabulary; returns the file's part of `arrays_sha256`."""
        key = path.resolve()
        if key not in self._checked_tokens:
            at = first_outside(chunks(tokens), 0, len(self.tokens) - 1)
            if at is not None:
                raise damaged(samples_dir, f"{path} holds token id {int(tokens[at])} at {at}, "
                                           f"outside the {len(self.tokens)} ids of "
                                           f"{self.vocab_dir}")
            self._checked_tokens[key] = file_part(path)
        return self._checked_tokens[key]


def check_meta(samples_dir: Path, meta: dict) -> None:
    """meta.json holds what the arrays are checked against, of the types `bert samples`
    writes."""
    fields = [(meta, key, kind, key) for key, kind in
              (("dtype", str), ("tokens_dir", str), ("max_seq_length", int))]
    for split in SPLITS:
        fields.append((meta.get("arrays_sha256"), split, str, f"arrays_sha256.{split}"))
        fields += [(meta.get(split), key, int, f"{split}.{key}")
                   for key in ("count", "corpus_tokens")]
    for where, key, kind, name in fields:
        if not (isinstance(where, dict) and isinstance(where.get(key), kind)):
            raise damaged(samples_dir, f"meta.json has no {name} (a {kind.__name__})")
    if meta["dtype"] not in ("uint16", "int32"):
        raise damaged(samples_dir, f"meta.json has dtype {meta['dtype']!r}, expected uint16 "
                                   "or int32")


def open_array(samples_dir: Path, path: Path, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """The .npy file at `path` memory-mapped, once its header says `dtype` and `shape` and the
    file holds that much data."""
    if not path.is_file():
        raise damaged(samples_dir, f"{path} is missing")
    try:
        with open(path, "rb") as file:
            version = np.lib.format.read_magic(file)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                           (2, 0): np.lib.format.read_array_header_2_0}[version]
            found_shape, fortran_order, found_dtype = read_header(file)
            offset = file.tell()
    except (ValueError, KeyError, OSError, SyntaxError, EOFError):
        raise damaged(samples_dir, f"{path} has no readable .npy header") from None
    expected = f"{dtype.name} {shape}"
    if (found_dtype, found_shape, fortran_order) != (dtype, shape, False):
        raise damaged(samples_dir, f"{path} holds {found_dtype.name} {found_shape}, meta.json "
                                   f"says {expected}")
    size, data = path.stat().st_size, offset + dtype.itemsize * int(np.prod(shape))
    if size != data:
        cut = "is cut short" if size < data else "runs past its data"
        raise damaged(samples_dir, f"{path} {cut}: {size} bytes, where {expected} after its "
                                   f"header takes {data}")
    if not data - offset:  # an empty array cannot be memory-mapped
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype, "r", offset, shape)


def check_pairs(samples_dir: Path, paths: dict[str, Path], pairs: dict[str, np.ndarray],
                n_tokens: int, max_seq_length: int) -> None:
    """NSP labels in {0, 1}; A and B inside the `n_tokens` tokens, and a pair (with [CLS] and
    two [SEP]) within `max_seq_length`."""
    labels, starts, lengths = (pairs[name] for name in
                               ("is_random_next", "segment_starts", "segment_lengths"))
    at = first_outside(chunks(labels), 0, 1)
    if at is not None:
        raise damaged(samples_dir, f"{paths['is_random_next']} holds NSP label "
                                   f"{int(labels[at])} for pair {at}, expected 0 or 1")
    at = first_outside(chunks(starts), 0, n_tokens)
    if at is None:  # the ends, once no start is so large that it would overflow
        at = first_outside(((row, part + lengths[row : row + len(part)])
                            for row, part in chunks(starts)), 0, n_tokens)
    if at is not None:
        raise damaged(samples_dir, f"{paths['segment_starts']} and segment_lengths.npy put "
                                   f"pair {at} at {starts[at].tolist()} + "
                                   f"{lengths[at].tolist()}, outside the {n_tokens} tokens of "
                                   f"{paths[TOKENS]}")
    at = first_outside(((row, part[:, 0].astype(np.int32) + part[:, 1])
                        for row, part in chunks(lengths)), 0, max_seq_length - 3)
    if at is not None:
        raise damaged(samples_dir, f"{paths['segment_lengths']} makes pair {at} "
                                   f"{int(lengths[at].sum()) + 3} tokens long, past "
                                   f"meta.json's max_seq_length {max_seq_length}")


def first_outside(parts: Iterable[tuple[int, np.ndarray]], low: int, high: int) -> int | None:
    """The first row of the (first row, rows) `parts` holding a value outside [low, high];
    None when there is none. A part is searched only when its minimum or maximum is outside
    (two reductions: far cheaper than a comparison per element)."""
    for row, part in parts:
        if len(part) and (part.min() < low or part.max() > high):
            outside = ((part < low) | (part > high)).reshape(len(part), -1).any(axis=1)
            return row + int(np.flatnonzero(outside)[0])
    return None


def chunks(array: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, rows) of `array` in pieces of about CHUNK_BYTES."""
    rows = max(1, CHUNK_BYTES // max(1, array[:1].nbytes))
    for start in range(0, len(array), rows):
        yield start, np.asarray(array[start : start + rows])
