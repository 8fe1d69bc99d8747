"""Small corpora: split by parts of documents instead of whole documents.

A train/val split by document needs documents: with 14 files, 10% val is one document, and
one book is one document. NSP then fails, since each random B must come from another
document of the same split. So when the split by document leaves train or val with fewer
than MIN_SPLIT_DOCUMENTS documents (`corpus.split_by: auto`), the corpus is split by parts:

- every document is cut into parts of N consecutive sentences (the remainder spread over
  them, so parts hold N..2N-1 sentences; a shorter document stays whole). N aims at about
  MIN_SPLIT_DOCUMENTS parts for the smaller split (total sentences / (10 / its share)), but
  is at least 8 (PREFERRED_PART_SENTENCES; a corpus under 128 sentences aims at 16 parts
  instead), at least MIN_PART_SENTENCES and at most MAX_PART_SENTENCES;
- val takes `val_fraction` of the parts (at least 2; train keeps at least 2), spread evenly
  through the corpus from a phase chosen by the seed; with val_fraction <= 0.5 no two val
  parts are neighbours. Documents of one sentence (which cannot be cut) keep their split;
- a part then acts as a document: train.txt / val.txt hold parts, blank-line separated, and
  `parts.json` says which document and part each one is. The samples stage never takes a
  random B from A's own part nor from the parts just before and after it in the same document
  (their text runs on from A's), only from other parts of that document or other documents.

A corpus that cannot give MIN_PARTS parts of two sentences or more (fewer than about 8
sentences) stays split by document; the corpus stage then warns that it is too small for NSP.
Parts keep the invariant that no text is in both train and val.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertcore.common.errors import BertError
from bertcore.data.corpus.splits import SPLITS, split_file
from bertcore.data.corpus.writer import SplitStats

PARTS_FILE = "parts.json"
MIN_SPLIT_DOCUMENTS = 10  # fewer in train or val: split by parts (corpus.split_by: auto)
MIN_PART_SENTENCES = 2  # a part must give an actual-next pair
PREFERRED_PART_SENTENCES = 8  # shorter parts only in corpora under 16 times this
MAX_PART_SENTENCES = 64
MIN_PARTS = 4  # two for train and two for val, so both can draw random Bs from another part


@dataclass(frozen=True)
class PartPlan:
    """How to cut the documents: `sizes[d]` are the sentence counts of document d's parts,
    `splits[d]` their splits (0 train, 1 val), in order."""

    part_sentences: int
    sizes: list[list[int]]
    splits: list[list[int]]

    @property
    def parts(self) -> int:
        return sum(len(s) for s in self.sizes)

    @property
    def documents_cut(self) -> int:
        return sum(len(s) > 1 for s in self.sizes)


def plan_parts(
    sentences: Sequence[int], hashed_splits: Sequence[int], val_fraction: float, seed: int
) -> PartPlan | None:
    """Cut documents of `sentences[d]` sentences into parts and split the parts; None when
    there would be fewer than MIN_PARTS parts of two sentences or more."""
    total = sum(sentences)
    target_parts = math.ceil(MIN_SPLIT_DOCUMENTS / min(val_fraction, 1.0 - val_fraction))
    floor = max(MIN_PART_SENTENCES, min(PREFERRED_PART_SENTENCES, total // 16))
    size = min(MAX_PART_SENTENCES, max(floor, total // target_parts))
    sizes = [_cut(n, size) for n in sentences]
    pairable = sum(1 for parts in sizes for n in parts if n >= MIN_PART_SENTENCES)
    if pairable < MIN_PARTS:
        return None
    n_val = min(max(2, round(val_fraction * pairable)), pairable - 2)
    phase = int.from_bytes(hashlib.blake2b(seed.to_bytes(8, "little"), digest_size=8).digest(),
                           "little") / 2**64
    val_positions = {math.floor((i + phase) * pairable / n_val) for i in range(n_val)}
    splits, position = [], 0
    for parts, hashed in zip(sizes, hashed_splits, strict=True):
        doc_splits = []
        for n in parts:
            if n >= MIN_PART_SENTENCES:
                doc_splits.append(int(position in val_positions))
                position += 1
            else:
                doc_splits.append(hashed)  # a one-sentence document keeps its split
        splits.append(doc_splits)
    return PartPlan(size, sizes, splits)


def _cut(sentences: int, size: int) -> list[int]:
    """Parts of `size` sentences, the remainder spread over them (each holds size..2*size-1)."""
    count = max(1, sentences // size)
    base, extra = divmod(sentences, count)
    return [base + (i < extra) for i in range(count)]


def cut_into_parts(
    out_dir: Path, order: Sequence[int], plan: PartPlan
) -> tuple[dict[str, SplitStats], dict[str, list[list[int]]]]:
    """Rewrite `out_dir/{train,val}.txt` (documents split whole; document d in file
    `order[d]`, in corpus order) as parts per `plan`. Returns the stats of each split and,
    per split, [document, part] of each of its parts in file order (for parts.json)."""
    whole = [out_dir / f".{split}.whole.txt" for split in SPLITS]
    for split, path in zip(SPLITS, whole, strict=True):
        os.replace(split_file(out_dir, split), path)
    stats = {split: SplitStats() for split in SPLITS}
    entries: dict[str, list[list[int]]] = {split: [] for split in SPLITS}
    with contextlib.ExitStack() as stack:  # closes the files, then removes the whole ones
        for path in whole:
            stack.callback(path.unlink)
        readers = [stack.enter_context(open(path, "rb")) for path in whole]
        outputs = {split: stack.enter_context(open(split_file(out_dir, split), "wb"))
                   for split in SPLITS}
        for doc, (source, sizes, splits) in enumerate(
            zip(order, plan.sizes, plan.splits, strict=True)
        ):
            lines = readers[source]
            for part, (count, split_index) in enumerate(zip(sizes, splits, strict=True)):
                split = SPLITS[split_index]
                handle = outputs[split]
                if stats[split].documents:
                    handle.write(b"\n")
                for _ in range(count):
                    line = next(lines)
                    handle.write(line)
                    stats[split].characters += len(line.decode("utf-8")) - 1
                stats[split].documents += 1
                stats[split].sentences += count
                entries[split].append([doc, part])
            separator = next(lines, b"\n")  # the blank line between documents
            assert separator == b"\n", "document sizes do not match the split files"
    return stats, entries


def write_parts_file(out_dir: Path, info: dict) -> None:
    """parts.json: `split_by` ("documents" or "parts"), `requested` (corpus.split_by) and,
    for parts, `part_sentences` and per split [document, part] of each block of its file, in
    file order (documents numbered in corpus order from 0). Compact: it lists every part."""
    (out_dir / PARTS_FILE).write_text(json.dumps(info, separators=(",", ":")) + "\n",
                                      encoding="utf-8")


def read_parts(corpus_dir: str | Path) -> dict:
    """parts.json of a corpus folder; {"split_by": "documents"} when there is none (a corpus
    made by hand, or by an older version)."""
    path = Path(corpus_dir) / PARTS_FILE
    if not path.is_file():
        return {"split_by": "documents"}
    try:
        parts = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        parts = None
    if not isinstance(parts, dict) or parts.get("split_by") not in ("documents", "parts"):
        raise BertError(f"{path} is damaged: rerun `bert corpus`")
    return parts


def neighbour_flags(entries: Sequence[Sequence[int]] | None, origins: np.ndarray) -> np.ndarray:
    """Per document of a tokenised split (block `origins[i]` of its file): bit 0 set when the
    document before it is the previous part of the same document, bit 1 when the one after
    it is the next part. Such neighbours are no source of random Bs."""
    flags = np.zeros(len(origins), np.uint8)
    if entries is None or len(origins) < 2:
        return flags
    table = np.asarray(entries, np.int64).reshape(-1, 2)[origins]
    same_doc = table[1:, 0] == table[:-1, 0]
    adjacent = same_doc & (table[1:, 1] - table[:-1, 1] == 1)
    flags[1:] |= adjacent.astype(np.uint8)
    flags[:-1] |= adjacent.astype(np.uint8) << 1
    return flags
