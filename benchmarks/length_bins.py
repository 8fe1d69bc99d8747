"""What length bins (`length_bin_width`) save: the padding of the training batches and the
seconds of a training step, on a samples folder the samples stage built.

For each bin width (and none), over `--epochs` epochs of the split: the share of the
collated tokens that are padding (a micro-batch pads to its longest, rounded up to 8) and
the share of samples an epoch leaves in its bins. Then one training step of BERT-tiny
(`StepRunner.train_step`, as pretraining runs it) on the first steps of an epoch, binned
(`--width`) and not, taking turns in rounds so that load from other processes hits both
alike; the mean step of each (binned steps differ in length by design, so the mean is what
a run's time goes by) and their ratio. Last line:
`padding_unbinned=A padding_binned=B s_per_step_unbinned=C s_per_step_binned=D`.

    python benchmarks/length_bins.py                                  # phase 2's samples, 512
    python benchmarks/length_bins.py --split data/samples/train --max-len 128 --batch-size 32 \
        --width 16
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from bertcore.data.samples.store import SampleStore
from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.training.config import TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.data.masking import (
    MaskingConfig,
    PretrainingCollator,
    VocabSpec,
    padded_length,
)
from bertcore.training.data.order import EpochSteps, LengthBins
from bertcore.training.loop.step import StepRunner
from bertcore.training.run.phases import scaled_masking


def padding(store: SampleStore, bins: LengthBins, batch: int, epochs: int) -> tuple[float, float]:
    """(padding share of the collated tokens, share of samples an epoch leaves out)."""
    steps = EpochSteps(store, bins, batch, seed=42)
    lengths = store.lengths
    real = padded = 0
    for epoch in range(epochs):
        for indices in steps.batches(epoch):
            found = lengths[indices]
            real += int(found.sum())
            padded += padded_length(int(found.max())) * batch
    return 1 - real / padded, 1 - steps.per_epoch * batch / len(store)


def step_seconds(runner: StepRunner, steps: list, count: int) -> list[float]:
    times = []
    for micro_batches in steps[:count]:
        began = time.perf_counter()
        result = runner.train_step(micro_batches)
        assert result.loss == result.loss  # reading a number waits for the step (not NaN)
        times.append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", type=Path, default=Path("data/samples/phase2/train"))
    parser.add_argument("--vocab", type=Path, default=Path("data/vocab"))
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--base-len", type=int, default=128, help="samples.max_seq_length")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--width", type=int, default=32, help="the binned run's bin width")
    parser.add_argument("--widths", default="64,32,16,8", help="bin widths for the padding")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per run and round")
    args = parser.parse_args()

    store = SampleStore(args.split)
    print(f"{args.split}: {len(store):,} samples, batch {args.batch_size}, up to "
          f"{args.max_len} tokens, {args.epochs} epochs")
    shares = {}
    for width in [None, *(int(w) for w in args.widths.split(","))]:
        share, left = padding(store, LengthBins(width, args.max_len), args.batch_size,
                              args.epochs)
        shares[width] = share
        print(f"  length_bin_width {width}: padding {share:.1%} of the tokens, "
              f"{left:.2%} of the samples left out of an epoch")
    if args.width not in shares:
        shares[args.width] = padding(store, LengthBins(args.width, args.max_len),
                                     args.batch_size, args.epochs)[0]

    vocab = VocabSpec.from_tokens(read_vocab(args.vocab))
    masking = scaled_masking(MaskingConfig(), args.base_len, args.max_len)
    config = BertConfig.from_preset("tiny", vocab_size=vocab.vocab_size,
                                    max_position_embeddings=max(512, args.max_len),
                                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    count = args.rounds * args.steps
    runners, steps = {}, {}
    for width in (None, args.width):
        batches = PretrainingBatches(store, PretrainingCollator(masking, vocab, seed=42),
                                     args.batch_size, 1, seed=42,
                                     bins=LengthBins(width, args.max_len))
        torch.manual_seed(0)  # the same weights for both
        runners[width] = StepRunner(BertPretrainingModel(config),
                                    TrainConfig(batch_size=args.batch_size, warmup_steps=0,
                                                micro_batches=1),
                                    batches, device="cpu")
        steps[width] = [step for step, _ in zip(batches.iterate(0), range(count + 2),
                                                strict=False)]
        step_seconds(runners[width], steps[width][count:], 2)  # warm-up
    times: dict[int | None, list[float]] = {None: [], args.width: []}
    for round_ in range(args.rounds):
        for width in times:
            part = steps[width][round_ * args.steps : (round_ + 1) * args.steps]
            times[width] += step_seconds(runners[width], part, args.steps)
    unbinned, binned = statistics.mean(times[None]), statistics.mean(times[args.width])
    print(f"training step, {torch.get_num_threads()} thread(s), {args.rounds} rounds x "
          f"{args.steps} steps: unbinned {unbinned:.4f} s, binned (width {args.width}) "
          f"{binned:.4f} s: {binned / unbinned:.2f}x")
    print(f"padding_unbinned={shares[None]:.4f} padding_binned={shares[args.width]:.4f} "
          f"s_per_step_unbinned={unbinned:.4f} s_per_step_binned={binned:.4f}")


if __name__ == "__main__":
    main()
