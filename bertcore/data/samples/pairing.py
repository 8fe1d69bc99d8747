"""The samples stage's pairing: next-sentence-prediction pairs from one document, by the
algorithm of Google's `create_pretraining_data.py` (`create_instances_from_document`) with its
flaws fixed (`pair_document`), and of a shard of documents of a document table, a task per
shard in worker processes (`PairTask`, `pair_shard`). Every document gets its own random
generator, seeded from (random_seed, split, dupe, document) (`document_rng`), so the pairs do
not depend on how the documents are sharded or on the number of workers.

Google's algorithm: draw a target length (`max_num_tokens`, or with probability
`short_seq_prob` a random one in [2, max_num_tokens]); gather whole sentences into a chunk
until the target is reached; split the chunk at a random sentence into A and B; with
probability 1/2 replace B by a run of sentences from a random other document
(`is_random_next`) and put the chunk's unused sentences back; truncate the pair, one token
at a time from the longer segment at a random end, until it fits.

Fixes:
- The random B never comes from the same document (Google retries 10 times, then gives up).
- Google forces a random B whenever the chunk holds a single sentence, which pushes the
  share of random pairs above 1/2. Here the coin is always tossed first and always obeyed:
  an "actual next" single-sentence chunk takes the following sentence as B, and a lone last
  sentence of a document becomes B after the sentences before it. So every instance gets
  its label from one fair coin and the random share is 1/2 up to sampling noise.
- Documents of a single sentence give no A (they cannot give an actual next pair, and
  using them only for random pairs would skew the balance); they still serve as random Bs.
- The target length is drawn again for each instance (Google draws it once per document,
  contrary to its own comment).

All positions are token offsets in one flat token array (see `bertcore.data.samples.doctable`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable

import numpy as np

from bertcore.data.samples.doctable import DocTable

# (a_start, a_stop, b_start, b_stop, is_random_next)
Instance = tuple[int, int, int, int, int]
# (rng, min_tokens) -> token range of whole sentences from a random OTHER document
RandomSegment = Callable[[random.Random, int], tuple[int, int]]


# ---------------------------------------------------------------------------------------------
# One document (Google's algorithm)


def pair_document(
    starts: list[int],
    rng: random.Random,
    max_num_tokens: int,
    short_seq_prob: float,
    random_segment: RandomSegment,
) -> list[Instance]:
    """NSP instances of one document whose sentence i spans tokens starts[i]:starts[i+1]."""
    n = len(starts) - 1
    instances: list[Instance] = []
    if n < 2:
        return instances
    i = 0
    while i < n:
        target = max_num_tokens
        if rng.random() < short_seq_prob:
            target = rng.randint(2, max_num_tokens)
        j = i + 1  # the chunk is sentences i..j-1: whole sentences up to the target length
        while j < n and starts[j] - starts[i] < target:
            j += 1
        if rng.random() < 0.5:
            is_random = 1
            a_end = rng.randint(i + 1, j - 1) if j - i >= 2 else j
            a0, a1 = starts[i], starts[a_end]
            b0, b1 = random_segment(rng, max(1, target - (a1 - a0)))
            next_i = a_end  # the sentences not used go back for the next chunk
        elif j - i >= 2 or j < n:
            is_random = 0
            if j - i == 1:
                j += 1  # an actual next pair needs a second sentence: take the following one
            a_end = rng.randint(i + 1, j - 1)
            a0, a1, b0, b1 = starts[i], starts[a_end], starts[a_end], starts[j]
            next_i = j
        else:
            is_random = 0  # a lone last sentence: B after the sentences before it
            k = i - 1
            while k > 0 and starts[j] - starts[k] < target:
                k -= 1
            a0, a1, b0, b1 = starts[k], starts[i], starts[i], starts[j]
            next_i = j
        excess = (a1 - a0) + (b1 - b0) - max_num_tokens
        if excess > 0:
            cut_a, cut_b = truncation(a1 - a0, b1 - b0, excess)
            front_a = _heads(rng, cut_a)
            front_b = _heads(rng, cut_b)
            a0, a1 = a0 + front_a, a1 - (cut_a - front_a)
            b0, b1 = b0 + front_b, b1 - (cut_b - front_b)
        instances.append((a0, a1, b0, b1, is_random))
        i = next_i
    return instances


def truncation(len_a: int, len_b: int, excess: int) -> tuple[int, int]:
    """Tokens to cut from A and from B when Google's `truncate_seq_pair` removes `excess`
    tokens one at a time from the longer segment (B when they are equally long)."""
    if len_a > len_b:
        first = min(excess, len_a - len_b)  # A until both are equal ...
        rest = excess - first  # ... then B, A, B, ...
        return first + rest // 2, (rest + 1) // 2
    first = min(excess, len_b - len_a + 1)  # B until it is one shorter than A ...
    rest = excess - first  # ... then A, B, A, ...
    return (rest + 1) // 2, first + rest // 2


def _heads(rng: random.Random, flips: int) -> int:
    """How many of `flips` fair coins land heads (cuts taken from the front)."""
    return rng.getrandbits(flips).bit_count() if flips else 0


# ---------------------------------------------------------------------------------------------
# A shard of a document table (in worker processes)


@dataclasses.dataclass(frozen=True)
class PairTask:
    """One worker task: pair documents [doc_lo, doc_hi) of a table in pass `dupe`."""

    table_dir: str
    split: str
    dupe: int
    doc_lo: int
    doc_hi: int
    max_seq_length: int
    short_seq_prob: float
    random_seed: int

    @property
    def where(self) -> str:
        """What it pairs, for messages."""
        return (f"pairing {self.split} documents {self.doc_lo}-{self.doc_hi - 1}, "
                f"pass {self.dupe + 1}")


def document_rng(random_seed: int, split: str, dupe: int, doc: int) -> random.Random:
    """The generator of one document in one pass: independent of how work is sharded."""
    key = hashlib.blake2b(f"{random_seed}/{split}/{dupe}/{doc}".encode(), digest_size=8)
    return random.Random(int.from_bytes(key.digest(), "little"))


def pair_shard(task: PairTask) -> np.ndarray:
    """NSP instances of one shard: int64 rows (a_start, a_stop, b_start, b_stop,
    is_random_next), token offsets into the split's tokens."""
    max_num_tokens = task.max_seq_length - 3  # room for [CLS], [SEP], [SEP]
    with DocTable(task.table_dir) as table:
        rows = table.documents(task.doc_lo, task.doc_hi)
        flags = table.neighbour_flags(task.doc_lo, task.doc_hi).tolist()
        sent_lo = int(rows[0, 0])
        offsets = table.sentence_starts(sent_lo, int(rows[-1, 0])).tolist()
        first_sentences = (rows[:, 0] - sent_lo).tolist()
        instances = []
        for k, doc in enumerate(range(task.doc_lo, task.doc_hi)):
            instances += pair_document(
                offsets[first_sentences[k] : first_sentences[k + 1] + 1],
                document_rng(task.random_seed, task.split, task.dupe, doc),
                max_num_tokens,
                task.short_seq_prob,
                _random_segments(table, doc, flags[k]),
            )
    return np.array(instances, np.int64).reshape(len(instances), 5)


def _random_segments(table: DocTable, doc: int, flags: int):
    """Google's random B for document `doc`: from a random start sentence of another
    document (not a neighbouring part), whole sentences until `min_tokens` are reached (or
    that document ends)."""
    n_docs = table.n_documents
    lo, hi = doc - (flags & 1), doc + (flags >> 1)  # itself, and its neighbouring parts
    excluded = hi - lo + 1

    def random_segment(rng: random.Random, min_tokens: int) -> tuple[int, int]:
        other = rng.randrange(n_docs - excluded)
        other += excluded if other >= lo else 0  # any document but lo..hi
        first, stop = table.documents(other, other + 1)[:, 0].tolist()
        return table.segment(first + rng.randrange(stop - first), stop, min_tokens)

    return random_segment
