"""Dynamic MLM masking at collate time, vectorised over the batch.

Every random number used for a sample comes from a counter-based hash of
(seed, epoch, sample index, position) (splitmix64), so the masks of a sample depend only on
those four numbers: not on the batch, the padding, the DataLoader worker or the process that
collates it. Runs with different worker or process counts therefore see identical masks, and a
new epoch sees new ones.

Selection follows Google's `create_pretraining_data.py`: a sequence with n candidate tokens
(not special, not padding) gets `min(max_predictions_per_seq, max(1, round(n * p)))` of them
selected; 80% of the selected become [MASK], 10% a random non-special token, 10% stay as they
are. Whole-word masking selects whole words (a token plus its `##` continuations) in random
order, skipping a word that would overshoot the count, as Google does; the 80/10/10 decision
is then taken once per word (all pieces masked, all replaced, or all kept), so a word is never
half hidden. (transformers v5 turns every whole-word selection into [MASK]; we keep the split.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertcore.common.errors import BertError, require
from bertcore.common.hashing import GOLDEN, mix64
from bertcore.training.config import MaskingConfig

IGNORE_INDEX = -100
MASK_FRACTION = 0.8  # of the selected tokens: 80% → [MASK]
RANDOM_FRACTION = 0.1  # 10% → a random non-special token; the remaining 10% stay
PAD_MULTIPLE = 8  # tensor-core friendly sequence lengths

_U64_MAX = np.uint64(0xFFFFFFFFFFFFFFFF)
_STREAMS = 3  # per position: selection key, 80/10/10 decision, replacement token


@dataclass(frozen=True, eq=False)
class VocabSpec:
    """What masking needs to know about the vocabulary.

    Ids below `num_special` are special: never selected, never used as a random replacement.
    `is_continuation[id]` is True for WordPiece `##` pieces (needed for whole-word masking).
    """

    vocab_size: int
    pad_id: int = 0
    unk_id: int = 1
    cls_id: int = 2
    sep_id: int = 3
    mask_id: int = 4
    num_special: int = 5
    is_continuation: np.ndarray | None = None

    def __post_init__(self):
        # the special ids and is_continuation are `from_tokens`'s, which makes them consistent
        require(
            self.vocab_size > self.num_special,
            "vocab_size",
            self.vocab_size,
            f"more than num_special={self.num_special} tokens",
        )

    @classmethod
    def from_tokens(cls, tokens: Sequence[str]) -> VocabSpec:
        """From the vocabulary in id order (vocab.txt). Everything up to the last of the five
        special tokens counts as special (covers Google's `[unused]` slots too)."""
        index = {token: i for i, token in enumerate(tokens)}
        names = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
        missing = [name for name in names if name not in index]
        require(not missing, "vocab", missing, "a vocabulary containing all special tokens")
        pad, unk, cls_, sep, mask = (index[name] for name in names)
        flags = np.fromiter((t.startswith("##") for t in tokens), dtype=bool, count=len(tokens))
        return cls(
            vocab_size=len(tokens),
            pad_id=pad,
            unk_id=unk,
            cls_id=cls_,
            sep_id=sep,
            mask_id=mask,
            num_special=max(pad, unk, cls_, sep, mask) + 1,
            is_continuation=flags,
        )


def sample_keys(seed: int, epochs: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """One uint64 key per sample from (seed, epoch, index); distinct for distinct samples."""
    epochs = np.asarray(epochs, dtype=np.int64).astype(np.uint64)
    indices = np.asarray(indices, dtype=np.int64).astype(np.uint64)
    seeds = np.full(indices.shape, seed % 2**64, dtype=np.uint64)
    return mix64(mix64(mix64(seeds) ^ epochs) ^ indices)


def position_hashes(keys: np.ndarray, length: int) -> np.ndarray:
    """uint64 [B, length, 3]: the splitmix64 stream of each sample key, three per position."""
    counters = np.arange(1, length * _STREAMS + 1, dtype=np.uint64).reshape(length, _STREAMS)
    return mix64(keys[:, None, None] + counters[None] * GOLDEN)


def _uniform(hashes: np.ndarray) -> np.ndarray:
    """uint64 → float64 uniform in [0, 1) from the top 53 bits."""
    return (hashes >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def num_to_predict(n_candidates: np.ndarray, config: MaskingConfig) -> np.ndarray:
    """Google's count: min(cap, max(1, round(n * p))), and 0 for a sequence without candidates.
    np.rint rounds half to even, as Python's round() does in Google's code."""
    n = np.asarray(n_candidates, dtype=np.int64)
    count = np.rint(n * config.mlm_probability).astype(np.int64)
    count = np.minimum(config.max_predictions_per_seq, np.maximum(1, count))
    return np.where(n > 0, count, 0)


def _select_tokens(keys: np.ndarray, candidates: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per row, the `counts` candidates with the smallest keys (a uniform random subset)."""
    keys = np.where(candidates, keys, _U64_MAX)
    order = np.argsort(keys, axis=1)
    ranks = np.empty_like(order)
    positions = np.broadcast_to(np.arange(keys.shape[1]), keys.shape)
    np.put_along_axis(ranks, order, positions, axis=1)
    return candidates & (ranks < counts[:, None])


def _word_starts(ids: np.ndarray, candidates: np.ndarray, is_continuation: np.ndarray):
    """A word starts at every candidate that is not a `##` piece continuing a candidate."""
    follows_candidate = np.zeros_like(candidates)
    follows_candidate[:, 1:] = candidates[:, :-1]
    return candidates & ~(is_continuation[ids] & follows_candidate)


def _select_words(keys, candidates, starts, counts):
    """Google's whole-word selection, vectorised: walk the words of each row in random order
    and take a word if it still fits in the remaining count, else skip it. Each pass takes,
    in that order, the words short enough to fit while their running total stays within the
    remaining count; a word skipped once never fits later (the remaining count only shrinks),
    so a few passes reproduce the sequential walk exactly (a test compares the two)."""
    batch, length = candidates.shape
    rows = np.broadcast_to(np.arange(batch)[:, None], candidates.shape)
    word = np.cumsum(starts, axis=1) - 1  # word number of each candidate within its row
    word = np.maximum(word, 0)
    flat = (rows * length + word)[candidates]
    word_len = np.bincount(flat, minlength=batch * length).reshape(batch, length)
    word_key = np.full((batch, length), _U64_MAX, dtype=np.uint64)
    word_key[rows[starts], word[starts]] = keys[starts]
    order = np.argsort(word_key, axis=1)
    lens = np.take_along_axis(word_len, order, axis=1)  # in random word order; 0 = no word
    taken = np.zeros((batch, length), dtype=bool)
    remaining = counts.astype(np.int64).copy()
    while True:
        fits = ~taken & (lens > 0) & (lens <= remaining[:, None])
        if not fits.any():
            break
        running = np.cumsum(np.where(fits, lens, 0), axis=1)
        take = fits & (running <= remaining[:, None])
        taken |= take
        remaining -= np.where(take, lens, 0).sum(axis=1)
    word_taken = np.zeros_like(taken)
    np.put_along_axis(word_taken, order, taken, axis=1)
    return candidates & np.take_along_axis(word_taken, word, axis=1)


def mask_tokens(
    input_ids: np.ndarray,
    lengths: np.ndarray,
    keys: np.ndarray,
    config: MaskingConfig,
    vocab: VocabSpec,
) -> tuple[np.ndarray, np.ndarray]:
    """Mask a padded int64 batch [B, L] (rows valid up to `lengths`).

    `keys` are the per-sample keys from `sample_keys`. Returns (masked input ids, labels), both
    int64 [B, L], labels = original id at selected positions and IGNORE_INDEX elsewhere.
    """
    length = input_ids.shape[1]
    positions = np.arange(length)
    candidates = (positions[None] < lengths[:, None]) & (input_ids >= vocab.num_special)
    hashes = position_hashes(keys, length)
    select_key, decide, replace = hashes[..., 0], hashes[..., 1], hashes[..., 2]
    counts = num_to_predict(candidates.sum(axis=1), config)
    uniform = _uniform(decide)
    if config.whole_word:  # with VocabSpec.is_continuation (PretrainingCollator checks)
        starts = _word_starts(input_ids, candidates, vocab.is_continuation)
        selected = _select_words(select_key, candidates, starts, counts)
        # One 80/10/10 decision per word: every piece reads the uniform of its word's start.
        start_of = np.maximum.accumulate(np.where(starts, positions[None], 0), axis=1)
        uniform = np.take_along_axis(uniform, start_of, axis=1)
    else:
        selected = _select_tokens(select_key, candidates, counts)
    to_mask = selected & (uniform < MASK_FRACTION)
    to_random = selected & (uniform >= MASK_FRACTION) & (uniform < MASK_FRACTION + RANDOM_FRACTION)
    span = np.uint64(vocab.vocab_size - vocab.num_special)
    random_ids = (replace % span).astype(np.int64) + vocab.num_special
    masked = np.where(to_mask, vocab.mask_id, np.where(to_random, random_ids, input_ids))
    labels = np.where(selected, input_ids, IGNORE_INDEX)
    return masked, labels


def padded_length(longest: int, multiple: int = PAD_MULTIPLE) -> int:
    return max(multiple, -(-longest // multiple) * multiple)


def labels_to_slots(labels: np.ndarray, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """[B, L] labels (IGNORE_INDEX where nothing is predicted) → fixed-size slots: positions
    [B, slots] (in order, padded with 0) and their targets [B, slots] (IGNORE_INDEX in unused
    slots), the static-shape form the model trains on (Google's `masked_lm_positions`)."""
    labels = np.asarray(labels, dtype=np.int64)
    batch = labels.shape[0]
    selected = labels != IGNORE_INDEX
    most = int(selected.sum(axis=1).max(initial=0))
    if most > slots:
        raise ValueError(f"{most} labelled positions in a sequence do not fit {slots} slots")
    order = np.argsort(~selected, axis=1, kind="stable")[:, :slots]  # labelled first
    positions = np.zeros((batch, slots), dtype=np.int64)
    targets = np.full((batch, slots), IGNORE_INDEX, dtype=np.int64)
    width = order.shape[1]
    targets[:, :width] = np.take_along_axis(labels, order, axis=1)
    positions[:, :width] = np.where(targets[:, :width] != IGNORE_INDEX, order, 0)
    return positions, targets


class PretrainingCollator:
    """DataLoader collate_fn: items `(epoch, index, ids, segment_b_start, is_random_next)` →
    dict of LongTensors `input_ids, token_type_ids, attention_mask` [B, L] padded to the
    longest sequence rounded up to a multiple of 8, freshly masked; `mlm_positions,
    mlm_targets` [B, max_predictions_per_seq] (see `labels_to_slots`); `nsp_labels` [B].
    `arrays` gives the same batch as int64 numpy arrays, for DataLoader workers."""

    def __init__(self, masking: MaskingConfig, vocab: VocabSpec, seed: int):
        if masking.whole_word and vocab.is_continuation is None:
            raise ValueError("whole-word masking needs VocabSpec.is_continuation")
        self.masking = masking
        self.vocab = vocab
        self.seed = int(seed)

    def __call__(self, items) -> dict[str, torch.Tensor]:
        return as_tensors(self.arrays(items))

    def arrays(self, items) -> dict[str, np.ndarray]:
        """The batch of `__call__` as numpy arrays: what a DataLoader worker sends back, since
        numpy arrays go through its pipe pickled, about 5x faster than tensors, which each
        travel as a segment of shared memory (benchmarks/collate.py)."""
        epochs, indices, sequences, b_start, nsp = zip(*items, strict=True)
        lengths = np.array([len(sequence) for sequence in sequences], dtype=np.int64)
        length = padded_length(int(lengths.max()))
        ids = np.full((len(items), length), self.vocab.pad_id, dtype=np.int64)
        for row, sequence in enumerate(sequences):
            ids[row, : lengths[row]] = sequence
        largest = int(ids.max())
        if largest >= self.vocab.vocab_size:
            raise BertError(
                f"token id {largest} is outside the vocabulary of {self.vocab.vocab_size}: "
                "the samples were built with another vocabulary; rebuild them (bert samples)"
            )
        keys = sample_keys(self.seed, epochs, indices)
        masked, labels = mask_tokens(ids, lengths, keys, self.masking, self.vocab)
        positions, targets = labels_to_slots(labels, self.masking.max_predictions_per_seq)
        columns = np.arange(length)[None]
        attention = columns < lengths[:, None]
        token_types = attention & (columns >= np.array(b_start, dtype=np.int64)[:, None])
        return {
            "input_ids": masked,
            "token_type_ids": token_types.astype(np.int64),
            "attention_mask": attention.astype(np.int64),
            "mlm_positions": positions,
            "mlm_targets": targets,
            "nsp_labels": np.array(nsp, dtype=np.int64),
        }


def as_tensors(arrays: dict[str, np.ndarray], pin_memory: bool = False) -> dict[str, torch.Tensor]:
    """A collated batch of numpy arrays as tensors sharing their memory (copied into pinned
    memory with `pin_memory`, for a faster, asynchronous copy to the GPU)."""
    tensors = {name: torch.from_numpy(array) for name, array in arrays.items()}
    if pin_memory:
        return {name: tensor.pin_memory() for name, tensor in tensors.items()}
    return tensors
