"""The samples folder on disk: one folder per split holding its arrays as .npy files, and
meta.json beside them (see `bertcore.data.samples.build` for how they are built).

    meta.json                      vocab fingerprint, lengths, counts, NSP balance per split,
                                   `arrays_sha256` per split (the arrays' fingerprint)
    {train,val}/input_ids.npy      all sequences `[CLS] A [SEP] B [SEP]`, concatenated
    {train,val}/offsets.npy        int64 (n+1,): sequence i = input_ids[offsets[i]:offsets[i+1]]
    {train,val}/segment_b_start.npy  int32 (n,): index of B's first token (= len(A) + 2)
    {train,val}/is_random_next.npy   uint8 (n,): 1 when B is a random segment (NSP label 1)
    phase2/                        with BERT's second phase on: the same layout at its length

Written by appending (`NpyAppender`, hashing as it writes), read by memory map (`SampleStore`).
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from bertcore.common.errors import BertError

META_FILE = "meta.json"
ARRAYS = ("input_ids", "offsets", "segment_b_start", "is_random_next")
FORMAT_VERSION = 1
# The samples of BERT's second phase (params.yaml `phase2`), a samples folder of their own inside
# phase 1's, so that phase 1's files, and their fingerprint, are the same with it on or off.
PHASE2_DIR = "phase2"


def phase2_samples(samples_dir: str | Path) -> Path | None:
    """The phase-2 samples folder inside `samples_dir`, when the samples stage built one."""
    folder = Path(samples_dir) / PHASE2_DIR
    return folder if (folder / META_FILE).is_file() else None


class NpyAppender:
    """A 1-D .npy file written by appending chunks; the header gets the final length on close.

    Writes go straight to the file (not through a memory map), so memory stays flat."""

    HEADER_BYTES = 128  # a multiple of 64, so the data is aligned for memory maps

    def __init__(self, path: Path, dtype: np.dtype):
        self.path = path
        self.dtype = np.dtype(dtype)
        self.count = 0
        self.header = b""  # the final .npy header, once closed
        self.data_sha256 = hashlib.sha256()  # of the bytes after the header, as written
        self._file = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._file.write(b"\0" * self.HEADER_BYTES)

    def append(self, values: np.ndarray) -> None:
        data = np.ascontiguousarray(values, self.dtype)
        self.data_sha256.update(memoryview(data).cast("B"))
        data.tofile(self._file)
        self.count += len(values)

    def close(self) -> None:
        shape = f"({self.count},)"
        header = f"{{'descr': '{self.dtype.str}', 'fortran_order': False, 'shape': {shape}, }}"
        header = header.ljust(self.HEADER_BYTES - 10 - 1) + "\n"
        self.header = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
        self._file.seek(0)
        self._file.write(self.header)
        self._file.close()


def arrays_sha256(parts: dict[str, tuple[bytes, bytes]]) -> str:
    """The fingerprint of one split's arrays (meta.json `arrays_sha256`): sha256 over, for
    each array of ARRAYS in that order, its file name (`input_ids.npy`...) and a newline, the
    file's .npy header (its first HEADER_BYTES bytes) and the 32-byte sha256 digest of the
    rest of the file (the data). `parts[name]` = (header, data digest). It changes whenever
    a byte of the files does, and is computed while they are written (no second read)."""
    digest = hashlib.sha256()
    for name in ARRAYS:
        header, data_digest = parts[name]
        digest.update(f"{name}.npy\n".encode() + header + data_digest)
    return digest.hexdigest()


def arrays_sha256_of_files(split_dir: str | Path) -> str:
    """`arrays_sha256` recomputed by reading the files of a split folder."""
    parts = {}
    for name in ARRAYS:
        data = (Path(split_dir) / f"{name}.npy").read_bytes()
        header = data[: NpyAppender.HEADER_BYTES]
        parts[name] = (header, hashlib.sha256(data[NpyAppender.HEADER_BYTES :]).digest())
    return arrays_sha256(parts)


# ---------------------------------------------------------------------------------------------
# Reading


def read_meta(samples_dir: str | Path) -> dict:
    path = Path(samples_dir) / META_FILE
    if not path.is_file():
        raise BertError(f"no samples at {samples_dir} ({META_FILE} missing): run `bert samples`")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        raise BertError(f"{path} is not valid JSON: rerun `bert samples`") from None


def check_vocab(samples_dir: str | Path, vocab_dir: str | Path) -> dict[str, Any]:
    """Raise BertError unless the samples were built with the vocabulary in `vocab_dir`;
    returns their meta.json."""
    from bertcore.data.vocab.files import vocab_fingerprint

    meta = read_meta(samples_dir)
    built_with = meta.get("vocab_fingerprint")
    current = vocab_fingerprint(vocab_dir)
    if built_with != current:
        raise BertError(
            f"the samples in {samples_dir} were built with another vocabulary than {vocab_dir} "
            f"(fingerprint {str(built_with)[:12]} != {current[:12]}): rerun `bert samples`"
        )
    return meta


class SampleStore:
    """One split of a samples folder, memory-mapped: `store[i] -> (ids, segment_b_start,
    is_random_next)`. Pickles by path, so DataLoader workers reopen the maps."""

    def __init__(self, split_dir: str | Path):
        self.split_dir = Path(split_dir)
        missing = [a for a in ARRAYS if not (self.split_dir / f"{a}.npy").is_file()]
        if missing:
            raise BertError(f"no samples at {self.split_dir} ({missing[0]}.npy missing): "
                            "run `bert samples`")
        arrays = {a: _load(self.split_dir / f"{a}.npy") for a in ARRAYS}
        self.input_ids = arrays["input_ids"]
        self.offsets = arrays["offsets"]
        self.segment_b_start = arrays["segment_b_start"]
        self.is_random_next = arrays["is_random_next"]
        n = len(self.is_random_next)
        if len(self.offsets) != n + 1 or len(self.segment_b_start) != n or (
            int(self.offsets[-1]) != len(self.input_ids)
        ):
            raise BertError(f"samples at {self.split_dir} are inconsistent: rerun `bert samples`")
        self._lengths = None

    def __len__(self) -> int:
        return len(self.is_random_next)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int, int]:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample {i} out of range (store has {n})")
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.input_ids[lo:hi], int(self.segment_b_start[i]), int(self.is_random_next[i])

    @property
    def lengths(self) -> np.ndarray:
        if self._lengths is None:
            self._lengths = np.diff(self.offsets)
        return self._lengths

    @property
    def dtype(self) -> np.dtype:
        return self.input_ids.dtype

    def __getstate__(self) -> dict:
        return {"split_dir": self.split_dir}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["split_dir"])


def _load(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r")
    except ValueError:  # an empty array cannot be memory-mapped
        return np.load(path)
