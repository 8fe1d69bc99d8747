"""NSP training samples on disk: built from a corpus and a tokenizer, read by memory map.

Layout of a samples folder (the contract in ARCHITECTURE.md):

    meta.json                      vocab fingerprint, lengths, counts, NSP balance per split
    {train,val}/input_ids.npy      all sequences `[CLS] A [SEP] B [SEP]`, concatenated
    {train,val}/offsets.npy        int64 (n+1,): sequence i = input_ids[offsets[i]:offsets[i+1]]
    {train,val}/segment_b_start.npy  int32 (n,): index of B's first token (= len(A) + 2)
    {train,val}/is_random_next.npy   uint8 (n,): 1 when B is a random segment (NSP label 1)

Building streams: each split is tokenised into a document table on disk (`doctable`), worker
processes pair shards of documents into NSP instances (`pairing`), and the shards are appended in
order to the output files (`store`). Every document gets its own random generator, seeded from
(random_seed, split, dupe, document), so the output is byte-identical whatever the number of
workers.

A corpus split by parts of documents (`bertcore.data.corpus.parts`, its parts.json passed as
`parts`) is paired part by part, and a random B never comes from A's own part nor from the
parts right before and after it in the same document.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bertcore.common.atomic import write_json
from bertcore.common.errors import BertError
from bertcore.common.pool import TaskRunner
from bertcore.data.corpus.parts import neighbour_flags
from bertcore.data.samples.config import SamplesConfig
from bertcore.data.samples.doctable import (
    DOCUMENTS,
    NEIGHBOURS,
    ORIGINS,
    DocTable,
    tokenize_corpus,
)
from bertcore.data.samples.pairing import pair_document
from bertcore.data.samples.store import FORMAT_VERSION, META_FILE, NpyAppender, arrays_sha256

# Documents are paired in shards of about this many corpus tokens (one task per shard and dupe).
SHARD_TOKENS = 1 << 19
# At most this many pairing passes over the val split (`val_pairs`). One pass of a small
# corpus's val split gives a few dozen pairs, and NSP accuracy on 50 pairs is +-0.07 (one
# standard error); every pass pairs the same held-out documents anew, as train's passes do.
VAL_MAX_PASSES = 20




def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 65536 else np.int32)


# ---------------------------------------------------------------------------------------------
# Building


@dataclasses.dataclass(frozen=True)
class PairTask:
    """One worker task: pair documents [doc_lo, doc_hi) of a table in pass `dupe`."""

    table_dir: str
    dtype: str
    split: str
    dupe: int
    doc_lo: int
    doc_hi: int
    max_seq_length: int
    short_seq_prob: float
    random_seed: int
    cls_id: int
    sep_id: int


def document_rng(random_seed: int, split: str, dupe: int, doc: int) -> random.Random:
    """The generator of one document in one pass: independent of how work is sharded."""
    key = hashlib.blake2b(f"{random_seed}/{split}/{dupe}/{doc}".encode(), digest_size=8)
    return random.Random(int.from_bytes(key.digest(), "little"))


def pair_shard(task: PairTask) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """NSP sequences of one shard: (input_ids, lengths, segment_b_start, is_random_next)."""
    dtype = np.dtype(task.dtype)
    max_num_tokens = task.max_seq_length - 3  # room for [CLS], [SEP], [SEP]
    with DocTable(task.table_dir, dtype) as table:
        docs = table.documents
        sent_lo, sent_hi = int(docs[task.doc_lo, 0]), int(docs[task.doc_hi, 0])
        offsets = table.sentence_starts(sent_lo, sent_hi)
        tok_lo = int(offsets[0])
        block = table.tokens(tok_lo, int(offsets[-1]))
        offsets = offsets.tolist()
        instances = []
        for doc in range(task.doc_lo, task.doc_hi):
            s0, s1 = int(docs[doc, 0]), int(docs[doc + 1, 0])
            instances += pair_document(
                offsets[s0 - sent_lo : s1 - sent_lo + 1],
                document_rng(task.random_seed, task.split, task.dupe, doc),
                max_num_tokens,
                task.short_seq_prob,
                _random_segments(table, doc),
            )
        pos = np.array(instances, np.int64).reshape(len(instances), 5)
        random_bs = [table.tokens(b0, b1) for _, _, b0, b1, r in instances if r]
    return _gather(pos, block, tok_lo, random_bs, task.cls_id, task.sep_id)


def excluded_range(table: DocTable, doc: int) -> tuple[int, int]:
    """The documents lo..hi that give `doc` no random B: itself, and its neighbouring parts."""
    flags = 0 if table.neighbours is None else int(table.neighbours[doc])
    return doc - (flags & 1), doc + (flags >> 1)


def _random_segments(table: DocTable, doc: int):
    """Google's random B for document `doc`: from a random start sentence of another
    document (not a neighbouring part), whole sentences until `min_tokens` are reached (or
    that document ends)."""
    n_docs = table.n_documents
    docs = table.documents
    lo, hi = excluded_range(table, doc)
    excluded = hi - lo + 1

    def random_segment(rng: random.Random, min_tokens: int) -> tuple[int, int]:
        other = rng.randrange(n_docs - excluded)
        other += excluded if other >= lo else 0  # any document but lo..hi
        first, stop = int(docs[other, 0]), int(docs[other + 1, 0])
        return table.segment(other, first + rng.randrange(stop - first), min_tokens)

    return random_segment


def _gather(pos: np.ndarray, block: np.ndarray, tok_lo: int, random_bs: list[np.ndarray],
            cls_id: int, sep_id: int):
    """Lay out `[CLS] A [SEP] B [SEP]` for every instance row of `pos` with one gather from
    one source: the shard's tokens (starting at corpus offset `tok_lo`), then [CLS] and
    [SEP], then the random Bs in order."""
    n = len(pos)
    a0, a1, b0, b1, is_random = pos.T
    len_a, len_b = a1 - a0, b1 - b0
    cls_at, sep_at = len(block), len(block) + 1
    source = np.concatenate([block, np.array([cls_id, sep_id], block.dtype), *random_bs])
    b_src = b0 - tok_lo
    random_rows = np.flatnonzero(is_random)
    b_src[random_rows] = cls_at + 2 + np.cumsum(len_b[random_rows]) - len_b[random_rows]
    one = np.ones(n, np.int64)
    starts = np.stack([cls_at * one, a0 - tok_lo, sep_at * one, b_src, sep_at * one], axis=1)
    lengths = np.stack([one, len_a, one, len_b, one], axis=1).ravel()
    out_starts = np.cumsum(lengths) - lengths
    index = np.repeat(starts.ravel() - out_starts, lengths) + np.arange(int(lengths.sum()))
    return (
        source[index],
        len_a + len_b + 3,
        (len_a + 2).astype(np.int32),
        is_random.astype(np.uint8),
    )


def _shards(documents: np.ndarray) -> Iterator[tuple[int, int]]:
    """Consecutive document ranges of about SHARD_TOKENS tokens each."""
    token_starts = documents[:, 1]
    lo = 0
    n_docs = len(documents) - 1
    while lo < n_docs:
        hi = int(np.searchsorted(token_starts, token_starts[lo] + SHARD_TOKENS, side="left"))
        hi = min(max(hi, lo + 1), n_docs)
        yield lo, hi
        lo = hi


def build_split(
    corpus_file: Path,
    split: str,
    encode_batch: Callable[[list[str]], list[list[int]]],
    out_dir: Path,
    work_dir: Path,
    config: SamplesConfig,
    dtype: np.dtype,
    dupe_factor: int,
    run: Callable,
    special_ids: tuple[int, int],
    parts: dict,
    *,
    min_pairs: int = 0,
    other_documents: int | None = None,
    progress: bool = False,
) -> tuple[dict, str]:
    """Tokenise, pair (through `run(pair_shard, tasks)`) and write one split into `out_dir`;
    return its statistics and `arrays_sha256`. `special_ids` = ([CLS], [SEP]); `parts` is
    the corpus's parts.json; `other_documents`, the other split's count, for advice.
    `min_pairs` > 0: pass after pass, up to `dupe_factor`, until the split holds that many
    pairs (pass k pairs as it would in any run, so the output depends only on the count)."""
    table_dir = work_dir / split
    stats = tokenize_corpus(corpus_file, encode_batch, table_dir, dtype, progress=progress)
    if stats["documents"] < 2:
        raise BertError(_too_few_documents(corpus_file, stats, parts, other_documents))
    documents = np.fromfile(table_dir / DOCUMENTS, np.int64).reshape(-1, 2)
    if parts.get("split_by") == "parts":
        _write_neighbours(corpus_file, table_dir, parts.get(split) or [], documents)
    pairing = _SplitPairing(table_dir, split, dtype, config, special_ids,
                            list(_shards(documents)))
    arrays = _SplitArrays(out_dir, dtype)
    passes = _pair_passes(pairing, run, arrays, dupe_factor, min_pairs, progress)
    digest = arrays.close()
    shutil.rmtree(table_dir)
    if arrays.count == 0:
        raise BertError(
            f"no NSP pairs could be made from {corpus_file}: each of its {stats['documents']} "
            "documents holds a single sentence, and NSP needs documents of two sentences or "
            "more (in one-sentence-per-line text a blank line ends a document: check "
            "corpus.format)"
        )
    return _split_stats(stats, parts, passes, arrays), digest


def _write_neighbours(corpus_file: Path, table_dir: Path, entries: list,
                      documents: np.ndarray) -> None:
    """The neighbour flags of a corpus split by parts (`entries`: the [document, part] of each
    block of the file), beside its document table."""
    origins = np.fromfile(table_dir / ORIGINS, np.int64)
    if len(origins) and origins[-1] >= len(entries):
        raise BertError(f"{corpus_file} does not match the parts.json beside it: "
                        "rerun `bert corpus`")
    flags = neighbour_flags(entries, origins)
    flags.tofile(table_dir / NEIGHBOURS)
    _check_random_b_sources(corpus_file, documents, flags)


@dataclasses.dataclass(frozen=True)
class _SplitPairing:
    """What every pairing task of one split shares: its document table, its settings and
    the shards of its documents."""

    table_dir: Path
    split: str
    dtype: np.dtype
    config: SamplesConfig
    special_ids: tuple[int, int]
    shards: list[tuple[int, int]]

    def tasks(self, dupes: Iterable[int]) -> list[PairTask]:
        """One task per shard and pass in `dupes`, pass by pass."""
        config = self.config
        return [
            PairTask(
                str(self.table_dir), self.dtype.str, self.split, dupe, lo, hi,
                config.max_seq_length, config.short_seq_prob, config.random_seed,
                *self.special_ids,
            )
            for dupe in dupes
            for lo, hi in self.shards
        ]


class _SplitArrays:
    """The four arrays of one split, appended shard after shard in task order, with the
    counts its statistics need."""

    def __init__(self, out_dir: Path, dtype: np.dtype):
        out_dir.mkdir(parents=True)
        self.writers = {
            "input_ids": NpyAppender(out_dir / "input_ids.npy", dtype),
            "offsets": NpyAppender(out_dir / "offsets.npy", np.int64),
            "segment_b_start": NpyAppender(out_dir / "segment_b_start.npy", np.int32),
            "is_random_next": NpyAppender(out_dir / "is_random_next.npy", np.uint8),
        }
        self.writers["offsets"].append(np.zeros(1, np.int64))
        self.tokens = self.random_count = 0
        self.min_length, self.max_length = np.iinfo(np.int64).max, 0

    @property
    def count(self) -> int:
        """Sequences written so far."""
        return self.writers["is_random_next"].count

    def append(self, ids: np.ndarray, lengths: np.ndarray, b_start: np.ndarray,
               is_random: np.ndarray) -> None:
        """One shard's sequences (what `pair_shard` returns)."""
        self.writers["input_ids"].append(ids)
        self.writers["offsets"].append(self.tokens + np.cumsum(lengths))
        self.writers["segment_b_start"].append(b_start)
        self.writers["is_random_next"].append(is_random)
        self.tokens += len(ids)
        self.random_count += int(is_random.sum())
        if len(lengths):
            self.max_length = max(self.max_length, int(lengths.max()))
            self.min_length = min(self.min_length, int(lengths.min()))

    def close(self) -> str:
        """Finish the files; returns their `arrays_sha256`."""
        for writer in self.writers.values():
            writer.close()
        return arrays_sha256({name: (w.header, w.data_sha256.digest())
                              for name, w in self.writers.items()})


def _pair_passes(pairing: _SplitPairing, run: Callable, arrays: _SplitArrays, dupe_factor: int,
                 min_pairs: int, progress: bool) -> int:
    """Pair `dupe_factor` passes into `arrays`: every pass at once, or (min_pairs > 0) one at
    a time until the split holds min_pairs. Returns the passes made."""
    rounds = [[dupe] for dupe in range(dupe_factor)] if min_pairs else [range(dupe_factor)]
    passes = 0
    with tqdm(total=len(pairing.shards) * dupe_factor, desc=f"pair {pairing.split}",
              unit="shard", disable=not progress, leave=False) as bar:
        for dupes in rounds:
            for shard in run(pair_shard, pairing.tasks(dupes)):
                arrays.append(*shard)
                bar.update()
            passes += len(dupes)
            if min_pairs and arrays.count >= min_pairs:
                break
    return passes


def _split_stats(stats: dict, parts: dict, passes: int, arrays: _SplitArrays) -> dict:
    """meta.json's entry of one split: its corpus's counts (`stats`), and its pairs'."""
    count = arrays.count
    return {
        "documents": stats["documents"],
        "split_by": parts.get("split_by", "documents"),
        "sentences": stats["sentences"],
        "corpus_tokens": stats["tokens"],
        "single_sentence_documents": stats["single_sentence_documents"],
        "empty_sentences_dropped": stats["empty_sentences_dropped"],
        "dupe_factor": passes,
        "count": count,
        "tokens": arrays.tokens,
        "mean_length": round(arrays.tokens / count, 3),
        "min_length": arrays.min_length,
        "max_length": arrays.max_length,
        "nsp_random_fraction": round(arrays.random_count / count, 4),
    }


def _too_few_documents(corpus_file: Path, stats: dict, parts: dict,
                       other_documents: int | None) -> str:
    """Why one document (or none) cannot give NSP pairs, and what will help."""
    what = (f"{corpus_file} holds {stats['documents']} document(s) ({stats['sentences']} "
            "sentences): too few for NSP pairs, whose random B comes from another document, "
            "so train and val need two each")
    if "requested" not in parts:  # not made by `bert corpus`
        return (f"{what}: add documents (a blank line separates them in this file) or make "
                "it with `bert corpus`")
    if parts["requested"] == "documents":
        return (f"{what}: set corpus.split_by: auto (cuts documents into parts when they are "
                "few) or add documents to corpus.source")
    if other_documents is not None and other_documents >= 100:
        return f"{what}: raise corpus.val_fraction"
    return (f"{what}, and the corpus is too small to cut into parts: add text to "
            "corpus.source (about 8 sentences or more, in documents of two sentences or more)")


def _check_random_b_sources(corpus_file: Path, documents: np.ndarray, flags: np.ndarray) -> None:
    """Every document that can give an A must have a document outside its neighbourhood."""
    n_docs = len(documents) - 1
    excluded = 1 + (flags & 1).astype(np.int64) + (flags >> 1)  # int: uint8 overflows past 255
    pairable = np.diff(documents[:, 0]) >= 2
    stuck = np.flatnonzero(pairable & (n_docs - excluded < 1))
    if len(stuck):
        raise BertError(
            f"{corpus_file}: part {int(stuck[0])} has no other part to draw a random B from "
            "but its neighbours (parts of the same document next to it): rerun `bert corpus`"
        )


def build_samples(
    corpus_files: dict[str, Path],
    tokenizer,
    out_dir: str | Path,
    config: SamplesConfig,
    vocab_fingerprint: str,
    *,
    parts: dict | None = None,
    progress: bool = False,
) -> dict:
    """Build every split of `corpus_files` ({"train": path, "val": path}) into `out_dir`
    (a fresh folder) with a `tokenizers.Tokenizer`; write meta.json and return it.

    `parts`: the corpus's parts.json (`bertcore.data.corpus.parts.read_parts`), when it is split
    by parts of documents. meta.json's `arrays_sha256` fingerprints each split's arrays.
    """
    out_dir = Path(out_dir)
    vocab_size = tokenizer.get_vocab_size()
    dtype = token_dtype(vocab_size)
    special_ids = (_special_id(tokenizer, "[CLS]"), _special_id(tokenizer, "[SEP]"))

    def encode_batch(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]

    work_dir = out_dir / ".work"
    meta = {
        "format": FORMAT_VERSION,
        "vocab_fingerprint": vocab_fingerprint,
        "vocab_size": vocab_size,
        "dtype": dtype.name,
        "max_seq_length": config.max_seq_length,
        "short_seq_prob": config.short_seq_prob,
        "dupe_factor": config.dupe_factor,
        "val_pairs": config.val_pairs,
        "random_seed": config.random_seed,
    }
    # The pool starts (spawn takes a moment) while the first split is being tokenised.
    digests = {}
    with TaskRunner(config.workers) as run:
        for split, path in corpus_files.items():
            if split == "train":
                dupe, min_pairs = config.dupe_factor, 0
            else:  # passes until NSP accuracy on val means something (val_pairs 0: one pass)
                dupe, min_pairs = (VAL_MAX_PASSES if config.val_pairs else 1), config.val_pairs
            other = meta["train"]["documents"] if "train" in meta else None
            meta[split], digests[split] = build_split(
                Path(path), split, encode_batch, out_dir / split, work_dir, config, dtype,
                dupe, run, special_ids, parts or {}, min_pairs=min_pairs,
                other_documents=other, progress=progress,
            )
    meta["arrays_sha256"] = digests
    shutil.rmtree(work_dir, ignore_errors=True)
    write_json(out_dir / META_FILE, meta)
    return meta


def _special_id(tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise BertError(f"the vocabulary has no {token} token: rerun `bert vocab`")
    return token_id
