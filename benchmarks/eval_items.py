"""What the per-item outcomes cost the evaluate stage: the default pipeline's shape (BERT-tiny
with the recipe's 4 heads, a vocabulary of 2,936, 1,172 val pairs of 24 to 128 tokens, 40 MLM
slots, eval.batch_size 64), random weights and pairs (the cost does not depend on them), on
the CPU as the stage computes (params.yaml's `cpu` section: its kernels, one thread). Three
timings, passes alternating so that a loaded machine disturbs them alike, medians of wall and
CPU seconds: the evaluation as pretraining's periodic one runs it (`evaluate`, no collector),
the same with each sequence's outcomes recorded (`SequenceOutcomes`, its columns read), and the
intervals of the five scores drawn from them (`intervals.estimate`, scipy imported before).
Then scipy's import, once, in a fresh process (the first interval of a process pays it).
Last line: `plain_s=... with_items_s=... intervals_s=... scipy_import_s=...` (wall seconds).

    python benchmarks/eval_items.py [--pairs 1172] [--passes 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
from epoch_order import at_least  # the sibling script's argparse type

from bertcore.common.config import CpuConfig
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.training.config import EvalConfig, MaskingConfig
from bertcore.training.data.masking import VocabSpec
from bertcore.training.evaluation.metrics import (
    SCORES,
    SequenceOutcomes,
    evaluate,
    score_figure,
    val_batches,
)

VOCAB_SIZE, MAX_SEQ_LENGTH = 2936, 128


class Pairs:
    """`count` NSP pairs as the sample store gives them: (ids, B's start, is_random_next)."""

    def __init__(self, count: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.pairs = []
        for _ in range(count):
            length = int(rng.integers(24, MAX_SEQ_LENGTH + 1))
            ids = rng.integers(5, VOCAB_SIZE, length).astype(np.uint16)
            ids[0], b_start = 2, int(rng.integers(4, length - 4))
            ids[b_start - 1] = ids[-1] = 3
            self.pairs.append((ids, b_start, int(rng.integers(2))))

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i):
        return self.pairs[i]


def timed(work) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=at_least(2), default=1172)
    parser.add_argument("--passes", type=at_least(1), default=5)
    args = parser.parse_args()
    from bertcore.common.cpu import pin_cpu

    pin_cpu(CpuConfig())  # as the stage: before torch computes
    torch.manual_seed(0)
    model = BertPretrainingModel(BertConfig(
        vocab_size=VOCAB_SIZE, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=512, max_position_embeddings=512)).eval()
    store = Pairs(args.pairs)
    masking, config = MaskingConfig(), EvalConfig()
    vocab = VocabSpec(VOCAB_SIZE)

    def plain():
        return evaluate(model, val_batches(store, masking, vocab, config))

    def with_items():
        items = SequenceOutcomes()
        evaluate(model, val_batches(store, masking, vocab, config), items=items)
        return items.columns()

    columns = with_items()
    from bertcore.common.intervals import estimate

    def intervals():
        return [estimate(score_figure(score, "val", columns).runs) for score in SCORES]

    intervals()  # scipy imported, its first call paid
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "with_items": [], "intervals": []}
    for _ in range(args.passes):
        for name, work in (("plain", plain), ("with_items", with_items),
                           ("intervals", intervals)):
            wall, cpu, _ = timed(work)
            runs[name].append((wall, cpu))
    medians = {name: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
               for name, r in runs.items()}
    for name, (wall, cpu) in medians.items():
        print(f"{name:>11}: wall {wall:.3f} s, CPU {cpu:.3f} s (median of {args.passes})")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import scipy.stats"], check=True)
    bare = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    scipy_import = (bare - started) - (time.perf_counter() - bare)
    print(f"plain_s={medians['plain'][0]:.3f} with_items_s={medians['with_items'][0]:.3f} "
          f"intervals_s={medians['intervals'][0]:.3f} scipy_import_s={scipy_import:.3f}")


if __name__ == "__main__":
    main()
