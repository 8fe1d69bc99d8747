"""What BERT's second phase costs: one training step of the same model at 128 and at 512 tokens.

The step is the pretraining step itself (`StepRunner.train_step`: forward, backward, clipping,
fused AdamW) on pretraining-like batches (most pairs near the full length, 10% short, MLM slots
scaled with the length as phase 2 scales them: 40 at 128, 160 at 512). Three shapes:

    128 x 32   phase 1 of the defaults (train.batch_size 32)
    512 x 8    phase 2 of the defaults: as many tokens per step (phase2.batch_size 8)
    512 x 32   as many sequences per step as phase 1

They take turns in rounds after a warm-up, so that load from other processes hits all alike;
the median step of each is printed, and a last machine-readable line:

    s_per_step_128x32=A s_per_step_512x8=B s_per_step_512x32=C

    OMP_NUM_THREADS=1 python benchmarks/phase_cost.py               # BERT-tiny, vocab 2936
    OMP_NUM_THREADS=1 python benchmarks/phase_cost.py --preset mini --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch
from model_step import make_batch, ours_inputs

from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.training.config import TrainConfig
from bertcore.training.loop.step import StepRunner

SHAPES = ((128, 32), (512, 8), (512, 32))  # (length, batch)
SLOTS_AT_128 = 40  # masking.max_predictions_per_seq; phase 2 scales it with the length


def step_seconds(trainer: StepRunner, batches: list[dict], steps: int) -> list[float]:
    times = []
    for index in range(steps):
        began = time.perf_counter()
        result = trainer.train_step([batches[index % len(batches)]])
        assert result.loss == result.loss  # reading a number waits for the step (not NaN)
        times.append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="tiny", help="model preset (params.yaml: tiny)")
    parser.add_argument("--vocab", type=int, default=2936,
                        help="vocabulary size (the defaults' on the built-in corpus: 2936)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per shape and round")
    args = parser.parse_args()

    generator = torch.Generator().manual_seed(0)
    config = BertConfig.from_preset(args.preset, vocab_size=args.vocab,
                                    max_position_embeddings=512, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)
    trainers, batches = {}, {}
    for length, batch in SHAPES:
        torch.manual_seed(0)  # the same weights for every shape
        slots = SLOTS_AT_128 * length // 128
        trainers[length, batch] = StepRunner(
            BertPretrainingModel(config),
            TrainConfig(batch_size=batch, warmup_steps=0, micro_batches=1),
            SimpleNamespace(steps_per_epoch=1, first_micro_batch=0), device="cpu")
        batches[length, batch] = [
            ours_inputs(make_batch(batch, length, args.vocab, generator, slots), slots)
            for _ in range(2)]
        step_seconds(trainers[length, batch], batches[length, batch], 2)  # warm-up
    times: dict[tuple[int, int], list[float]] = {shape: [] for shape in SHAPES}
    for _ in range(args.rounds):
        for shape in SHAPES:
            times[shape] += step_seconds(trainers[shape], batches[shape], args.steps)
    parameters = trainers[SHAPES[0]].raw_model.num_parameters()
    print(f"preset {args.preset} ({parameters:,} parameters), vocab {args.vocab}, "
          f"{torch.get_num_threads()} thread(s), {args.rounds} rounds x {args.steps} steps")
    base = statistics.median(times[SHAPES[0]])
    for (length, batch), found in times.items():
        median = statistics.median(found)
        print(f"  {length:>3} tokens x {batch:>2}: {median:.4f} s/step, "
              f"{length * batch / median:,.0f} tokens/s, {median / base:.2f}x the 128 x 32 step")
    print(" ".join(f"s_per_step_{length}x{batch}={statistics.median(found):.4f}"
                   for (length, batch), found in times.items()))


if __name__ == "__main__":
    main()
