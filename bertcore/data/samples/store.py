"""The samples folder on disk: each split's tokenised corpus, written once, and its NSP pairs as
references into it; meta.json beside them (see `bertcore.data.samples.build` for how they are
built).

    meta.json                          format, vocab fingerprint, [CLS]/[SEP] ids, lengths,
                                       counts, NSP balance per split, `arrays_sha256` per split
    {train,val}/tokens.npy             every sentence's token ids, concatenated (no specials)
    {train,val}/segment_starts.npy     int64 (n, 2): where pair i's A and B begin in tokens
    {train,val}/segment_lengths.npy    uint16 (n, 2): how long A and B are
    {train,val}/is_random_next.npy     uint8 (n,): 1 when B is a random segment (NSP label 1)
    phase2/                            with BERT's second phase on: its meta.json and pair
                                       arrays, pointing into phase 1's tokens.npy (`tokens_dir`)

A and B are each one contiguous run of a document's tokens (whole sentences, then truncated at
either end), so sample i is `[CLS] A [SEP] B [SEP]`, assembled when it is read (`SampleStore`).
Written by appending (`NpyAppender`, hashing as it writes), read by memory map.
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
FORMAT_VERSION = 2
TOKENS = "tokens"
# The arrays of a split's pairs: name -> (dtype, columns). A segment is at most
# max_seq_length - 3 <= 8189 tokens, so its length fits uint16; its start (int64) reaches past
# the 2**32 tokens of a large corpus.
PAIR_ARRAYS = {
    "segment_starts": (np.dtype("<i8"), 2),
    "segment_lengths": (np.dtype("<u2"), 2),
    "is_random_next": (np.dtype("u1"), 1),
}
# What `arrays_sha256` covers, in its order: the token file the pairs point into, then theirs.
ARRAYS = (TOKENS, *PAIR_ARRAYS)
# The samples of BERT's second phase (params.yaml `phase2`), a samples folder of their own inside
# phase 1's, so that phase 1's files, and their fingerprint, are the same with it on or off.
PHASE2_DIR = "phase2"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 65536 else np.int32)


def phase2_samples(samples_dir: str | Path) -> Path | None:
    """The phase-2 samples folder inside `samples_dir`, when the samples stage built one."""
    folder = Path(samples_dir) / PHASE2_DIR
    return folder if (folder / META_FILE).is_file() else None


class NpyAppender:
    """A .npy file of `columns` columns (1: a 1-D array) written by appending rows; the header
    gets the final length on close.

    Writes go straight to the file (not through a memory map), so memory stays flat."""

    HEADER_BYTES = 128  # a multiple of 64, so the data is aligned for memory maps

    def __init__(self, path: Path, dtype: np.dtype, columns: int = 1):
        self.path = path
        self.dtype = np.dtype(dtype)
        self.columns = columns
        self.count = 0  # rows
        self.header = b""  # the final .npy header, once closed
        self.data_sha256 = hashlib.sha256()  # of the bytes after the header, as written
        self._file = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._file.write(b"\0" * self.HEADER_BYTES)

    def append(self, values: np.ndarray) -> None:
        data = np.ascontiguousarray(values, self.dtype)
        self.data_sha256.update(memoryview(data).cast("B"))
        data.tofile(self._file)
        self.count += len(values)

    def close(self) -> tuple[bytes, bytes]:
        """Finish the file; returns (its header, the sha256 digest of its data)."""
        shape = f"({self.count},)" if self.columns == 1 else f"({self.count}, {self.columns})"
        header = f"{{'descr': '{self.dtype.str}', 'fortran_order': False, 'shape': {shape}, }}"
        header = header.ljust(self.HEADER_BYTES - 10 - 1) + "\n"
        self.header = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
        self._file.seek(0)
        self._file.write(self.header)
        self._file.close()
        return self.header, self.data_sha256.digest()


def arrays_sha256(parts: dict[str, tuple[bytes, bytes]]) -> str:
    """The fingerprint of one split of a samples folder (meta.json `arrays_sha256`): sha256
    over, for each array of ARRAYS in that order, its file name (`tokens.npy`...) and a newline,
    the file's .npy header (its first HEADER_BYTES bytes) and the 32-byte sha256 digest of the
    rest of the file (the data). `parts[name]` = (header, data digest). The tokens are those
    the pairs point into (phase 1's for phase 2), so it changes whenever a byte of what the
    samples are read from does; it is computed while the files are written (no second read)."""
    digest = hashlib.sha256()
    for name in ARRAYS:
        header, data_digest = parts[name]
        digest.update(f"{name}.npy\n".encode() + header + data_digest)
    return digest.hexdigest()


def file_part(path: Path) -> tuple[bytes, bytes]:
    """(header, data digest) of one array file as `arrays_sha256` takes it, read in chunks of
    a few MB: its first HEADER_BYTES bytes and the sha256 digest of the rest."""
    digest = hashlib.sha256()
    chunk = memoryview(bytearray(4 << 20))
    with open(path, "rb") as file:
        header = file.read(NpyAppender.HEADER_BYTES)
        while size := file.readinto(chunk):
            digest.update(chunk[:size])
    return header, digest.digest()


def arrays_sha256_of_files(split_dir: str | Path) -> str:
    """`arrays_sha256` recomputed by reading the files of a split folder (and its tokens)."""
    split_dir = Path(split_dir)
    paths = split_files(split_dir, read_meta(split_dir.parent))
    return arrays_sha256({name: file_part(path) for name, path in paths.items()})


# ---------------------------------------------------------------------------------------------
# Reading


def read_meta(samples_dir: str | Path) -> dict:
    """meta.json of a samples folder; samples of another format are a user's mistake."""
    path = Path(samples_dir) / META_FILE
    if not path.is_file():
        raise BertError(f"no samples at {samples_dir} ({META_FILE} missing): run `bert samples`")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        raise BertError(f"{path} is not valid JSON: rerun `bert samples`") from None
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != FORMAT_VERSION:
        raise BertError(f"the samples in {samples_dir} are of format {found}, this version "
                        f"reads format {FORMAT_VERSION}: rerun `bert samples`")
    return meta


def split_files(split_dir: Path, meta: dict) -> dict[str, Path]:
    """The files of ARRAYS a split is read from, by name: its pair arrays, and the token file
    they point into: its split's, in the samples folder `tokens_dir` (relative to the one
    holding `split_dir`: "." or, for phase 2, "..")."""
    tokens = split_dir.parent / meta["tokens_dir"] / split_dir.name / f"{TOKENS}.npy"
    return {TOKENS: tokens, **{name: split_dir / f"{name}.npy" for name in PAIR_ARRAYS}}


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
    is_random_next)`, ids = `[CLS] A [SEP] B [SEP]` (a new array of `dtype`), segment_b_start
    = len(A) + 2. Pickles by path, so DataLoader workers reopen the maps."""

    def __init__(self, split_dir: str | Path):
        self.split_dir = Path(split_dir)
        meta = read_meta(self.split_dir.parent)
        paths = split_files(self.split_dir, meta)
        missing = [path for path in paths.values() if not path.is_file()]
        if missing:
            raise BertError(f"no samples at {self.split_dir} ({missing[0]} missing): "
                            "run `bert samples`")
        arrays = {name: _load(path) for name, path in paths.items()}
        self.tokens = arrays[TOKENS]  # the pairs' source: the split's corpus, tokenised
        self.segment_starts = arrays["segment_starts"]
        self.segment_lengths = arrays["segment_lengths"]
        self.is_random_next = arrays["is_random_next"]
        self.cls_id, self.sep_id = int(meta["cls_id"]), int(meta["sep_id"])
        n = len(self.is_random_next)
        if (self.segment_starts.shape != (n, 2) or self.segment_lengths.shape != (n, 2)
                or self.tokens.dtype != np.dtype(meta["dtype"])):
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
        a, b = self.segment_starts[i].tolist()
        len_a, len_b = self.segment_lengths[i].tolist()
        ids = np.empty(len_a + len_b + 3, self.tokens.dtype)
        ids[0] = self.cls_id
        ids[len_a + 1] = ids[-1] = self.sep_id
        try:
            ids[1 : len_a + 1] = self.tokens[a : a + len_a]
            ids[len_a + 2 : -1] = self.tokens[b : b + len_b]
        except ValueError:  # a segment past the end of the tokens
            raise BertError(f"sample {i} at {self.split_dir} points past its tokens: "
                            "rerun `bert samples`") from None
        return ids, len_a + 2, int(self.is_random_next[i])

    @property
    def lengths(self) -> np.ndarray:
        """int64 (n,): every sample's length, [CLS] and [SEP]s included."""
        if self._lengths is None:
            self._lengths = self.segment_lengths.sum(axis=1, dtype=np.int64) + 3
        return self._lengths

    @property
    def dtype(self) -> np.dtype:
        return self.tokens.dtype

    def __getstate__(self) -> dict:
        return {"split_dir": self.split_dir}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["split_dir"])


def _load(path: Path) -> np.ndarray:
    """A .npy file memory-mapped, as a plain ndarray (indexing an np.memmap costs more); the
    map stays open through the array's base."""
    try:
        return np.asarray(np.load(path, mmap_mode="r"))
    except ValueError:  # an empty array cannot be memory-mapped
        return np.load(path)
