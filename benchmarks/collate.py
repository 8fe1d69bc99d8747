"""Collate + dynamic masking throughput on one CPU core (target: >= 1 M tokens/s).

Batches of 32 NSP samples with a length mix like Google's create_pretraining_data output at
max_seq_length 128 (most pairs fill the target length, `short_seq_prob` of them are short).
Counts real (unpadded) tokens. Times token-level and whole-word masking, and, when
transformers is installed, its DataCollatorForLanguageModeling on the same samples for
comparison. Then the same batches through one DataLoader worker, side by side: the collator
returning tensors (each sent back through shared memory) and its numpy arrays (pickled through
the worker's pipe, as PretrainingBatches does), in samples per second and their ratio. Last
line: `collate_tokens_per_s=N worker_samples_per_s=M` (token-level masking, ours; M: arrays).

    python benchmarks/collate.py [--batches 300] [--batch-size 32] [--max-len 128]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch.utils.data import DataLoader

from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec

VOCAB_SIZE = 30522
CONTINUATION_SHARE = 0.2  # share of vocabulary ids that are `##` pieces


def make_items(count: int, max_len: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    items = []
    for index in range(count):
        if rng.random() < 0.1:  # short_seq_prob
            total = int(rng.integers(8, max_len + 1))
        else:  # whole sentences rarely fill the target exactly
            total = int(rng.integers(max_len - 24, max_len + 1))
        len_a = int(rng.integers(1, total - 3))
        ids = rng.integers(5, VOCAB_SIZE, total).astype(np.uint16)
        ids[0], ids[len_a + 1], ids[-1] = 2, 3, 3
        items.append((0, index, ids, len_a + 2, index % 2))
    return items


def time_collate(collate, batches, tokens: int) -> float:
    """Best of three passes over all batches, in tokens per second."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for batch in batches:
            collate(batch)
        best = min(best, time.perf_counter() - start)
    return tokens / best


def through_worker(collate, items, batch_size: int, passes: int = 3) -> float:
    """Samples per second of `collate` run in one DataLoader worker over `items`, `passes`
    times, timed from the first batch on (the worker's start left out)."""
    loader = DataLoader(items * passes, batch_size=batch_size, collate_fn=collate, num_workers=1)
    batches = iter(loader)
    next(batches)
    start = time.perf_counter()
    count = sum(1 for _ in batches)
    return count * batch_size / (time.perf_counter() - start)


def hf_collator():
    """transformers' MLM collator on an equivalent tokenizer, or None without transformers."""
    try:
        from tokenizers import Tokenizer, models
        from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast
    except ImportError:
        return None
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {token: i for i, token in enumerate(specials)}
    vocab.update({f"t{i}": i for i in range(len(specials), VOCAB_SIZE)})
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")),
        pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    )
    collate = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, pad_to_multiple_of=8)

    def features(items):  # the list-of-dicts input it expects, built outside the timing
        return [
            {"input_ids": item[2].tolist(),
             "token_type_ids": [0] * item[3] + [1] * (len(item[2]) - item[3]),
             "next_sentence_label": item[4]}
            for item in items
        ]

    return collate, features


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)

    items = make_items(args.batches * args.batch_size, args.max_len)
    batches = [items[i : i + args.batch_size] for i in range(0, len(items), args.batch_size)]
    mean_len = np.mean([len(item[2]) for item in items])
    rng = np.random.default_rng(1)
    vocab = VocabSpec(VOCAB_SIZE, is_continuation=rng.random(VOCAB_SIZE) < CONTINUATION_SHARE)
    print(f"{len(batches)} batches of {args.batch_size}, mean length {mean_len:.1f}, 1 thread")

    tokens = sum(len(item[2]) for item in items)
    token = time_collate(PretrainingCollator(MaskingConfig(), vocab, seed=0), batches, tokens)
    print(f"ours, token-level masking:  {token / 1e6:6.2f} M tokens/s")
    whole_word = PretrainingCollator(MaskingConfig(whole_word=True), vocab, seed=0)
    whole = time_collate(whole_word, batches, tokens)
    print(f"ours, whole-word masking:   {whole / 1e6:6.2f} M tokens/s")
    hf = hf_collator()
    if hf is not None:
        collate, features = hf
        some = batches[:50]
        some_tokens = sum(len(item[2]) for batch in some for item in batch)
        speed = time_collate(collate, [features(b) for b in some], some_tokens)
        print(f"transformers DataCollatorForLanguageModeling: {speed / 1e6:6.2f} M tokens/s")
    collator = PretrainingCollator(MaskingConfig(), vocab, seed=0)
    as_tensors = through_worker(collator, items, args.batch_size)
    as_arrays = through_worker(collator.arrays, items, args.batch_size)
    print(f"one DataLoader worker, samples/s: tensors {as_tensors:,.0f}, numpy arrays "
          f"{as_arrays:,.0f} ({as_arrays / as_tensors:.2f}x)")
    print(f"collate_tokens_per_s={token:.0f} worker_samples_per_s={as_arrays:.0f}")


if __name__ == "__main__":
    main()
