"""Pseudo-log-likelihood: the batched scorer (`bertcore.downstream.probes.pll`: all masked
copies of one or several sentences in one padded batch, its encoder unpadded as the probe
stage runs it), the same batches with the encoder on the padded batch, and one forward pass
per masked copy (the straightforward way), on the same sentences, threads and model, side by
side in one run (the batched two in turn, `--rounds` times, medians); prints sentences/s of
each and the ratios, and checks that all give the same PLLs.

    PYTHONPATH=. python benchmarks/probe_pll.py [--sentences 1000] [--threads 1]
    PYTHONPATH=. python benchmarks/probe_pll.py --model models/hf --text data/corpus/val.txt

The model is BERT-tiny's shape (2 layers, 128 hidden, 2 heads) with random weights over a
vocabulary trained on the sentences, short synthetic ones (tests/helpers/tiny_pretrain.py's
corpus, 7 words): the cost does not depend on what the weights hold. `--model` (a BERT folder
with its tokenizer) and `--text` (one sentence a line) measure a real model on real sentences
instead, as the probe stage scores them.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import click
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.tiny_pretrain import corpus_documents

from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.training import train_tokenizer
from bertcore.downstream.probes.masked_lm import MaskedLM
from bertcore.downstream.probes.pll import masked_copies, pseudo_log_likelihoods
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.saved.trained_model import load_model_and_tokenizer


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


# wall: as a user waits; cpu: this process's CPU seconds, steadier on a machine that other
# processes load (with one thread, the cost on one core)
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}


def timed(fn, *args, clock: str = "wall") -> tuple[float, list[float]]:
    start = CLOCK[clock]()
    result = fn(*args)
    return CLOCK[clock]() - start, result


def synthetic(sentences: int, batch_size: int) -> tuple[MaskedLM, list[str]]:
    """BERT-tiny's shape, random weights, over a vocabulary trained on short sentences."""
    documents = corpus_documents(sentences // 6 + 1, seed=0)
    texts = [s for doc in documents for s in doc][:sentences]
    tokenizer = train_tokenizer([texts], VocabConfig(vocab_size=500, min_frequency=1))
    torch.manual_seed(0)
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.get_vocab_size())
    return MaskedLM(BertPretrainingModel(config), tokenizer, batch_size=batch_size), texts


def real(model_dir: str, text: str, sentences: int, batch_size: int
         ) -> tuple[MaskedLM, list[str]]:
    """A BERT folder with its tokenizer, and the first `sentences` lines of `text` that fit."""
    model, tokenizer = load_model_and_tokenizer(model_dir, None, head="mlm")
    lm = MaskedLM(model, tokenizer, batch_size=batch_size)
    with open(text, encoding="utf-8") as lines:
        texts = [line.strip() for line in lines if line.strip()]
    fits = [t for t in texts if len(lm.word_ids(t)) + 2 <= lm.max_tokens]
    return lm, fits[:sentences]


@click.command()
@click.option("--sentences", default=1000, show_default=True)
@click.option("--threads", default=1, show_default=True)
@click.option("--batch-size", default=256, show_default=True)
@click.option("--rounds", default=3, show_default=True, help="of the batched scorers, in turn")
@click.option("--model", "model_dir", default=None, help="a BERT folder with its tokenizer")
@click.option("--text", default=None, help="sentences, one a line (with --model)")
@click.option("--clock", type=click.Choice(sorted(CLOCK)), default="wall", show_default=True)
def main(sentences: int, threads: int, batch_size: int, rounds: int, model_dir: str | None,
         text: str | None, clock: str) -> None:
    torch.set_num_threads(threads)
    if model_dir:
        lm, texts = real(model_dir, text, sentences, batch_size)
    else:
        lm, texts = synthetic(sentences, batch_size)
    config = lm.model.config
    ids = [lm.encode(t) for t in texts]
    copies = sum(len(i) - 2 for i in ids)
    pseudo_log_likelihoods(lm, ids[:50])  # warm up every path
    one_copy_at_a_time(lm, ids[:5])
    seconds: dict[bool, list[float]] = {True: [], False: []}
    scores = {}
    for round_ in range(rounds):
        for unpad in (True, False) if round_ % 2 == 0 else (False, True):
            lm.unpad = unpad
            elapsed, scores[unpad] = timed(pseudo_log_likelihoods, lm, ids, clock=clock)
            seconds[unpad].append(elapsed)
    lm.unpad = True
    plain_s, plain = timed(one_copy_at_a_time, lm, ids, clock=clock)
    unpadded_s, padded_s = (statistics.median(seconds[u]) for u in (True, False))
    worst = max(abs(a - b) for batched in scores.values()
                for a, b in zip(batched, plain, strict=True))
    print(f"{len(ids)} sentences, {copies} masked copies, {config.num_hidden_layers} layers, "
          f"{config.hidden_size} hidden, {threads} thread(s), batch {batch_size} copies, "
          f"batched scorers: median of {rounds} rounds, {clock} clock")
    for name, elapsed in (("batched, unpadded:", unpadded_s), ("batched, padded:", padded_s),
                          ("one copy per forward:", plain_s)):
        print(f"{name:<22}{len(ids) / elapsed:9.1f} sentences/s ({elapsed:.2f} s)")
    print(f"ratios: batched x{plain_s / unpadded_s:.1f} one copy per forward; unpadded "
          f"x{padded_s / unpadded_s:.2f} padded; largest PLL difference {worst:.2e}; padded and "
          f"unpadded PLLs {'identical' if scores[True] == scores[False] else 'differ'}")


if __name__ == "__main__":
    main()
