"""NSP training samples built from a corpus and a tokenizer into a samples folder, whose
layout, writer and reader are `bertcore.data.samples.store`'s (the contract in
ARCHITECTURE.md).

Building streams: each split is tokenised once, in worker processes, a batch of sentences per
task (`tokenizing`), into its `tokens.npy` and a document table on disk (`doctable`); then
worker processes pair shards of documents into NSP instances (`pairing`), for phase 1's
length and then phase 2's, and the shards' pairs are appended in order to each phase's pair
arrays (`store`). This module is the main process's part: the shards, the tasks, the order of
their results and the messages. Every document gets its own random generator
(`pairing.document_rng`), so the output is byte-identical whatever the number of workers, and
phase 1's is the same with phase 2 on or off.

A corpus split by parts of documents (`bertcore.data.corpus.parts`, its parts.json passed as
`parts`) is paired part by part, and a random B never comes from A's own part nor from the
parts right before and after it in the same document.

`build_samples_from_corpus` is the samples stage: the corpus and vocabulary folders in, the
samples folder and its metrics out.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bertcore.common.atomic import atomic_dir, write_json
from bertcore.common.errors import BertError
from bertcore.common.pool import TaskRunner, worker_count
from bertcore.data.corpus.parts import neighbour_flags, read_parts
from bertcore.data.corpus.splits import SPLITS, split_file
from bertcore.data.samples.config import Phase2Samples, SamplesConfig
from bertcore.data.samples.doctable import NEIGHBOURS, ORIGINS, DocTable
from bertcore.data.samples.pairing import PairTask, pair_shard
from bertcore.data.samples.store import (
    PHASE1_DIR,
    PHASE2_DIR,
    TOKENS,
    NpyAppender,
    SplitPairsWriter,
    new_meta,
    token_dtype,
    write_meta,
)
from bertcore.data.samples.tokenizing import (
    LineBatch,
    SentenceBatch,
    SentenceEncoder,
    tokenize_corpus,
)
from bertcore.data.vocab.files import load_tokenizer, vocab_fingerprint

# Sentences are tokenised in tasks of about this many bytes of the corpus file (`tokenizing`).
SENTENCE_BATCH_BYTES = 1 << 20
# Documents are paired in shards of about this many corpus tokens (one task per shard and dupe).
SHARD_TOKENS = 1 << 19
# At most this many pairing passes over the val split (`val_pairs`). One pass of a small
# corpus's val split gives a few dozen pairs, and NSP accuracy on 50 pairs is +-0.07 (one
# standard error); every pass pairs the same held-out documents anew, as train's passes do.
VAL_MAX_PASSES = 20
# A document's neighbourhood (no random B from it): itself and the parts either side.
NEIGHBOURHOOD = 3


def _shards(table: DocTable) -> Iterator[tuple[int, int]]:
    """Consecutive document ranges of about SHARD_TOKENS tokens each: a range ends before the
    first document that begins SHARD_TOKENS or more after its first one (the index read a
    chunk at a time)."""
    lo, lo_token = 0, 0  # the range being cut, and where its first document begins
    for first, rows in table.index_chunks():
        starts = rows[:-1, 1]  # where documents first, first + 1, ... begin
        at = 0
        while True:
            at = max(at, lo + 1 - first)  # a range holds one document at least
            found = at + int(np.searchsorted(starts[at:], lo_token + SHARD_TOKENS))
            if found >= len(starts):
                break
            yield lo, first + found
            lo, lo_token = first + found, int(starts[found])
    if lo < table.n_documents:
        yield lo, table.n_documents


def build_split(
    corpus_file: Path,
    split: str,
    encode: Callable[[Iterable[LineBatch]], Iterator[SentenceBatch]],
    out_dir: Path,
    configs: dict[str, SamplesConfig],
    dtype: np.dtype,
    run: Callable,
    parts: dict,
    *,
    other_documents: int | None = None,
    progress: bool = False,
) -> dict[str, tuple[dict, str]]:
    """Tokenise one split once (`encode`) into `out_dir/split/tokens.npy`, then pair it (through
    `run(pair_shard, tasks)`) for each phase of `configs` (its folder, PHASE1_DIR or
    PHASE2_DIR, -> its settings); return each phase's meta.json entry and `arrays_sha256` of
    the split. `parts` is the corpus's parts.json; `other_documents`, the other split's count,
    for advice."""
    table_dir = out_dir / ".work" / split
    (out_dir / split).mkdir(parents=True)
    tokens = NpyAppender(out_dir / split / f"{TOKENS}.npy", dtype)
    stats = tokenize_corpus(corpus_file, encode, table_dir, tokens,
                            batch_bytes=SENTENCE_BATCH_BYTES, progress=progress)
    tokens_part = tokens.close()
    if stats["documents"] < 2:
        raise BertError(_too_few_documents(corpus_file, stats, parts, other_documents))
    if parts.get("split_by") == "parts":
        _write_neighbours(corpus_file, table_dir, parts.get(split) or [])
    with DocTable(table_dir) as table:
        shards = list(_shards(table))
    built = {}
    for phase_dir, config in configs.items():
        pairs = SplitPairsWriter(out_dir / phase_dir / split)
        passes = _pair_passes(table_dir, split, config, shards, run, pairs, progress)
        digest = pairs.close(tokens_part)
        if pairs.count == 0:
            raise BertError(
                f"no NSP pairs could be made from {corpus_file}: each of its "
                f"{stats['documents']} documents holds a single sentence, and NSP needs "
                "documents of two sentences or more (in one-sentence-per-line text a blank "
                "line ends a document: check corpus.format)"
            )
        entry = pairs.meta_entry(stats, parts.get("split_by", "documents"), passes)
        built[phase_dir] = entry, digest
    shutil.rmtree(table_dir)
    return built


def _write_neighbours(corpus_file: Path, table_dir: Path, entries: list) -> None:
    """The neighbour flags of a corpus split by parts (`entries`: the [document, part] of each
    block of the file), beside its document table."""
    origins = np.fromfile(table_dir / ORIGINS, np.int64)
    if len(origins) and origins[-1] >= len(entries):
        raise BertError(f"{corpus_file} does not match the parts.json beside it: "
                        "rerun `bert corpus`")
    flags = neighbour_flags(entries, origins)
    flags.tofile(table_dir / NEIGHBOURS)
    if len(flags) <= NEIGHBOURHOOD:  # a larger split has a document outside any neighbourhood
        with DocTable(table_dir) as table:
            documents = table.documents(0, table.n_documents)
        _check_random_b_sources(corpus_file, documents, flags)


def _pair_passes(table_dir: Path, split: str, config: SamplesConfig,
                 shards: list[tuple[int, int]], run: Callable, pairs: SplitPairsWriter,
                 progress: bool) -> int:
    """Pair the split's passes into `pairs`, a task per shard and pass: train's dupe_factor
    passes at once; val's one at a time until it holds val_pairs (so that NSP accuracy on it
    means something), up to VAL_MAX_PASSES, or one pass (val_pairs 0). Returns the passes
    made."""
    min_pairs = 0 if split == "train" else config.val_pairs
    dupe_factor = (config.dupe_factor if split == "train"
                   else VAL_MAX_PASSES if min_pairs else 1)
    rounds = [[dupe] for dupe in range(dupe_factor)] if min_pairs else [range(dupe_factor)]
    passes = 0
    with tqdm(total=len(shards) * dupe_factor, unit="shard", disable=not progress,
              desc=f"pair {split} ({config.max_seq_length})", leave=False) as bar:
        for dupes in rounds:
            tasks = (PairTask(str(table_dir), split, dupe, lo, hi, config.max_seq_length,
                              config.short_seq_prob, config.random_seed)
                     for dupe in dupes for lo, hi in shards)
            for shard in run(pair_shard, tasks):
                pairs.append(shard)
                bar.update()
            passes += len(dupes)
            if min_pairs and pairs.count >= min_pairs:
                break
    return passes


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
    """Every document that can give an A must have a document outside its neighbourhood
    (`documents`: the document index, rows 0..n; `flags`: the neighbour flags)."""
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
    phase2_length: int | None = None,
    parts: dict | None = None,
    progress: bool = False,
) -> dict[str, dict]:
    """Build every split of `corpus_files` ({"train": path, "val": path}) into `out_dir`
    (a fresh folder) with a `tokenizers.Tokenizer`, and with `phase2_length` the samples of
    BERT's second phase at that length into `out_dir/phase2` (pointing into the same tokens);
    write each phase's meta.json and return them by the phase's folder: {PHASE1_DIR (""):
    phase 1's, PHASE2_DIR: phase 2's}.

    `parts`: the corpus's parts.json (`bertcore.data.corpus.parts.read_parts`), when it is split
    by parts of documents. meta.json's `arrays_sha256` fingerprints each split's arrays.
    """
    out_dir = Path(out_dir)
    vocab_size = tokenizer.get_vocab_size()
    dtype = token_dtype(vocab_size)
    cls_id, sep_id = _special_id(tokenizer, "[CLS]"), _special_id(tokenizer, "[SEP]")

    configs = {PHASE1_DIR: config}
    if phase2_length is not None:
        configs[PHASE2_DIR] = replace(config, max_seq_length=phase2_length)
    metas = {phase_dir: new_meta(phase_dir, c, vocab_fingerprint, vocab_size, cls_id, sep_id)
             for phase_dir, c in configs.items()}
    workers = worker_count(config.workers, "samples.workers")
    with TaskRunner(workers) as run:
        encode = SentenceEncoder(tokenizer, out_dir / ".work", dtype, run, workers)
        for split, path in corpus_files.items():
            other = metas[PHASE1_DIR].get("train", {}).get("documents")
            built = build_split(Path(path), split, encode, out_dir, configs, dtype, run,
                                parts or {}, other_documents=other, progress=progress)
            for phase_dir, (entry, digest) in built.items():
                metas[phase_dir][split] = entry
                metas[phase_dir]["arrays_sha256"][split] = digest
    shutil.rmtree(out_dir / ".work", ignore_errors=True)
    for phase_dir, meta in metas.items():
        write_meta(out_dir / phase_dir, meta)  # last: then the arrays are whole
    return metas


def _special_id(tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise BertError(f"the vocabulary has no {token} token: rerun `bert vocab`")
    return token_id


METRIC_KEYS = ("documents", "split_by", "count", "tokens", "mean_length", "max_length",
               "nsp_random_fraction")


@dataclass(frozen=True)
class SamplesPaths:
    """What the samples stage reads and writes."""

    corpus_dir: str | Path  # train.txt, val.txt and parts.json
    vocab_dir: str | Path  # the tokenizer
    out_dir: str | Path  # the samples
    metrics_file: str | Path  # counts and NSP balance


@dataclass(frozen=True)
class SamplesReport:
    """What the samples stage built: each length's meta.json, by folder (phase 1's first)."""

    built: dict[str, dict]

    def summary(self) -> list[str]:
        """A line per length and split: pairs, tokens, mean length, random B."""
        lines = []
        for meta in self.built.values():
            for split in SPLITS:
                m = meta[split]
                lines.append(f"samples {split} (length {meta['max_seq_length']}): "
                             f"{m['count']} pairs, {m['tokens']} tokens, mean length "
                             f"{m['mean_length']}, random B {m['nsp_random_fraction']:.1%}")
        return lines


def build_samples_from_corpus(config: SamplesConfig, phase2: Phase2Samples, paths: SamplesPaths,
                              progress: bool = False) -> SamplesReport:
    """The samples stage: the corpus' splits tokenised and paired (at phase 2's length too,
    with `phase2.enabled`) into the samples folder, and their metrics, each written whole."""
    corpus_files = {split: split_file(paths.corpus_dir, split) for split in SPLITS}
    for path in corpus_files.values():
        if not path.is_file():
            raise BertError(f"no corpus at {path}: run `bert corpus` first or pass --corpus")
    tokenizer = load_tokenizer(paths.vocab_dir)
    fingerprint = vocab_fingerprint(paths.vocab_dir)
    parts = read_parts(paths.corpus_dir)  # split by parts: no random B from a neighbouring part
    with atomic_dir(paths.out_dir, layout=[PHASE2_DIR]) as staging:  # phase 2's: with it on
        built = build_samples(corpus_files, tokenizer, staging, config, fingerprint,
                              phase2_length=phase2.max_seq_length if phase2.enabled else None,
                              parts=parts, progress=progress)
    write_json(paths.metrics_file, _metrics(built, phase2.enabled))
    return SamplesReport(built)


def _metrics(built: dict[str, dict], phase2: bool) -> dict:
    """metrics/samples.json: each split's counts; phase 2's only with it on, so that with it
    off the file is what it always was."""
    metrics = {s: {k: built[PHASE1_DIR][s][k] for k in METRIC_KEYS} for s in SPLITS}
    if phase2:
        metrics[PHASE2_DIR] = {s: {k: built[PHASE2_DIR][s][k] for k in METRIC_KEYS}
                               for s in SPLITS}
    return metrics
