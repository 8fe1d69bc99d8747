"""Pseudo-log-likelihood: the batched scorer (`bertcore.downstream.probes.pll`: all masked
copies of one or several sentences in one padded forward pass) against one forward pass per
masked copy (the straightforward way), on the same sentences, threads and model, side by side
in one run; prints sentences/s of each and the ratio, and checks that both give the same PLLs.

    PYTHONPATH=. python benchmarks/probe_pll.py [--sentences 1000] [--threads 1]

The model is BERT-tiny's shape (2 layers, 128 hidden, 2 heads) with random weights over a
vocabulary trained on the sentences, which are short synthetic ones (tests/tiny_pretrain.py's
corpus, 7 words): the cost does not depend on what the weights hold.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiny_pretrain import corpus_documents

from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.training import train_tokenizer
from bertcore.downstream.probes.masked_lm import MaskedLM
from bertcore.downstream.probes.pll import masked_copies, pseudo_log_likelihoods
from bertcore.model.bert import BertConfig, BertPretrainingModel


def one_copy_at_a_time(lm: MaskedLM, sentences: list[list[int]]) -> list[float]:
    """One forward pass per masked copy, no padding."""
    totals = []
    for ids in sentences:
        copies, positions = masked_copies(torch.tensor(ids), lm.mask_id)
        total = 0.0
        for copy, position in zip(copies, positions, strict=True):
            log_probs = lm.log_probs_at([copy[None]], position[None])
            total += log_probs[0, ids[position]].item()
        totals.append(total)
    return totals


def timed(fn, *args) -> tuple[float, list[float]]:
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


@click.command()
@click.option("--sentences", default=1000, show_default=True)
@click.option("--threads", default=1, show_default=True)
@click.option("--batch-size", default=256, show_default=True)
def main(sentences: int, threads: int, batch_size: int) -> None:
    torch.set_num_threads(threads)
    documents = corpus_documents(sentences // 6 + 1, seed=0)
    texts = [s for doc in documents for s in doc][:sentences]
    tokenizer = train_tokenizer([texts], VocabConfig(vocab_size=500, min_frequency=1))
    torch.manual_seed(0)
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size())
    lm = MaskedLM(BertPretrainingModel(config), tokenizer, batch_size=batch_size)
    ids = [lm.encode(t) for t in texts]
    copies = sum(len(i) - 2 for i in ids)
    pseudo_log_likelihoods(lm, ids[:50])  # warm up both paths
    one_copy_at_a_time(lm, ids[:5])
    batched_s, batched = timed(pseudo_log_likelihoods, lm, ids)
    plain_s, plain = timed(one_copy_at_a_time, lm, ids)
    worst = max(abs(a - b) for a, b in zip(batched, plain, strict=True))
    print(f"{len(ids)} sentences, {copies} masked copies, BERT-tiny shape "
          f"({config.num_hidden_layers} layers, {config.hidden_size} hidden), {threads} "
          f"thread(s), batch {batch_size} copies")
    print(f"batched scorer:       {len(ids) / batched_s:9.1f} sentences/s ({batched_s:.2f} s)")
    print(f"one copy per forward: {len(ids) / plain_s:9.1f} sentences/s ({plain_s:.2f} s)")
    print(f"ratio: x{plain_s / batched_s:.1f}; largest PLL difference {worst:.2e}")


if __name__ == "__main__":
    main()
