"""The samples folder on disk, its writer and its reader: each split's tokenised corpus,
written once, and its NSP pairs as references into it; meta.json beside them
(`bertcore.data.samples.build` builds them with what is written here). The one module that
knows meta.json: its name, its writer (`write_meta`), its reader (`read_meta`) and the samples'
fingerprint made of it (`samples_fingerprint`).

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
Written by appending (`NpyAppender`, `SplitPairsWriter`, hashing as they write), meta.json
last (`new_meta`, its splits added by `build`, `write_meta`); read by memory map (`read_meta`,
`SampleStore`).
"""

from __future__ import annotations

import hashlib
import json
import struct
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertcore.common.atomic import write_json
from bertcore.common.digests import fingerprint_files
from bertcore.common.errors import BertError

if TYPE_CHECKING:
    from bertcore.data.samples.config import SamplesConfig

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
# The samples of each phase, by their folder inside the samples folder: phase 1's are the folder
# itself; BERT's second phase's (params.yaml `phase2`) a samples folder of their own inside it,
# so that phase 1's files, and their fingerprint, are the same with it on or off.
PHASE1_DIR = ""
PHASE2_DIR = "phase2"
# Where each phase's pairs find the {split}/tokens.npy they point into, from its folder
# (meta.json `tokens_dir`): phase 2's share phase 1's.
TOKENS_DIRS = {PHASE1_DIR: ".", PHASE2_DIR: ".."}


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 65536 else np.int32)


def holds_samples(folder: str | Path) -> bool:
    """Whether `folder` holds samples: their meta.json, written last, is there."""
    return (Path(folder) / META_FILE).is_file()


def phase2_samples(samples_dir: str | Path) -> Path | None:
    """The phase-2 samples folder inside `samples_dir`, when the samples stage built one."""
    folder = Path(samples_dir) / PHASE2_DIR
    return folder if holds_samples(folder) else None


# ---------------------------------------------------------------------------------------------
# Writing


class NpyAppender:
    """A .npy file of `columns` columns (1: a 1-D array) written by appending rows; the header
    gets the final length on close.

    Writes go straight to the file (not through a memory map), so memory stays flat."""

    HEADER_BYTES = 128  # a multiple of 64, so the data is aligned for memory maps

    def __init__(self, path: Path, dtype: np.dtype, columns: int = 1):
        self.dtype = np.dtype(dtype)
        self.columns = columns
        self.count = 0  # rows
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
        header = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
        self._file.seek(0)
        self._file.write(header)
        self._file.close()
        return header, self.data_sha256.digest()


class SplitPairsWriter:
    """The pair arrays of one split of one phase's samples, appended in order from NSP
    instances (int64 rows: a_start, a_stop, b_start, b_stop, is_random_next, token offsets
    into the split's tokens, as `bertcore.data.samples.pairing.pair_shard` gives them), with
    the counts of its meta.json entry (`meta_entry`)."""

    def __init__(self, split_dir: Path):
        split_dir.mkdir(parents=True, exist_ok=True)
        self.writers = {name: NpyAppender(split_dir / f"{name}.npy", dtype, columns)
                        for name, (dtype, columns) in PAIR_ARRAYS.items()}
        self.tokens = self.random_count = 0
        self.min_length, self.max_length = np.iinfo(np.int64).max, 0

    @property
    def count(self) -> int:
        """Pairs written so far."""
        return self.writers["is_random_next"].count

    def append(self, instances: np.ndarray) -> None:
        """The next instances, in order."""
        a0, a1, b0, b1, is_random = instances.T
        segment_lengths = np.stack([a1 - a0, b1 - b0], axis=1)
        self.writers["segment_starts"].append(np.stack([a0, b0], axis=1))
        self.writers["segment_lengths"].append(segment_lengths)
        self.writers["is_random_next"].append(is_random)
        lengths = segment_lengths.sum(axis=1) + 3  # [CLS] A [SEP] B [SEP]
        self.tokens += int(lengths.sum())
        self.random_count += int(is_random.sum())
        if len(lengths):
            self.max_length = max(self.max_length, int(lengths.max()))
            self.min_length = min(self.min_length, int(lengths.min()))

    def close(self, tokens_part: tuple[bytes, bytes]) -> str:
        """Finish the files; returns the split's `arrays_sha256`, with `tokens_part` (header,
        data digest) of the token file the pairs point into."""
        parts = {name: writer.close() for name, writer in self.writers.items()}
        return arrays_sha256({TOKENS: tokens_part, **parts})

    def meta_entry(self, corpus: dict, split_by: str, passes: int) -> dict:
        """meta.json's entry of the split: its corpus's counts (`corpus`, as
        `bertcore.data.samples.doctable.DocTableWriter.counts` gives them), what its corpus
        split dealt out (`split_by`), the passes made over it, and its pairs' counts."""
        count = self.count
        return {
            "documents": corpus["documents"],
            "split_by": split_by,
            "sentences": corpus["sentences"],
            "corpus_tokens": corpus["tokens"],
            "single_sentence_documents": corpus["single_sentence_documents"],
            "empty_sentences_dropped": corpus["empty_sentences_dropped"],
            "dupe_factor": passes,
            "count": count,
            "tokens": self.tokens,
            "mean_length": round(self.tokens / count, 3),
            "min_length": self.min_length,
            "max_length": self.max_length,
            "nsp_random_fraction": round(self.random_count / count, 4),
        }


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


def new_meta(phase_dir: str, config: SamplesConfig, vocab_fingerprint: str, vocab_size: int,
             cls_id: int, sep_id: int) -> dict:
    """meta.json of one phase's samples (`phase_dir`: PHASE1_DIR or PHASE2_DIR) built with
    `config` and the vocabulary described, before its splits are added."""
    return {
        "format": FORMAT_VERSION,
        "vocab_fingerprint": vocab_fingerprint,
        "vocab_size": vocab_size,
        "dtype": token_dtype(vocab_size).name,
        "cls_id": cls_id,
        "sep_id": sep_id,
        "tokens_dir": TOKENS_DIRS[phase_dir],
        "max_seq_length": config.max_seq_length,
        "short_seq_prob": config.short_seq_prob,
        "dupe_factor": config.dupe_factor,
        "val_pairs": config.val_pairs,
        "random_seed": config.random_seed,
        "arrays_sha256": {},
    }


def write_meta(folder: str | Path, meta: dict) -> None:
    """Write one phase's meta.json into `folder`, once its arrays are whole (it marks them so)."""
    write_json(Path(folder) / META_FILE, meta)


# ---------------------------------------------------------------------------------------------
# Reading


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


def read_meta(samples_dir: str | Path) -> dict:
    """meta.json of a samples folder; samples of another format are a user's mistake."""
    path = Path(samples_dir) / META_FILE
    if not path.is_file():
        raise BertError(f"no samples at {samples_dir} ({META_FILE} missing): run `bert samples`")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:  # not JSON, or not even UTF-8
        raise BertError(f"{path} is not valid JSON: rerun `bert samples`") from None
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != FORMAT_VERSION:
        raise BertError(f"the samples in {samples_dir} are of format {found}, this version "
                        f"reads format {FORMAT_VERSION}: rerun `bert samples`")
    return meta


def samples_fingerprint(samples_dir: str | Path) -> str:
    """The samples' fingerprint: sha256 of their meta.json, which records the hashes of the
    arrays (`arrays_sha256`, written by the samples stage), so a start never reads them."""
    meta_file = Path(samples_dir) / META_FILE
    if not read_meta(samples_dir).get("arrays_sha256"):
        raise BertError(f"{meta_file} does not record the hashes of the samples' arrays "
                        "(arrays_sha256): rebuild the samples with `bert samples`")
    return fingerprint_files([meta_file])


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

    @cached_property
    def lengths(self) -> np.ndarray:
        """int64 (n,): every sample's length, [CLS] and [SEP]s included."""
        return self.segment_lengths.sum(axis=1, dtype=np.int64) + 3

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
